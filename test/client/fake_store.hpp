// An in-memory Store for the dispatcher's unit tests: every instance shares one backend,
// which records each call in order. With `transactions` set, begin() returns a
// FakeTransaction that records its calls there too ("begin", "tx_complete", "commit",
// "rollback") and keeps a handler's writes until it commits.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "client/seam.hpp"
#include "client/setup_error.hpp"

namespace relaybus::client::testing {

struct FakeBackend {
  std::mutex mutex;
  std::deque<Delivery> pending;
  std::vector<std::string> calls;  // "claim", "complete_many", "fail", "release", ...
  std::vector<std::vector<std::string>> complete_batches;
  std::vector<std::pair<std::string, std::string>> failures;
  std::vector<std::string> released;
  std::vector<int> claim_sizes;               // batch sizes asked for
  bool transactions = false;                  // begin() returns a FakeTransaction
  std::set<std::string> lost_leases;          // tokens whose in-transaction complete() says false
  std::vector<std::string> committed;         // tokens completed by a committed transaction
  std::vector<std::string> committed_writes;  // handlers' writes that committed
  int open_transactions = 0;
  int relinquished = 0;
  int renewals = 0;
  bool claim_renews = false;  // claim_renews_held_lanes(), as relaybus 0.3.0's store says
  int opened = 0;
  // Handlers the store says are not subscribed: a claim naming one fails, as relaybus's does.
  std::set<std::string> unsubscribed;
  // check_worker() throws a SetupError with this message when set.
  std::optional<std::string> setup_problem;
  std::vector<std::string> names;  // what identify() was told, per instance opened
  std::condition_variable notified;
  int notifications = 0;  // sent and not yet heard: every instance listens, the first hears
  // complete_many waits (without holding `mutex`) while this is set: a settlement
  // connection that has fallen behind.
  bool hold_completions = false;
  std::condition_variable completions_released;
  void release_completions() {
    std::lock_guard<std::mutex> lock(mutex);
    hold_completions = false;
    completions_released.notify_all();
  }

  // A NOTIFY relaybus from anyone.
  void notify() {
    std::lock_guard<std::mutex> lock(mutex);
    ++notifications;
    notified.notify_all();
  }
  void add(int n, const std::string& handler = "h") {
    std::lock_guard<std::mutex> lock(mutex);
    for (int i = 0; i < n; ++i) {
      Delivery d;
      d.event_id = "e" + std::to_string(pending.size() + calls.size()) + "-" + std::to_string(i);
      d.token = "t-" + d.event_id;
      d.handler = handler;
      d.type = "test";
      d.payload = "{}";
      pending.push_back(d);
    }
  }
  std::size_t completed_count() {
    std::lock_guard<std::mutex> lock(mutex);
    return completed_count_locked();
  }
  std::size_t completed_count_locked() const {
    std::size_t n = 0;
    for (const auto& b : complete_batches) n += b.size();
    return n;
  }
};

class FakeTransaction final : public Transaction {
 public:
  explicit FakeTransaction(FakeBackend& backend) : b_(backend) {
    std::lock_guard<std::mutex> lock(b_.mutex);
    b_.calls.push_back("begin");
    ++b_.open_transactions;
  }
  ~FakeTransaction() override {
    if (open_) end("rollback", false);  // destroyed uncommitted
  }
  // A handler's own statement inside the transaction.
  void write(std::string what) { writes_.push_back(std::move(what)); }
  bool complete(const std::string& token) override {
    std::lock_guard<std::mutex> lock(b_.mutex);
    b_.calls.push_back("tx_complete");
    if (b_.lost_leases.count(token)) return false;
    completed_.push_back(token);
    return true;
  }
  void commit() override { end("commit", true); }
  void rollback() override { end("rollback", false); }

 private:
  void end(const char* call, bool keep) {
    std::lock_guard<std::mutex> lock(b_.mutex);
    if (!open_) throw std::logic_error("FakeTransaction: ended twice");
    open_ = false;
    --b_.open_transactions;
    b_.calls.push_back(call);
    if (!keep) return;
    b_.committed.insert(b_.committed.end(), completed_.begin(), completed_.end());
    b_.committed_writes.insert(b_.committed_writes.end(), writes_.begin(), writes_.end());
  }
  FakeBackend& b_;
  bool open_ = true;
  std::vector<std::string> completed_;
  std::vector<std::string> writes_;
};

class FakeStore final : public Store {
 public:
  explicit FakeStore(FakeBackend& backend) : b_(backend) {
    std::lock_guard<std::mutex> lock(b_.mutex);
    ++b_.opened;
  }
  // Hands out the deliveries of the handlers named (every one when none is), in order.
  std::vector<Delivery> claim(const Worker&, int batch, std::chrono::milliseconds,
                              const std::vector<std::string>& handlers) override {
    std::lock_guard<std::mutex> lock(b_.mutex);
    b_.calls.push_back("claim");
    b_.claim_sizes.push_back(batch);
    for (const auto& h : handlers)
      if (b_.unsubscribed.count(h))
        throw StoreError(core::ErrorCode::kUndefinedObject,
                         "handler \"" + h + "\" is not subscribed", "42704");
    const std::set<std::string> wanted(handlers.begin(), handlers.end());
    std::vector<Delivery> out;
    for (auto it = b_.pending.begin();
         it != b_.pending.end() && static_cast<int>(out.size()) < batch;) {
      if (wanted.empty() || wanted.count(it->handler)) {
        out.push_back(*it);
        it = b_.pending.erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }
  void check_worker(const Worker&, const std::vector<std::string>&,
                    std::chrono::milliseconds) override {
    std::lock_guard<std::mutex> lock(b_.mutex);
    b_.calls.push_back("check_worker");
    if (b_.setup_problem)
      throw SetupError(SetupError::Kind::kNotSubscribed, *b_.setup_problem, "42704");
  }
  void identify(const std::string& name) override {
    std::lock_guard<std::mutex> lock(b_.mutex);
    b_.names.push_back(name);
  }
  int complete_many(const std::vector<std::string>& tokens) override {
    std::unique_lock<std::mutex> lock(b_.mutex);
    b_.completions_released.wait(lock, [this] { return !b_.hold_completions; });
    b_.calls.push_back("complete_many");
    b_.complete_batches.push_back(tokens);
    return static_cast<int>(tokens.size());
  }
  FailOutcome fail(const std::string& token, const std::string& error,
                   std::optional<std::chrono::milliseconds>) override {
    std::lock_guard<std::mutex> lock(b_.mutex);
    b_.calls.push_back("fail");
    b_.failures.emplace_back(token, error);
    return FailOutcome::kRetry;
  }
  bool bury(const std::string& token, const std::string& error) override {
    std::lock_guard<std::mutex> lock(b_.mutex);
    b_.calls.push_back("bury");
    b_.failures.emplace_back(token, error);
    return true;
  }
  bool release(const std::string& token) override {
    std::lock_guard<std::mutex> lock(b_.mutex);
    b_.calls.push_back("release");
    b_.released.push_back(token);
    return true;
  }
  int relinquish(const Worker&) override {
    std::lock_guard<std::mutex> lock(b_.mutex);
    b_.calls.push_back("relinquish");
    return ++b_.relinquished;
  }
  int extend_lease(const Worker&, std::chrono::milliseconds) override {
    std::lock_guard<std::mutex> lock(b_.mutex);
    b_.calls.push_back("extend_lease");
    return ++b_.renewals;
  }
  bool claim_renews_held_lanes() const override {
    std::lock_guard<std::mutex> lock(b_.mutex);
    return b_.claim_renews;
  }
  std::unique_ptr<Transaction> begin() override {
    {
      std::lock_guard<std::mutex> lock(b_.mutex);
      if (!b_.transactions) return nullptr;
    }
    return std::make_unique<FakeTransaction>(b_);
  }
  void listen() override {}
  // Like libpq: every notification sent so far is taken at once.
  bool wait_for_wakeup(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(b_.mutex);
    if (!b_.notified.wait_for(lock, timeout, [this] { return b_.notifications > 0; })) return false;
    b_.notifications = 0;
    return true;
  }
  // The dispatcher never publishes or administers: these record the call and refuse.
  std::string publish(const Event&) override { return refuse("publish"); }
  std::vector<std::string> publish_batch(const std::vector<Event>&) override {
    refuse("publish_batch");
    return {};
  }
  void subscribe(const store::Subscription&) override { refuse("subscribe"); }
  bool requeue(const std::string&, const std::string&) override {
    refuse("requeue");
    return false;
  }
  std::optional<store::DeliveryState> lookup(const std::string&, const std::string&) override {
    refuse("lookup");
    return std::nullopt;
  }
  void unsubscribe(const std::string&) override { refuse("unsubscribe"); }
  bool pause(const std::string&) override {
    refuse("pause");
    return false;
  }
  bool resume(const std::string&) override {
    refuse("resume");
    return false;
  }
  bool cancel(const std::string&, const std::string&) override {
    refuse("cancel");
    return false;
  }
  std::int64_t requeue_dead(const std::optional<std::string>&) override {
    refuse("requeue_dead");
    return 0;
  }
  std::vector<store::HandlerStatistics> statistics() override {
    refuse("statistics");
    return {};
  }
  std::vector<store::ListedDelivery> list_deliveries(const store::DeliveryFilter&) override {
    refuse("list_deliveries");
    return {};
  }
  int take_over_expired() override {
    refuse("take_over_expired");
    return 0;
  }
  std::int64_t purge_expired() override {
    refuse("purge_expired");
    return 0;
  }

 private:
  std::string refuse(const char* call) {
    {
      std::lock_guard<std::mutex> lock(b_.mutex);
      b_.calls.push_back(call);
    }
    throw std::logic_error(std::string("FakeStore: the dispatcher called ") + call);
  }
  FakeBackend& b_;
};

inline StoreFactory fake_factory(FakeBackend& backend) {
  return [&backend] { return std::unique_ptr<Store>(new FakeStore(backend)); };
}

}  // namespace relaybus::client::testing
