#include "claim_loop.hpp"

#include <algorithm>

#include "setup_hints.hpp"

namespace relaybus::client {

namespace {
// Waits on a store's socket in slices, so that stop() is noticed within this long.
constexpr std::chrono::milliseconds kWaitSlice{50};
}  // namespace

ClaimLoop::ClaimLoop(StoreFactory stores, Worker worker, std::vector<std::string> handlers,
                     Options options, Deliver deliver, LogFn log)
    : stores_(std::move(stores)),
      worker_(std::move(worker)),
      handlers_(std::move(handlers)),
      options_(options),
      deliver_(std::move(deliver)),
      log_(std::move(log)) {}

ClaimLoop::~ClaimLoop() {
  stop();
}

void ClaimLoop::start(std::unique_ptr<Store> store) {
  store_ = std::move(store);
  thread_ = std::thread([this] { run(); });
}

void ClaimLoop::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    changed_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void ClaimLoop::returned(std::size_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  returned_ = std::min(returned_ + n, in_flight_);
  changed_.notify_all();
}

void ClaimLoop::settled_returned(std::size_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  returned_ -= std::min(n, returned_);
  in_flight_ -= std::min(n, in_flight_);
  changed_.notify_all();
}

void ClaimLoop::settled(std::size_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  in_flight_ -= std::min(n, in_flight_);
  returned_ = std::min(returned_, in_flight_);
  changed_.notify_all();
}

std::size_t ClaimLoop::in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_flight_;
}

std::chrono::steady_clock::time_point ClaimLoop::lanes_renewed_at() const {
  return std::chrono::steady_clock::time_point(
      std::chrono::steady_clock::duration(lanes_renewed_at_.load(std::memory_order_relaxed)));
}

ClaimLoop::Counters ClaimLoop::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

bool ClaimLoop::wait_for_work() {
  const auto deadline = std::chrono::steady_clock::now() + options_.poll_interval;
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
      woken = store_->wait_for_wakeup(std::min(left, kWaitSlice));
    } catch (const std::exception& e) {
      log_(std::string("waiting for notifications: ") + e.what());
      std::this_thread::sleep_for(std::min(left, kWaitSlice));
    }
    if (woken) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++counters_.wakeups;
      }
      return space_out_wakeup();
    }
  }
}

bool ClaimLoop::space_out_wakeup() {
  std::unique_lock<std::mutex> lock(mutex_);
  return !changed_.wait_until(lock, last_claim_ + options_.wakeup_interval,
                              [this] { return stopping_; });
}

void ClaimLoop::take_notifications() {
  if (!options_.listen) return;
  try {
    store_->wait_for_wakeup(std::chrono::milliseconds(0));
  } catch (const std::exception&) {
    // A broken connection: the claim reports it.
  }
}

std::vector<std::string> ClaimLoop::claimable() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::string> names;
  for (const auto& h : handlers_) {
    auto it = left_out_.find(h);
    if (it != left_out_.end()) {
      if (now < it->second) continue;
      left_out_.erase(it);
      retrying_.push_back(h);
    }
    names.push_back(h);
  }
  return names;
}

bool ClaimLoop::leave_out_unsubscribed(const std::string& error,
                                       const std::vector<std::string>& asked) {
  for (const auto& h : asked) {
    if (error.find("handler \"" + h + "\" is not subscribed") == std::string::npos) continue;
    left_out_[h] = std::chrono::steady_clock::now() + options_.recheck_unsubscribed;
    retrying_.erase(std::remove(retrying_.begin(), retrying_.end(), h), retrying_.end());
    if (!reported_.insert(h).second) return true;  // said once already
    const auto every = options_.recheck_unsubscribed.count();
    // Once a handler is left out, whether any other is still claimed for.
    const bool others = std::any_of(handlers_.begin(), handlers_.end(), [&](const std::string& o) {
      return o != h && left_out_.find(o) == left_out_.end();
    });
    log_("handler " + h + " is not subscribed: " +
         (others ? "claiming for the other handlers without it" : "claiming nothing for now") +
         ", and trying it again every " +
         (every % 1000 == 0 ? std::to_string(every / 1000) + " s" : std::to_string(every) + " ms") +
         " (an admin must run " + subscribe_statement(h) + ", or fix the name in the worker)");
    return true;
  }
  return false;
}

void ClaimLoop::run() {
  while (!store_) {
    try {
      store_ = stores_();
    } catch (const std::exception& e) {
      log_(std::string("claim connection: ") + e.what());
      std::unique_lock<std::mutex> lock(mutex_);
      if (changed_.wait_for(lock, options_.poll_interval, [this] { return stopping_; })) return;
    }
  }
  if (options_.listen) {
    try {
      store_->listen();
    } catch (const std::exception& e) {
      log_(std::string("LISTEN failed, polling only: ") + e.what());
    }
  }
  // Refill when half a batch is free, not at every freed slot: one claim per finished
  // delivery would cost as many statements as the row-lease design it replaces.
  // Places for deliveries claimed and not yet returned: concurrency of them run, and a batch
  // larger than concurrency waits in line for the handlers (as in the Python runtime). A
  // worker behind on a backlog then claims a batch per statement rather than the few
  // handlers just freed, so that the claims' fixed cost is spread over many deliveries.
  const std::size_t batch = static_cast<std::size_t>(std::max(1, options_.batch_size));
  const std::size_t capacity =
      std::max(batch, static_cast<std::size_t>(std::max(1, options_.concurrency)));
  const std::size_t max_unsettled = std::max<std::size_t>(1, options_.max_unsettled);
  const std::size_t refill = std::max<std::size_t>(1, batch / 2);
  // Free places: deliveries that may be claimed, and no more than keeps the deliveries in
  // flight (unreturned, or waiting for settlement) within capacity + max_unsettled. Under
  // the lock.
  const auto free = [&] {
    const std::size_t unreturned = in_flight_ - returned_;
    const std::size_t places = unreturned < capacity ? capacity - unreturned : 0;
    const std::size_t held = capacity + max_unsettled;
    return std::min(places, in_flight_ < held ? held - in_flight_ : 0);
  };
  for (;;) {
    std::size_t ask = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || free() >= refill; });
      if (stopping_) return;
      ask = std::min(batch, free());
    }
    std::vector<Delivery> got;
    const std::vector<std::string> names = claimable();
    if (names.empty()) {
      // Every handler is left out: an empty list would claim every handler's deliveries.
      if (!wait_for_work()) return;
      continue;
    }
    take_notifications();
    last_claim_ = std::chrono::steady_clock::now();
    try {
      got = store_->claim(worker_, static_cast<int>(ask), options_.lease, names);
    } catch (const StoreError& e) {
      if (e.code() == core::ErrorCode::kUndefinedObject && leave_out_unsubscribed(e.what(), names))
        continue;  // at once, for the others
      log_(std::string("claim failed: ") + e.what());
      if (!wait_for_work()) return;
      continue;
    } catch (const std::exception& e) {
      log_(std::string("claim failed: ") + e.what());
      if (!wait_for_work()) return;
      continue;
    }
    if (names.size() == handlers_.size() && store_->claim_renews_held_lanes())
      lanes_renewed_at_.store(last_claim_.time_since_epoch().count(), std::memory_order_relaxed);
    for (const auto& h : retrying_) {
      reported_.erase(h);
      log_("handler " + h + " is subscribed again: claiming for it");
    }
    retrying_.clear();
    const bool empty = got.empty();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++counters_.claims;
      counters_.claimed += got.size();
      in_flight_ += got.size();
    }
    if (!empty) deliver_(std::move(got));
    // Only an empty claim waits: a short one may just mean keys in flight or lanes of
    // others, and the next claim can already find more.
    if (!empty) continue;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const std::size_t held = in_flight_;
      if (held > 0) {
        // What this worker runs may be what blocks the rest: a key's later deliveries wait
        // for its head, and those keys live in lanes only this worker may claim. Claim
        // again as soon as some of it is settled, not a poll interval later.
        changed_.wait_for(lock, options_.poll_interval,
                          [&] { return stopping_ || in_flight_ < held; });
        if (stopping_) return;
        continue;
      }
    }
    if (!wait_for_work()) return;
  }
}

}  // namespace relaybus::client
