// Retention of an unsubscribed handler: its expired positions are finished from the cursor
// up, in order, and never under a running attempt.
#include "core/positions_retention.hpp"

#include <gtest/gtest.h>

namespace relaybus::core {
namespace {

PositionLane Lane(Position acked, PositionSet done = {}) {
  PositionLane lane;
  lane.epoch = 3;
  lane.progress.acked_upto = acked;
  lane.progress.done = std::move(done);
  return lane;
}

std::vector<RetentionEntry> Entries(Position first, std::vector<bool> expired) {
  std::vector<RetentionEntry> out;
  for (bool e : expired) out.push_back({first++, e});
  return out;
}

TEST(RetireExpiredPositionsTest, FinishesUpToTheFirstPositionNotExpired) {
  const ProgressUpdate u =
      retire_expired_positions(Lane(10), Entries(11, {true, true, false, true}));
  EXPECT_TRUE(u.write);
  EXPECT_EQ(u.progress.acked_upto, 12);  // 14 waits behind 13, which is not expired
  EXPECT_TRUE(u.progress.done.empty());
}

TEST(RetireExpiredPositionsTest, EverythingExpiredIsFinished) {
  const ProgressUpdate u = retire_expired_positions(Lane(0), Entries(1, {true, true, true}));
  EXPECT_TRUE(u.write);
  EXPECT_EQ(u.progress.acked_upto, 3);
}

TEST(RetireExpiredPositionsTest, DonePositionsArePassedAndTheCursorMovesOverDoneAbove) {
  // 12 is done (young or not); 14 and 15 are done above a young 13.
  const ProgressUpdate u = retire_expired_positions(Lane(10, {12, 14, 15}),
                                                    Entries(11, {true, false, false, true, true}));
  EXPECT_TRUE(u.write);
  EXPECT_EQ(u.progress.acked_upto, 12);
  EXPECT_EQ(u.progress.done, (PositionSet{14, 15}));
  const ProgressUpdate all =
      retire_expired_positions(Lane(10, {12, 16}), Entries(11, {true, false, true, true, true}));
  EXPECT_EQ(all.progress.acked_upto, 16);  // 16 done right above 15: passed as well
  EXPECT_TRUE(all.progress.done.empty());
}

TEST(RetireExpiredPositionsTest, NothingWhileTheLaneRunsAnything) {
  PositionLane flying = Lane(10);
  flying.progress.in_flight = {11};
  EXPECT_FALSE(retire_expired_positions(flying, Entries(11, {true, true})).write);
  PositionLane retrying = Lane(10);
  retrying.retrying = {4};
  EXPECT_FALSE(retire_expired_positions(retrying, Entries(11, {true, true})).write);
}

TEST(RetireExpiredPositionsTest, NothingUnlessTheScanStartsRightAboveTheCursor) {
  EXPECT_FALSE(retire_expired_positions(Lane(10), Entries(12, {true, true})).write);
  EXPECT_FALSE(retire_expired_positions(Lane(10), Entries(11, {false, true})).write);
  EXPECT_FALSE(retire_expired_positions(Lane(10), {}).write);
  // A gap the scan did not read stops it.
  std::vector<RetentionEntry> gap = Entries(11, {true});
  gap.push_back({13, true});
  EXPECT_EQ(retire_expired_positions(Lane(10), gap).progress.acked_upto, 11);
}

}  // namespace
}  // namespace relaybus::core
