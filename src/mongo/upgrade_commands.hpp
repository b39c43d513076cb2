// Internal to src/mongo (not installed): the 0.1.0 document layout, and the command
// documents that convert it in place into the one of documents.hpp, as pure builders and
// readers (no server). upgrade.hpp sends them; docs/mongodb.md ("Upgrading from the 0.1.0
// layout") describes both layouts and the steps.
//
// 0.1.0 (relaybus's first MongoDB store, as the reference design describes it): a claim was
// a conditional findOneAndUpdate per delivery that set status "processing", attempts + 1
// (the attempt charged at claim), leaseOwner, leaseToken and leaseExpiresAt; a renewal
// moved leaseExpiresAt; completion set status "completed" and kept the document. Lease
// fields are on every 0.1.0 delivery, null when it is not leased. Otherwise the documents
// had today's shape, without these:
//
//   deliveries  no laneId, no claims; status also "processing" and "completed"
//   events      no handlers
//   lanes       none (the collection did not exist)
//   indexes     kObsoleteIndexes on deliveries, instead of today's three
//
// Every builder of a write carries {w: "majority"}: the conversion runs outside any
// transaction, and a step's next write (a completed delivery's delete after its history
// document) must not survive a failover that the previous one did not.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "documents.hpp"

namespace relaybus::mongo::upgrade {

// Documents per batch: each step reads at most this many (events: their deliveries too)
// and writes them in one command, so no command and no reply is large.
inline constexpr int kBatch = 1000;

// --- the 0.1.0 layout

// Statuses 0.2.0 does not have.
inline constexpr char kProcessing[] = "processing";
inline constexpr char kCompleted[] = "completed";
// Lease fields of a 0.1.0 delivery (with field::kLeaseExpiresAt, spelled as the lanes' field).
inline constexpr char kLeaseOwner[] = "leaseOwner";
inline constexpr char kLeaseToken[] = "leaseToken";
// The 0.1.0 indexes of deliveries, none of which 0.2.0 has:
//   deliveries_status_available  {status, availableAt}        claim: due deliveries
//   deliveries_status_lease      {status, leaseExpiresAt}     recovery: expired leases
//   deliveries_key_sequence      {handler, key, sequence}     claim: per-key order
//   deliveries_handler_updated   {handler, updatedAt: -1}     listing by handler
inline constexpr const char* kObsoleteIndexes[] = {
    "deliveries_status_available", "deliveries_status_lease", "deliveries_key_sequence",
    "deliveries_handler_updated"};

// The lastError of a delivery that was in flight at the upgrade and had none: the text of
// the PostgreSQL upgrade (sql/parts/upgrade-0.1.0-0.2.0-before.sql).
inline constexpr char kInFlightError[] = "lease lost: upgraded from 0.1.0 while in flight";

// --- reading (each throws core::Error kInternal for a document it cannot read)

// A delivery by its eventId and handler fields (the parts of its _id).
struct DeliveryKey {
  std::string event_id;
  std::string handler;
};
DeliveryKey read_delivery_key(const bson_t* delivery);

// A delivery still to convert (projection: legacy_fields()).
struct LegacyDelivery {
  DeliveryKey id;
  std::optional<std::string> key;
  std::string status;  // pending, processing or dead
  bool has_claims = false;
  std::optional<std::string> last_error;
  // 0.1.0 deliveries have no createdAt (statistics, listing and purge read it): they get
  // their updatedAt, the closest time the document has (its creation, unless it was claimed).
  bool has_created_at = false;
  std::int64_t updated_at_ms = 0;
};
LegacyDelivery read_legacy_delivery(const bson_t* delivery);

// A completed 0.1.0 delivery: what its completion history document keeps.
struct CompletedDelivery {
  DeliveryKey id;
  std::int32_t attempts = 0;
  std::int64_t updated_at_ms = 0;  // when it completed
};
CompletedDelivery read_completed_delivery(const bson_t* delivery);

// An entry of listIndexes: its name.
std::string read_index_name(const bson_t* index);
// A group of count_lanes: {_id: handler, n: count}.
std::pair<std::string, std::int64_t> read_lane_count(const bson_t* group);

// --- the layout mark (documents.hpp, kLayoutMark): read first, written last.

// The mark by _id, limit 1: its version.
Bson find_layout_mark();
// The mark's version (int32 or int64; anything else is kInternal).
std::int64_t read_layout_version(const bson_t* mark);
// Upserts the mark at kLayoutVersion. $max, so that it never lowers a version a newer relaybus
// wrote meanwhile; convertedAt ($setOnInsert) is the first marking's.
Bson write_layout_mark(std::int64_t now_ms);

// --- the marker of a database not (fully) in the 0.2.0 layout: limit-1 finds of _id.

// A delivery with a lease field or without laneId (every 0.1.0 delivery has both).
Bson find_unconverted_delivery();
// An event without handlers.
Bson find_event_without_handlers();

// --- stop-the-world: a 0.1.0 lease that has not expired at now_ms (its worker may run).
Bson find_live_lease(std::int64_t now_ms);

// --- obsolete indexes: listed, then each one present dropped by name.
Bson list_indexes(const char* collection);
std::vector<std::string> obsolete_among(const std::vector<std::string>& index_names);
// IndexNotFound (27) means done.
Bson drop_index(const char* collection, const std::string& name);

// --- lanes: every subscribed handler with fewer than core::kLaneCount lane documents gets
// them by subscribe's upserts (commands::lane_upserts, each $setOnInsert).
Bson find_subscription_ids();
Bson count_lanes();  // lane documents per handler
std::vector<std::string> handlers_without_lanes(
    const std::vector<std::string>& subscribed,
    const std::vector<std::pair<std::string, std::int64_t>>& counts);
Bson lane_upserts(const std::string& handler);

// --- events.handlers, from the deliveries of each event, completed ones included.
// Events without handlers by _id, after `after` (the last id of the previous batch).
Bson find_events_without_handlers(const std::optional<std::string>& after);
// The deliveries of the events first..last (by _id): the _id range {e: first} to
// {e: last, h: MaxKey}, so the _id index answers it (deliveries have no eventId index).
Bson find_deliveries_of_events(const std::string& first, const std::string& last);
// Each of `event_ids` with the sorted handlers of its deliveries among `deliveries` (none:
// an empty list); deliveries of other events are ignored.
std::vector<std::pair<std::string, std::vector<std::string>>> handlers_of(
    const std::vector<std::string>& event_ids, const std::vector<DeliveryKey>& deliveries);
// Sets each event's handlers, on condition that it still has none.
Bson set_event_handlers(
    const std::vector<std::pair<std::string, std::vector<std::string>>>& events);

// --- completed deliveries move to the completion history: the history document first
// (upserted, $setOnInsert), then the delivery deleted, so a crash in between leaves both
// and the next run finishes the move.
Bson find_completed(const std::optional<DeliveryKey>& after);
Bson record_completions(const std::vector<CompletedDelivery>& completed);
Bson delete_completed(const std::vector<CompletedDelivery>& completed);

// --- the other deliveries (pending, processing, dead): laneId (delivery_lane), claims 0
// where absent, the lease fields removed; a processing one becomes pending with its
// attempts and availableAt kept (it was due when claimed, so it is due at once) and
// lastError kInFlightError unless it had one. One statement per delivery, by _id and the
// status read.
std::vector<const char*> legacy_fields();
Bson find_unconverted(const std::optional<DeliveryKey>& after);
Bson convert_deliveries(const std::vector<LegacyDelivery>& deliveries, std::int64_t now_ms);

}  // namespace relaybus::mongo::upgrade
