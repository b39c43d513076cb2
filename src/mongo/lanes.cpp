#include "lanes.hpp"

#include "driver.hpp"

namespace relaybus::mongo::detail {

const std::string& process_holder() {
  static const std::string holder = "mongo-process-" + new_event_id();
  return holder;
}

const std::string& holder_of(const store::Worker& worker) {
  return worker.holder.empty() ? process_holder() : worker.holder;
}

std::vector<StoredLane> lanes_of(const std::vector<Bson>& docs) {
  std::vector<StoredLane> out;
  for (const auto& d : docs) out.push_back(reported([&] { return read_lane(d.get()); }));
  return out;
}

std::map<std::pair<std::string, std::string>, WorkDelivery> deliveries_of(
    const std::vector<Bson>& docs) {
  std::map<std::pair<std::string, std::string>, WorkDelivery> out;
  for (const auto& d : docs) {
    WorkDelivery w = reported([&] { return read_work_delivery(d.get()); });
    auto key = std::make_pair(w.handler, w.event_id);
    out.emplace(std::move(key), std::move(w));
  }
  return out;
}

std::map<std::pair<std::string, std::int16_t>, StoredLane> lanes_by_id(
    const std::vector<Bson>& docs) {
  std::map<std::pair<std::string, std::int16_t>, StoredLane> out;
  for (auto& l : lanes_of(docs)) {
    auto key = std::make_pair(l.handler, l.lane);
    out.emplace(std::move(key), std::move(l));
  }
  return out;
}

bool lease_expired(const StoredLane& lane, std::int64_t now) {
  return !lane.lease_expires_at_ms || *lane.lease_expires_at_ms <= now;
}

core::LaneBinding binding_of(const StoredLane& lane, const std::string& holder, std::int64_t now) {
  core::LaneBinding b;
  b.to_holder = lane.holder.has_value();
  b.same_holder = lane.holder && *lane.holder == holder;
  b.backend_alive = false;  // no backends: a lane without holder is an orphan
  b.lease_expired = lease_expired(lane, now);
  return b;
}

}  // namespace relaybus::mongo::detail
