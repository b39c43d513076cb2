// complete and complete_many over positions: which tokens of a lane take effect and the lane
// row they leave.
#include "core/positions_completion.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace relaybus::core {
namespace {

// Epoch 4; cursor at 10, 13 done; 11, 12, 14 picked from the window; 3 and 7 retried.
PositionLane Lane() {
  PositionLane lane;
  lane.epoch = 4;
  lane.progress.acked_upto = 10;
  lane.progress.done = {13};
  lane.progress.in_flight = {11, 12, 14};
  lane.retrying = {3, 7};
  return lane;
}

PositionToken Token(Position position, std::int32_t claims = 0, std::int64_t epoch = 4) {
  PositionToken token;
  token.lane = 9;
  token.epoch = epoch;
  token.position = position;
  token.claims = claims;
  token.handler = "h";
  return token;
}

// The rows of retries 3 (claims 1) and 7 (claims 2).
ExceptionRows Rows() {
  ExceptionRows rows;
  rows[3] = ExceptionView{true, 1, 1};
  rows[7] = ExceptionView{true, 2, 2};
  return rows;
}

using Positions = std::vector<Position>;

TEST(RetriesToReadTest, OnlyPositionsListedAsRetriesEachOnceAscending) {
  EXPECT_EQ(retries_to_read(Lane(), {Token(7, 2), Token(11), Token(3), Token(7, 9), Token(99)}),
            (Positions{3, 7}));
  EXPECT_TRUE(retries_to_read(Lane(), {Token(11), Token(12)}).empty());
}

TEST(CompleteLaneTest, OutOfOrderWindowCompletionsMoveTheCursorOnlyOverContiguousPositions) {
  const LaneCompletion c = complete_lane(Lane(), {Token(12)}, {});
  EXPECT_EQ(c.completed, Positions{12});
  EXPECT_TRUE(c.write);
  EXPECT_EQ(c.lane.progress.acked_upto, 10) << "11 is still in flight";
  EXPECT_EQ(c.lane.progress.done, (PositionSet{12, 13}));
  EXPECT_EQ(c.lane.progress.in_flight, (PositionSet{11, 14}));

  const LaneCompletion d = complete_lane(c.lane, {Token(11)}, {});
  EXPECT_EQ(d.lane.progress.acked_upto, 13) << "11, 12, 13 contiguous; 14 in flight";
  EXPECT_TRUE(d.lane.progress.done.empty());
  EXPECT_EQ(d.lane.progress.in_flight, PositionSet{14});
}

TEST(CompleteLaneTest, ARetryCompletesByItsRowAndLeavesRetrying) {
  const LaneCompletion c = complete_lane(Lane(), {Token(7, 2)}, Rows());
  EXPECT_TRUE(c.completed.empty());
  EXPECT_EQ(c.retries, Positions{7});
  EXPECT_TRUE(c.write);
  EXPECT_EQ(c.lane.retrying, PositionSet{3});
  EXPECT_EQ(c.lane.progress, Lane().progress) << "the cursor passed a retry long ago";
  EXPECT_EQ(c.count(), 1u);
}

TEST(CompleteLaneTest, ARetryTokenWithOtherClaimsCompletesNothing) {
  const LaneCompletion c = complete_lane(Lane(), {Token(7, 1), Token(7, 3)}, Rows());
  EXPECT_EQ(c.count(), 0u);
  EXPECT_FALSE(c.write);
  EXPECT_EQ(c.lane.retrying, Lane().retrying);
}

TEST(CompleteLaneTest, ARetryWhoseRowIsGoneOrDeadCompletesNothing) {
  ExceptionRows rows = Rows();
  rows[3].pending = false;
  EXPECT_FALSE(complete_lane(Lane(), {Token(3, 1)}, rows).write);
  EXPECT_FALSE(complete_lane(Lane(), {Token(7, 2)}, {}).write);
}

TEST(CompleteLaneTest, AWindowTokenWithClaimsCompletesNothing) {
  EXPECT_FALSE(complete_lane(Lane(), {Token(11, 1)}, Rows()).write);
}

TEST(CompleteLaneTest, ARepeatedOrStaleCompletionWritesNothing) {
  // 13 is done, 10 below the cursor, 20 never picked, and a token of another epoch.
  const LaneCompletion c =
      complete_lane(Lane(), {Token(13), Token(10), Token(20), Token(11, 0, 3)}, Rows());
  EXPECT_EQ(c.count(), 0u);
  EXPECT_FALSE(c.write);
  EXPECT_EQ(c.lane.progress, Lane().progress);
  EXPECT_EQ(c.lane.retrying, Lane().retrying);
}

TEST(CompleteLaneTest, ATokenPassedTwiceCompletesOnce) {
  const LaneCompletion c =
      complete_lane(Lane(), {Token(12), Token(12), Token(3, 1), Token(3, 1)}, Rows());
  EXPECT_EQ(c.completed, Positions{12});
  EXPECT_EQ(c.retries, Positions{3});
  EXPECT_EQ(c.count(), 2u);
}

TEST(CompleteLaneTest, AMixedBatchCompletesWhatHoldsAndIgnoresTheRest) {
  const LaneCompletion c = complete_lane(
      Lane(), {Token(14), Token(7, 2), Token(11), Token(3, 5), Token(12), Token(99)}, Rows());
  EXPECT_EQ(c.completed, (Positions{11, 12, 14}));
  EXPECT_EQ(c.retries, Positions{7});
  EXPECT_EQ(c.lane.progress.acked_upto, 14);
  EXPECT_TRUE(c.lane.progress.in_flight.empty());
  EXPECT_TRUE(c.lane.progress.done.empty());
  EXPECT_EQ(c.lane.retrying, PositionSet{3});
}

TEST(CompleteLaneTest, ACompletedLaneCompletesNothingAgain) {
  const LaneCompletion first =
      complete_lane(Lane(), {Token(11), Token(12), Token(14), Token(3, 1), Token(7, 2)}, Rows());
  EXPECT_EQ(first.count(), 5u);
  const LaneCompletion again =
      complete_lane(first.lane, {Token(11), Token(12), Token(14), Token(3, 1), Token(7, 2)}, {});
  EXPECT_EQ(again.count(), 0u);
  EXPECT_FALSE(again.write);
}

}  // namespace
}  // namespace relaybus::core
