// The MongoDB store's document model: every collection and field name, and pure functions
// that build and read the documents (libbson bson_t). Nothing here talks to a server and
// nothing decides a rule of the lane protocol: lanes come from core::lane_of, retry
// policies are core::RetryPolicy, and stored values read back are brought into core's
// bounds (core::clamped). commands.hpp builds the command documents from these.
//
// Collections (the per-handler lanes of the PostgreSQL store, not the reference design's
// global ones):
//
//   subscriptions  {_id: handler, eventTypes: [..], maxAttempts: int32,
//                   backoffBaseUs: int64, backoffMaxUs: int64}
//   events         {_id: eventId, type, key: string|null, payload: {..} (the JSON object,
//                   parsed), handlers: [..] (every handler it ever had a delivery for: inbox
//                   deduplication), createdAt: date}
//   deliveries     {_id: {e: eventId, h: handler}, eventId, handler, laneId: int32
//                   (core::lane_of of the key, else of the event id), key: string|null,
//                   sequence: int64 (per key, from key_counters; 0 unkeyed),
//                   status: "pending"|"dead", attempts: int32, claims: int32,
//                   availableAt: date, lastError: string|null, createdAt: date,
//                   updatedAt: date}
//   lanes          {_id: {h: handler, l: lane}, handler, lane: int32, epoch: int64,
//                   owner: string|null, holder: string|null, leaseExpiresAt: date|null,
//                   inFlight: [eventId..], lost: [eventId..], version: int64 (absent until
//                   a claim writes the lane)}
//   key_counters   {_id: key, last: int64}
//   completions    {_id: {e: eventId, h: handler}, eventId, handler, attempts: int32 (the
//                   completing one included), completedAt: date}: the optional completion
//                   history (MongoOptions::completion_history), and 0.1.0's completed
//                   deliveries, which the upgrade moves here in the same shape
//   relaybus_meta  the store's own metadata: {_id: "layout", version: int32
//                   (kLayoutVersion), convertedAt: date}, the layout mark setup() writes
//                   once the database is in this layout (upgrade.hpp)
//
// Storage: every multi-document write runs in a transaction with write concern
// {w: "majority"} and read concern "snapshot" (read preference primary), so what a
// transaction read is one consistent snapshot, a write that raced with another
// transaction's write fails with a WriteConflict (TransientTransactionError) and is run
// again whole, and a committed publish survives a failover. Setup's DDL (create,
// createIndexes) is sent with {w: "majority"} too. Times (availableAt, createdAt,
// updatedAt) are the client's wall clock in milliseconds, as BSON dates.
#pragma once

#include <bson/bson.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../store/store.hpp"

namespace relaybus::mongo {

// An owned bson_t. Moves, never copies.
class Bson {
 public:
  Bson();                        // an empty document
  explicit Bson(bson_t* adopt);  // takes ownership
  Bson(Bson&& other) noexcept;
  Bson& operator=(Bson&& other) noexcept;
  Bson(const Bson&) = delete;
  Bson& operator=(const Bson&) = delete;
  ~Bson();

  bson_t* get() const { return doc_; }
  // Canonical extended JSON (every number typed): what the golden tests compare.
  std::string canonical_json() const;
  // Relaxed extended JSON, for messages.
  std::string relaxed_json() const;

 private:
  bson_t* doc_;
};

// Appends a string, and an array of strings: the helpers every builder here and in
// commands.cpp uses.
void append_string(bson_t* doc, const char* name, const std::string& value);
void append_strings(bson_t* doc, const char* name, const std::vector<std::string>& values);

// Collections.
inline constexpr char kSubscriptions[] = "subscriptions";
inline constexpr char kEvents[] = "events";
inline constexpr char kDeliveries[] = "deliveries";
inline constexpr char kLanes[] = "lanes";
inline constexpr char kKeyCounters[] = "key_counters";
inline constexpr char kCompletions[] = "completions";
inline constexpr char kMeta[] = "relaybus_meta";
inline constexpr const char* kCollections[] = {kSubscriptions, kEvents,      kDeliveries, kLanes,
                                               kKeyCounters,   kCompletions, kMeta};

// The layout mark: the relaybus_meta document that says which layout the database is in, so
// that setup() need not look for 0.1.0 documents (which no index finds) on every start.
// This file's layout is version 2 (0.1.0's, unmarked, counts as 1).
inline constexpr char kLayoutMark[] = "layout";
inline constexpr std::int32_t kLayoutVersion = 2;

// Field names: the one place each is spelled.
namespace field {
inline constexpr char kId[] = "_id";
// subscriptions
inline constexpr char kEventTypes[] = "eventTypes";
inline constexpr char kMaxAttempts[] = "maxAttempts";
inline constexpr char kBackoffBaseUs[] = "backoffBaseUs";
inline constexpr char kBackoffMaxUs[] = "backoffMaxUs";
inline constexpr char kPaused[] = "paused";  // true while paused (MongoStore::pause); else absent
// events
inline constexpr char kType[] = "type";
inline constexpr char kKey[] = "key";  // also deliveries
inline constexpr char kPayload[] = "payload";
inline constexpr char kHandlers[] = "handlers";
inline constexpr char kCreatedAt[] = "createdAt";  // also deliveries
// deliveries (their _id is {e, h})
inline constexpr char kIdEvent[] = "e";
inline constexpr char kIdHandler[] = "h";
inline constexpr char kEventId[] = "eventId";
inline constexpr char kHandler[] = "handler";  // also lanes
inline constexpr char kLaneId[] = "laneId";
inline constexpr char kSequence[] = "sequence";
inline constexpr char kStatus[] = "status";
inline constexpr char kAttempts[] = "attempts";
inline constexpr char kClaims[] = "claims";
inline constexpr char kAvailableAt[] = "availableAt";
inline constexpr char kLastError[] = "lastError";
inline constexpr char kUpdatedAt[] = "updatedAt";
// lanes (their _id is {h, l})
inline constexpr char kIdLane[] = "l";
inline constexpr char kLane[] = "lane";
inline constexpr char kEpoch[] = "epoch";
inline constexpr char kOwner[] = "owner";
inline constexpr char kHolder[] = "holder";
inline constexpr char kLeaseExpiresAt[] = "leaseExpiresAt";
inline constexpr char kInFlight[] = "inFlight";
inline constexpr char kLost[] = "lost";
// Bumped by every write that changes inFlight (claims, attempt ends, hand-backs); absent on
// a lane no claim has written yet. A claim's lane write is conditional on it too.
inline constexpr char kVersion[] = "version";  // also the layout mark's
// key_counters
inline constexpr char kLast[] = "last";
// completions (their _id is {e, h}; eventId, handler and attempts as in deliveries)
inline constexpr char kCompletedAt[] = "completedAt";
// relaybus_meta's layout mark (its _id is kLayoutMark; version as above)
inline constexpr char kConvertedAt[] = "convertedAt";
}  // namespace field

// Delivery statuses: the stored ones of the seam (store::DeliveryState::status).
inline constexpr char kPending[] = "pending";
inline constexpr char kDead[] = "dead";
// The listing's statuses that are not stored (store::kListableStatuses): a pending delivery
// in flight, and the completion history.
inline constexpr char kProcessing[] = "processing";
inline constexpr char kCompleted[] = "completed";

// The payload: a JSON object, parsed (bson_init_from_json). Throws core::Error
// kInvalidParameter for anything else (not JSON, an array, a scalar, trailing text).
Bson parse_payload(const std::string& json, const std::string& where = {});

// {e: eventId, h: handler}
Bson delivery_id(const std::string& event_id, const std::string& handler);
// {h: handler, l: lane}
Bson lane_id(const std::string& handler, std::int16_t lane);

// A subscription's stored fields other than _id.
Bson subscription_fields(const store::Subscription& subscription);
// A lane as subscribe creates it (the $setOnInsert of its upsert): free, epoch 0.
Bson new_lane_fields(const std::string& handler, std::int16_t lane);

struct NewEvent {
  std::string id;
  std::string type;
  std::optional<std::string> key;
  const bson_t* payload = nullptr;  // from parse_payload
  std::vector<std::string> handlers;
  std::int64_t created_at_ms = 0;
};
Bson event_document(const NewEvent& event);

// A delivery's lane: core::lane_of of its key, else of its event id. Publish stores it, and
// the 0.1.0 upgrade backfills it (upgrade_commands.hpp) with this same function.
std::int16_t delivery_lane(const std::string& event_id, const std::optional<std::string>& key);

// One pending delivery as publish inserts it. Its lane is delivery_lane(). createdAt and
// updatedAt are `now_ms`.
struct NewDelivery {
  std::string event_id;
  std::string handler;
  std::optional<std::string> key;
  std::int64_t sequence = 0;  // 0 unkeyed
  std::int64_t available_at_ms = 0;
  std::int64_t now_ms = 0;
};
Bson delivery_document(const NewDelivery& delivery);

// One completion history entry, as the completing transaction writes it (its _id is
// delivery_id()): the fields other than _id.
struct NewCompletion {
  std::string event_id;
  std::string handler;
  std::int32_t attempts = 0;  // the attempts it took, the completing one included
  std::int64_t completed_at_ms = 0;
};
Bson completion_fields(const NewCompletion& completion);

// One index, with why it exists.
struct IndexSpec {
  const char* collection;
  const char* name;
  Bson keys;
  Bson partial;  // empty: not partial
  bool unique = false;
  const char* reason;
};
// Every index setup creates (the _id indexes aside).
std::vector<IndexSpec> index_specs();

// --- reading. Each throws core::Error kInternal for a document it cannot read (a field
// missing or of the wrong type: storage edited by hand, or a bug).

struct StoredEvent {
  std::string type;
  std::optional<std::string> key;
  std::vector<std::string> handlers;
};
StoredEvent read_event(const bson_t* event);

struct StoredDelivery {
  std::string status;
  std::int32_t attempts = 0;
  std::int32_t claims = 0;
  bool dead() const { return status == kDead; }
};
StoredDelivery read_delivery(const bson_t* delivery);

// A key_counters document: its `last`.
std::int64_t read_counter(const bson_t* counter);

// A subscriptions document, its policy clamped into core's bounds.
store::Subscription read_subscription(const bson_t* subscription);
// Whether a subscriptions document is paused (field paused true; absent: not).
bool read_paused(const bson_t* subscription);

// The string _id of a document (subscriptions, events, key_counters).
std::string read_string_id(const bson_t* document);

// --- the worker half's reads

// A lanes document (projection: commands::kLaneFields).
struct StoredLane {
  std::string handler;
  std::int16_t lane = 0;
  std::int64_t epoch = 0;
  std::optional<std::string> owner;
  std::optional<std::string> holder;
  std::optional<std::int64_t> lease_expires_at_ms;  // null: never leased
  std::vector<std::string> in_flight;
  std::vector<std::string> lost;
  std::optional<std::int64_t> version;  // absent: never written by a claim
};
StoredLane read_lane(const bson_t* lane);

// A deliveries document as the worker half reads it (projection: commands::kWorkFields).
struct WorkDelivery {
  std::string event_id;
  std::string handler;
  std::optional<std::string> key;
  std::int64_t sequence = 0;
  std::string status;
  std::int32_t attempts = 0;
  std::int32_t claims = 0;
  std::int64_t available_at_ms = 0;
  bool pending() const { return status == kPending; }
};
WorkDelivery read_work_delivery(const bson_t* delivery);

// An events document as a claim returns it: the payload as relaxed extended JSON text.
struct ClaimedEvent {
  std::string id;
  std::string type;
  std::optional<std::string> key;
  std::string payload;
  std::int64_t created_at_ms = 0;
};
ClaimedEvent read_claimed_event(const bson_t* event);

// One group of commands::first_pending_sequences: {_id: key, first: sequence}.
std::pair<std::string, std::int64_t> read_first_sequence(const bson_t* group);

// A group of commands::lanes_with_work: {_id: {h: handler, l: lane}, at: date}.
std::pair<std::string, std::int16_t> read_lane_group(const bson_t* group);

// --- the operator half's and maintenance's reads

// The _id {e, h} of a deliveries or completions document, as (handler, event id).
std::pair<std::string, std::string> read_delivery_id(const bson_t* document);

// A deliveries document as list_deliveries reads it (projection: commands::listed_fields).
struct ListedDeliveryDocument {
  std::string event_id;
  std::string handler;
  std::optional<std::string> key;
  std::string status;
  std::int32_t attempts = 0;
  std::int64_t available_at_ms = 0;
  std::optional<std::string> last_error;
  std::int64_t created_at_ms = 0;
  bool pending() const { return status == kPending; }
};
ListedDeliveryDocument read_listed_delivery(const bson_t* delivery);

// A completions document.
struct StoredCompletion {
  std::string event_id;
  std::string handler;
  std::int32_t attempts = 0;
  std::int64_t completed_at_ms = 0;
};
StoredCompletion read_completion(const bson_t* completion);

// An events document with the fields a listing shows (projection: type, key).
struct EventSummary {
  std::string id;
  std::string type;
  std::optional<std::string> key;
};
EventSummary read_event_summary(const bson_t* event);

// An events document's _id and handlers (purge: the deliveries it can still have).
std::pair<std::string, std::vector<std::string>> read_event_handlers(const bson_t* event);

// A group of commands::count_deliveries: {_id: handler, pending, dead, oldest: date|null}.
struct DeliveryCounts {
  std::string handler;
  std::int64_t pending = 0;  // waiting, not in flight
  std::int64_t dead = 0;
  std::optional<std::int64_t> oldest_pending_ms;  // createdAt of the oldest waiting one
};
DeliveryCounts read_delivery_counts(const bson_t* group);

// A group of commands::count_completions: {_id: handler, completed}.
std::pair<std::string, std::int64_t> read_completion_count(const bson_t* group);

}  // namespace relaybus::mongo
