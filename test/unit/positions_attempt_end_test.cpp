// fail, bury and release over positions: what an ended attempt writes for a window pick and
// for a retry.
#include "core/positions_attempt_end.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <optional>

namespace relaybus::core {
namespace {

// Epoch 4; cursor at 10, 12 done; 11 and 13 picked from the window; 7 retried.
PositionLane Lane() {
  PositionLane lane;
  lane.epoch = 4;
  lane.progress.acked_upto = 10;
  lane.progress.done = {12};
  lane.progress.in_flight = {11, 13};
  lane.retrying = {7};
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

// 7's exception row: claims 2, attempts 3.
std::optional<ExceptionView> Row(std::int32_t claims = 2, std::int32_t attempts = 3) {
  return ExceptionView{true, claims, attempts};
}

RetryPolicy Policy(std::int32_t max_attempts) {
  return RetryPolicy{max_attempts, 1000, 1'000'000};
}

PositionAttemptEnd Window(Ending ending, Position p = 11, std::int32_t max_attempts = 5,
                          bool retry_at = false) {
  return end_position_attempt(ending, Token(p), Lane(), true, std::nullopt, Policy(max_attempts),
                              retry_at);
}

PositionAttemptEnd Retry(Ending ending, std::int32_t max_attempts = 5, bool retry_at = false) {
  return end_position_attempt(ending, Token(7, 2), Lane(), true, Row(), Policy(max_attempts),
                              retry_at);
}

// ---------------------------------------------------------------- a window pick

TEST(WindowPickEndTest, FailMovesItToAnExceptionRowWithOneAttemptAndClaimsOne) {
  const PositionAttemptEnd e = Window(Ending::kFail);
  EXPECT_EQ(e.end.result, AttemptResult::kRetry);
  EXPECT_EQ(e.listed, Listed::kWindow);
  EXPECT_EQ(e.end.attempts, 1) << "a window pick was never charged: this is its first";
  EXPECT_EQ(e.claims, 1);
  EXPECT_EQ(e.due, DueAt::kAfterDelay);
  EXPECT_EQ(e.end.delay_us, 1000) << "backoff_base * 2^0";
  EXPECT_EQ(e.charged, 1);
}

TEST(WindowPickEndTest, ItsPositionIsFinishedAndTheCursorPassesIt) {
  const PositionAttemptEnd e = Window(Ending::kFail);
  EXPECT_EQ(e.lane.progress.acked_upto, 12) << "11 finished, 12 done: contiguous";
  EXPECT_TRUE(e.lane.progress.done.empty());
  EXPECT_EQ(e.lane.progress.in_flight, PositionSet{13});
  EXPECT_EQ(e.lane.retrying, Lane().retrying);
  EXPECT_EQ(e.lane.epoch, 4);
}

TEST(WindowPickEndTest, AnOutOfOrderEndJoinsDone) {
  const PositionAttemptEnd e = Window(Ending::kRelease, 13);
  EXPECT_EQ(e.lane.progress.acked_upto, 10);
  EXPECT_EQ(e.lane.progress.done, (PositionSet{12, 13}));
  EXPECT_EQ(e.lane.progress.in_flight, PositionSet{11});
}

TEST(WindowPickEndTest, ReleaseChargesNothingAndIsDueAsTheDeliveryWas) {
  const PositionAttemptEnd e = Window(Ending::kRelease);
  EXPECT_EQ(e.end.result, AttemptResult::kReleased);
  EXPECT_EQ(e.end.attempts, 0);
  EXPECT_FALSE(e.end.dead);
  EXPECT_EQ(e.due, DueAt::kUnchanged);
  EXPECT_EQ(e.claims, 1) << "the released attempt's token must die: it carried 0";
  EXPECT_EQ(e.charged, 0);
  EXPECT_EQ(e.lane.progress.in_flight, PositionSet{13}) << "released positions move out too";
}

TEST(WindowPickEndTest, BuryIsDeadWithOneAttempt) {
  const PositionAttemptEnd e = Window(Ending::kBury);
  EXPECT_EQ(e.end.result, AttemptResult::kDead);
  EXPECT_TRUE(e.end.dead);
  EXPECT_EQ(e.end.attempts, 1);
  EXPECT_EQ(e.due, DueAt::kUnchanged);
  EXPECT_EQ(e.claims, 1);
}

TEST(WindowPickEndTest, FailWithABudgetOfOneIsDead) {
  const PositionAttemptEnd e = Window(Ending::kFail, 11, 1);
  EXPECT_EQ(e.end.result, AttemptResult::kDead);
  EXPECT_EQ(e.end.attempts, 1);
  EXPECT_EQ(e.due, DueAt::kUnchanged);
}

TEST(WindowPickEndTest, FailWithARetryTimeUsesIt) {
  const PositionAttemptEnd e = Window(Ending::kFail, 11, 5, true);
  EXPECT_EQ(e.end.result, AttemptResult::kRetry);
  EXPECT_EQ(e.due, DueAt::kRetryAt);
  EXPECT_EQ(e.end.attempts, 1);
}

TEST(WindowPickEndTest, WithoutItsDeliveryRowItIsLost) {
  const PositionAttemptEnd e =
      end_position_attempt(Ending::kFail, Token(11), Lane(), false, std::nullopt, Policy(5), false);
  EXPECT_EQ(e.end.result, AttemptResult::kLost);
}

TEST(WindowPickEndTest, AFinishedPositionBeyondTheWindowStillLeavesInFlight) {
  PositionLane lane = Lane();
  lane.progress.in_flight.insert(500);  // a row edited by hand
  const PositionAttemptEnd e =
      end_position_attempt(Ending::kFail, Token(500), lane, true, std::nullopt, Policy(5), false);
  EXPECT_EQ(e.end.result, AttemptResult::kRetry);
  EXPECT_EQ(e.lane.progress.in_flight.count(500), 0u);
}

// ---------------------------------------------------------------- a retry

TEST(RetryEndTest, FailChargesTheRowsAttemptsWithTheBackoffOfTheNewCount) {
  const PositionAttemptEnd e = Retry(Ending::kFail);
  EXPECT_EQ(e.end.result, AttemptResult::kRetry);
  EXPECT_EQ(e.listed, Listed::kRetry);
  EXPECT_EQ(e.end.attempts, 4);
  EXPECT_EQ(e.end.delay_us, 8000) << "base * 2^(4-1)";
  EXPECT_EQ(e.due, DueAt::kAfterDelay);
  EXPECT_EQ(e.claims, 3) << "the row's counter moves past the token's";
  EXPECT_EQ(e.charged, 1);
}

TEST(RetryEndTest, ItLeavesRetryingAndTheProgressAlone) {
  const PositionAttemptEnd e = Retry(Ending::kFail);
  EXPECT_TRUE(e.lane.retrying.empty());
  EXPECT_EQ(e.lane.progress, Lane().progress);
}

TEST(RetryEndTest, FailAtTheBudgetIsDead) {
  const PositionAttemptEnd e = Retry(Ending::kFail, 4);
  EXPECT_EQ(e.end.result, AttemptResult::kDead);
  EXPECT_EQ(e.end.attempts, 4);
  EXPECT_EQ(e.due, DueAt::kUnchanged);
}

TEST(RetryEndTest, ReleaseKeepsTheAttemptsAndTheDueTime) {
  const PositionAttemptEnd e = Retry(Ending::kRelease);
  EXPECT_EQ(e.end.result, AttemptResult::kReleased);
  EXPECT_EQ(e.end.attempts, 3);
  EXPECT_EQ(e.charged, 0);
  EXPECT_EQ(e.due, DueAt::kUnchanged);
  EXPECT_EQ(e.claims, 3);
}

TEST(RetryEndTest, BuryIsDead) {
  const PositionAttemptEnd e = Retry(Ending::kBury);
  EXPECT_EQ(e.end.result, AttemptResult::kDead);
  EXPECT_EQ(e.end.attempts, 4);
}

TEST(RetryEndTest, AClaimsCounterAtItsTopDoesNotWrap) {
  const std::int32_t top = std::numeric_limits<std::int32_t>::max();
  const PositionAttemptEnd e = end_position_attempt(Ending::kRelease, Token(7, top), Lane(), true,
                                                    Row(top), Policy(5), false);
  EXPECT_EQ(e.claims, top);
}

// ---------------------------------------------------------------- lost

TEST(LostAttemptEndTest, EveryTokenThatNoLongerHoldsWritesNothing) {
  PositionLane moved = Lane();
  moved.epoch = 5;
  struct Case {
    PositionToken token;
    std::optional<PositionLane> lane;
    std::optional<ExceptionView> row;
  } cases[] = {
      {Token(11), std::nullopt, std::nullopt},            // no lane row with the token's epoch
      {Token(11), moved, std::nullopt},                   // a takeover moved the epoch
      {Token(12), Lane(), std::nullopt},                  // finished (done)
      {Token(10), Lane(), std::nullopt},                  // below the cursor
      {Token(14), Lane(), std::nullopt},                  // never picked
      {Token(11, 1), Lane(), std::nullopt},               // a window pick carries claims 0
      {Token(7, 1), Lane(), Row()},                       // an older attempt of the retry
      {Token(7, 2), Lane(), std::nullopt},                // the retry's row is gone
      {Token(7, 2), Lane(), ExceptionView{false, 2, 3}},  // dead
  };
  for (const Case& c : cases) {
    for (Ending ending : {Ending::kFail, Ending::kBury, Ending::kRelease}) {
      const PositionAttemptEnd e =
          end_position_attempt(ending, c.token, c.lane, true, c.row, Policy(5), false);
      EXPECT_EQ(e.end.result, AttemptResult::kLost) << c.token.position << '/' << c.token.claims;
      EXPECT_EQ(e.listed, Listed::kNowhere);
    }
  }
}

TEST(LostAttemptEndTest, TheTokenOfAnEndedWindowPickNoLongerHoldsItsRetry) {
  const PositionAttemptEnd first = Window(Ending::kRelease);
  PositionLane lane = first.lane;
  lane.retrying.insert(11);  // claimed again as a retry, same epoch
  const ExceptionView row{true, first.claims, first.end.attempts};
  EXPECT_EQ(
      end_position_attempt(Ending::kFail, Token(11), lane, true, row, Policy(5), false).end.result,
      AttemptResult::kLost);
  EXPECT_EQ(end_position_attempt(Ending::kFail, Token(11, first.claims), lane, true, row, Policy(5),
                                 false)
                .end.result,
            AttemptResult::kRetry);
}

}  // namespace
}  // namespace relaybus::core
