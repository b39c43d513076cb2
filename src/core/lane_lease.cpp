#include "lane_lease.hpp"

#include <algorithm>

namespace relaybus::core {

namespace {
// The next epoch. Unsigned arithmetic keeps the (unreachable) wrap at 2^63 defined.
std::int64_t next_epoch(std::int64_t epoch) noexcept {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(epoch) + 1u);
}
}  // namespace

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
      w.epoch = got_picks ? next_epoch(epoch) : epoch;
      return w;
    case LaneOrigin::kExpired:
    case LaneOrigin::kOrphaned:
      // The takeover itself must be recorded (epoch bump, in-flight list cleared) even if
      // this claim finds nothing to run in the lane.
      w.write = true;
      w.hold = got_picks;
      w.new_holder = got_picks;
      w.epoch = next_epoch(epoch);
      return w;
  }
  return w;
}

int lane_room(std::size_t in_flight) noexcept {
  const auto cap = static_cast<std::size_t>(kMaxInFlightPerLane);
  return in_flight >= cap ? 0 : static_cast<int>(cap - in_flight);
}

int lanes_to_acquire(int round, int remaining) noexcept {
  if (remaining <= 0) return 0;
  const int step = 4 << std::clamp(round, 0, 4);  // 4, 8, 16, 32, 64
  return std::min(step, remaining);
}

}  // namespace relaybus::core
