// MemoryStore's operator half: unsubscribe, requeue_dead, statistics, listing and purge,
// with the semantics of the PostgreSQL functions of the same names (sql/parts/api-0.2.0.sql,
// src/pg/purge.cpp). "In flight" is core::counts_in_flight over the in-flight lists of
// held lanes, as there.
#include <algorithm>
#include <set>
#include <tuple>

#include "core/attempt_end.hpp"
#include "core/claim_request.hpp"
#include "core/error.hpp"
#include "core/lane_lease.hpp"
#include "memory_store.hpp"

namespace relaybus::store {

void MemoryStore::set_retention(std::chrono::milliseconds completed,
                                std::chrono::milliseconds dead) {
  retention_completed_ = completed;
  retention_dead_ = dead;
}

void MemoryStore::unsubscribe(const std::string& handler) {
  reported([&] { core::validate_name("handler name", handler); });
  std::lock_guard<std::mutex> lock(bus_->mutex_);
  if (bus_->subscriptions_.erase(handler) == 0)
    throw StoreError(core::ErrorCode::kUndefinedObject,
                     "handler \"" + handler + "\" is not subscribed");
  bus_->paused_.erase(handler);
}

namespace {
void require_subscribed(const std::map<std::string, Subscription>& subs,
                        const std::string& handler) {
  if (subs.count(handler) == 0)
    throw StoreError(core::ErrorCode::kUndefinedObject,
                     "handler \"" + handler + "\" is not subscribed");
}
}  // namespace

bool MemoryStore::pause(const std::string& handler) {
  reported([&] { core::validate_name("handler name", handler); });
  std::lock_guard<std::mutex> lock(bus_->mutex_);
  require_subscribed(bus_->subscriptions_, handler);
  return bus_->paused_.insert(handler).second;
}

bool MemoryStore::resume(const std::string& handler) {
  reported([&] { core::validate_name("handler name", handler); });
  std::lock_guard<std::mutex> lock(bus_->mutex_);
  require_subscribed(bus_->subscriptions_, handler);
  if (bus_->paused_.erase(handler) == 0) return false;
  ++bus_->publications_;  // wakes waiting workers, as a publish does
  bus_->published_.notify_all();
  return true;
}

bool MemoryStore::cancel(const std::string& event_id, const std::string& handler) {
  // No name check, as requeue: a name no delivery has is simply not found (PostgreSQL too).
  std::lock_guard<std::mutex> lock(bus_->mutex_);
  auto it = bus_->deliveries_.find({handler, event_id});
  if (it == bus_->deliveries_.end()) return false;
  const auto& d = it->second;
  const bool in_flight =
      core::counts_in_flight(!d.dead) && holding_worker(handler, d.lane, event_id).has_value();
  if (core::cancel_verdict(d.dead, in_flight) == core::CancelVerdict::kInFlight)
    throw StoreError(
        core::ErrorCode::kObjectInUse,
        "delivery of event \"" + event_id + "\" to handler \"" + handler + "\" is in flight");
  bus_->deliveries_.erase(it);
  // Its key's next delivery may be claimable now.
  ++bus_->publications_;
  bus_->published_.notify_all();
  return true;
}

std::int64_t MemoryStore::requeue_dead(const std::optional<std::string>& handler) {
  if (handler) reported([&] { core::validate_name("handler name", *handler); });
  std::lock_guard<std::mutex> lock(bus_->mutex_);
  std::int64_t n = 0;
  bool known = !handler || bus_->subscriptions_.count(*handler) > 0;
  for (auto& [key, d] : bus_->deliveries_) {
    if (handler && key.first != *handler) continue;
    known = true;
    if (!core::requeues(d.dead)) continue;
    d.dead = false;
    d.attempts = core::kRequeuedAttempts;
    ++d.claims;
    d.available_at = d.updated_at = bus_->now();
    ++n;
  }
  if (!known)
    throw StoreError(core::ErrorCode::kUndefinedObject,
                     "handler \"" + *handler + "\" is not subscribed and has no deliveries");
  if (n > 0) {
    ++bus_->publications_;
    bus_->published_.notify_all();
  }
  return n;
}

std::optional<std::string> MemoryStore::holding_worker(const std::string& handler,
                                                       std::int16_t lane,
                                                       const std::string& event_id) const {
  auto it = bus_->lanes_.find({handler, lane});
  if (it == bus_->lanes_.end() || !it->second.owner) return std::nullopt;
  const auto& f = it->second.in_flight;
  if (std::find(f.begin(), f.end(), event_id) == f.end()) return std::nullopt;
  return it->second.owner;
}

std::vector<HandlerStatistics> MemoryStore::statistics() {
  std::lock_guard<std::mutex> lock(bus_->mutex_);
  std::map<std::string, HandlerStatistics> by_handler;
  for (const auto& [handler, s] : bus_->subscriptions_) {
    by_handler[handler].handler = handler;
    by_handler[handler].paused = bus_->paused_.count(handler) > 0;
  }
  for (const auto& [key, d] : bus_->deliveries_) {
    auto& s = by_handler[key.first];
    s.handler = key.first;
    if (d.dead) {
      ++s.dead;
      continue;
    }
    const bool in_flight = core::counts_in_flight(!d.dead) &&
                           holding_worker(key.first, d.lane, key.second).has_value();
    if (in_flight) {
      ++s.processing;
    } else {
      ++s.pending;
      if (!s.oldest_pending_us || d.created_wall_us < *s.oldest_pending_us)
        s.oldest_pending_us = d.created_wall_us;
    }
  }
  std::vector<HandlerStatistics> out;
  for (auto& [handler, s] : by_handler) out.push_back(std::move(s));
  return out;  // by name: std::map
}

std::vector<ListedDelivery> MemoryStore::list_deliveries(const DeliveryFilter& filter) {
  validate(filter);
  std::lock_guard<std::mutex> lock(bus_->mutex_);
  std::vector<ListedDelivery> out;
  if (filter.status == std::string("completed")) return out;  // no history kept
  const auto wall_now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  for (const auto& [key, d] : bus_->deliveries_) {
    if (filter.handler && key.first != *filter.handler) continue;
    const auto owner = core::counts_in_flight(!d.dead)
                           ? holding_worker(key.first, d.lane, key.second)
                           : std::nullopt;
    ListedDelivery l;
    l.event_id = key.second;
    l.handler = key.first;
    const auto& event = bus_->events_.at(key.second);
    l.type = event.type;
    l.key = d.key;
    l.status = d.dead ? "dead" : owner ? "processing" : "pending";
    if (filter.status && l.status != *filter.status) continue;
    l.attempts = d.attempts;
    // The bus's clock may be a test's: the due time is reported relative to the wall clock.
    l.available_at_us =
        wall_now_us +
        std::chrono::duration_cast<std::chrono::microseconds>(d.available_at - bus_->now()).count();
    if (!d.last_error.empty()) l.last_error = d.last_error;
    l.lease_owner = owner;
    l.created_at_us = d.created_wall_us;
    out.push_back(std::move(l));
  }
  std::sort(out.begin(), out.end(), [](const ListedDelivery& a, const ListedDelivery& b) {
    return std::make_tuple(-a.created_at_us, a.event_id, a.handler) <
           std::make_tuple(-b.created_at_us, b.event_id, b.handler);
  });
  if (out.size() > static_cast<std::size_t>(filter.max_rows))
    out.resize(static_cast<std::size_t>(filter.max_rows));
  return out;
}

std::int64_t MemoryStore::purge_expired() {
  std::lock_guard<std::mutex> lock(bus_->mutex_);
  const auto now = bus_->now();
  std::int64_t deleted = 0;
  std::set<std::pair<std::string, std::string>> purged;  // (handler, event id) off the lanes
  // Dead letters not updated within the dead-letter retention, and the pending deliveries
  // of unsubscribed handlers created before it (a re-subscribe before then resumes them).
  for (auto it = bus_->deliveries_.begin(); it != bus_->deliveries_.end();) {
    const auto& d = it->second;
    const bool unsubscribed = bus_->subscriptions_.count(it->first.first) == 0;
    const bool expired = d.dead ? d.updated_at < now - retention_dead_
                                : unsubscribed && d.created_at < now - retention_dead_;
    if (expired && !d.completing) {
      if (!d.dead) purged.insert(it->first);
      it = bus_->deliveries_.erase(it);
      ++deleted;
    } else {
      ++it;
    }
  }
  // Events without deliveries, published before the completed retention.
  std::set<std::string> referenced;
  for (const auto& [key, d] : bus_->deliveries_) referenced.insert(key.second);
  std::set<std::string> purged_events;
  for (auto it = bus_->events_.begin(); it != bus_->events_.end();) {
    if (referenced.count(it->first) == 0 && it->second.published < now - retention_completed_) {
      purged_events.insert(it->first);
      it = bus_->events_.erase(it);
      ++deleted;
    } else {
      ++it;
    }
  }
  // The ids of purged events and of purged pending deliveries leave the lanes' lists
  // (core::counts_in_flight, lane_lease.hpp), as in the MongoDB store: a lane that listed
  // one is written (its version moves); so is every lane of a handler whose pending
  // deliveries went, listed or not, so that a conditional claim that read one of them
  // before is refused.
  if (purged.empty() && purged_events.empty()) return deleted;
  std::set<std::string> handlers_purged;
  for (const auto& [handler, id] : purged) handlers_purged.insert(handler);
  for (auto& [key, lane] : bus_->lanes_) {
    const auto gone = [&](const std::string& id) {
      return purged_events.count(id) > 0 || purged.count({key.first, id}) > 0;
    };
    const std::size_t listed = lane.in_flight.size() + lane.lost.size();
    lane.in_flight.erase(std::remove_if(lane.in_flight.begin(), lane.in_flight.end(), gone),
                         lane.in_flight.end());
    lane.lost.erase(std::remove_if(lane.lost.begin(), lane.lost.end(), gone), lane.lost.end());
    if (lane.in_flight.size() + lane.lost.size() != listed || handlers_purged.count(key.first))
      ++lane.version;
  }
  return deleted;
}

}  // namespace relaybus::store
