#include "lane_lease.hpp"

#include <algorithm>
#include <limits>

namespace relaybus::core {

namespace {
// The next epoch. Unsigned arithmetic keeps the (unreachable) wrap at 2^63 defined.
std::int64_t next_epoch(std::int64_t epoch) noexcept {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(epoch) + 1u);
}
}  // namespace

bool is_callers(const LaneBinding& lane, bool caller_has_holder) noexcept {
  if (caller_has_holder) return lane.to_holder && lane.same_holder;
  return !lane.to_holder && lane.backend_alive;
}

LaneOrigin classify_held_lane(const LaneBinding& lane, bool caller_has_holder) noexcept {
  if (is_callers(lane, caller_has_holder)) return LaneOrigin::kHeld;
  // Nobody can finish the in-flight deliveries of a backend that is gone: at once.
  if (!lane.to_holder && !lane.backend_alive) return LaneOrigin::kOrphaned;
  // Another live incarnation (another holder, or a holder-less claim's backend) keeps its
  // lanes while their lease lasts, like any other worker.
  return lane.lease_expired ? LaneOrigin::kExpired : LaneOrigin::kOthers;
}

bool acquirable(bool has_owner, bool lease_expired, bool owner_is_caller) noexcept {
  return !has_owner || (lease_expired && !owner_is_caller);
}

bool due_for_takeover(bool has_owner, bool lease_expired) noexcept {
  return has_owner && lease_expired;
}

bool counts_in_flight(bool delivery_pending) noexcept {
  return delivery_pending;
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
    case LaneOrigin::kOthers:
      return w;  // not the caller's: untouched
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

LeaseRenewal lease_renewal(std::int64_t now_us, std::int64_t lease_us) noexcept {
  // Saturating: a lease is at most a day (validate_lease), but nothing here may overflow
  // whatever a caller passes.
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const std::int64_t lease = std::max<std::int64_t>(lease_us, 0);
  const std::int64_t slack = lease / 2;
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  auto plus = [&](std::int64_t a, std::int64_t b) { return a > kMax - b ? kMax : a + b; };
  const std::int64_t since = now_us < kMin + slack ? kMin : now_us - slack;
  return {plus(now_us, lease), plus(plus(now_us, lease), slack), since};
}

}  // namespace relaybus::core
