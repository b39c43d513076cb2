#include "expired_takeover.hpp"

#include <algorithm>

namespace relaybus::core {

namespace {

LaneUpdate handed_back(const LaneSnapshot& lane, bool record_lost) {
  LaneUpdate u;
  u.handler = lane.handler;
  u.lane = lane.lane;
  u.write = plan_lane_write(LaneOrigin::kExpired, lane.epoch, /*has_live_in_flight=*/false,
                            /*got_picks=*/false);
  u.read_epoch = lane.epoch;
  if (record_lost) {
    // What a claim that died after its epoch bump left behind is owed as well.
    u.lost = lane.lost;
    for (const auto& id : lane.in_flight)
      if (std::find(u.lost.begin(), u.lost.end(), id) == u.lost.end()) u.lost.push_back(id);
  }
  return u;
}

}  // namespace

int take_over_expired_lanes(ClaimStore& store, const std::vector<LaneSnapshot>& expired) {
  if (expired.empty()) return 0;
  const bool conditional = store.concurrency() == LaneConcurrency::kConditionalWrites;
  std::vector<LaneUpdate> updates;
  updates.reserve(expired.size());
  for (const auto& lane : expired) updates.push_back(handed_back(lane, conditional));
  if (!conditional) {
    std::vector<const LaneSnapshot*> lanes;
    for (const auto& lane : expired) lanes.push_back(&lane);
    charge_in_flight(store, lanes);
    store.write_lanes(updates);
    return static_cast<int>(expired.size());
  }
  const std::vector<bool> took = store.write_lanes(updates);
  std::vector<LaneSnapshot> owed;
  std::vector<LaneRef> refs;
  std::vector<std::int64_t> epochs;
  int taken = 0;
  for (std::size_t i = 0; i < updates.size(); ++i) {
    if (i >= took.size() || !took[i]) continue;
    ++taken;
    if (updates[i].lost.empty()) continue;
    owed.push_back(
        {updates[i].handler, updates[i].lane, updates[i].write.epoch, updates[i].lost, {}});
    refs.push_back({updates[i].handler, updates[i].lane});
    epochs.push_back(updates[i].write.epoch);
  }
  if (!owed.empty()) {
    std::vector<const LaneSnapshot*> lanes;
    for (const auto& o : owed) lanes.push_back(&o);
    charge_in_flight(store, lanes);
    store.clear_lost(refs, epochs);
  }
  return taken;
}

}  // namespace relaybus::core
