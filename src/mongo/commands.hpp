// The exact command documents the MongoDB store sends, as pure builders (no server, no
// session: the driver adds lsid, txnNumber, startTransaction, autocommit, readConcern and
// $db when it sends them). The unit tests compare each with golden extended JSON.
//
// Every decision comes from src/core: the lane (core::lane_of, in delivery_document), the
// handlers a repeated publish adds (core::handlers_to_add, in plan_publish), whether a
// delivery requeues and with what budget (core::requeues, core::kRequeuedAttempts, in
// requeue_update), the bounds of names and policies (core::validate_name, core::validate).
// A filter that names a value read earlier (requeue's status and claims) is a
// compare-and-set on what core judged, not a second copy of the rule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "documents.hpp"
#include "store/store.hpp"

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

}  // namespace relaybus::mongo::commands
