// MongoStore's operator half beyond subscribe, requeue and lookup (mongo_store.hpp):
// unsubscribe, requeue_dead, statistics, list_deliveries. None runs in a transaction: the
// writes are single commands, and the reads are admin scans that a transaction's lifetime
// limit (60 s by default) and its pinned snapshot would only make riskier.
#include <algorithm>
#include <map>

#include "commands.hpp"
#include "core/attempt_end.hpp"
#include "core/error.hpp"
#include "core/lane_lease.hpp"
#include "documents.hpp"
#include "driver.hpp"
#include "field_readers.hpp"
#include "lanes.hpp"
#include "mongo_store.hpp"
#include "operator_commands.hpp"

namespace relaybus::mongo {

using namespace detail;

namespace {

using DeliveryKey = std::pair<std::string, std::string>;  // (handler, event id)

// core::Error as the seam reports it, its hint in the message (StoreError has no hint).
template <typename Body>
void checked(Body&& body) {
  try {
    body();
  } catch (const core::Error& e) {
    throw StoreError(e.code(),
                     e.hint().empty() ? e.what() : std::string(e.what()) + ". " + e.hint());
  }
}

// The deliveries in flight in held lanes (of `handler`, or of every handler), each with the
// worker whose lane it is in: the listed ids whose delivery core::counts_in_flight keeps.
std::map<DeliveryKey, std::string> in_flight(mongoc_client_t* client, const std::string& database,
                                             const std::optional<std::string>& handler) {
  const std::vector<StoredLane> lanes = lanes_of(
      find_all(client, database, nullptr, commands::find_in_flight_lanes(handler), "find lanes"));
  HandlerEvents refs;
  for (const auto& l : lanes)
    for (const auto& id : l.in_flight) refs.push_back({l.handler, id});
  if (refs.empty()) return {};
  const auto pending = deliveries_of(
      find_all(client, database, nullptr, commands::find_deliveries(refs, true), "find in flight"));
  std::map<DeliveryKey, std::string> out;
  for (const auto& l : lanes) {
    for (const auto& id : l.in_flight) {
      auto d = pending.find({l.handler, id});
      if (core::counts_in_flight(d != pending.end() && d->second.pending()))
        out[{l.handler, id}] = l.owner.value_or("");
    }
  }
  return out;
}

HandlerEvents keys_of(const std::map<DeliveryKey, std::string>& in_flight) {
  HandlerEvents out;
  for (const auto& [key, owner] : in_flight) out.push_back(key);
  return out;
}

// Type and key of each event (an event purged already has none: PostgreSQL's LEFT JOIN).
std::map<std::string, EventSummary> events_of(mongoc_client_t* client, const std::string& database,
                                              std::vector<std::string> ids) {
  std::map<std::string, EventSummary> out;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  if (ids.empty()) return out;
  for (const auto& d :
       find_all(client, database, nullptr, commands::find_event_summaries(ids), "find events")) {
    EventSummary e = reported([&] { return read_event_summary(d.get()); });
    std::string id = e.id;
    out.emplace(std::move(id), std::move(e));
  }
  return out;
}

}  // namespace

void MongoStore::unsubscribe(const std::string& handler) {
  reported([&] { commands::validate_handler(handler); });
  Bson reply = run(client_, database_, nullptr, commands::delete_subscription(handler),
                   "delete subscription");
  if (count_of(reply, "n") == 0)
    throw StoreError(core::ErrorCode::kUndefinedObject,
                     "handler \"" + handler + "\" is not subscribed");
}

bool MongoStore::pause(const std::string& handler) {
  return set_paused(handler, true);
}

bool MongoStore::resume(const std::string& handler) {
  return set_paused(handler, false);
}

bool MongoStore::set_paused(const std::string& handler, bool paused) {
  reported([&] { commands::validate_handler(handler); });
  Bson reply = run(client_, database_, nullptr, commands::set_paused(handler, paused),
                   paused ? "pause" : "resume");
  if (count_of(reply, "nModified") == 1) return true;
  if (find_all(client_, database_, nullptr, commands::find_subscriptions({handler}),
               "find subscription")
          .empty())
    throw StoreError(core::ErrorCode::kUndefinedObject,
                     "handler \"" + handler + "\" is not subscribed");
  return false;
}

bool MongoStore::cancel(const std::string& event_id, const std::string& handler) {
  // No name check, as requeue: a name no delivery has is simply not found (PostgreSQL too).
  bool cancelled = false;
  in_transaction([&](mongoc_client_session_t* session) {
    cancelled = false;
    auto found = find_all(client_, database_, session,
                          commands::find_cancel_target(event_id, handler), "find delivery");
    if (found.empty()) return;
    const StoredDelivery seen = reported([&] { return read_delivery(found.front().get()); });
    const auto lane = static_cast<std::int16_t>(
        reported([&] { return fields::integer_field(found.front().get(), field::kLaneId); }));
    const std::vector<std::pair<std::string, std::int16_t>> lane_ref{{handler, lane}};
    auto lanes = find_all(client_, database_, session, commands::find_lanes(lane_ref), "find lane");
    std::optional<StoredLane> l;
    if (!lanes.empty())
      l = reported([&]() -> StoredLane { return read_lane(lanes.front().get()); });
    const bool listed =
        l && l->owner &&
        std::find(l->in_flight.begin(), l->in_flight.end(), event_id) != l->in_flight.end();
    const bool in_flight = core::counts_in_flight(!seen.dead()) && listed;
    if (core::cancel_verdict(seen.dead(), in_flight) == core::CancelVerdict::kInFlight)
      throw StoreError(
          core::ErrorCode::kObjectInUse,
          "delivery of event \"" + event_id + "\" to handler \"" + handler + "\" is in flight");
    if (!l)
      throw StoreError(core::ErrorCode::kInternal,
                       "the lane of event \"" + event_id + "\"'s delivery to handler \"" + handler +
                           "\" is missing: subscribe the handler again to recreate it");
    if (count_of(run(client_, database_, session, commands::fence_lane(handler, lane, l->version),
                     "fence lane"),
                 "nModified") != 1)
      throw StoreError(core::ErrorCode::kConflict,
                       "the delivery's lane changed while cancel read it; retry");
    Bson reply = run(client_, database_, session,
                     commands::delete_deliveries({{handler, event_id}}), "cancel");
    cancelled = count_of(reply, "n") == 1;
  });
  return cancelled;
}

std::int64_t MongoStore::requeue_dead(const std::optional<std::string>& handler) {
  if (handler) {
    reported([&] { commands::validate_handler(*handler); });
    const bool known = !find_all(client_, database_, nullptr,
                                 commands::find_subscriptions({*handler}), "find subscription")
                            .empty() ||
                       !find_all(client_, database_, nullptr, commands::find_any_delivery(*handler),
                                 "find a delivery")
                            .empty();
    if (!known)
      throw StoreError(core::ErrorCode::kUndefinedObject,
                       "handler \"" + *handler + "\" is not subscribed and has no deliveries");
  }
  Bson reply = run(client_, database_, nullptr, commands::requeue_dead_update(handler, now_ms()),
                   "requeue dead");
  return count_of(reply, "nModified");
}

std::vector<store::HandlerStatistics> MongoStore::statistics() {
  std::map<std::string, store::HandlerStatistics> by_name;
  auto of = [&](const std::string& handler) -> store::HandlerStatistics& {
    store::HandlerStatistics& s = by_name[handler];
    s.handler = handler;
    return s;
  };
  for (const auto& d : find_all(client_, database_, nullptr, commands::find_subscription_names(),
                                "find subscriptions")) {
    const std::string name = reported([&] { return read_string_id(d.get()); });
    of(name).paused = read_paused(d.get());
  }
  const auto running = in_flight(client_, database_, std::nullopt);
  for (const auto& [key, owner] : running) ++of(key.first).processing;
  for (const auto& g : find_all(client_, database_, nullptr,
                                commands::count_deliveries(keys_of(running)), "count deliveries")) {
    const DeliveryCounts c = reported([&] { return read_delivery_counts(g.get()); });
    store::HandlerStatistics& s = of(c.handler);
    s.pending = c.pending;
    s.dead = c.dead;
    if (c.oldest_pending_ms) s.oldest_pending_us = *c.oldest_pending_ms * 1000;
  }
  for (const auto& g :
       find_all(client_, database_, nullptr, commands::count_completions(), "count completions")) {
    const auto [handler, completed] = reported([&] { return read_completion_count(g.get()); });
    of(handler).completed = completed;
  }
  std::vector<store::HandlerStatistics> out;
  for (auto& [name, s] : by_name) out.push_back(std::move(s));
  return out;
}

std::vector<store::ListedDelivery> MongoStore::list_deliveries(
    const store::DeliveryFilter& filter) {
  checked([&] { commands::validate_filter(filter); });
  std::vector<store::ListedDelivery> out;
  if (filter.max_rows == 0) return out;  // a find's limit 0 would mean no limit
  if (filter.status == std::string(kCompleted)) {
    std::vector<StoredCompletion> history;
    std::vector<std::string> ids;
    for (const auto& d : find_all(client_, database_, nullptr,
                                  commands::find_completions(filter.handler, filter.max_rows),
                                  "find completions")) {
      history.push_back(reported([&] { return read_completion(d.get()); }));
      ids.push_back(history.back().event_id);
    }
    const auto events = events_of(client_, database_, ids);
    for (const auto& c : history) {
      store::ListedDelivery row;
      row.event_id = c.event_id;
      row.handler = c.handler;
      if (auto e = events.find(c.event_id); e != events.end()) {
        row.type = e->second.type;
        row.key = e->second.key;
      }
      row.status = kCompleted;
      row.attempts = c.attempts;
      row.created_at_us = c.completed_at_ms * 1000;
      out.push_back(std::move(row));
    }
    return out;
  }
  const auto running = in_flight(client_, database_, filter.handler);
  std::vector<ListedDeliveryDocument> listed;
  std::vector<std::string> ids;
  for (const auto& d :
       find_all(client_, database_, nullptr,
                commands::find_listed_deliveries(filter, keys_of(running)), "find deliveries")) {
    listed.push_back(reported([&] { return read_listed_delivery(d.get()); }));
    ids.push_back(listed.back().event_id);
  }
  const auto events = events_of(client_, database_, ids);
  for (const auto& d : listed) {
    auto r = running.find({d.handler, d.event_id});
    const bool processing = r != running.end() && core::counts_in_flight(d.pending());
    store::ListedDelivery row;
    row.status = processing ? kProcessing : d.status;
    // The filter asked for this status; a delivery that changed between the reads may not
    // have it any more.
    if (filter.status && row.status != *filter.status) continue;
    row.event_id = d.event_id;
    row.handler = d.handler;
    if (auto e = events.find(d.event_id); e != events.end()) row.type = e->second.type;
    row.key = d.key;
    row.attempts = d.attempts;
    row.available_at_us = d.available_at_ms * 1000;
    row.last_error = d.last_error;
    if (processing) row.lease_owner = r->second;
    row.created_at_us = d.created_at_ms * 1000;
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace relaybus::mongo
