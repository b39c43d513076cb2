#include "mongo_claim_store.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "commands.hpp"
#include "maintenance_commands.hpp"
#include "core/lane_lease.hpp"

namespace relaybus::mongo::detail {

namespace {

constexpr std::int32_t kDuplicateKey = 11000;

// Per statement of commands::lane_writes, whether it matched: a failed condition is a
// DuplicateKey write error at the statement's index. Any other write error, or a write
// concern error, is thrown.
std::vector<bool> matched_per_statement(Bson reply, std::size_t statements, const char* what) {
  std::vector<bool> took(statements, true);
  bson_iter_t it;
  bson_iter_t errors;
  if (bson_iter_init_find(&it, reply.get(), "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
      bson_iter_recurse(&it, &errors)) {
    while (bson_iter_next(&errors)) {
      std::int64_t index = -1;
      std::int64_t code = 0;
      bson_iter_t e;
      if (BSON_ITER_HOLDS_DOCUMENT(&errors) && bson_iter_recurse(&errors, &e)) {
        while (bson_iter_next(&e)) {
          if (std::strcmp(bson_iter_key(&e), "index") == 0) index = bson_iter_as_int64(&e);
          if (std::strcmp(bson_iter_key(&e), "code") == 0) code = bson_iter_as_int64(&e);
        }
      }
      if (code != kDuplicateKey || index < 0 || static_cast<std::size_t>(index) >= statements) {
        bson_error_t error;
        write_error_of(reply.get(), &error);
        fail_with(what, error, std::move(reply));
      }
      took[static_cast<std::size_t>(index)] = false;
    }
  }
  if (bson_iter_init_find(&it, reply.get(), "writeConcernError")) {
    Bson only;
    bson_append_iter(only.get(), "writeConcernError", -1, &it);
    bson_error_t error;
    write_error_of(only.get(), &error);
    fail_with(what, error, std::move(reply));
  }
  return took;
}

}  // namespace

core::LaneConcurrency MongoClaimStore::concurrency() const {
  return core::LaneConcurrency::kConditionalWrites;
}

std::vector<core::SubscribedHandler> MongoClaimStore::subscribed_handlers(
    const std::optional<std::vector<std::string>>& requested) {
  std::vector<core::SubscribedHandler> out;
  for (const auto& d : all(commands::find_subscribed(requested), "find subscriptions")) {
    store::Subscription s = reported([&] { return read_subscription(d.get()); });
    policies_[s.handler] = s.retry;
    out.push_back({s.handler, read_paused(d.get())});
  }
  std::sort(out.begin(), out.end(),
            [](const core::SubscribedHandler& a, const core::SubscribedHandler& b) {
              return a.name < b.name;
            });
  return out;
}

std::vector<core::HeldLane> MongoClaimStore::held_lanes(const std::vector<std::string>& handlers) {
  const std::vector<StoredLane> lanes =
      lanes_of(all(commands::find_held_lanes(handlers, worker_), "find held lanes"));
  HandlerEvents refs;
  for (const auto& l : lanes)
    for (const auto& id : l.in_flight) refs.push_back({l.handler, id});
  const auto pending =
      refs.empty() ? decltype(deliveries_of({})){}
                   : deliveries_of(all(commands::find_deliveries(refs, true), "find in flight"));
  std::vector<core::HeldLane> out;
  for (const auto& l : lanes) {
    core::HeldLane held;
    held.lane = {l.handler, l.lane, l.epoch, {}, l.lost};
    for (const auto& id : l.in_flight) {
      auto d = pending.find({l.handler, id});
      if (!core::counts_in_flight(d != pending.end() && d->second.pending())) continue;
      held.lane.in_flight.push_back(id);
      const auto& key = d->second.key;
      if (key && std::find(held.in_flight_keys.begin(), held.in_flight_keys.end(), *key) ==
                     held.in_flight_keys.end())
        held.in_flight_keys.push_back(*key);
    }
    held.binding = binding_of(l, holder_, now_);
    held_epochs_[{l.handler, l.lane}] = l.epoch;
    versions_[{l.handler, l.lane}] = l.version;
    out.push_back(std::move(held));
  }
  return out;
}

std::vector<core::LaneSnapshot> MongoClaimStore::lock_for_takeover(
    const std::vector<core::LaneRef>& lanes) {
  const auto read = lanes_by_id(all(commands::find_lanes(ids(lanes)), "find lanes"));
  std::vector<core::LaneSnapshot> out;
  for (const auto& ref : lanes) {
    auto l = read.find({ref.handler, ref.lane});
    if (l == read.end()) continue;
    auto held = held_epochs_.find({ref.handler, ref.lane});
    if (held != held_epochs_.end() && held->second != l->second.epoch) continue;
    versions_[{ref.handler, ref.lane}] = l->second.version;
    out.push_back(snapshot(l->second));
  }
  return out;
}

std::vector<core::LostDelivery> MongoClaimStore::lock_lost(
    const std::vector<core::DeliveryRef>& deliveries) {
  HandlerEvents refs;
  for (const auto& d : deliveries) refs.push_back({d.handler, d.event_id});
  const auto pending = deliveries_of(all(commands::find_deliveries(refs, true), "find lost"));
  std::vector<core::LostDelivery> out;
  for (const auto& ref : deliveries) {
    auto d = pending.find({ref.handler, ref.event_id});
    if (d == pending.end()) continue;
    claims_read_[{ref.handler, ref.event_id}] = d->second.claims;
    out.push_back({ref.handler, ref.event_id, d->second.attempts, policy_of(ref.handler)});
  }
  return out;
}

void MongoClaimStore::write_charges(const std::vector<core::Charge>& charges) {
  std::vector<std::int32_t> claims;
  for (const auto& c : charges) claims.push_back(claims_read_.at({c.handler, c.event_id}));
  run(client_, database_, nullptr, commands::charge_updates(charges, claims, now_), "charge");
}

std::vector<core::LaneRef> MongoClaimStore::lanes_with_work(
    const std::vector<std::string>& handlers) {
  LaneIds groups;
  for (const auto& d : all(commands::lanes_with_work(handlers, now_), "find lanes with work"))
    groups.push_back(reported([&] { return read_lane_group(d.get()); }));
  if (groups.empty()) return {};
  const auto lanes = lanes_by_id(all(commands::find_lanes(groups), "find lanes"));
  std::vector<core::LaneRef> out;
  for (const auto& g : groups) {
    auto l = lanes.find(g);
    if (l != lanes.end() && acquirable(l->second)) out.push_back({g.first, g.second});
  }
  return out;
}

std::vector<core::AcquiredLane> MongoClaimStore::lock_acquirable(
    const std::vector<core::LaneRef>& window, int wanted) {
  if (window.empty() || wanted <= 0) return {};
  const auto lanes = lanes_by_id(all(commands::find_lanes(ids(window)), "find lanes"));
  std::vector<core::AcquiredLane> out;
  for (std::size_t i = 0; i < window.size() && static_cast<int>(out.size()) < wanted; ++i) {
    auto l = lanes.find({window[i].handler, window[i].lane});
    if (l == lanes.end() || !acquirable(l->second)) continue;
    versions_[{window[i].handler, window[i].lane}] = l->second.version;
    out.push_back({snapshot(l->second), l->second.owner.has_value(), i + 1});
  }
  return out;
}

std::vector<core::CandidateRow> MongoClaimStore::candidates(
    const std::vector<core::CandidateLane>& lanes, int limit) {
  struct Row {
    std::int64_t at;
    core::CandidateRow row;
  };
  std::vector<Row> rows;
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    const core::LaneSnapshot& lane = *lanes[i].lane;
    const int take = std::max(0, std::min(limit, lanes[i].room));
    int taken = 0;
    int skip = 0;
    for (int page = take; taken < take; page = std::min(page * 2, kMaxCandidatePage)) {
      std::vector<WorkDelivery> found;
      for (const auto& d : all(commands::find_candidates(lane.handler, lane.lane, lanes[i].excluded,
                                                         now_, skip, page),
                               "find candidates"))
        found.push_back(reported([&] { return read_work_delivery(d.get()); }));
      skip += static_cast<int>(found.size());
      const auto firsts = first_sequences(lane, found);
      for (auto& d : found) {
        if (taken == take) break;
        if (d.key && core::has_pending_predecessor(d.sequence, {firsts.at(*d.key)})) continue;
        rows.push_back({d.available_at_ms, {i, d.event_id, d.key, d.attempts, d.claims, false}});
        ++taken;
      }
      if (static_cast<int>(found.size()) < page) break;
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.at != b.at ? a.at < b.at : a.row.event_id < b.row.event_id;
  });
  if (rows.size() > static_cast<std::size_t>(std::max(limit, 0))) rows.resize(limit);
  std::vector<core::CandidateRow> out;
  for (auto& r : rows) out.push_back(std::move(r.row));
  return out;
}

std::vector<bool> MongoClaimStore::write_lanes(const std::vector<core::LaneUpdate>& updates) {
  if (updates.empty()) return {};
  // Conditional on the version each lane was read at too (see commands::lane_writes):
  // the list a claim writes is the one it read plus its picks.
  std::vector<std::optional<std::int64_t>> read;
  for (const auto& u : updates) read.push_back(versions_[{u.handler, u.lane}]);
  Bson reply = command(client_, database_, nullptr,
                       commands::lane_writes(updates, read, worker_, holder_, now_ + lease_ms_),
                       "write lanes");
  std::vector<bool> took = matched_per_statement(std::move(reply), updates.size(), "write lanes");
  for (std::size_t i = 0; i < updates.size(); ++i)
    if (took[i]) versions_[{updates[i].handler, updates[i].lane}] = read[i].value_or(0) + 1;
  return took;
}

void MongoClaimStore::clear_lost(const std::vector<core::LaneRef>& lanes,
                                 const std::vector<std::int64_t>& epochs) {
  if (lanes.empty()) return;
  run(client_, database_, nullptr, commands::clear_lost(lanes, epochs), "clear lost");
}

std::vector<core::LaneSnapshot> MongoClaimStore::expired_lanes(int limit) {
  std::vector<StoredLane> due;
  for (auto& l : lanes_of(all(commands::find_expired_lanes(now_, limit), "find expired lanes"))) {
    if (core::due_for_takeover(l.owner.has_value(), lease_expired(l, now_)))
      due.push_back(std::move(l));
  }
  if (due.empty()) return {};
  std::vector<std::string> handlers;
  HandlerEvents refs;
  for (const auto& l : due) {
    if (std::find(handlers.begin(), handlers.end(), l.handler) == handlers.end())
      handlers.push_back(l.handler);
    for (const auto& id : l.in_flight) refs.push_back({l.handler, id});
  }
  subscribed_handlers(handlers);  // their policies
  const auto pending =
      refs.empty() ? decltype(deliveries_of({})){}
                   : deliveries_of(all(commands::find_deliveries(refs, true), "find in flight"));
  std::vector<core::LaneSnapshot> out;
  for (const auto& l : due) {
    core::LaneSnapshot lane{l.handler, l.lane, l.epoch, {}, l.lost};
    for (const auto& id : l.in_flight) {
      auto d = pending.find({l.handler, id});
      if (core::counts_in_flight(d != pending.end() && d->second.pending()))
        lane.in_flight.push_back(id);
    }
    versions_[{l.handler, l.lane}] = l.version;
    out.push_back(std::move(lane));
  }
  return out;
}

std::vector<Bson> MongoClaimStore::all(const Bson& cmd, const char* what) {
  return find_all(client_, database_, nullptr, cmd, what);
}

LaneIds MongoClaimStore::ids(const std::vector<core::LaneRef>& lanes) {
  LaneIds out;
  for (const auto& l : lanes) out.push_back({l.handler, l.lane});
  return out;
}

core::LaneSnapshot MongoClaimStore::snapshot(const StoredLane& l) {
  return {l.handler, l.lane, l.epoch, l.in_flight, l.lost};
}

bool MongoClaimStore::acquirable(const StoredLane& l) const {
  return core::acquirable(l.owner.has_value(), lease_expired(l, now_), l.owner == worker_);
}

std::map<std::string, std::int64_t> MongoClaimStore::first_sequences(
    const core::LaneSnapshot& lane, const std::vector<WorkDelivery>& found) {
  std::vector<std::string> keys;
  for (const auto& d : found)
    if (d.key && std::find(keys.begin(), keys.end(), *d.key) == keys.end()) keys.push_back(*d.key);
  std::map<std::string, std::int64_t> out;
  if (keys.empty()) return out;
  for (const auto& d :
       all(commands::first_pending_sequences(lane.handler, lane.lane, keys), "find key order"))
    out.insert(reported([&] { return read_first_sequence(d.get()); }));
  for (const auto& k : keys) out.emplace(k, INT64_MAX);  // none pending: no predecessor
  return out;
}

core::RetryPolicy MongoClaimStore::policy_of(const std::string& handler) const {
  auto it = policies_.find(handler);
  return it == policies_.end() ? core::RetryPolicy{} : it->second;
}

}  // namespace relaybus::mongo::detail
