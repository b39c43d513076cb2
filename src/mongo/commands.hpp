// The exact command documents the MongoDB store sends, as pure builders (no server, no
// session: the driver adds lsid, txnNumber, startTransaction, autocommit, readConcern and
// $db when it sends them). The unit tests compare each with golden extended JSON.
//
// Every decision comes from src/core: the lane (core::lane_of, in delivery_lane), the
// handlers a repeated publish adds (core::handlers_to_add, in plan_publish), whether a
// delivery requeues and with what budget (core::requeues, core::kRequeuedAttempts, in
// requeue_update), the bounds of names and policies (core::validate_name, core::validate).
// A filter that names a value read earlier (requeue's status and claims) is a
// compare-and-set on what core judged, not a second copy of the rule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../core/attempt_end.hpp"
#include "../core/claim_protocol.hpp"
#include "documents.hpp"
#include "../store/store.hpp"

namespace relaybus::mongo::commands {

// --- validation, before any command is built. Each throws core::Error with the code the
// other stores use (kInvalidParameter for a bad value).

void validate_subscription(const store::Subscription& subscription);
// Checks one event and returns its parsed payload. `where` prefixes messages ("events[2]: ").
Bson validate_event(const store::Event& event, const std::string& where = {});
// The given handlers of an event must be subscribed: `found` is what find_subscriptions
// returned. Throws kUndefinedObject naming the first that is not.
void check_subscribed(const std::vector<std::string>& given, const std::vector<std::string>& found);

// --- setup (not in a transaction; each repeatable)

// {create: name, writeConcern: {w: "majority"}}; NamespaceExists (48) means done.
Bson create_collection(const char* name);
// {createIndexes: collection, indexes: [...], writeConcern: {w: "majority"}}: the
// index_specs() of that collection. Creating an existing identical index is a no-op.
Bson create_indexes(const char* collection);
// The collections that have indexes of their own, in setup's order.
std::vector<const char*> indexed_collections();

// --- subscribe (one transaction)

// Upserts the subscription ($set: a repeat updates types and policy).
Bson subscription_upsert(const store::Subscription& subscription);
// The handler's core::kLaneCount lane upserts, one update command, unordered; each only
// $setOnInsert, so a repeated subscribe (or setup) never touches a lane in use.
Bson lane_upserts(const std::string& handler);

// --- publish (one transaction per publish or batch, or the caller's)

// The stored event of an id, if any (type, key, handlers).
Bson find_event(const std::string& event_id);
// The subscribers of a type: {eventTypes: {$in: [type, "*"]}}, by _id. The wildcard is the
// seam's documented meaning of "*" (store::Subscription); core has no function for it.
Bson find_subscribers(const std::string& type);
// Which of the given handlers are subscribed.
Bson find_subscriptions(const std::vector<std::string>& handlers);
// The key's next sequence number: findAndModify $inc, upsert, new. The write holds the
// counter document until commit: a concurrent publisher of the key conflicts and runs
// again, so sequence order is commit order.
Bson next_sequence(const std::string& key);
Bson insert_event(const NewEvent& event);
// A repeated publish: the handlers core::handlers_to_add chose, added to the event.
Bson add_event_handlers(const std::string& event_id, const std::vector<std::string>& added);
Bson insert_deliveries(const std::vector<NewDelivery>& deliveries);

// What publishing one event does, decided from what the transaction read. plan_publish
// takes the stored event (a repeated id: its type and key win, as core/republish.hpp
// says); add_targets then takes the target handlers (the given ones, or the subscribers of
// plan.type) and keeps those core::handlers_to_add chooses.
struct PublishPlan {
  bool new_event = true;
  std::string type;                // the stored event's on a repeat
  std::optional<std::string> key;  // the stored event's on a repeat: its lane and order
  std::vector<std::string> had;    // the stored event's handlers
  std::vector<std::string> added;  // handlers that get a delivery
};
PublishPlan plan_publish(const store::Event& event, const std::optional<StoredEvent>& stored);
void add_targets(PublishPlan& plan, const std::vector<std::string>& targets);

// --- requeue and lookup

// The delivery (status, attempts, claims).
Bson find_delivery(const std::string& event_id, const std::string& handler);
// core::requeues decides on `seen`; nullopt when it does not requeue. Otherwise the update
// to pending with core::kRequeuedAttempts, due now, claims + 1 (the old token dies), on
// condition that the delivery is still as seen.
std::optional<Bson> requeue_update(const std::string& event_id, const std::string& handler,
                                   const StoredDelivery& seen, std::int64_t now_ms);

// --- the worker half. Builders of commands sent in a transaction carry no write concern
// (the transaction's applies); the claim's own writes, which are not in one, carry
// {w: "majority"}.

// The fields the worker half reads of a lane, and of a delivery.
std::vector<const char*> lane_fields();
std::vector<const char*> work_fields();

// The subscriptions (their policies too): every one (nullopt), or those of `handlers`.
Bson find_subscribed(const std::optional<std::vector<std::string>>& handlers);
// The lanes of `handlers` held under `worker`'s name.
Bson find_held_lanes(const std::vector<std::string>& handlers, const std::string& worker);
// Lanes by _id.
Bson find_lanes(const std::vector<std::pair<std::string, std::int16_t>>& lanes);
// Every lane owned under `worker`'s name, whatever the handler (relinquish, extend_lease).
Bson find_owned_lanes(const std::string& worker);
// Deliveries by (handler, event id); `pending_only` adds {status: "pending"}.
Bson find_deliveries(const std::vector<std::pair<std::string, std::string>>& handler_event,
                     bool pending_only);
// The lanes of `handlers` with a pending delivery due at `now_ms`, each with its earliest
// due time, oldest first: one aggregation over deliveries_claim ($sort by the index, then
// $group with $first, which the server can answer with a DISTINCT_SCAN). At most
// core::kLaneCount groups per handler.
Bson lanes_with_work(const std::vector<std::string>& handlers, std::int64_t now_ms);
// A lane's due pending deliveries not in `excluded`, in due order (availableAt, _id: the
// event id within one handler), `skip` then at most `limit` of them.
Bson find_candidates(const std::string& handler, std::int16_t lane,
                     const std::vector<std::string>& excluded, std::int64_t now_ms, int skip,
                     int limit);
// The first (lowest) pending sequence of each of `keys` in the lane, over
// deliveries_key_order: what core::has_pending_predecessor compares a candidate with.
Bson first_pending_sequences(const std::string& handler, std::int16_t lane,
                             const std::vector<std::string>& keys);

// A takeover's charges: one unordered update, each statement on condition that the delivery
// is still pending with the claims counter lock_lost read (`claims_read`, parallel).
Bson charge_updates(const std::vector<core::Charge>& charges,
                    const std::vector<std::int32_t>& claims_read, std::int64_t now_ms);

// A claim's lane writes: one unordered update, one statement per lane, each conditional
// on {_id, epoch: read_epoch}. Each statement is an upsert ($setOnInsert handler, lane):
// a statement whose condition fails then tries to insert a second document with the lane's
// _id and fails with DuplicateKey (11000), reported in writeErrors with the statement's
// index. That is how the reply says, per statement, whether it matched: the update
// command's n and nModified are totals. (A lane document is never deleted, so the insert
// itself never happens.) Each is conditional on the lane's version as read too
// (`read_versions`, parallel; nullopt: absent), and bumps it: an attempt end or another
// claim of the same incarnation that changed inFlight since the read makes the write fail,
// instead of being overwritten with the stale list. `holder` is what a new binding stores;
// `lease_expires_at_ms` the lease of a held lane.
Bson lane_writes(const std::vector<core::LaneUpdate>& updates,
                 const std::vector<std::optional<std::int64_t>>& read_versions,
                 const std::string& worker, const std::string& holder,
                 std::int64_t lease_expires_at_ms);
// The lost lists of these lanes were charged: cleared, at the epoch the claim wrote.
Bson clear_lost(const std::vector<core::LaneRef>& lanes, const std::vector<std::int64_t>& epochs);

// The claimed events (type, key, payload, createdAt).
Bson find_events(const std::vector<std::string>& ids);

// Completion, in a transaction: the deliveries whose tokens core::token_holds.
Bson delete_deliveries(const std::vector<std::pair<std::string, std::string>>& handler_event);
// With the completion history on, in the same transaction: one statement per completed
// delivery, an upsert of the completions document with its _id {e, h}. An upsert, not an
// insert: the only (event, handler) completed twice is an event purged and published again
// with its id while its history was still kept, and a DuplicateKey there would abort the
// completion every time it ran. The later completion replaces the earlier entry.
Bson record_completions(const std::vector<NewCompletion>& completions);

// fail / bury / release, in a transaction: the write core::end_attempt chose, on condition
// that the delivery is still as read (pending, `claims_read`); `available_at_ms`: its new
// due time (kRetry), or nullopt to keep it. `error` empty: lastError stays.
Bson end_update(const std::string& handler, const std::string& event_id, std::int32_t claims_read,
                const core::AttemptEnd& end, std::optional<std::int64_t> available_at_ms,
                const std::string& error, std::int64_t now_ms);
// The ended attempt leaves its lane's in-flight list (the lane's version bumped).
Bson pull_in_flight(const std::string& handler, std::int16_t lane, const std::string& event_id);

// relinquish: hands these lanes back (free, nothing in flight), each on condition that it
// is as read (epoch, owner, holder, inFlight), so a claim in between keeps its lane; the
// version is bumped.
Bson hand_back(const std::vector<StoredLane>& lanes);
// extend_lease: renews these lanes, on condition they are still the caller's.
Bson renew(const std::vector<StoredLane>& lanes, const std::string& worker,
           const std::string& holder, std::int64_t lease_expires_at_ms);

}  // namespace relaybus::mongo::commands
