// The in-memory store: the whole seam (store.hpp) on plain data structures, with every
// decision made by core (claim_protocol, attempt_end, republish, retry_policy). Two uses:
// users unit-test their handlers and their dispatcher setup against it without a
// database, and it is the protocol's executable specification: test/contract runs the
// same suite against it and against the PostgreSQL store.
//
// A MemoryBus is one "database"; every MemoryStore opened on it is one "connection". A
// worker without a holder binds its lanes to the instance that acquired them, as the
// PostgreSQL store binds them to the backend: once that instance is destroyed, its lanes
// are orphans. Every call is atomic (one mutex per bus). A delivery completed in an open
// transaction makes every other call on it wait for that transaction to end, as in
// PostgreSQL (so a thread that fails a delivery its own open transaction completed waits
// forever, as it would there). Not durable, not shared between processes: a test double
// and a reference, not a production store.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "../core/attempt_end.hpp"
#include "../core/claim_protocol.hpp"
#include "store.hpp"

namespace relaybus::store {

class MemoryBus {
 public:
  using Clock = std::chrono::steady_clock;

  // kLocks: a claim is one atomic step, as PostgreSQL's row locks make it. kConditionalWrites:
  // each of a claim's reads and its lane writes is a step of its own and the writes are
  // conditional on the epochs read, as a store without row locks (MongoDB) must work; the
  // contract suite runs in both modes.
  explicit MemoryBus(core::LaneConcurrency concurrency = core::LaneConcurrency::kLocks);
  // Replaces the clock (tests move time on without sleeping). Leases, backoffs and delays
  // are measured on it.
  void set_clock(std::function<Clock::time_point()> now);

 private:
  friend class MemoryStore;
  friend class MemoryTransaction;
  friend class MemoryClaimStore;

  struct Lane {
    std::int64_t epoch = 0;
    std::optional<std::string> owner;
    std::optional<std::string> holder;      // bound to a holder
    std::optional<std::uint64_t> instance;  // else bound to the instance that acquired it
    Clock::time_point expires{};
    std::vector<std::string> in_flight;  // pruned lazily, as in the PostgreSQL store
    std::vector<std::string> lost;       // kConditionalWrites: taken over, not yet charged
    // Moved by every write of the lane (a claim's, an attempt's end, relinquish): with
    // kConditionalWrites a claim writes only a lane still as it read it. The epoch alone
    // is not enough: an attempt that ends during its worker's next claim takes its
    // delivery off in_flight without moving the epoch, and that claim's write would put
    // it back, listed and pending, where nobody would run it again.
    std::int64_t version = 0;
    int pins = 0;  // open transactions that completed a delivery of this lane
  };
  struct Delivery {
    std::int16_t lane = 0;
    std::optional<std::string> key;
    std::int64_t sequence = 0;
    bool dead = false;
    std::int32_t attempts = 0;
    std::int32_t claims = 0;
    Clock::time_point available_at{};
    std::string last_error;
    Clock::time_point created_at{};    // on the bus's clock: retention
    Clock::time_point updated_at{};    // on the bus's clock: retention of dead letters
    std::int64_t created_wall_us = 0;  // wall clock: statistics and listing
    bool completing = false;           // completed in a transaction still open: others wait for it
  };
  struct Event {
    std::string type;
    std::optional<std::string> key;
    std::string payload;
    std::vector<std::string> handlers;  // every handler it ever had (inbox deduplication)
    std::string published_at;
    Clock::time_point published{};  // on the bus's clock: retention
  };
  using DeliveryKey = std::pair<std::string, std::string>;  // handler, event id
  using LaneKey = std::pair<std::string, std::int16_t>;     // handler, lane

  Clock::time_point now() const { return now_(); }
  Lane& lane(const std::string& handler, std::int16_t number) { return lanes_[{handler, number}]; }
  const Delivery* pending(const std::string& handler, const std::string& event_id) const;
  std::vector<std::string> live_in_flight(const std::string& handler, const Lane& lane) const;
  // Waits until no open transaction is completing this delivery, as a PostgreSQL statement
  // waits for the row lock of a completion in progress.
  void wait_settled(std::unique_lock<std::mutex>& lock, const std::string& handler,
                    const std::string& event_id);

  std::mutex mutex_;
  std::condition_variable published_;
  std::condition_variable settled_;  // a transaction ended
  std::uint64_t publications_ = 0;
  std::function<Clock::time_point()> now_;
  core::LaneConcurrency concurrency_;
  std::uint64_t next_instance_ = 1;
  std::set<std::uint64_t> live_instances_;
  std::map<std::string, Subscription> subscriptions_;
  std::set<std::string> paused_;  // subscribed handlers that are paused
  std::map<std::string, Event> events_;
  std::map<DeliveryKey, Delivery> deliveries_;
  std::map<std::string, std::int64_t> key_counters_;
  std::map<LaneKey, Lane> lanes_;
};

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(std::shared_ptr<MemoryBus> bus);
  ~MemoryStore() override;  // its holder-less lanes become orphans
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  std::vector<Delivery> claim(const Worker& worker, int batch, std::chrono::milliseconds lease,
                              const std::vector<std::string>& handlers) override;
  int complete_many(const std::vector<std::string>& tokens) override;
  FailOutcome fail(const std::string& token, const std::string& error,
                   std::optional<std::chrono::milliseconds> retry_after = {}) override;
  bool bury(const std::string& token, const std::string& error) override;
  bool release(const std::string& token) override;
  int relinquish(const Worker& worker) override;
  int extend_lease(const Worker& worker, std::chrono::milliseconds lease) override;
  void listen() override;
  bool wait_for_wakeup(std::chrono::milliseconds timeout) override;
  // A transaction holding completions: its lanes cannot be taken over until it ends, and
  // the deliveries go at commit.
  std::unique_ptr<Transaction> begin() override;

  std::string publish(const Event& event) override;
  std::vector<std::string> publish_batch(const std::vector<Event>& events) override;
  void subscribe(const Subscription& subscription) override;
  bool requeue(const std::string& event_id, const std::string& handler) override;
  std::optional<DeliveryState> lookup(const std::string& event_id,
                                      const std::string& handler) override;
  // The operator half (memory_operator.cpp). This store keeps no completion history:
  // `completed` is always 0 and listing "completed" lists nothing.
  void unsubscribe(const std::string& handler) override;
  bool pause(const std::string& handler) override;
  bool resume(const std::string& handler) override;
  bool cancel(const std::string& event_id, const std::string& handler) override;
  std::int64_t requeue_dead(const std::optional<std::string>& handler) override;
  std::vector<HandlerStatistics> statistics() override;
  std::vector<ListedDelivery> list_deliveries(const DeliveryFilter& filter) override;
  int take_over_expired() override;
  std::int64_t purge_expired() override;
  // This instance's retention for purge_expired (PostgreSQL: relaybus.retention_completed
  // and relaybus.retention_dead, with the same defaults), measured on the bus's clock.
  void set_retention(std::chrono::milliseconds completed, std::chrono::milliseconds dead);

 private:
  friend class MemoryTransaction;
  // Ends an attempt under the bus's lock (fail, bury, release).
  core::AttemptResult end(const std::string& token, core::Ending ending, const std::string& error,
                          std::optional<std::chrono::milliseconds> retry_after);
  void check_publishable(const Event& event) const;
  // The worker whose held lane lists this pending delivery as in flight, if one does.
  std::optional<std::string> holding_worker(const std::string& handler, std::int16_t lane,
                                            const std::string& event_id) const;
  std::string publish_locked(const Event& event);

  std::shared_ptr<MemoryBus> bus_;
  std::uint64_t instance_;
  std::uint64_t seen_publications_ = 0;
  bool listening_ = false;
  std::chrono::milliseconds retention_completed_ = std::chrono::hours(7 * 24);
  std::chrono::milliseconds retention_dead_ = std::chrono::hours(14 * 24);
};

}  // namespace relaybus::store
