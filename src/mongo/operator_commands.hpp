// The commands of the MongoDB store's operator half: unsubscribe, requeue_dead, statistics
// and list_deliveries, as pure builders pinned by golden tests (commands.hpp has the rest).
// None runs in a transaction: each is an admin read or a write of its own, and the writes
// carry {w: "majority"}.
//
// Every decision comes from src/core. Where a filter narrows what the server returns to
// what core decides, it says whose copy it is: {status: "dead"} in requeue_dead is the
// query copy of core::requeues, as relaybus.requeue_dead is the SQL one. "In flight" is
// core::counts_in_flight, applied by the store to the pending deliveries of held lanes'
// in-flight lists (find_in_flight_lanes, then commands::find_deliveries); the statistics
// and the listing take that set of ids as their input, not a rule of their own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "documents.hpp"
#include "../store/store.hpp"

namespace relaybus::mongo::commands {

// --- validation, before anything is sent

// core::validate_name of a handler name: kInvalidParameter for an empty or over-long one.
void validate_handler(const std::string& handler);
// The status is one of store::kListableStatuses (or none) and max_rows is zero or more:
// core::Error kInvalidParameter otherwise, with a hint.
void validate_filter(const store::DeliveryFilter& filter);

// --- unsubscribe

// Deletes the subscription ({_id: handler}, limit 1). `n` 0: there was none.
Bson delete_subscription(const std::string& handler);

// --- pause, resume, cancel

// pause (paused: true) or resume: {_id: handler, paused: {$ne: paused}} to
// {$set: {paused: true}} or {$unset: {paused: ""}}. `nModified` 0: it was so already, or
// it is not subscribed (commands::find_subscriptions tells which).
Bson set_paused(const std::string& handler, bool paused);
// The delivery's status, attempts and lane, for cancel ({_id}, limit 1).
Bson find_cancel_target(const std::string& event_id, const std::string& handler);
// Bumps the version of the delivery's lane if it is still `version` (nullopt: absent),
// so that a claim that read the lane before it fails its conditional write instead of
// handing out the delivery cancel removes. `nModified` 0: the lane changed meanwhile.
Bson fence_lane(const std::string& handler, std::int16_t lane,
                const std::optional<std::int64_t>& version);

// --- requeue_dead

// Whether `handler` has a delivery left ({handler}, limit 1, along deliveries_claim); whether
// it is subscribed is commands::find_subscriptions.
Bson find_any_delivery(const std::string& handler);
// Every dead delivery of `handler` (nullopt: of every handler) to what a requeue writes:
// one multi-update, {status: "dead"} being the query copy of core::requeues.
Bson requeue_dead_update(const std::optional<std::string>& handler, std::int64_t now_ms);

// --- statistics and listing

// Every subscription's name (and paused), sorted.
Bson find_subscription_names();
// The held lanes (an owner, live or expired) with something in their in-flight list, of
// `handler` (nullopt: every handler). A scan of lanes (core::kLaneCount per handler): lanes
// have no index that a claim would have to write.
Bson find_in_flight_lanes(const std::optional<std::string>& handler);
// Per handler: its pending deliveries other than `in_flight` (the pending deliveries of
// held lanes' in-flight lists, as core::counts_in_flight chose them), its dead ones, and the
// oldest createdAt of those pending. One aggregation: a scan of deliveries.
Bson count_deliveries(const std::vector<std::pair<std::string, std::string>>& in_flight);
// Per handler: its completion history entries. An aggregation along completions_handler.
Bson count_completions();

// The fields a listing reads of a delivery.
std::vector<const char*> listed_fields();
// Deliveries for list_deliveries (not "completed"), newest first (createdAt descending,
// eventId, handler, as PostgreSQL), at most filter.max_rows (> 0), of filter.handler if
// given. `in_flight` (as for count_deliveries) narrows the filter to what the listing
// keeps, so that the limit counts the right documents: "pending" leaves them out,
// "processing" is only them, "dead" and none take every delivery. A scan with a top-k
// sort: deliveries have no index on createdAt, which every publish would have to write.
Bson find_listed_deliveries(const store::DeliveryFilter& filter,
                            const std::vector<std::pair<std::string, std::string>>& in_flight);
// The completion history, newest first (completedAt descending, eventId, handler), at most
// `limit` (> 0), of `handler` if given: along completions_completed_at or
// completions_handler.
Bson find_completions(const std::optional<std::string>& handler, int limit);
// The type and key of events.
Bson find_event_summaries(const std::vector<std::string>& ids);

}  // namespace relaybus::mongo::commands
