// The store-neutral seam: what a worker runtime and a publisher need from a relaybus store,
// and nothing about how the store is reached. Implemented by the PostgreSQL store on libpq
// (src/client/pg_store), by the in-memory reference store (src/store/memory_store), and
// next by the MongoDB store; test/contract runs one suite over every implementation.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "../core/retry_policy.hpp"

namespace relaybus::store {

// One claimed (event, handler) pair. `token` is opaque: it is passed back unchanged.
struct Delivery {
  std::string token;
  std::string event_id;
  std::string handler;
  std::string type;
  std::string key;  // empty when the event has no ordering key
  bool has_key = false;
  std::string payload;  // the payload object as JSON text
  int attempts = 0;     // attempts charged before this one
  std::string published_at;
};

// A store error: a core error code, the message, and the store's own code where it has one
// (the SQLSTATE for PostgreSQL), for logs only: callers decide on code().
class StoreError : public std::runtime_error {
 public:
  StoreError(core::ErrorCode code, const std::string& message, std::string native_code = {})
      : std::runtime_error(message), code_(code), native_code_(std::move(native_code)) {}
  core::ErrorCode code() const noexcept { return code_; }
  const std::string& native_code() const noexcept { return native_code_; }

 private:
  core::ErrorCode code_;
  std::string native_code_;
};

// Who claims: a worker name, and the holder of this incarnation. Lanes are bound to the
// pair, so every connection of the process holds them (a pool may close or swap
// connections), and a restarted process, with another holder, never adopts the lanes of
// its predecessor while their lease lasts.
struct Worker {
  std::string name;
  // Empty: none. Then lanes are bound to the instance that acquired them (PostgreSQL: its
  // backend), and every live instance of the worker name shares them.
  std::string holder;
};

// How fail() ended the attempt.
enum class FailOutcome {
  kRetry,  // charged; claimable again after the backoff
  kDead,   // charged; the budget is spent, it is dead-lettered
  kLost,   // the token's lease was lost (taken over, or ended already): nothing changed
};

// One event to publish. Everything but the type is optional.
struct Event {
  std::string type;
  std::string payload = "{}";  // a JSON object
  std::optional<std::string> key;
  std::optional<std::string> event_id;  // publishing an id again adds only new handlers
  std::optional<std::vector<std::string>> handlers;  // default: every subscriber of the type
  std::optional<std::chrono::milliseconds> delay;    // due this long after publish
};

// An external handler's subscription: the event types it gets ("*": every type) and what
// a failed attempt costs.
struct Subscription {
  std::string handler;
  std::vector<std::string> event_types;
  core::RetryPolicy retry;
};

// What the store knows of one (event, handler) delivery, for operators and tests.
struct DeliveryState {
  std::string status;  // "pending" or "dead" (a completed delivery has no state)
  int attempts = 0;

  bool operator==(const DeliveryState& o) const {
    return status == o.status && attempts == o.attempts;
  }
};

// One handler's counts, as the operator sees them.
struct HandlerStatistics {
  std::string handler;
  std::int64_t pending = 0;     // waiting: not in any held lane's in-flight list
  std::int64_t processing = 0;  // in flight: claimed under a lease, not yet ended
  std::int64_t dead = 0;
  std::int64_t completed = 0;  // completion history (0 when the store keeps none)
  // Whether the store records completions now (PostgreSQL: relaybus.completion_history); when
  // not, `completed` counts only what was recorded while it did.
  bool completed_recorded = true;
  // Creation time of the oldest waiting delivery, microseconds since the Unix epoch.
  std::optional<std::int64_t> oldest_pending_us;
  bool paused = false;  // subscribed and paused: nothing of it is claimed
};

// The statuses list_deliveries() accepts and reports.
inline constexpr const char* kListableStatuses[] = {"pending", "processing", "dead", "completed"};

// Which deliveries to list. Everything empty: pending, processing and dead of every handler.
struct DeliveryFilter {
  std::optional<std::string> status;  // one of kListableStatuses ("completed": the history)
  std::optional<std::string> handler;
  int max_rows = 100;  // zero or more
};

// Runs `body`, reporting a core::Error as the seam reports errors: a StoreError with its
// code. For the stores that run core's checks in-process (in memory, MongoDB).
template <typename Body>
auto reported(Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const core::Error& e) {
    throw StoreError(e.code(), e.what());
  }
}

// kInvalidParameter for an unknown status or a negative max_rows: every store checks a
// filter with this before it reads anything.
inline void validate(const DeliveryFilter& filter) {
  if (filter.status) {
    bool known = false;
    for (const char* s : kListableStatuses) known = known || *filter.status == s;
    if (!known)
      throw StoreError(core::ErrorCode::kInvalidParameter,
                       "unknown status \"" + *filter.status +
                           "\": use pending, processing, dead, completed or none");
  }
  if (filter.max_rows < 0)
    throw StoreError(core::ErrorCode::kInvalidParameter, "max_rows must be zero or more");
}

// One listed delivery, newest first.
struct ListedDelivery {
  std::string event_id;
  std::string handler;
  std::string type;
  std::optional<std::string> key;
  std::string status;  // one of kListableStatuses
  int attempts = 0;
  std::optional<std::int64_t> available_at_us;  // none for the completion history
  std::optional<std::string> last_error;
  std::optional<std::string> lease_owner;  // the worker holding its lane, when processing
  std::int64_t created_at_us = 0;          // the history: when it completed
};

// Completion inside the caller's own transaction, where the store has transactions: the
// handler's writes and the completion commit together or not at all (effectively-once for
// transactional handlers). Destroying it uncommitted rolls back.
class Transaction {
 public:
  virtual ~Transaction() = default;
  // Deletes the delivery inside this transaction if its lease is still valid. While this
  // transaction is open no other worker can take the delivery's lane over.
  virtual bool complete(const std::string& token) = 0;
  virtual void commit() = 0;
  virtual void rollback() = 0;
};

// Not thread-safe: every thread that talks to the store uses its own instance (a libpq
// connection serves one thread at a time).
class Store {
 public:
  virtual ~Store() = default;

  // --- the worker half
  // Leases lanes for `worker` and returns up to `batch` due deliveries of `handlers`
  // (empty: every handler that external workers run).
  virtual std::vector<Delivery> claim(const Worker& worker, int batch,
                                      std::chrono::milliseconds lease,
                                      const std::vector<std::string>& handlers) = 0;
  // Deletes the deliveries whose lease is still valid; returns how many.
  virtual int complete_many(const std::vector<std::string>& tokens) = 0;
  // Charges one attempt; retried after the handler's backoff, or after `retry_after`.
  virtual FailOutcome fail(const std::string& token, const std::string& error,
                           std::optional<std::chrono::milliseconds> retry_after = {}) = 0;
  // Dead-letters the delivery at once (charging the attempt); false = lease lost.
  virtual bool bury(const std::string& token, const std::string& error) = 0;
  // Gives a delivery back without charging an attempt; false = lease lost.
  virtual bool release(const std::string& token) = 0;
  // Hands back every lane of `worker` that runs nothing; returns how many.
  virtual int relinquish(const Worker& worker) = 0;
  // Renews every lane `worker` holds; returns how many.
  virtual int extend_lease(const Worker& worker, std::chrono::milliseconds lease) = 0;
  // True when every claim that returns (found something or not) has left each lane the
  // worker holds for the handlers it named leased until at least the claim's start plus its
  // `lease` (relaybus 0.3.0's claim renews those due). A runtime then need not renew lanes a
  // recent claim renewed: each extend_lease rewrites every lease row, which a held snapshot
  // keeps as a dead version, and makes the next claim find them due again.
  virtual bool claim_renews_held_lanes() const { return false; }
  // Subscribes this instance to publish notifications. Idempotent.
  virtual void listen() = 0;
  // Waits up to `timeout` for a notification; true if one arrived. Polling stays the
  // correctness path: a false return only means "look anyway".
  virtual bool wait_for_wakeup(std::chrono::milliseconds timeout) = 0;
  // A transaction to complete in, or nullptr when the store has none.
  virtual std::unique_ptr<Transaction> begin() { return nullptr; }
  // What a worker checks before it claims anything: that this store lets `worker` claim
  // `handlers` with `lease` (the role's rights, every handler subscribed), and leaves nothing
  // behind. Throws an error that says what to run to fix it. A store that cannot tell
  // before claiming checks nothing.
  virtual void check_worker(const Worker& /*worker*/, const std::vector<std::string>& /*handlers*/,
                            std::chrono::milliseconds /*lease*/) {}
  // Names this instance for the store's own monitoring (PostgreSQL: application_name, in
  // pg_stat_activity), unless its connection settings chose a name already.
  virtual void identify(const std::string& /*name*/) {}

  // --- the publisher half
  // Publishes one event atomically with its deliveries; returns its id.
  virtual std::string publish(const Event& event) = 0;
  // Publishes every event or none; returns their ids in order.
  virtual std::vector<std::string> publish_batch(const std::vector<Event>& events) = 0;

  // --- the operator half
  // Subscribes (or updates) an external handler.
  virtual void subscribe(const Subscription& subscription) = 0;
  // Moves a dead delivery back to pending with a fresh budget; false if it is not dead.
  virtual bool requeue(const std::string& event_id, const std::string& handler) = 0;
  // The delivery's state; nullopt once completed (or never published).
  virtual std::optional<DeliveryState> lookup(const std::string& event_id,
                                              const std::string& handler) = 0;
  // Removes the subscription (kUndefinedObject if there is none). Its deliveries and lanes
  // stay: a re-subscribe resumes them; purge_expired() removes its pending ones once older
  // than the dead-letter retention.
  virtual void unsubscribe(const std::string& handler) = 0;
  // Stops handing out the handler's deliveries: claims skip it (publishing goes on, its
  // deliveries are kept, attempts in flight end as usual) until resume(). False if it was
  // paused already; kUndefinedObject if it is not subscribed. A re-subscribe keeps it
  // paused; an unsubscribe forgets it.
  virtual bool pause(const std::string& handler) = 0;
  // Hands the handler's deliveries out again. False if it was not paused.
  virtual bool resume(const std::string& handler) = 0;
  // Removes a dead delivery, or a pending one not in flight, so that it never runs (again);
  // false if (event_id, handler) has no delivery, kObjectInUse while it is in flight.
  virtual bool cancel(const std::string& event_id, const std::string& handler) = 0;
  // requeue() for every dead delivery of `handler` (nullopt: of every handler); returns how
  // many. kUndefinedObject for a handler neither subscribed nor with deliveries.
  virtual std::int64_t requeue_dead(const std::optional<std::string>& handler) = 0;
  // Per handler (subscribed, with deliveries left, or with completion history), by name.
  virtual std::vector<HandlerStatistics> statistics() = 0;
  // kInvalidParameter for an unknown status or a negative max_rows.
  virtual std::vector<ListedDelivery> list_deliveries(const DeliveryFilter& filter) = 0;

  // --- maintenance: what the PostgreSQL extension's background worker runs on its own,
  // and an operator (`relaybus maintain`) runs for a store without one.
  // Takes over lanes whose lease expired, charging each delivery in flight one attempt
  // (dead-lettering those out of attempts); returns how many lanes.
  virtual int take_over_expired() = 0;
  // Deletes what the store's retention has expired (dead letters, history, events without
  // deliveries) in bounded slices; returns how many. Call it until it returns 0.
  virtual std::int64_t purge_expired() = 0;
};

// Opens a new store instance (a new connection) for a thread of the dispatcher.
using StoreFactory = std::function<std::unique_ptr<Store>()>;

}  // namespace relaybus::store
