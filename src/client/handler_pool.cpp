#include "handler_pool.hpp"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <stdexcept>

namespace relaybus::client {

struct HandlerPool::State {
  struct Running {
    std::thread::id thread;  // the pool thread running it
    bool abandoned = false;  // released at shutdown: its outcome is ignored
  };

  State(std::map<std::string, Handler> h, std::map<std::string, TransactionalHandler> t,
        StoreFactory f, Sinks s, LogFn l)
      : handlers(std::move(h)),
        transactional(std::move(t)),
        stores(std::move(f)),
        sinks(std::move(s)),
        log(std::move(l)) {}

  bool is_abandoned(const std::string& token) const {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = running.find(token);
    return it != running.end() && it->second.abandoned;
  }

  const std::map<std::string, Handler> handlers;
  const std::map<std::string, TransactionalHandler> transactional;
  const StoreFactory stores;
  const Sinks sinks;
  const LogFn log;

  mutable std::mutex mutex;
  std::condition_variable work;  // a delivery was queued, or finishing
  std::condition_variable idle;  // nothing runs any more
  std::deque<Delivery> queue;    // claimed, not started
  std::map<std::string, Running> running;
  bool finishing = false;  // threads end once the queue is empty
  Counters counters;
};

// How one run ended.
enum class HandlerPool::Outcome {
  kReturned,    // a plain handler returned: to be completed
  kThrew,       // to be failed with `error`
  kBuried,      // threw Bury: to be dead-lettered with `error`
  kCommitted,   // completed inside the handler's transaction
  kLost,        // the lease was lost: the transaction was rolled back
  kRolledBack,  // abandoned before its completion: rolled back, nothing to report
};

struct HandlerPool::Result {
  Outcome outcome;
  std::string error;
};

HandlerPool::HandlerPool(std::map<std::string, Handler> handlers,
                         std::map<std::string, TransactionalHandler> transactional,
                         StoreFactory stores, Sinks sinks, LogFn log) {
  for (const auto& entry : transactional)
    if (handlers.count(entry.first))
      throw std::invalid_argument("relaybus: handler " + entry.first +
                                  " is registered both as plain and as transactional");
  state_ = std::make_shared<State>(std::move(handlers), std::move(transactional), std::move(stores),
                                   std::move(sinks), std::move(log));
}

HandlerPool::~HandlerPool() {
  shutdown(std::chrono::milliseconds::zero());
}

void HandlerPool::start(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([state = state_] { work(state); });
}

void HandlerPool::submit(std::vector<Delivery> deliveries) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  for (auto& d : deliveries) s.queue.push_back(std::move(d));
  s.work.notify_all();
}

std::vector<Delivery> HandlerPool::take_queued() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<Delivery> out(std::make_move_iterator(s.queue.begin()),
                            std::make_move_iterator(s.queue.end()));
  s.queue.clear();
  return out;
}

std::vector<std::string> HandlerPool::shutdown(std::chrono::milliseconds grace) {
  State& s = *state_;
  std::vector<std::string> abandoned;
  std::set<std::thread::id> busy;
  {
    std::unique_lock<std::mutex> lock(s.mutex);
    if (s.finishing) return abandoned;
    for (auto& d : s.queue) abandoned.push_back(std::move(d.token));
    s.queue.clear();
    s.idle.wait_for(lock, grace, [&] { return s.running.empty(); });
    for (auto& [token, running] : s.running) {
      running.abandoned = true;
      abandoned.push_back(token);
      busy.insert(running.thread);
    }
    s.finishing = true;
    s.work.notify_all();
  }
  // The queue is empty and finishing is set: a thread not running a handler now never
  // starts one, and ends at once.
  for (auto& t : threads_) {
    if (busy.count(t.get_id())) {
      t.detach();
    } else {
      t.join();
    }
  }
  threads_.clear();
  return abandoned;
}

HandlerPool::Counters HandlerPool::counters() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->counters;
}

void HandlerPool::work(const std::shared_ptr<State>& state) {
  State& s = *state;
  std::unique_ptr<Store> store;  // this thread's, opened by its first transactional delivery
  for (;;) {
    Delivery d;
    {
      std::unique_lock<std::mutex> lock(s.mutex);
      s.work.wait(lock, [&] { return !s.queue.empty() || s.finishing; });
      if (s.queue.empty()) return;
      d = std::move(s.queue.front());
      s.queue.pop_front();
      s.running.emplace(d.token, State::Running{std::this_thread::get_id()});
    }
    Result r = run(s, store, d);
    // Said after the hand-over, outside the lock: the log function is the user's.
    std::string note;
    // attempts=N as the API numbers them (claim's attempts, the attempts charged before this
    // one: 0 on a first try), as the Python and Node.js workers log them.
    if (r.outcome == Outcome::kThrew)
      note = "handler " + d.handler + " failed on event " + d.event_id +
             ", attempts=" + std::to_string(d.attempts) + ": " + r.error;
    else if (r.outcome == Outcome::kBuried)
      note = "handler " + d.handler + " failed on event " + d.event_id +
             ", attempts=" + std::to_string(d.attempts) + ", and buried it: " + r.error;
    else if (r.outcome == Outcome::kLost)
      note = "handler " + d.handler + " on event " + d.event_id +
             ": the lease was lost, its transaction rolled back";
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      auto it = s.running.find(d.token);
      const bool abandoned = it->second.abandoned;
      s.running.erase(it);
      if (s.running.empty()) s.idle.notify_all();
      if (abandoned) continue;  // released at shutdown: the outcome no longer counts
      // Handed over under the lock, so shutdown() cannot return (and the sinks' owner stop
      // them) between the handler's return and this hand-over.
      switch (r.outcome) {
        case Outcome::kReturned:
          ++s.counters.succeeded;
          s.sinks.complete(std::move(d.token));
          break;
        case Outcome::kThrew:
          ++s.counters.failed;
          s.sinks.fail(std::move(d.token), std::move(r.error));
          break;
        case Outcome::kBuried:
          ++s.counters.failed;
          ++s.counters.buried;
          if (s.sinks.bury) {
            s.sinks.bury(std::move(d.token), std::move(r.error));
          } else {
            s.sinks.fail(std::move(d.token), std::move(r.error));
          }
          break;
        case Outcome::kCommitted:
          ++s.counters.succeeded;
          s.sinks.settled(1);
          break;
        case Outcome::kLost:
          ++s.counters.lost;
          s.sinks.settled(1);
          break;
        case Outcome::kRolledBack:  // only when abandoned
          break;
      }
      if (s.running.empty() && s.queue.empty() && s.sinks.idle) s.sinks.idle();
    }
    if (!note.empty() && s.log) s.log(note);
  }
}

HandlerPool::Result HandlerPool::run(State& s, std::unique_ptr<Store>& store, const Delivery& d) {
  try {
    auto t = s.transactional.find(d.handler);
    if (t != s.transactional.end()) return run_in_transaction(s, store, t->second, d);
    auto h = s.handlers.find(d.handler);
    if (h == s.handlers.end()) throw std::runtime_error("no handler registered for " + d.handler);
    h->second(d);
    return {Outcome::kReturned, {}};
  } catch (const Bury& e) {
    return {Outcome::kBuried, e.what()};
  } catch (const std::exception& e) {
    return {Outcome::kThrew, e.what()};
  } catch (...) {
    return {Outcome::kThrew, "handler threw a non-standard exception"};
  }
}

HandlerPool::Result HandlerPool::run_in_transaction(State& s, std::unique_ptr<Store>& store,
                                                    const TransactionalHandler& handler,
                                                    const Delivery& d) {
  if (!store) store = s.stores();
  std::unique_ptr<Transaction> tx = store->begin();
  if (!tx) throw std::logic_error("the store has no transactions for handler " + d.handler);
  // Ends the transaction once; a failure to end it is the attempt's error.
  auto end = [&tx](bool commit) {
    auto ending = std::move(tx);
    commit ? ending->commit() : ending->rollback();
  };
  try {
    handler(d, *tx, *store);
    // Released at shutdown meanwhile: another worker may run it; these writes must not stay.
    if (s.is_abandoned(d.token)) {
      end(false);
      return {Outcome::kRolledBack, {}};
    }
    const bool completed = tx->complete(d.token);
    end(completed);
    return {completed ? Outcome::kCommitted : Outcome::kLost, {}};
  } catch (...) {
    if (tx) {
      try {
        end(false);
      } catch (const std::exception& e) {
        s.log(std::string("rollback failed: ") + e.what());
      }
    }
    throw;  // run() turns it into the attempt's failure, sent outside the transaction
  }
}

}  // namespace relaybus::client
