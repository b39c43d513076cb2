// Ends attempts on the dispatcher's settlement connection. Completions that arrive within
// one window (2 ms by default) go out as a single complete_many: a no-op handler finishes
// in microseconds, and one statement per delivery would cost more than the claim saved.
// When no handler is left running (flush_now), they go at once.
// Failures (and burials) go through the same thread because they use the same connection;
// they are rare, so each is its own fail (or bury) call.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "seam.hpp"

namespace relaybus::client {

class CompletionBatcher {
 public:
  // Called on the batcher's thread after each statement, with the number of tokens whose
  // attempt has ended (successfully sent or given up on): the dispatcher's in-flight count.
  using SettledFn = std::function<void(std::size_t settled)>;
  using LogFn = std::function<void(const std::string&)>;

  CompletionBatcher(std::chrono::microseconds window, std::size_t max_batch, SettledFn settled,
                    LogFn log);

  void complete(std::string token);
  void fail(std::string token, std::string error);
  // Dead-letters at once (bury), on the same connection as the failures.
  void bury(std::string token, std::string error);
  // Nothing else is running that could complete within the window (the handler pool went
  // idle): what is queued goes out now. Waiting would add the window to every claim cycle
  // (the claim loop refills only once completions are settled) and group nothing more.
  void flush_now();

  // The thread body: settles until stop() and then flushes everything queued.
  void run(Store& store);
  // The same on a store of its own: opens one (every `retry` after an error, until stop())
  // and then runs on it.
  void run(const StoreFactory& open, std::chrono::milliseconds retry);
  // Asks run() to flush what is queued and return.
  void stop();

  // Counters, for tests and progress output.
  std::size_t statements() const;
  std::size_t completed() const;

 private:
  void flush(Store& store, std::unique_lock<std::mutex>& lock);

  const std::chrono::microseconds window_;
  const std::size_t max_batch_;
  SettledFn settled_;
  LogFn log_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::string> completions_;
  std::chrono::steady_clock::time_point first_at_;  // arrival of the oldest queued completion
  struct Failure {
    std::string token;
    std::string error;
    bool bury = false;
  };
  std::deque<Failure> failures_;
  bool stopping_ = false;
  bool flush_now_ = false;  // flush_now() since the last flush
  std::size_t statements_ = 0;
  std::size_t completed_ = 0;
};

}  // namespace relaybus::client
