// Runs handlers on a fixed set of threads, from a queue the claim loop fills. It knows which
// deliveries are running, gives them a grace period at shutdown and hands back the tokens
// of those it abandons. Outcomes leave through Sinks, always under the pool's lock and
// never for an abandoned delivery: once shutdown() has returned no sink is called again.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "seam.hpp"

namespace relaybus::client {

// A handler returns to complete the delivery and throws to fail the attempt (the
// exception's what() becomes last_error).
using Handler = std::function<void(const Delivery&)>;

class HandlerPool {
 public:
  struct Sinks {
    std::function<void(std::string token)> complete;                 // handler returned
    std::function<void(std::string token, std::string error)> fail;  // handler threw
  };
  struct Counters {
    std::size_t succeeded = 0;  // handlers that returned
    std::size_t failed = 0;     // handlers that threw
  };
  HandlerPool(std::map<std::string, Handler> handlers, Sinks sinks);
  ~HandlerPool();  // shutdown() if start() ran and shutdown() did not
  HandlerPool(const HandlerPool&) = delete;
  HandlerPool& operator=(const HandlerPool&) = delete;

  void start(int threads);
  // Queues claimed deliveries for the threads. Only before shutdown().
  void submit(std::vector<Delivery> deliveries);
  // Takes back the deliveries not started yet.
  std::vector<Delivery> take_queued();
  // Waits up to `grace` for the running handlers, then abandons the ones still running
  // (whatever they return is ignored) and lets the idle threads end. Returns the abandoned
  // tokens, and any delivery still queued. Idempotent.
  std::vector<std::string> shutdown(std::chrono::milliseconds grace);
  Counters counters() const;

 private:
  struct Running {
    bool abandoned = false;  // released at shutdown: its outcome is ignored
  };
  void work();

  const std::map<std::string, Handler> handlers_;
  const Sinks sinks_;

  mutable std::mutex mutex_;
  std::condition_variable work_;  // a delivery was queued, or finishing
  std::condition_variable idle_;  // nothing runs any more
  std::deque<Delivery> queue_;    // claimed, not started
  std::map<std::string, Running> running_;
  bool finishing_ = false;  // threads end once the queue is empty
  Counters counters_;
  std::vector<std::thread> threads_;
};

}  // namespace relaybus::client
