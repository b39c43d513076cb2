// The commands of the MongoDB store's maintenance: take over expired lanes, and purge what
// retention expired. Pure builders, pinned by golden tests. Outside any transaction; the
// writes carry {w: "majority"}. The takeover's writes are the claim's (commands::lane_writes,
// charge_updates, clear_lost): only its read is here.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "documents.hpp"

namespace relaybus::mongo::commands {

// Lanes one take_over_expired() takes over at most, as PostgreSQL's kTakeoverBatch
// (src/pg/lane_admin.cpp).
inline constexpr int kTakeoverBatch = 1000;
// Documents of each kind one purge_expired() deletes at most, as PostgreSQL's kPurgeSlice
// (src/pg/purge.cpp): the ids found by one find, then deleted by _id.
inline constexpr int kPurgeSlice = 10000;

// --- take_over_expired

// Lanes held (an owner) whose lease expired at `now_ms`, the longest expired first, at most
// `limit`. The filter is the query copy of core::due_for_takeover, as take_over_expired's
// lock statement is PostgreSQL's. A scan of lanes (core::kLaneCount per handler): an index
// on leaseExpiresAt would be written by every claim and every renewal.
Bson find_expired_lanes(std::int64_t now_ms, int limit);

// --- purge_expired, in PostgreSQL's order. Each find returns at most `limit` ids; each
// delete repeats the find's condition, so a document that changed in between (requeued,
// completed again) stays.

// Dead deliveries last updated before `cutoff_ms`, oldest first: along deliveries_dead.
Bson find_expired_dead(std::int64_t cutoff_ms, int limit);
Bson delete_expired_dead(const std::vector<std::pair<std::string, std::string>>& ids,
                         std::int64_t cutoff_ms);
// The handlers that have lanes (every handler ever subscribed: lanes are never deleted)
// but are not in `subscribed`: one aggregation along lanes_handler_lane.
Bson find_unsubscribed_handlers(const std::vector<std::string>& subscribed);
// Pending deliveries of those handlers created before `cutoff_ms` (PostgreSQL: created_at):
// along deliveries_claim, which leads with handler.
Bson find_expired_unsubscribed(const std::vector<std::string>& handlers, std::int64_t cutoff_ms,
                               int limit);
Bson delete_expired_unsubscribed(const std::vector<std::pair<std::string, std::string>>& ids,
                                 std::int64_t cutoff_ms);
// Completion history completed before `cutoff_ms`: along completions_completed_at.
Bson find_expired_completions(std::int64_t cutoff_ms, int limit);
Bson delete_expired_completions(const std::vector<std::pair<std::string, std::string>>& ids,
                                std::int64_t cutoff_ms);
// Events created before `cutoff_ms`, oldest first, with their handlers: along
// events_created_at.
Bson find_expired_events(std::int64_t cutoff_ms, int limit);
// Which of these (handler, event id) deliveries exist: by _id. An event's handlers name
// every handler it ever had a delivery for (publish adds to them in the transaction that
// inserts the delivery), so its deliveries, if any, are among (handler, event) for them:
// PostgreSQL's NOT EXISTS along the primary key, here an $in along _id.
Bson find_delivery_ids(const std::vector<std::pair<std::string, std::string>>& ids);
// Deletes these events, each on condition that its handlers are still as read: a publish
// that added a delivery to one meanwhile added its handler too, and that event stays.
struct ReadEvent {
  std::string id;
  std::vector<std::string> handlers;
};
Bson delete_events(const std::vector<ReadEvent>& events);
// Takes these events' ids off the inFlight and lost lists of their handlers' lanes, with
// the lanes' versions bumped (core::counts_in_flight, lane_lease.hpp: a purged id leaves
// every lane's lists). One statement per handler (multi). purge_expired sends it twice:
// - before delete_events, to the lanes that list one of the ids: none of these handlers
//   has a delivery of the event left, and none can get one while the event exists (a
//   republish adds only handlers it never had), so no entry of them can appear after
//   this, and none it removes is live;
// - after deleting an unsubscribed handler's pending deliveries, to every lane of the
//   handler (every_lane): a claim that read one of them before the delete either wrote
//   its lane before this (pruned here) or writes after and is refused, its write being
//   conditional on the version it read, which moved whether or not the lane listed the id.
Bson prune_purged(const std::vector<ReadEvent>& events, bool every_lane);

}  // namespace relaybus::mongo::commands
