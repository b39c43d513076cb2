// Runs handlers on a fixed set of threads, from a queue the claim loop fills. It knows which
// deliveries are running, gives them a grace period at shutdown and hands back the tokens
// of those it abandons. Outcomes leave through Sinks, always under the pool's lock and
// never for an abandoned delivery: once shutdown() has returned no sink is called again.
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
  ~HandlerPool();  // shutdown(0) unless shutdown() ran
  HandlerPool(const HandlerPool&) = delete;
  HandlerPool& operator=(const HandlerPool&) = delete;

  void start(int threads);
  // Queues claimed deliveries for the threads. Only before shutdown().
  void submit(std::vector<Delivery> deliveries);
  // Takes back the deliveries not started yet.
  std::vector<Delivery> take_queued();
  // Waits up to `grace` for the running handlers, then abandons the ones still running
  // (whatever they return is ignored), joins the idle threads and detaches the others.
  // Returns the abandoned tokens, and any delivery still queued. Idempotent.
  std::vector<std::string> shutdown(std::chrono::milliseconds grace);
  Counters counters() const;

 private:
  struct State;
  // A thread's body. It holds the state, not the pool: a thread whose handler returns
  // after the pool is gone only finds its delivery abandoned and ends.
  static void work(const std::shared_ptr<State>& state);

  std::shared_ptr<State> state_;
  std::vector<std::thread> threads_;
};

}  // namespace relaybus::client
