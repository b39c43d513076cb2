// The worker runtime: claims deliveries, runs C++ handlers on a pool of threads, and ends
// each attempt (complete_many in batches, fail on an exception). One Dispatcher per
// process is the intended use; each of its threads has its own store connection.
//
// It composes four pieces, each with its own thread(s) and lock: the ClaimLoop (claims up
// to the free capacity, owns the in-flight count), the HandlerPool (runs handlers), the
// CompletionBatcher (the settlement connection) and the LeaseRenewer. The Dispatcher itself
// only wires them together and orders the shutdown.
//
// Transactional handlers (see TransactionalHandler in handler_pool.hpp) complete inside
// their own transaction, on a store instance of the handler thread: effectively-once where
// the store has transactions (PostgreSQL). A store without them (begin() returns nullptr)
// cannot run one, so the constructor opens one store instance to check, and throws
// std::invalid_argument if it has none: a misconfiguration is reported before anything is
// claimed, not as failed attempts. An error opening that instance propagates too.
//
// start() fails fast in the same spirit: it opens the claim connection first and asks the
// store to check the worker (Store::check_worker: on PostgreSQL the extension, the worker
// right, every handler subscribed), and throws what it finds (a SetupError saying what to
// run, or the connection's error) before any thread starts. A program lets it end main()
// with a message and a non-zero exit code.
//
// Every connection is named for the server's monitoring (application_name on PostgreSQL):
// "relaybus-cpp WORKER" unless the configuration or the connection settings name it.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "bury.hpp"
#include "claim_loop.hpp"
#include "completion_batcher.hpp"
#include "handler_pool.hpp"
#include "lease_renewer.hpp"
#include "seam.hpp"

namespace relaybus::client {

struct DispatcherConfig {
  std::string worker_prefix = "relaybus";
  // Most deliveries one claim asks for. A batch larger than concurrency is claimed whole,
  // its surplus waiting in line for a handler: a worker behind on a backlog then claims a
  // batch per statement, not the few places its handlers just freed.
  int batch_size = 100;
  int concurrency = 10;  // handlers running at once (claimed, not yet returned)
  // A handler that returned frees its place, while its completion (or failure) waits for
  // the completion window and the statement. The worker holds at most max(concurrency,
  // batch_size) + max_unsettled deliveries in flight: claims wait beyond that for
  // settlements.
  std::size_t max_unsettled = 1000;
  // Threads running handlers; 0 = concurrency. Fewer threads than concurrency leaves
  // claimed deliveries waiting in line (useful when handlers are mostly quick).
  int handler_threads = 0;
  std::chrono::milliseconds poll_interval{1000};
  // Least time from one claim to the next that a notification causes: anyone who can
  // connect may NOTIFY relaybus, and a flood of them costs a claim per interval at most.
  std::chrono::microseconds wakeup_interval{1000};
  std::chrono::milliseconds lease{30000};
  std::chrono::microseconds completion_window{2000};
  std::size_t max_completion_batch = 1000;
  // stop(): how long running handlers may take before they are released.
  std::chrono::milliseconds shutdown_grace{10000};
  bool listen = true;  // LISTEN relaybus to end the poll wait early
  // A handler found unsubscribed while running is left out of the claims (so that it does
  // not stop the others) and tried again after this long.
  std::chrono::milliseconds recheck_unsubscribed{30000};
  std::function<void(const std::string&)> log;  // defaults to stderr
  // The connections' name for the server's monitoring (pg_stat_activity.application_name);
  // empty: "relaybus-cpp " + the worker name. application_name in the connection string, or
  // PGAPPNAME, wins over both.
  std::string application_name;
};

struct DispatcherCounters {
  std::size_t claims = 0;     // claim statements
  std::size_t claimed = 0;    // deliveries received
  std::size_t succeeded = 0;  // handlers that returned
  std::size_t failed = 0;     // handlers that threw (Bury included)
  std::size_t buried = 0;     // handlers that threw Bury: dead-lettered at once
  std::size_t lost = 0;       // transactional handlers rolled back because the lease was lost
  std::size_t released = 0;   // deliveries given back at shutdown
  std::size_t wakeups = 0;    // notifications that ended a poll wait
};

class Dispatcher {
 public:
  // A name may be in one map only (std::invalid_argument otherwise).
  Dispatcher(StoreFactory stores, DispatcherConfig config, std::map<std::string, Handler> handlers,
             std::map<std::string, TransactionalHandler> transactional = {});
  ~Dispatcher();  // stops if still running
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // Checks the store (Store::check_worker) on the claim connection, then starts the threads.
  // Throws, having started nothing, when the store cannot be reached or is not set up
  // (SetupError), and std::invalid_argument when there is no handler at all (a claim for no
  // handler would claim every handler's deliveries). Once started, connection errors are
  // logged and retried, never thrown.
  void start();
  // Graceful shutdown: stop claiming, release deliveries not started yet, let running
  // handlers finish within shutdown_grace (release the others), flush completions,
  // relinquish the worker's lanes. Returns when done. A handler still running after the
  // grace is not waited for, neither here nor by the destructor: its thread is left to
  // end when the handler returns, and what it returns is ignored.
  void stop();

  const std::string& worker() const { return worker_.name; }
  DispatcherCounters counters() const;
  std::size_t in_flight() const;

 private:
  void release(const std::vector<std::string>& tokens);

  const StoreFactory stores_;
  const DispatcherConfig config_;
  const Worker worker_;  // the name, and this incarnation's holder
  const std::function<void(const std::string&)> log_;
  const std::vector<std::string> names_;  // every handler's name, sorted
  const StoreFactory named_stores_;       // stores_, each instance named (identify)

  // Declared in the order they depend on each other: each one's callbacks only reach
  // pieces that are running while it runs.
  CompletionBatcher batcher_;
  HandlerPool pool_;
  ClaimLoop claims_;
  LeaseRenewer renewer_;
  std::thread settle_thread_;

  mutable std::mutex mutex_;  // the lifecycle and the release count
  bool started_ = false;
  bool stopped_ = false;
  std::size_t released_ = 0;
};

}  // namespace relaybus::client
