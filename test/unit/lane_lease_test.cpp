// What a claim writes for each lane it looked at. The epoch is the fence: it must move
// whenever a lane changes hands and stay put while the same incarnation keeps it.
#include "core/lane_lease.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>

namespace relaybus::core {

// Readable test names and failure messages (internal linkage, found by ADL).
static std::ostream& operator<<(std::ostream& os, LaneOrigin origin) {
  switch (origin) {
    case LaneOrigin::kHeld:
      return os << "held";
    case LaneOrigin::kFree:
      return os << "free";
    case LaneOrigin::kExpired:
      return os << "expired";
    case LaneOrigin::kOrphaned:
      return os << "orphaned";
    case LaneOrigin::kOthers:
      return os << "others";
  }
  return os << "LaneOrigin(" << static_cast<int>(origin) << ")";
}

namespace {

constexpr LaneOrigin kAllOrigins[] = {LaneOrigin::kHeld, LaneOrigin::kFree, LaneOrigin::kExpired,
                                      LaneOrigin::kOrphaned};

LaneBinding to_backend(bool alive, bool expired) {
  LaneBinding b;
  b.backend_alive = alive;
  b.lease_expired = expired;
  return b;
}

LaneBinding to_holder(bool same, bool expired) {
  LaneBinding b;
  b.to_holder = true;
  b.same_holder = same;
  b.lease_expired = expired;
  return b;
}

constexpr bool kWithHolder = true;
constexpr bool kWithoutHolder = false;

TEST(LaneLeaseTest, WithoutHolderALaneOfALiveBackendIsSharedExpiredOrNot) {
  // Every connection of a worker name shares its lanes while the acquiring backend lives.
  EXPECT_EQ(classify_held_lane(to_backend(true, false), kWithoutHolder), LaneOrigin::kHeld);
  EXPECT_EQ(classify_held_lane(to_backend(true, true), kWithoutHolder), LaneOrigin::kHeld);
}

TEST(LaneLeaseTest, ALaneOfAGoneBackendIsAnOrphanForEveryCaller) {
  for (bool expired : {false, true}) {
    EXPECT_EQ(classify_held_lane(to_backend(false, expired), kWithoutHolder),
              LaneOrigin::kOrphaned);
    EXPECT_EQ(classify_held_lane(to_backend(false, expired), kWithHolder), LaneOrigin::kOrphaned);
  }
}

TEST(LaneLeaseTest, TheSameHolderKeepsItsLanesOnAnyConnection) {
  EXPECT_EQ(classify_held_lane(to_holder(true, false), kWithHolder), LaneOrigin::kHeld);
  EXPECT_EQ(classify_held_lane(to_holder(true, true), kWithHolder), LaneOrigin::kHeld);
}

TEST(LaneLeaseTest, AnotherIncarnationsLaneIsLeftWhileItsLeaseIsLiveThenTakenOver) {
  // Another holder, a holder-less caller of a holder's lane, a holder of a live backend's.
  const LaneBinding live[] = {to_holder(false, false), to_holder(true, false),
                              to_backend(true, false)};
  const bool callers[] = {kWithHolder, kWithoutHolder, kWithHolder};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(classify_held_lane(live[i], callers[i]), LaneOrigin::kOthers) << i;
    LaneBinding expired = live[i];
    expired.lease_expired = true;
    EXPECT_EQ(classify_held_lane(expired, callers[i]), LaneOrigin::kExpired) << i;
  }
}

TEST(LaneLeaseTest, IsCallersIsExactlyTheHeldCase) {
  for (bool to : {false, true})
    for (bool same : {false, true})
      for (bool alive : {false, true})
        for (bool expired : {false, true})
          for (bool caller : {false, true}) {
            LaneBinding b{to, same, alive, expired};
            EXPECT_EQ(is_callers(b, caller), classify_held_lane(b, caller) == LaneOrigin::kHeld);
          }
}

TEST(LaneLeaseTest, ALaneOfOthersIsNeverWritten) {
  for (bool in_flight : {false, true})
    for (bool picks : {false, true})
      EXPECT_FALSE(plan_lane_write(LaneOrigin::kOthers, 7, in_flight, picks).write);
}

TEST(LaneLeaseTest, OnlyTakeoversChargeInFlightDeliveries) {
  EXPECT_FALSE(charges_in_flight(LaneOrigin::kHeld));
  EXPECT_FALSE(charges_in_flight(LaneOrigin::kFree));
  EXPECT_TRUE(charges_in_flight(LaneOrigin::kExpired));
  EXPECT_TRUE(charges_in_flight(LaneOrigin::kOrphaned));
}

TEST(LaneLeaseTest, OrphanedIsChargedLikeExpired) {
  EXPECT_EQ(charges_in_flight(classify_held_lane(to_backend(false, false), kWithoutHolder)),
            charges_in_flight(LaneOrigin::kExpired));
  EXPECT_FALSE(charges_in_flight(LaneOrigin::kOthers));
}

// One row of the decision table. `write` false means the lane row is left untouched; then
// nothing else is stored and only `epoch` (the fence of tokens, of which there are none) is
// checked to be unchanged.
struct Expected {
  bool write;
  bool hold;
  bool new_holder;
  std::int64_t epoch_delta;
};

struct Case {
  LaneOrigin origin;
  bool has_live_in_flight;
  bool got_picks;
  Expected expected;
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.origin << (c.has_live_in_flight ? "_InFlight" : "_NoInFlight")
            << (c.got_picks ? "_Picks" : "_NoPicks");
}

constexpr Expected kUntouched = {false, false, false, 0};

// clang-format off
const Case kCases[] = {
    // A held lane keeps its epoch (same holder, its tokens stay valid).
    {LaneOrigin::kHeld,     false, false, {true,  false, false, 0}},  // runs nothing: hand back
    {LaneOrigin::kHeld,     false, true,  {true,  true,  false, 0}},  // renew for the picks
    {LaneOrigin::kHeld,     true,  false, kUntouched},                // still running: no write
    {LaneOrigin::kHeld,     true,  true,  {true,  true,  false, 0}},
    // A free lane is only written when it yields something; acquiring it is a new hand.
    {LaneOrigin::kFree,     false, false, kUntouched},
    {LaneOrigin::kFree,     false, true,  {true,  true,  true,  1}},
    {LaneOrigin::kFree,     true,  false, kUntouched},
    {LaneOrigin::kFree,     true,  true,  {true,  true,  true,  1}},
    // A takeover is always recorded (epoch bump fences the previous holder), held only with
    // picks. The previous holder's in-flight deliveries are charged, not "live".
    {LaneOrigin::kExpired,  false, false, {true,  false, false, 1}},
    {LaneOrigin::kExpired,  false, true,  {true,  true,  true,  1}},
    {LaneOrigin::kExpired,  true,  false, {true,  false, false, 1}},
    {LaneOrigin::kExpired,  true,  true,  {true,  true,  true,  1}},
    {LaneOrigin::kOrphaned, false, false, {true,  false, false, 1}},
    {LaneOrigin::kOrphaned, false, true,  {true,  true,  true,  1}},
    {LaneOrigin::kOrphaned, true,  false, {true,  false, false, 1}},
    {LaneOrigin::kOrphaned, true,  true,  {true,  true,  true,  1}},
};
// clang-format on

class PlanLaneWriteTest : public ::testing::TestWithParam<Case> {};

TEST_P(PlanLaneWriteTest, FollowsTheDecisionTable) {
  const Case& c = GetParam();
  for (std::int64_t epoch : {std::int64_t{0}, std::int64_t{1}, std::int64_t{41},
                             std::numeric_limits<std::int64_t>::max() - 1}) {
    SCOPED_TRACE("epoch " + std::to_string(epoch));
    const LaneWrite w = plan_lane_write(c.origin, epoch, c.has_live_in_flight, c.got_picks);
    EXPECT_EQ(w.write, c.expected.write);
    if (w.write) {
      EXPECT_EQ(w.hold, c.expected.hold);
      // When the lane is handed back nobody new holds it, whatever the flag says; when it
      // is held the flag must say whether this backend became the holder.
      if (c.expected.hold) {
        EXPECT_EQ(w.new_holder, c.expected.new_holder);
      }
    }
    EXPECT_EQ(w.epoch, epoch + c.expected.epoch_delta);
  }
}

INSTANTIATE_TEST_SUITE_P(AllOriginsAndFlags, PlanLaneWriteTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::ostringstream name;
                           name << info.param;
                           return name.str();
                         });

TEST(LaneLeaseTest, DecisionTableCoversEveryCombination) {
  int covered = 0;
  for (LaneOrigin origin : kAllOrigins)
    for (bool in_flight : {false, true})
      for (bool picks : {false, true})
        for (const Case& c : kCases)
          if (c.origin == origin && c.has_live_in_flight == in_flight && c.got_picks == picks)
            ++covered;
  EXPECT_EQ(covered, 16);
}

TEST(LaneLeaseTest, PicksAreAlwaysWrittenAndHeld) {
  // Tokens handed out must carry the epoch stored in the lane row, so a lane with picks is
  // always written and leased to the worker.
  for (LaneOrigin origin : kAllOrigins)
    for (bool in_flight : {false, true}) {
      const LaneWrite w = plan_lane_write(origin, 7, in_flight, true);
      EXPECT_TRUE(w.write) << origin;
      EXPECT_TRUE(w.hold) << origin;
    }
}

TEST(LaneLeaseTest, EpochMovesExactlyWhenTheLaneChangesHands) {
  for (LaneOrigin origin : kAllOrigins)
    for (bool in_flight : {false, true})
      for (bool picks : {false, true}) {
        const LaneWrite w = plan_lane_write(origin, 100, in_flight, picks);
        if (!w.write) {
          EXPECT_EQ(w.epoch, 100) << origin;
          continue;
        }
        const bool changes_hands = origin != LaneOrigin::kHeld;
        if (changes_hands) {
          EXPECT_GT(w.epoch, 100) << origin << " in_flight=" << in_flight << " picks=" << picks;
        } else {
          EXPECT_EQ(w.epoch, 100) << origin << " in_flight=" << in_flight << " picks=" << picks;
        }
      }
}

TEST(LaneLeaseTest, OrphanedLaneIsTakenOverExactlyLikeExpired) {
  for (bool in_flight : {false, true})
    for (bool picks : {false, true}) {
      const LaneWrite o = plan_lane_write(LaneOrigin::kOrphaned, 9, in_flight, picks);
      const LaneWrite e = plan_lane_write(LaneOrigin::kExpired, 9, in_flight, picks);
      EXPECT_EQ(o.write, e.write);
      EXPECT_EQ(o.hold, e.hold);
      EXPECT_EQ(o.new_holder, e.new_holder);
      EXPECT_EQ(o.epoch, e.epoch);
    }
}

TEST(LaneLeaseTest, LanesToAcquireGrowsGeometricallyUpTo64) {
  const int expected[] = {4, 8, 16, 32, 64, 64, 64, 64, 64, 64};
  for (int round = 0; round < 10; ++round)
    EXPECT_EQ(lanes_to_acquire(round, 1000), expected[round]) << "round " << round;
  EXPECT_EQ(lanes_to_acquire(100, 1000), 64);
  EXPECT_EQ(lanes_to_acquire(std::numeric_limits<int>::max(), 1000), 64);
}

TEST(LaneLeaseTest, LanesToAcquireNeverExceedsRemaining) {
  EXPECT_EQ(lanes_to_acquire(0, 1), 1);
  EXPECT_EQ(lanes_to_acquire(0, 3), 3);
  EXPECT_EQ(lanes_to_acquire(0, 4), 4);
  EXPECT_EQ(lanes_to_acquire(1, 5), 5);
  EXPECT_EQ(lanes_to_acquire(4, 63), 63);
  EXPECT_EQ(lanes_to_acquire(4, 64), 64);
  EXPECT_EQ(lanes_to_acquire(4, 65), 64);
  for (int round = 0; round < 12; ++round)
    for (int remaining = 1; remaining <= 200; ++remaining) {
      const int n = lanes_to_acquire(round, remaining);
      ASSERT_GE(n, 1) << "round " << round << " remaining " << remaining;
      ASSERT_LE(n, remaining) << "round " << round << " remaining " << remaining;
      ASSERT_LE(n, 64) << "round " << round << " remaining " << remaining;
    }
}

TEST(LaneLeaseTest, LanesToAcquireIsZeroWhenNothingRemains) {
  for (int round : {0, 1, 4, 5, 100})
    for (int remaining : {0, -1, -64, std::numeric_limits<int>::min()})
      EXPECT_EQ(lanes_to_acquire(round, remaining), 0)
          << "round " << round << " remaining " << remaining;
}

TEST(LaneLeaseTest, AcquisitionRoundsCoverABatchOfTen) {
  // A batch of 10 that finds one delivery per lane: 4 lanes, then the 6 still missing.
  int remaining = 10;
  int round = 0;
  int acquired = 0;
  while (remaining > 0) {
    const int n = lanes_to_acquire(round++, remaining);
    acquired += n;
    remaining -= n;
  }
  EXPECT_EQ(round, 2);
  EXPECT_EQ(acquired, 10);
}

TEST(LaneRoomTest, CountsDownToZeroAndStaysThere) {
  EXPECT_EQ(lane_room(0), kMaxInFlightPerLane);
  EXPECT_EQ(lane_room(1), kMaxInFlightPerLane - 1);
  EXPECT_EQ(lane_room(kMaxInFlightPerLane - 1), 1);
  EXPECT_EQ(lane_room(kMaxInFlightPerLane), 0);
  EXPECT_EQ(lane_room(kMaxInFlightPerLane + 1), 0);
  EXPECT_EQ(lane_room(static_cast<std::size_t>(-1)), 0);
}

// A kept lane is held for at least the lease after every claim, and its lease row is
// rewritten only once less than the lease is left: then to 1.5 x the lease, so claims
// rewrite it at most once per half lease.
TEST(LeaseRenewal, RenewsOnlyWhenLessThanTheLeaseIsLeft) {
  const std::int64_t lease = 30'000'000, now = 1'000'000'000;
  const LeaseRenewal r = lease_renewal(now, lease);
  EXPECT_EQ(r.renew_before_us, now + lease);
  EXPECT_EQ(r.expires_at_us, now + lease + lease / 2);
  // Renewed now, the lease is not renewed again by a claim within half a lease...
  EXPECT_FALSE(r.expires_at_us < lease_renewal(now + lease / 2, lease).renew_before_us);
  // ...and is renewed by one just after that, still with the whole lease left.
  EXPECT_LT(r.expires_at_us, lease_renewal(now + lease / 2 + 1, lease).renew_before_us);
  EXPECT_GE(r.expires_at_us - (now + lease / 2 + 1), lease - 1);
}

TEST(LeaseRenewal, IsDueOutsideOneToOneAndAHalfLeases) {
  const std::int64_t lease = 1'000'000, now = 50'000'000;
  const LeaseRenewal r = lease_renewal(now, lease);
  EXPECT_TRUE(r.due(now));                   // expired or about to
  EXPECT_TRUE(r.due(now + lease - 1));       // less than the lease left
  EXPECT_FALSE(r.due(now + lease));          // the whole lease left
  EXPECT_FALSE(r.due(now + lease * 3 / 2));  // as a renewal leaves it
  // A longer lease of an earlier claim is cut back to this claim's 1.5 x lease.
  EXPECT_TRUE(r.due(now + lease * 3 / 2 + 1));
  EXPECT_TRUE(r.due(now + 30 * lease));
}

// A lane is due for renewal half a lease after a claim renewed it: "in use" is a delivery
// published since then, so that a lane that got one since its last renewal is kept.
TEST(LeaseRenewal, InUseSinceHalfALeaseAgo) {
  const std::int64_t lease = 30'000'000, now = 1'000'000'000;
  EXPECT_EQ(lease_renewal(now, lease).in_use_since_us, now - lease / 2);
  // The claim that finds the lane due is at least half a lease after the renewal at `now`.
  EXPECT_EQ(lease_renewal(now + lease / 2, lease).in_use_since_us, now);
}

TEST(LeaseRenewal, SaturatesInsteadOfOverflowing) {
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  const LeaseRenewal r = lease_renewal(max - 10, 30'000'000);
  EXPECT_EQ(r.renew_before_us, max);
  EXPECT_EQ(r.expires_at_us, max);
  const LeaseRenewal negative = lease_renewal(100, -5);
  EXPECT_EQ(negative.renew_before_us, 100);
  EXPECT_EQ(negative.expires_at_us, 100);
  const std::int64_t min = std::numeric_limits<std::int64_t>::min();
  EXPECT_EQ(lease_renewal(min + 10, 30'000'000).in_use_since_us, min);
}

}  // namespace
}  // namespace relaybus::core
