// The fence of a 0.3.0 token: which list of its lane holds a position, what the holder still
// runs, and whether a token holds its attempt.
#include "core/positions_fence.hpp"

#include <gtest/gtest.h>

#include <optional>

namespace relaybus::core {
namespace {

// Epoch 4; cursor at 10, 12 done; 11, 13 picked from the window; 3 and 7 retried.
PositionLane Lane() {
  PositionLane lane;
  lane.epoch = 4;
  lane.progress.acked_upto = 10;
  lane.progress.done = {12};
  lane.progress.in_flight = {11, 13};
  lane.retrying = {3, 7};
  return lane;
}

PositionToken Token(Position position, std::int32_t claims, std::int64_t epoch = 4) {
  PositionToken token;
  token.lane = 9;
  token.epoch = epoch;
  token.position = position;
  token.claims = claims;
  token.handler = "h";
  return token;
}

ExceptionView Row(std::int32_t claims, bool pending = true, std::int32_t attempts = 2) {
  return ExceptionView{pending, claims, attempts};
}

// ---------------------------------------------------------------- listed_as

TEST(ListedAsTest, AnUnfinishedInFlightPositionIsAWindowPick) {
  EXPECT_EQ(listed_as(Lane(), 11), Listed::kWindow);
  EXPECT_EQ(listed_as(Lane(), 13), Listed::kWindow);
}

TEST(ListedAsTest, APositionOfRetryingIsARetry) {
  EXPECT_EQ(listed_as(Lane(), 3), Listed::kRetry);
  EXPECT_EQ(listed_as(Lane(), 7), Listed::kRetry);
}

TEST(ListedAsTest, AnythingElseIsNowhere) {
  for (Position p : {1, 10, 12, 14, 100}) EXPECT_EQ(listed_as(Lane(), p), Listed::kNowhere) << p;
}

TEST(ListedAsTest, AFinishedPositionStillInFlightIsNoWindowPick) {
  PositionLane lane = Lane();
  lane.progress.in_flight = {5, 12, 11};  // 5 below the cursor, 12 in done
  EXPECT_EQ(listed_as(lane, 5), Listed::kNowhere);
  EXPECT_EQ(listed_as(lane, 12), Listed::kNowhere);
  EXPECT_EQ(listed_as(lane, 11), Listed::kWindow);
}

TEST(ListedAsTest, APositionInBothListsIsDecidedByTheProgress) {
  PositionLane lane = Lane();
  lane.retrying.insert(11);  // unfinished: a window pick
  lane.retrying.insert(12);
  lane.progress.in_flight.insert(12);  // finished: a retry
  EXPECT_EQ(listed_as(lane, 11), Listed::kWindow);
  EXPECT_EQ(listed_as(lane, 12), Listed::kRetry);
}

// ---------------------------------------------------------------- running_positions

TEST(RunningPositionsTest, CountsWindowPicksAndRetries) {
  EXPECT_EQ(running_positions(Lane()), 4u);
}

TEST(RunningPositionsTest, AnIdleLaneRunsNothing) {
  PositionLane lane;
  EXPECT_EQ(running_positions(lane), 0u);
  lane.progress.acked_upto = 20;
  lane.progress.in_flight = {3, 20};  // stale entries, finished long ago
  EXPECT_EQ(running_positions(lane), 0u);
}

TEST(RunningPositionsTest, RetriesAloneKeepALaneRunning) {
  PositionLane lane;
  lane.retrying = {5};
  EXPECT_EQ(running_positions(lane), 1u);
}

TEST(RunningPositionsTest, APositionInBothListsCountsOnce) {
  PositionLane lane = Lane();
  lane.retrying.insert(11);
  EXPECT_EQ(running_positions(lane), 4u);
}

// ---------------------------------------------------------------- the fence

TEST(PositionFenceTest, AWindowPickHoldsWithClaimsZero) {
  const FenceView fence = position_fence(Token(11, 0), Lane(), true, std::nullopt);
  EXPECT_TRUE(fence.lane_found);
  EXPECT_TRUE(fence.listed_in_flight);
  EXPECT_TRUE(token_holds(Token(11, 0), fence));
}

TEST(PositionFenceTest, AWindowPickTokenWithOtherClaimsDoesNotHold) {
  // A forged token, or one of a retry of the same position that finished.
  const FenceView fence = position_fence(Token(11, 1), Lane(), true, std::nullopt);
  EXPECT_TRUE(lane_holds(Token(11, 1), fence));
  EXPECT_FALSE(token_holds(Token(11, 1), fence));
}

TEST(PositionFenceTest, AWindowPickWithoutItsDeliveryRowDoesNotHold) {
  EXPECT_FALSE(
      token_holds(Token(11, 0), position_fence(Token(11, 0), Lane(), false, std::nullopt)));
}

TEST(PositionFenceTest, ARetryHoldsWhileItsRowHasTheTokensClaims) {
  EXPECT_TRUE(token_holds(Token(7, 2), position_fence(Token(7, 2), Lane(), false, Row(2))));
  EXPECT_FALSE(token_holds(Token(7, 2), position_fence(Token(7, 2), Lane(), false, Row(3))))
      << "the row's counter moved: the attempt ended";
  EXPECT_FALSE(token_holds(Token(7, 3), position_fence(Token(7, 3), Lane(), false, Row(2))));
}

TEST(PositionFenceTest, ARetryOfADeferredRowHoldsWithClaimsZero) {
  // A row a claim deferred or parked starts at claims 0; its first retry carries 0.
  EXPECT_TRUE(token_holds(Token(3, 0), position_fence(Token(3, 0), Lane(), false, Row(0))));
}

TEST(PositionFenceTest, ARetryWithoutItsRowOrWithADeadOneDoesNotHold) {
  EXPECT_FALSE(token_holds(Token(7, 2), position_fence(Token(7, 2), Lane(), true, std::nullopt)));
  EXPECT_FALSE(token_holds(Token(7, 2), position_fence(Token(7, 2), Lane(), true, Row(2, false))));
}

TEST(PositionFenceTest, TheWindowTokenOfAnAttemptThatEndedDoesNotHoldItsRetry) {
  // 11 failed from the window (its row has claims 1) and is retried under the same epoch.
  PositionLane lane = Lane();
  lane.progress.in_flight.erase(11);
  lane.progress.done.insert(11);
  lane.retrying.insert(11);
  EXPECT_FALSE(token_holds(Token(11, 0), position_fence(Token(11, 0), lane, true, Row(1))));
  EXPECT_TRUE(token_holds(Token(11, 1), position_fence(Token(11, 1), lane, true, Row(1))));
}

TEST(PositionFenceTest, AnotherEpochDoesNotHold) {
  for (std::int64_t epoch : {3, 5}) {
    const FenceView fence = position_fence(Token(11, 0, epoch), Lane(), true, std::nullopt);
    EXPECT_FALSE(lane_holds(Token(11, 0, epoch), fence));
    EXPECT_FALSE(token_holds(Token(11, 0, epoch), fence));
  }
}

TEST(PositionFenceTest, NoLaneRowOrAPositionNotListedDoesNotHold) {
  EXPECT_FALSE(token_holds(Token(11, 0), position_fence(Token(11, 0), std::nullopt, true, Row(0))));
  for (Position p : {10, 12, 14}) {
    const FenceView fence = position_fence(Token(p, 0), Lane(), true, Row(0));
    EXPECT_FALSE(fence.listed_in_flight) << p;
    EXPECT_FALSE(token_holds(Token(p, 0), fence)) << p;
  }
}

TEST(PositionFenceTest, TheR3FenceIsTheR1Rule) {
  const PositionToken token = Token(11, 0);
  const LeaseToken fenced = fence_token(token);
  EXPECT_EQ(fenced.epoch, token.epoch);
  EXPECT_EQ(fenced.claims, token.claims);
  EXPECT_EQ(fenced.lane, token.lane);
}

}  // namespace
}  // namespace relaybus::core
