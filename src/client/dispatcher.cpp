#include "dispatcher.hpp"

#include <algorithm>
#include <iostream>

#include "worker_name.hpp"

namespace relaybus::client {

namespace {
// Waits on a store's socket in slices, so that stop() is noticed within this long.
constexpr std::chrono::milliseconds kWaitSlice{50};
}  // namespace

Dispatcher::Dispatcher(StoreFactory stores, DispatcherConfig config,
                       std::map<std::string, Handler> handlers)
    : stores_(std::move(stores)),
      config_(std::move(config)),
      handlers_(std::move(handlers)),
      worker_{make_worker_name(config_.worker_prefix), make_holder()},
      batcher_(
          config_.completion_window, config_.max_completion_batch,
          [this](std::size_t n) { settled(n); }, [this](const std::string& m) { log(m); }) {
  config_.batch_size = std::max(1, config_.batch_size);
  config_.concurrency = std::max(1, config_.concurrency);
  for (const auto& entry : handlers_) handler_names_.push_back(entry.first);
}

Dispatcher::~Dispatcher() {
  stop();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finishing_ = true;
    changed_.notify_all();
  }
  for (auto& t : handler_threads_)
    if (t.joinable()) t.join();
}

void Dispatcher::log(const std::string& message) const {
  if (config_.log) {
    config_.log(worker_.name + ": " + message);
  } else {
    std::cerr << "relaybus dispatcher " << worker_.name << ": " << message << std::endl;
  }
}

void Dispatcher::start() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (started_) return;
    started_ = true;
  }
  const int threads = config_.handler_threads > 0 ? config_.handler_threads : config_.concurrency;
  for (int i = 0; i < threads; ++i) handler_threads_.emplace_back([this] { handler_loop(); });
  settle_thread_ = std::thread([this] {
    std::unique_ptr<Store> store;
    while (!store) {
      try {
        store = stores_();
      } catch (const std::exception& e) {
        log(std::string("settlement connection: ") + e.what());
        std::unique_lock<std::mutex> lock(mutex_);
        // Nothing can be completed without a connection: retry until stop() gives up.
        if (changed_.wait_for(lock, config_.poll_interval, [this] { return finishing_; })) return;
      }
    }
    batcher_.run(*store);
  });
  renew_thread_ = std::thread([this] { renew_loop(); });
  claim_thread_ = std::thread([this] { claim_loop(); });
}

DispatcherCounters Dispatcher::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

std::size_t Dispatcher::in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_flight_;
}

void Dispatcher::settled(std::size_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  in_flight_ -= std::min(n, in_flight_);
  changed_.notify_all();
}

bool Dispatcher::wait_for_work(Store& store) {
  const auto deadline = std::chrono::steady_clock::now() + config_.poll_interval;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return false;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return true;
    bool woken = false;
    try {
      woken = store.wait_for_wakeup(std::min(left, kWaitSlice));
    } catch (const std::exception& e) {
      log(std::string("waiting for notifications: ") + e.what());
      std::this_thread::sleep_for(std::min(left, kWaitSlice));
    }
    if (woken) {
      std::lock_guard<std::mutex> lock(mutex_);
      ++counters_.wakeups;
      return true;
    }
  }
}

void Dispatcher::claim_loop() {
  while (!claim_store_) {
    try {
      claim_store_ = stores_();
    } catch (const std::exception& e) {
      log(std::string("claim connection: ") + e.what());
      std::unique_lock<std::mutex> lock(mutex_);
      if (changed_.wait_for(lock, config_.poll_interval, [this] { return stopping_; })) return;
    }
  }
  if (config_.listen) {
    try {
      claim_store_->listen();
    } catch (const std::exception& e) {
      log(std::string("LISTEN failed, polling only: ") + e.what());
    }
  }
  // Refill when half a batch is free, not at every freed slot: one claim per finished
  // delivery would cost as many statements as the row-lease design it replaces.
  const std::size_t capacity = static_cast<std::size_t>(config_.concurrency);
  const std::size_t refill =
      std::max<std::size_t>(1, std::min<std::size_t>(config_.batch_size, capacity) / 2);
  for (;;) {
    std::size_t ask = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || capacity - in_flight_ >= refill; });
      if (stopping_) return;
      ask = std::min<std::size_t>(config_.batch_size, capacity - in_flight_);
    }
    std::vector<Delivery> got;
    try {
      got = claim_store_->claim(worker_, static_cast<int>(ask), config_.lease, handler_names_);
    } catch (const std::exception& e) {
      log(std::string("claim failed: ") + e.what());
      if (!wait_for_work(*claim_store_)) return;
      continue;
    }
    const bool empty = got.empty();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++counters_.claims;
      counters_.claimed += got.size();
      in_flight_ += got.size();
      for (auto& d : got) queue_.push_back(std::move(d));
      changed_.notify_all();
    }
    // Only an empty claim waits: a short one may just mean keys in flight or lanes of
    // others, and the next claim can already find more.
    if (!empty) continue;
    std::size_t held = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      held = in_flight_;
      if (held > 0) {
        // What this worker runs may be what blocks the rest: a key's later deliveries wait
        // for its head, and those keys live in lanes only this worker may claim. Claim
        // again as soon as some of it is completed, not a poll interval later.
        changed_.wait_for(lock, config_.poll_interval,
                          [&] { return stopping_ || in_flight_ < held; });
        if (stopping_) return;
        continue;
      }
    }
    if (!wait_for_work(*claim_store_)) return;
  }
}

void Dispatcher::handler_loop() {
  for (;;) {
    Delivery d;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return !queue_.empty() || finishing_; });
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
    changed_.notify_all();
    if (abandoned) continue;  // released at shutdown: the outcome no longer counts
    // Queued under our lock, so stop() cannot stop the batcher between the handler's
    // return and this hand-over.
    if (ok) {
      ++counters_.succeeded;
      batcher_.complete(std::move(d.token));
    } else {
      ++counters_.failed;
      batcher_.fail(std::move(d.token), std::move(error));
    }
  }
}

void Dispatcher::renew_loop() {
  std::unique_ptr<Store> store;
  const auto every = std::max(std::chrono::milliseconds(1), config_.lease / 3);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (changed_.wait_for(lock, every, [this] { return finishing_; })) return;
    if (in_flight_ == 0) continue;  // nothing runs: an idle worker's lanes may lapse
    lock.unlock();
    try {
      if (!store) store = stores_();
      store->extend_lease(worker_, config_.lease);
    } catch (const std::exception& e) {
      log(std::string("extend_lease failed: ") + e.what());
      store.reset();
    }
    lock.lock();
  }
}

void Dispatcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!started_ || stopped_) return;
    stopped_ = true;
    stopping_ = true;
    changed_.notify_all();
  }
  claim_thread_.join();

  // 1. Deliveries claimed but not started go back at once, without charging an attempt.
  std::deque<Delivery> unstarted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    unstarted.swap(queue_);
  }
  auto release_all = [this](const std::vector<std::string>& tokens) {
    for (const auto& token : tokens) {
      try {
        if (claim_store_) claim_store_->release(token);
      } catch (const std::exception& e) {
        log(std::string("release failed: ") + e.what());
      }
    }
  };
  std::vector<std::string> tokens;
  for (const auto& d : unstarted) tokens.push_back(d.token);
  release_all(tokens);

  // 2. Running handlers get the grace period; the ones still running are aborted: their
  // deliveries are released and whatever they return later is ignored.
  std::vector<std::string> aborted;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    counters_.released += unstarted.size();
    in_flight_ -= std::min(unstarted.size(), in_flight_);
    changed_.wait_for(lock, config_.shutdown_grace, [this] { return running_.empty(); });
    for (auto& [token, running] : running_) {
      running.abandoned = true;
      aborted.push_back(token);
    }
    finishing_ = true;
    changed_.notify_all();
  }

  // 3. Completions of finished handlers go out before the lanes are handed back.
  batcher_.stop();
  if (settle_thread_.joinable()) settle_thread_.join();
  release_all(aborted);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    counters_.released += aborted.size();
    in_flight_ -= std::min(aborted.size(), in_flight_);
  }
  if (renew_thread_.joinable()) renew_thread_.join();

  // 4. Lanes that run nothing now are free for other workers at once, not at lease expiry.
  try {
    if (claim_store_) claim_store_->relinquish(worker_);
  } catch (const std::exception& e) {
    log(std::string("relinquish failed: ") + e.what());
  }
  if (aborted.empty()) {
    for (auto& t : handler_threads_)
      if (t.joinable()) t.join();
  }
}

}  // namespace relaybus::client
