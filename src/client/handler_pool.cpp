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

  State(std::map<std::string, Handler> h, Sinks s) : handlers(std::move(h)), sinks(std::move(s)) {}

  const std::map<std::string, Handler> handlers;
  const Sinks sinks;

  mutable std::mutex mutex;
  std::condition_variable work;  // a delivery was queued, or finishing
  std::condition_variable idle;  // nothing runs any more
  std::deque<Delivery> queue;    // claimed, not started
  std::map<std::string, Running> running;
  bool finishing = false;  // threads end once the queue is empty
  Counters counters;
};

HandlerPool::HandlerPool(std::map<std::string, Handler> handlers, Sinks sinks)
    : state_(std::make_shared<State>(std::move(handlers), std::move(sinks))) {}

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
    bool ok = true;
    std::string error;
    try {
      auto it = s.handlers.find(d.handler);
      if (it == s.handlers.end())
        throw std::runtime_error("no handler registered for " + d.handler);
      it->second(d);
    } catch (const std::exception& e) {
      ok = false;
      error = e.what();
    } catch (...) {
      ok = false;
      error = "handler threw a non-standard exception";
    }
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.running.find(d.token);
    const bool abandoned = it->second.abandoned;
    s.running.erase(it);
    if (s.running.empty()) s.idle.notify_all();
    if (abandoned) continue;  // released at shutdown: the outcome no longer counts
    // Handed over under the lock, so shutdown() cannot return (and the sinks' owner stop
    // them) between the handler's return and this hand-over.
    if (ok) {
      ++s.counters.succeeded;
      s.sinks.complete(std::move(d.token));
    } else {
      ++s.counters.failed;
      s.sinks.fail(std::move(d.token), std::move(error));
    }
  }
}

}  // namespace relaybus::client
