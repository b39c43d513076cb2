#include "completion_batcher.hpp"

#include <memory>
#include <thread>

namespace relaybus::client {

namespace {
// A statement that fails (a dropped connection) is retried a few times before its tokens
// are given up on: their deliveries then run again after the lease expires.
constexpr int kAttempts = 3;
}  // namespace

CompletionBatcher::CompletionBatcher(std::chrono::microseconds window, std::size_t max_batch,
                                     SettledFn settled, LogFn log)
    : window_(window),
      max_batch_(max_batch == 0 ? 1 : max_batch),
      settled_(std::move(settled)),
      log_(std::move(log)) {}

void CompletionBatcher::complete(std::string token) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (completions_.empty()) first_at_ = std::chrono::steady_clock::now();
  completions_.push_back(std::move(token));
  // Only a full batch needs the thread now; otherwise the window's timer wakes it.
  if (completions_.size() == 1 || completions_.size() >= max_batch_) wake_.notify_one();
}

void CompletionBatcher::flush_now() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (completions_.empty()) return;  // a flag left set would skip the next window
  flush_now_ = true;
  wake_.notify_one();
}

void CompletionBatcher::fail(std::string token, std::string error) {
  std::lock_guard<std::mutex> lock(mutex_);
  failures_.push_back({std::move(token), std::move(error), false});
  wake_.notify_one();
}

void CompletionBatcher::bury(std::string token, std::string error) {
  std::lock_guard<std::mutex> lock(mutex_);
  failures_.push_back({std::move(token), std::move(error), true});
  wake_.notify_one();
}

void CompletionBatcher::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  stopping_ = true;
  wake_.notify_one();
}

std::size_t CompletionBatcher::statements() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return statements_;
}

std::size_t CompletionBatcher::completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

void CompletionBatcher::run(const StoreFactory& open, std::chrono::milliseconds retry) {
  std::unique_ptr<Store> store;
  while (!store) {
    try {
      store = open();
    } catch (const std::exception& e) {
      if (log_) log_(std::string("settlement connection: ") + e.what());
      // Nothing can be completed without a connection: retry until stop() gives up.
      std::unique_lock<std::mutex> lock(mutex_);
      if (wake_.wait_for(lock, retry, [this] { return stopping_; })) return;
    }
  }
  run(*store);
}

void CompletionBatcher::run(Store& store) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (completions_.empty() && failures_.empty()) {
      if (stopping_) return;
      wake_.wait(lock);
      continue;
    }
    // Completions wait for the rest of their window unless the batch is full, a failure
    // is queued anyway, nothing else is running, or we are stopping.
    if (failures_.empty() && !stopping_ && !flush_now_ && completions_.size() < max_batch_) {
      const auto due = first_at_ + window_;
      if (std::chrono::steady_clock::now() < due) {
        wake_.wait_until(lock, due);
        continue;
      }
    }
    flush(store, lock);
  }
}

void CompletionBatcher::flush(Store& store, std::unique_lock<std::mutex>& lock) {
  std::vector<std::string> tokens;
  if (completions_.size() <= max_batch_) {
    tokens.swap(completions_);
  } else {
    tokens.assign(std::make_move_iterator(completions_.begin()),
                  std::make_move_iterator(completions_.begin() + max_batch_));
    completions_.erase(completions_.begin(), completions_.begin() + max_batch_);
    first_at_ = std::chrono::steady_clock::now();
  }
  std::deque<Failure> failures;
  failures.swap(failures_);
  flush_now_ = false;
  lock.unlock();

  // The statements run without the lock: handlers keep queueing meanwhile.
  std::size_t statements = 0;
  int completed = 0;
  if (!tokens.empty()) {
    for (int attempt = 1; attempt <= kAttempts; ++attempt) {
      try {
        ++statements;
        completed = store.complete_many(tokens);
        break;
      } catch (const std::exception& e) {
        if (log_) log_(std::string("complete_many failed: ") + e.what());
        if (attempt < kAttempts) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }
  for (const auto& f : failures) {
    for (int attempt = 1; attempt <= kAttempts; ++attempt) {
      try {
        ++statements;
        if (f.bury) {
          store.bury(f.token, f.error);
        } else {
          store.fail(f.token, f.error);
        }
        break;
      } catch (const std::exception& e) {
        if (log_) log_(std::string(f.bury ? "bury failed: " : "fail failed: ") + e.what());
        if (attempt < kAttempts) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }
  if (settled_) settled_(tokens.size() + failures.size());

  lock.lock();
  statements_ += statements;
  completed_ += static_cast<std::size_t>(completed);
}

}  // namespace relaybus::client
