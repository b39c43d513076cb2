// How an attempt ends without completing, and the fence every end checks.
#include "core/attempt_end.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace relaybus::core {
namespace {

LeaseToken Token() {
  return LeaseToken{3, 7, 11, "h", "e1"};
}

// A fence that shows Token() still holding its delivery.
FenceView Holding() {
  FenceView f;
  f.lane_found = true;
  f.lane_epoch = 7;
  f.listed_in_flight = true;
  f.delivery_found = true;
  f.delivery_pending = true;
  f.delivery_claims = 11;
  return f;
}

RetryPolicy Policy(std::int32_t max_attempts, std::int64_t base_us = 1000,
                   std::int64_t max_us = 1'000'000) {
  return RetryPolicy{max_attempts, base_us, max_us};
}

// ---------------------------------------------------------------- the fence

TEST(TokenHoldsTest, HoldsWhenLaneAndDeliveryAgree) {
  EXPECT_TRUE(lane_holds(Token(), Holding()));
  EXPECT_TRUE(token_holds(Token(), Holding()));
}

TEST(TokenHoldsTest, LaneNotFound) {
  FenceView f = Holding();
  f.lane_found = false;
  EXPECT_FALSE(lane_holds(Token(), f));
  EXPECT_FALSE(token_holds(Token(), f));
}

TEST(TokenHoldsTest, EpochMovedByATakeover) {
  FenceView f = Holding();
  f.lane_epoch = 8;
  EXPECT_FALSE(lane_holds(Token(), f));
  EXPECT_FALSE(token_holds(Token(), f));
  f.lane_epoch = 6;  // any other epoch, not only a later one
  EXPECT_FALSE(token_holds(Token(), f));
}

TEST(TokenHoldsTest, DeliveryNotListedInFlight) {
  FenceView f = Holding();
  f.listed_in_flight = false;
  EXPECT_FALSE(lane_holds(Token(), f));
  EXPECT_FALSE(token_holds(Token(), f));
}

TEST(TokenHoldsTest, DeliveryMissing) {
  FenceView f = Holding();
  f.delivery_found = false;
  EXPECT_TRUE(lane_holds(Token(), f)) << "the lane half knows nothing of the delivery";
  EXPECT_FALSE(token_holds(Token(), f));
}

TEST(TokenHoldsTest, DeliveryDead) {
  FenceView f = Holding();
  f.delivery_pending = false;
  EXPECT_TRUE(lane_holds(Token(), f));
  EXPECT_FALSE(token_holds(Token(), f));
}

TEST(TokenHoldsTest, ClaimsCounterMismatch) {
  FenceView f = Holding();
  f.delivery_claims = 12;  // the attempt ended and the delivery was claimed again
  EXPECT_TRUE(lane_holds(Token(), f));
  EXPECT_FALSE(token_holds(Token(), f));
  f.delivery_claims = 10;
  EXPECT_FALSE(token_holds(Token(), f));
}

// ---------------------------------------------------------------- end_attempt

TEST(EndAttemptTest, ReleaseKeepsTheAttemptsAndIsDueAtOnce) {
  const AttemptEnd end = end_attempt(Ending::kRelease, Token(), Holding(), Policy(5), 2, false);
  EXPECT_EQ(end.result, AttemptResult::kReleased);
  EXPECT_EQ(end.attempts, 2);
  EXPECT_FALSE(end.dead);
  EXPECT_FALSE(end.use_delay);
  EXPECT_EQ(end.delay_us, 0);
}

TEST(EndAttemptTest, ReleaseAtTheBudgetIsStillAReleaseNotADeath) {
  const AttemptEnd end = end_attempt(Ending::kRelease, Token(), Holding(), Policy(3), 2, false);
  EXPECT_EQ(end.result, AttemptResult::kReleased);
  EXPECT_EQ(end.attempts, 2);
  EXPECT_FALSE(end.dead);
}

TEST(EndAttemptTest, FailChargesOneAttemptAndWaitsTheBackoff) {
  const RetryPolicy policy = Policy(10, 1000, 1'000'000);
  const AttemptEnd end = end_attempt(Ending::kFail, Token(), Holding(), policy, 2, false);
  EXPECT_EQ(end.result, AttemptResult::kRetry);
  EXPECT_EQ(end.attempts, 3);
  EXPECT_FALSE(end.dead);
  EXPECT_TRUE(end.use_delay);
  EXPECT_EQ(end.delay_us, 4000);  // base * 2^(3-1)
  EXPECT_EQ(end.delay_us, backoff_us(policy, 3));
}

TEST(EndAttemptTest, FailWithAGivenRetryTimeUsesNoBackoff) {
  const AttemptEnd end = end_attempt(Ending::kFail, Token(), Holding(), Policy(10), 2, true);
  EXPECT_EQ(end.result, AttemptResult::kRetry);
  EXPECT_EQ(end.attempts, 3) << "a given retry time still charges the attempt";
  EXPECT_FALSE(end.use_delay);
  EXPECT_EQ(end.delay_us, 0);
}

TEST(EndAttemptTest, FailAtTheBudgetIsDead) {
  const AttemptEnd end = end_attempt(Ending::kFail, Token(), Holding(), Policy(3), 2, false);
  EXPECT_EQ(end.result, AttemptResult::kDead);
  EXPECT_EQ(end.attempts, 3);
  EXPECT_TRUE(end.dead);
  EXPECT_FALSE(end.use_delay);
}

TEST(EndAttemptTest, FailOneBeforeTheBudgetRetries) {
  const AttemptEnd end = end_attempt(Ending::kFail, Token(), Holding(), Policy(3), 1, false);
  EXPECT_EQ(end.result, AttemptResult::kRetry);
  EXPECT_EQ(end.attempts, 2);
  EXPECT_FALSE(end.dead);
}

TEST(EndAttemptTest, FailAtTheBudgetWithARetryTimeIsStillDead) {
  const AttemptEnd end = end_attempt(Ending::kFail, Token(), Holding(), Policy(3), 2, true);
  EXPECT_EQ(end.result, AttemptResult::kDead);
  EXPECT_TRUE(end.dead);
}

TEST(EndAttemptTest, BuryIsDeadWithBudgetLeft) {
  const AttemptEnd end = end_attempt(Ending::kBury, Token(), Holding(), Policy(25), 0, false);
  EXPECT_EQ(end.result, AttemptResult::kDead);
  EXPECT_TRUE(end.dead);
  EXPECT_EQ(end.attempts, 1) << "bury charges the attempt";
  EXPECT_FALSE(end.use_delay);
}

TEST(EndAttemptTest, AnAttemptCountAtItsLimitDoesNotOverflow) {
  const std::int32_t top = std::numeric_limits<std::int32_t>::max();
  const AttemptEnd end = end_attempt(Ending::kFail, Token(), Holding(),
                                     Policy(std::numeric_limits<std::int32_t>::max()), top, false);
  EXPECT_EQ(end.attempts, top);
  EXPECT_TRUE(end.dead);
}

TEST(EndAttemptTest, ALostTokenWritesNothing) {
  FenceView lost = Holding();
  lost.lane_epoch = 8;
  for (Ending ending : {Ending::kFail, Ending::kBury, Ending::kRelease}) {
    for (bool retry_at : {false, true}) {
      const AttemptEnd end = end_attempt(ending, Token(), lost, Policy(1), 5, retry_at);
      EXPECT_EQ(end.result, AttemptResult::kLost);
      EXPECT_EQ(end.attempts, 0);
      EXPECT_FALSE(end.dead);
      EXPECT_FALSE(end.use_delay);
      EXPECT_EQ(end.delay_us, 0);
    }
  }
}

TEST(EndAttemptTest, EveryFenceMismatchMakesTheEndLost) {
  FenceView views[6];
  for (auto& v : views) v = Holding();
  views[0].lane_found = false;
  views[1].lane_epoch = 99;
  views[2].listed_in_flight = false;
  views[3].delivery_found = false;
  views[4].delivery_pending = false;
  views[5].delivery_claims = 99;
  for (const auto& v : views)
    EXPECT_EQ(end_attempt(Ending::kFail, Token(), v, Policy(5), 1, false).result,
              AttemptResult::kLost);
}

TEST(EndAttemptTest, AZeroBudgetIsClampedToOne) {
  // A policy edited by hand: max_attempts 0 must behave as 1, never as "no limit".
  const AttemptEnd zero = end_attempt(Ending::kFail, Token(), Holding(), Policy(0), 0, false);
  const AttemptEnd one = end_attempt(Ending::kFail, Token(), Holding(), Policy(1), 0, false);
  EXPECT_EQ(zero.result, AttemptResult::kDead);
  EXPECT_EQ(zero.attempts, 1);
  EXPECT_EQ(zero.result, one.result);
  EXPECT_EQ(zero.attempts, one.attempts);
  EXPECT_EQ(end_attempt(Ending::kFail, Token(), Holding(), Policy(-5), 0, false).result,
            AttemptResult::kDead);
}

TEST(EndAttemptTest, ANegativeOrInvertedBackoffIsClamped) {
  // base below 0 counts as 0 (no delay); max below base is raised to base.
  const AttemptEnd negative =
      end_attempt(Ending::kFail, Token(), Holding(), Policy(10, -1000, -1), 0, false);
  EXPECT_EQ(negative.result, AttemptResult::kRetry);
  EXPECT_TRUE(negative.use_delay);
  EXPECT_EQ(negative.delay_us, 0);
  const AttemptEnd inverted =
      end_attempt(Ending::kFail, Token(), Holding(), Policy(10, 5000, 10), 3, false);
  EXPECT_EQ(inverted.delay_us, 5000);
  const AttemptEnd huge = end_attempt(Ending::kFail, Token(), Holding(),
                                      Policy(100, std::numeric_limits<std::int64_t>::max(),
                                             std::numeric_limits<std::int64_t>::max()),
                                      10, false);
  EXPECT_EQ(huge.delay_us, kMaxBackoffUs);
}

// ---------------------------------------------------------------- relinquish, requeue

TEST(RelinquishTest, CallerWithHolderCoversOnlyItsOwnHoldersLanes) {
  EXPECT_TRUE(relinquish_covers(/*lane_has_holder=*/true, /*same_holder=*/true, true));
  EXPECT_FALSE(relinquish_covers(true, false, true));
  EXPECT_FALSE(relinquish_covers(false, false, true)) << "a backend-bound lane is not its";
  EXPECT_FALSE(relinquish_covers(false, true, true));
}

TEST(RelinquishTest, CallerWithoutHolderCoversEveryBackendBoundLane) {
  EXPECT_TRUE(relinquish_covers(false, false, false));
  EXPECT_TRUE(relinquish_covers(false, true, false));
  EXPECT_FALSE(relinquish_covers(true, true, false)) << "a holder's lane is never its";
  EXPECT_FALSE(relinquish_covers(true, false, false));
}

TEST(RelinquishTest, OnlyALaneRunningNothingGoesBack) {
  EXPECT_TRUE(relinquishes(0));
  EXPECT_FALSE(relinquishes(1));
  EXPECT_FALSE(relinquishes(32));
}

TEST(RequeueTest, OnlyADeadDeliveryMoves) {
  EXPECT_TRUE(requeues(true));
  EXPECT_FALSE(requeues(false));
  EXPECT_EQ(kRequeuedAttempts, 0) << "a requeued delivery starts a fresh budget";
}

}  // namespace
}  // namespace relaybus::core
