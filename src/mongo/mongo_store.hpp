// The MongoDB store on libmongoc: the store seam (src/store/store.hpp) over the documents of
// documents.hpp, sending the commands of commands.hpp. Every decision is core's.
//
// BUILT: setup (collections and indexes, repeatable; converts the 0.1.0 layout in place),
// subscribe (the subscription and the handler's 256 lane documents), publish and
// publish_batch (atomic: one transaction of their own, run with
// mongoc_client_session_with_transaction, the driver's documented retry loop for
// TransientTransactionError and UnknownTransactionCommitResult, bounded here to
// kMaxTransactionAttempts runs of the body; or inside the caller's session and
// transaction), requeue and lookup.
//
// BUILT TOO: the worker half. claim is core::run_claim in LaneConcurrency::kConditionalWrites
// mode: nothing is locked, each step is its own command outside any transaction, every lane
// write is conditional on the epoch the claim read (one unordered update per claim step,
// per-lane results from DuplicateKey write errors, see commands::lane_writes).
// complete_many, fail, bury and release each run in one transaction of their own; begin()
// returns a MongoDB transaction to complete in. A Worker without holder gets the process's
// random holder. listen() does nothing and wait_for_wakeup() sleeps its timeout (polling).
// BUILT TOO: the operator half and maintenance, none of it in a transaction
// (mongo_operator.cpp, mongo_maintenance.cpp). unsubscribe deletes the subscription;
// requeue_dead is one multi-update on the core::requeues condition; statistics and
// list_deliveries are admin reads (scans of deliveries), "in flight" being
// core::counts_in_flight over held lanes' in-flight lists; take_over_expired reads expired
// lanes and runs core::take_over_expired_lanes on the claim's conditional writes;
// purge_expired deletes in slices of commands::kPurgeSlice. The optional completion history
// (MongoOptions::completion_history) is written in the completing transaction.
// None of it has run against a real server (docs/mongodb.md).
//
// Needs a replica set (MongoDB 4.0 or later) or a sharded cluster (4.2 or later):
// transactions do not run on a standalone server. Call setup() first: before 4.4 a
// transaction cannot create the collections it writes. Not thread-safe: one instance per thread,
// like every store.
#pragma once

#include <mongoc/mongoc.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../core/attempt_end.hpp"
#include "../store/store.hpp"

namespace relaybus::mongo {

class Bson;  // documents.hpp

// How many times a transaction's body runs before a TransientTransactionError (a write
// conflict, a failover) is reported as StoreError kConflict instead of run again. The
// driver also stops after 120 seconds, and retries a commit with an unknown result within
// that time without running the body again.
inline constexpr int kMaxTransactionAttempts = 5;

// What PostgreSQL sets in GUCs (src/pg/settings.cpp), with the same defaults.
struct MongoOptions {
  // relaybus.completion_history: a completions document per completed delivery, written in
  // the completing transaction (one more write per completion).
  bool completion_history = false;
  // relaybus.retention_completed: how long purge_expired() keeps the completion history, and
  // events without deliveries.
  std::chrono::seconds retention_completed{7 * 24 * 3600};
  // relaybus.retention_dead: how long it keeps dead deliveries, and the pending deliveries
  // of unsubscribed handlers.
  std::chrono::seconds retention_dead{14 * 24 * 3600};
};

class MongoStore final : public store::Store {
 public:
  // `uri`: a mongodb:// URI (its replicaSet option names the set); `database`: where the
  // collections are. Connects lazily. Throws StoreError kInvalidParameter for a bad URI or
  // database name.
  MongoStore(const std::string& uri, std::string database);
  // The same, with `options` (kInvalidParameter for a negative retention).
  MongoStore(const std::string& uri, std::string database, const MongoOptions& options);
  ~MongoStore() override;
  MongoStore(const MongoStore&) = delete;
  MongoStore& operator=(const MongoStore&) = delete;

  // The client, for a caller that starts its own session and transaction (then passes the
  // session to the overloads below). Owned by the store.
  mongoc_client_t* client() const { return client_; }
  const std::string& database() const { return database_; }
  const MongoOptions& options() const { return options_; }

  // Creates the collections and indexes. Repeatable: existing ones are left as they are.
  // Converts a database in the 0.1.0 layout in place (docs/mongodb.md, "Upgrading from the
  // 0.1.0 layout"; stop every 0.1.0 worker first: kConflict while a 0.1.0 lease is live),
  // and gives every subscribed handler its lanes.
  void setup();

  // --- the worker half: core::run_claim in LaneConcurrency::kConditionalWrites mode (no
  // locks: every lane write conditional on the epoch read), completions and attempt ends in
  // transactions. A Worker without holder gets the process's random holder (see lanes.hpp).
  std::vector<store::Delivery> claim(const store::Worker& worker, int batch,
                                     std::chrono::milliseconds lease,
                                     const std::vector<std::string>& handlers) override;
  int complete_many(const std::vector<std::string>& tokens) override;
  store::FailOutcome fail(const std::string& token, const std::string& error,
                          std::optional<std::chrono::milliseconds> retry_after = {}) override;
  bool bury(const std::string& token, const std::string& error) override;
  bool release(const std::string& token) override;
  int relinquish(const store::Worker& worker) override;
  int extend_lease(const store::Worker& worker, std::chrono::milliseconds lease) override;
  void listen() override;
  // No notifications yet: returns false after sleeping `timeout` (polling).
  bool wait_for_wakeup(std::chrono::milliseconds timeout) override;
  // A MongoDB transaction (a session of client(), majority, snapshot) to complete in.
  std::unique_ptr<store::Transaction> begin() override;

  // --- the publisher half. Each validates everything before it sends a command.
  std::string publish(const store::Event& event) override;
  std::vector<std::string> publish_batch(const std::vector<store::Event>& events) override;
  // In the caller's session, which must be in a transaction the caller started (it commits
  // or aborts it). Errors are thrown as StoreError: kConflict for a TransientTransactionError
  // (the caller's whole transaction must run again), kUnavailable when the server cannot be
  // reached. The session must belong to this store's client().
  std::string publish(mongoc_client_session_t* session, const store::Event& event);
  std::vector<std::string> publish_batch(mongoc_client_session_t* session,
                                         const std::vector<store::Event>& events);

  // --- the operator half
  void subscribe(const store::Subscription& subscription) override;
  // In the caller's session and transaction, as publish's overload.
  void subscribe(mongoc_client_session_t* session, const store::Subscription& subscription);
  bool requeue(const std::string& event_id, const std::string& handler) override;
  std::optional<store::DeliveryState> lookup(const std::string& event_id,
                                             const std::string& handler) override;
  // Deletes the subscription; kUndefinedObject when there is none.
  void unsubscribe(const std::string& handler) override;
  // One multi-update of the dead deliveries; kUndefinedObject for a handler neither
  // subscribed nor with a delivery.
  std::int64_t requeue_dead(const std::optional<std::string>& handler) override;
  // Sets or unsets the subscription's paused field where it differs.
  bool pause(const std::string& handler) override;
  bool resume(const std::string& handler) override;
  // In a transaction: reads the delivery and its lane, refuses it in flight
  // (core::cancel_verdict), bumps the lane's version (fencing a claim that read it) and
  // deletes the delivery. No history entry: the MongoDB store's history records
  // completions only.
  bool cancel(const std::string& event_id, const std::string& handler) override;
  // Admin reads, outside a transaction: a scan of deliveries and of the history, the held
  // lanes' in-flight lists. Not one snapshot: a delivery that changes state meanwhile may
  // be counted as it was or as it is.
  std::vector<store::HandlerStatistics> statistics() override;
  // Admin reads as statistics(); a scan of deliveries with a top-k sort.
  std::vector<store::ListedDelivery> list_deliveries(const store::DeliveryFilter& filter) override;

  // --- maintenance: no background worker runs it here; call it from a scheduler or
  // `relaybus maintain`.
  // Up to commands::kTakeoverBatch expired lanes (core::take_over_expired_lanes, the
  // conditional-writes steps).
  int take_over_expired() override;
  // One slice (commands::kPurgeSlice) of each kind; call it until it returns 0.
  std::int64_t purge_expired() override;

 private:
  bool set_paused(const std::string& handler, bool paused);
  using Body = std::function<void(mongoc_client_session_t*)>;
  // Runs `body` in a transaction of its own (majority, snapshot), retried as the driver's
  // loop decides, at most kMaxTransactionAttempts times.
  void in_transaction(const Body& body);
  void require_session(mongoc_client_session_t* session) const;
  // The commands of publish_batch, in `session`'s transaction, for events validated already
  // (their payloads parsed, their ids chosen, so a body that runs again publishes the same).
  void publish_checked(mongoc_client_session_t* session, const std::vector<store::Event>& events,
                       const std::vector<Bson>& payloads, const std::vector<std::string>& ids);
  // Checks every event, then publishes them in `session` (nullptr: a transaction of its own).
  std::vector<std::string> publish_events(mongoc_client_session_t* session,
                                          const std::vector<store::Event>& events, bool batch);
  void subscribe_checked(mongoc_client_session_t* session, const store::Subscription& s);
  // fail, bury, release: one transaction; core::end_attempt decides.
  core::AttemptResult end(const std::string& token, core::Ending ending, const std::string& error,
                          std::optional<std::chrono::milliseconds> retry_after);

  mongoc_client_t* client_ = nullptr;
  std::string database_;
  MongoOptions options_;
};

}  // namespace relaybus::mongo
