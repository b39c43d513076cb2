#include "lane_lease.hpp"

#include <algorithm>

namespace relaybus::core {

LaneOrigin classify_held_lane(bool holder_alive) noexcept {
  return holder_alive ? LaneOrigin::kHeld : LaneOrigin::kOrphaned;
}

bool charges_in_flight(LaneOrigin origin) noexcept {
  return origin == LaneOrigin::kExpired || origin == LaneOrigin::kOrphaned;
}

LaneWrite plan_lane_write(LaneOrigin origin, std::int64_t epoch, bool has_live_in_flight,
                          bool got_picks) noexcept {
  LaneWrite w;
  w.epoch = epoch;
  switch (origin) {
    case LaneOrigin::kHeld:
      // Keep it while it runs something; hand it back once it runs nothing, so idle lanes
      // do not stay hidden from other workers.
      w.write = got_picks || !has_live_in_flight;
      w.hold = got_picks || has_live_in_flight;
      return w;
    case LaneOrigin::kFree:
      // Acquiring a lane that yields nothing is not written at all.
      w.write = got_picks;
      w.hold = got_picks;
      w.new_holder = got_picks;
      w.epoch = got_picks ? epoch + 1 : epoch;
      return w;
    case LaneOrigin::kExpired:
    case LaneOrigin::kOrphaned:
      // The takeover itself must be recorded (epoch bump, in-flight list cleared) even if
      // this claim finds nothing to run in the lane.
      w.write = true;
      w.hold = got_picks;
      w.new_holder = got_picks;
      w.epoch = epoch + 1;
      return w;
  }
  return w;
}

int lanes_to_acquire(int round, int remaining) noexcept {
  if (remaining <= 0) return 0;
  const int step = 4 << std::min(round, 4);  // 4, 8, 16, 32, 64
  return std::min(step, remaining);
}

}  // namespace relaybus::core
