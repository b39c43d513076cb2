// cancel of a window position: finished only when no attempt runs it and it is unfinished.
#include "core/positions_cancel.hpp"

#include <gtest/gtest.h>

namespace relaybus::core {
namespace {

// Cursor at 10, 12 done, 13 in flight, 7 retried.
PositionLane Lane() {
  PositionLane lane;
  lane.epoch = 2;
  lane.progress.acked_upto = 10;
  lane.progress.done = {12};
  lane.progress.in_flight = {13};
  lane.retrying = {7};
  return lane;
}

TEST(FinishUnclaimedPositionTest, AnUnfinishedPositionNotInFlightIsFinished) {
  const ProgressUpdate u = finish_unclaimed_position(Lane(), 11, true);
  EXPECT_TRUE(u.write);
  EXPECT_EQ(u.positions, std::vector<Position>{11});
  EXPECT_EQ(u.progress.acked_upto, 12);
  EXPECT_EQ(u.progress.in_flight, PositionSet{13});
}

TEST(FinishUnclaimedPositionTest, OneAboveTheOthersJoinsDone) {
  const ProgressUpdate u = finish_unclaimed_position(Lane(), 20, true);
  EXPECT_TRUE(u.write);
  EXPECT_EQ(u.progress.acked_upto, 10);
  EXPECT_EQ(u.progress.done, (PositionSet{12, 20}));
}

TEST(FinishUnclaimedPositionTest, InFlightIsRefused) {
  EXPECT_FALSE(finish_unclaimed_position(Lane(), 13, true).write);
}

TEST(FinishUnclaimedPositionTest, FinishedOrBeyondTheWindowIsNothingToDo) {
  for (Position p : {5, 7, 10, 12, 10 + kPositionWindow + 1})
    EXPECT_FALSE(finish_unclaimed_position(Lane(), p, true).write) << p;
}

TEST(FinishUnclaimedPositionTest, APositionWithoutADeliveryIsNotFinished) {
  EXPECT_FALSE(finish_unclaimed_position(Lane(), 11, false).write);
}

TEST(FinishUnclaimedPositionTest, NothingToDoLeavesTheProgressAsItWas) {
  const ProgressUpdate u = finish_unclaimed_position(Lane(), 13, true);
  EXPECT_EQ(u.progress, Lane().progress);
  EXPECT_TRUE(u.positions.empty());
}

}  // namespace
}  // namespace relaybus::core
