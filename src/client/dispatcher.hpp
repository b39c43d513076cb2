// The worker runtime: claims deliveries, runs C++ handlers on a pool of threads, and ends
// each attempt (complete_many in batches, fail on an exception). One Dispatcher per
// process is the intended use; each of its threads has its own store connection.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "completion_batcher.hpp"
#include "seam.hpp"

namespace relaybus::client {

// A handler returns to complete the delivery and throws to fail the attempt (the
// exception's what() becomes last_error).
using Handler = std::function<void(const Delivery&)>;

struct DispatcherConfig {
  std::string worker_prefix = "relaybus";
  int batch_size = 10;   // most deliveries one claim asks for
  int concurrency = 10;  // handlers in flight (claimed and not yet settled)
  // Threads running handlers; 0 = concurrency. Fewer threads than concurrency leaves
  // claimed deliveries waiting in line (useful when handlers are mostly quick).
  int handler_threads = 0;
  std::chrono::milliseconds poll_interval{1000};
  std::chrono::milliseconds lease{30000};
  std::chrono::microseconds completion_window{2000};
  std::size_t max_completion_batch = 1000;
  // stop(): how long running handlers may take before they are released.
  std::chrono::milliseconds shutdown_grace{10000};
  bool listen = true;                           // LISTEN relaybus to end the poll wait early
  std::function<void(const std::string&)> log;  // defaults to stderr
};

struct DispatcherCounters {
  std::size_t claims = 0;     // claim statements
  std::size_t claimed = 0;    // deliveries received
  std::size_t succeeded = 0;  // handlers that returned
  std::size_t failed = 0;     // handlers that threw
  std::size_t released = 0;   // deliveries given back at shutdown
  std::size_t wakeups = 0;    // notifications that ended a poll wait
};

class Dispatcher {
 public:
  Dispatcher(StoreFactory stores, DispatcherConfig config, std::map<std::string, Handler> handlers);
  ~Dispatcher();  // stops if still running
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  void start();
  // Graceful shutdown: stop claiming, release deliveries not started yet, let running
  // handlers finish within shutdown_grace (release the others), flush completions,
  // relinquish the worker's lanes. Returns when done; a handler that never returns is
  // only waited for by the destructor.
  void stop();

  const std::string& worker() const { return worker_.name; }
  DispatcherCounters counters() const;
  std::size_t in_flight() const;

 private:
  struct Running {
    bool abandoned = false;  // released at shutdown: its outcome is ignored
  };

  void claim_loop();
  void handler_loop();
  void renew_loop();
  void settled(std::size_t n);
  void log(const std::string& message) const;
  bool wait_for_work(Store& store);  // sleeps out the poll interval; false when stopping

  StoreFactory stores_;
  DispatcherConfig config_;
  std::map<std::string, Handler> handlers_;
  std::vector<std::string> handler_names_;
  Worker worker_;  // the name, and this incarnation's holder

  std::unique_ptr<Store> claim_store_;  // the claim thread's; stop() uses it after the join
  CompletionBatcher batcher_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;  // queue, in-flight count or stopping changed
  std::deque<Delivery> queue_;       // claimed, not started
  std::map<std::string, Running> running_;
  std::size_t in_flight_ = 0;
  bool stopping_ = false;   // no more claims
  bool finishing_ = false;  // handler threads exit once the queue is empty
  bool started_ = false;
  bool stopped_ = false;
  DispatcherCounters counters_;

  std::thread claim_thread_;
  std::thread settle_thread_;
  std::thread renew_thread_;
  std::vector<std::thread> handler_threads_;
};

}  // namespace relaybus::client
