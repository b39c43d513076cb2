// Runs handlers on a fixed set of threads, from a queue the claim loop fills. It knows which
// deliveries are running, gives them a grace period at shutdown and hands back the tokens
// of those it abandons. Outcomes leave through Sinks, always under the pool's lock and
// never for an abandoned delivery: once shutdown() has returned no sink is called again.
//
// A transactional handler runs inside a transaction on the thread's own store instance
// (opened at its first such delivery): the pool begins it, runs the handler, and completes
// the delivery in the same transaction. complete() true: commit; false (the lease was lost):
// roll back, so the handler's writes are discarded with it; a throw: roll back, then fail
// the attempt like a plain handler's, on the settlement connection. Its writes and its completion
// commit together or not at all, which makes such a handler effectively-once.
//
// A handler that never returns never blocks shutdown: shutdown() detaches the threads that
// run abandoned handlers. Everything such a thread touches once its handler returns (the
// queue, the running set, the handlers themselves) lives in a block the threads share with
// the pool, so it outlives the pool.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bury.hpp"
#include "seam.hpp"

namespace relaybus::client {

// A handler returns to complete the delivery and throws to fail the attempt (the
// exception's what() becomes last_error); throwing Bury dead-letters it at once.
using Handler = std::function<void(const Delivery&)>;

// A handler whose writes belong to the delivery's transaction. It gets the store as well
// as the transaction because the seam's Transaction carries no way to reach the store's
// connection, and only the concrete store knows what its statements go through: with the
// PostgreSQL store a handler casts `store` to PgStore and uses connection(), on which the
// transaction is open. It must write through that store only, and must neither commit nor
// roll back: returning completes, throwing fails the attempt.
using TransactionalHandler = std::function<void(const Delivery&, Transaction&, Store&)>;

class HandlerPool {
 public:
  struct Sinks {
    std::function<void(std::string token)> complete;                 // handler returned
    std::function<void(std::string token, std::string error)> fail;  // handler threw
    std::function<void(std::string token, std::string error)> bury;  // handler threw Bury
    // Attempts that a transactional handler's thread ended itself (committed, or lease lost).
    std::function<void(std::size_t n)> settled;
    // Optional: nothing runs and nothing is queued any more, after an outcome was handed over.
    std::function<void()> idle;
  };
  struct Counters {
    std::size_t succeeded = 0;  // handlers that returned
    std::size_t failed = 0;     // handlers that threw (Bury included)
    std::size_t buried = 0;     // handlers that threw Bury
    std::size_t lost = 0;       // transactional handlers rolled back: the lease was lost
  };
  using LogFn = std::function<void(const std::string&)>;

  // `stores` opens the threads' own instances, for transactional handlers only. The two
  // maps must not share a name.
  HandlerPool(std::map<std::string, Handler> handlers,
              std::map<std::string, TransactionalHandler> transactional, StoreFactory stores,
              Sinks sinks, LogFn log);
  ~HandlerPool();  // shutdown(0) unless shutdown() ran
  HandlerPool(const HandlerPool&) = delete;
  HandlerPool& operator=(const HandlerPool&) = delete;

  void start(int threads);
  // Queues claimed deliveries for the threads. Only before shutdown().
  void submit(std::vector<Delivery> deliveries);
  // Takes back the deliveries not started yet.
  std::vector<Delivery> take_queued();
  // Waits up to `grace` for the running handlers, then abandons the ones still running
  // (whatever they return is ignored; a transactional one is rolled back), joins the idle
  // threads and detaches the others. Returns the abandoned tokens, and any delivery still
  // queued. Idempotent.
  std::vector<std::string> shutdown(std::chrono::milliseconds grace);
  Counters counters() const;

 private:
  struct State;
  // A thread's body. It holds the state, not the pool: a thread whose handler returns
  // after the pool is gone only finds its delivery abandoned and ends.
  static void work(const std::shared_ptr<State>& state);
  enum class Outcome;
  struct Result;
  static Result run(State& s, std::unique_ptr<Store>& store, const Delivery& d);
  static Result run_in_transaction(State& s, std::unique_ptr<Store>& store,
                                   const TransactionalHandler& handler, const Delivery& d);

  std::shared_ptr<State> state_;
  std::vector<std::thread> threads_;
};

}  // namespace relaybus::client
