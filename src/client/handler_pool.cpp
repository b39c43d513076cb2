#include "handler_pool.hpp"

#include <stdexcept>

namespace relaybus::client {

HandlerPool::HandlerPool(std::map<std::string, Handler> handlers, Sinks sinks)
    : handlers_(std::move(handlers)), sinks_(std::move(sinks)) {}

HandlerPool::~HandlerPool() {
  shutdown(std::chrono::milliseconds::zero());
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

void HandlerPool::start(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
}

void HandlerPool::submit(std::vector<Delivery> deliveries) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& d : deliveries) queue_.push_back(std::move(d));
  work_.notify_all();
}

std::vector<Delivery> HandlerPool::take_queued() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Delivery> out(std::make_move_iterator(queue_.begin()),
                            std::make_move_iterator(queue_.end()));
  queue_.clear();
  return out;
}

std::vector<std::string> HandlerPool::shutdown(std::chrono::milliseconds grace) {
  std::vector<std::string> abandoned;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (finishing_) return abandoned;
    for (auto& d : queue_) abandoned.push_back(std::move(d.token));
    queue_.clear();
    idle_.wait_for(lock, grace, [this] { return running_.empty(); });
    for (auto& [token, running] : running_) {
      running.abandoned = true;
      abandoned.push_back(token);
    }
    finishing_ = true;
    work_.notify_all();
  }
  // A thread still running an abandoned handler is joined by the destructor.
  if (abandoned.empty()) {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  return abandoned;
}

HandlerPool::Counters HandlerPool::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

void HandlerPool::work() {
  for (;;) {
    Delivery d;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_.wait(lock, [this] { return !queue_.empty() || finishing_; });
      if (queue_.empty()) return;
      d = std::move(queue_.front());
      queue_.pop_front();
      running_.emplace(d.token, Running{});
    }
    bool ok = true;
    std::string error;
    try {
      auto it = handlers_.find(d.handler);
      if (it == handlers_.end()) throw std::runtime_error("no handler registered for " + d.handler);
      it->second(d);
    } catch (const std::exception& e) {
      ok = false;
      error = e.what();
    } catch (...) {
      ok = false;
      error = "handler threw a non-standard exception";
    }
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = running_.find(d.token);
    const bool abandoned = it->second.abandoned;
    running_.erase(it);
    if (running_.empty()) idle_.notify_all();
    if (abandoned) continue;  // released at shutdown: the outcome no longer counts
    // Handed over under our lock, so shutdown() cannot return (and the sinks' owner stop
    // them) between the handler's return and this hand-over.
    if (ok) {
      ++counters_.succeeded;
      sinks_.complete(std::move(d.token));
    } else {
      ++counters_.failed;
      sinks_.fail(std::move(d.token), std::move(error));
    }
  }
}

}  // namespace relaybus::client
