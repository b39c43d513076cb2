// Waiting for the signals that ask a worker to stop, SIGTERM (a service manager, kill) and
// SIGINT (Ctrl-C), so that a program can end with Dispatcher::stop(), the graceful shutdown:
//
//   rb::StopSignals signals;   // from here on SIGINT and SIGTERM end signals.wait()
//   dispatcher.start();
//   signals.wait();
//   dispatcher.stop();
//
// While a StopSignals exists it handles both signals, whichever thread receives them: the
// first ends wait(); a second one, while the program is still stopping, does what the
// signal does without it (ends the process), for an operator who will not wait for the
// grace period. The destructor puts the previous handlers back. One at a time per process
// (a second constructed while one exists throws std::logic_error).
#pragma once

#include <chrono>
#include <optional>

namespace relaybus::client {

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Waits for SIGINT or SIGTERM and returns it; at once if one came already.
  int wait();
  // The same for at most `timeout`; nullopt if none came.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);
  // The signal received so far, if any; does not wait.
  std::optional<int> received() const;
};

// Waits for SIGINT or SIGTERM and returns it: a StopSignals for the length of the wait. A
// signal that comes before the call does what it does without a handler (ends the
// process): construct a StopSignals before the dispatcher starts to catch those too.
int wait_for_stop_signal();

}  // namespace relaybus::client
