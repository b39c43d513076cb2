// Positions and cursors: what a completion, a finish, a claim's plan and a takeover do to a
// lane's progress, rule by rule, then a lane driven at random against a model of its
// deliveries.
#include "core/positions.hpp"

#include "core/lane_lease.hpp"
#include "core/retry_policy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace relaybus::core {

// Readable failure messages (internal linkage, found by ADL).
static std::ostream& operator<<(std::ostream& os, WindowAction action) {
  switch (action) {
    case WindowAction::kPick:
      return os << "PICK";
    case WindowAction::kSkip:
      return os << "SKIP";
    case WindowAction::kAbsent:
      return os << "ABSENT";
    case WindowAction::kDefer:
      return os << "DEFER";
    case WindowAction::kPark:
      return os << "PARK";
    case WindowAction::kWait:
      return os << "WAIT";
  }
  return os << "WindowAction(" << static_cast<int>(action) << ")";
}

static std::ostream& operator<<(std::ostream& os, const LaneProgress& p) {
  os << "{acked_upto " << p.acked_upto << ", done [";
  for (Position d : p.done) os << ' ' << d;
  os << " ], in_flight [";
  for (Position f : p.in_flight) os << ' ' << f;
  return os << " ]}";
}

namespace {

using Actions = std::vector<WindowAction>;
constexpr WindowAction PICK = WindowAction::kPick;
constexpr WindowAction SKIP = WindowAction::kSkip;
constexpr WindowAction ABSENT = WindowAction::kAbsent;
constexpr WindowAction DEFER = WindowAction::kDefer;
constexpr WindowAction PARK = WindowAction::kPark;
constexpr WindowAction WAIT = WindowAction::kWait;

constexpr std::int64_t kNow = 1'000'000;

LaneProgress Progress(Position acked_upto, std::vector<Position> done = {},
                      std::vector<Position> in_flight = {}) {
  LaneProgress p;
  p.acked_upto = acked_upto;
  p.done = PositionSet(done.begin(), done.end());
  p.in_flight = PositionSet(in_flight.begin(), in_flight.end());
  return p;
}

WindowEntry Unkeyed(Position position) {
  WindowEntry e;
  e.position = position;
  e.available_at_us = kNow;
  return e;
}

WindowEntry Keyed(Position position, std::string key) {
  WindowEntry e = Unkeyed(position);
  e.key = std::move(key);
  return e;
}

WindowEntry Absent(Position position) {
  WindowEntry e = Unkeyed(position);
  e.exists = false;
  return e;
}

WindowEntry NotDue(WindowEntry e) {
  e.available_at_us = kNow + 1;
  return e;
}

LanePlan Plan(const LaneProgress& progress, const std::vector<WindowEntry>& window,
              int batch_room = 100, const KeySet& pending = {}, const KeySet& in_batch = {}) {
  return plan_lane(progress, window, batch_room, kNow, pending, in_batch);
}

// ---- complete_positions ----

TEST(CompletePositionsTest, TheLowestInFlightMovesTheCursorOverEveryContiguousFinishedPosition) {
  const auto u = complete_positions(Progress(10, {12, 13, 15}, {11, 14, 16}), {11});
  EXPECT_EQ(u.positions, std::vector<Position>{11});
  EXPECT_EQ(u.progress, Progress(13, {15}, {14, 16}));
  EXPECT_TRUE(u.write);
}

TEST(CompletePositionsTest, AnOutOfOrderCompletionJoinsDoneAndLeavesTheCursor) {
  const auto u = complete_positions(Progress(10, {12}, {11, 14, 16}), {16, 14});
  EXPECT_EQ(u.positions, (std::vector<Position>{14, 16}));
  EXPECT_EQ(u.progress, Progress(10, {12, 14, 16}, {11}));
  EXPECT_TRUE(u.write);
}

TEST(CompletePositionsTest, ClosingTheLastGapEmptiesDone) {
  const auto u = complete_positions(Progress(10, {12, 13, 14}, {11}), {11});
  EXPECT_EQ(u.progress, Progress(14));
}

TEST(CompletePositionsTest, OnlyInFlightPositionsComplete) {
  // 12 finished already, 9 below the cursor, 20 never claimed, 11 repeated.
  const auto u = complete_positions(Progress(10, {12}, {11, 13}), {12, 9, 20, 11, 11});
  EXPECT_EQ(u.positions, std::vector<Position>{11});
  EXPECT_EQ(u.progress, Progress(12, {}, {13}));
}

TEST(CompletePositionsTest, ARepeatedOrStaleCompletionChangesNothingAndWritesNothing) {
  const LaneProgress start = Progress(10, {12}, {11, 13});
  const auto first = complete_positions(start, {13});
  ASSERT_TRUE(first.write);
  const auto again = complete_positions(first.progress, {13});
  EXPECT_TRUE(again.positions.empty());
  EXPECT_EQ(again.progress, first.progress);
  EXPECT_FALSE(again.write);

  const auto nothing = complete_positions(start, {});
  EXPECT_FALSE(nothing.write);
  EXPECT_EQ(nothing.progress, start);
}

TEST(CompletePositionsTest, AnUnnormalizedRowIsBroughtIntoShapeNotRefused) {
  // done below the cursor, done touching it, a finished position still listed in flight.
  const auto u = complete_positions(Progress(10, {5, 11, 12, 15}, {3, 12, 14}), {14});
  EXPECT_EQ(u.positions, std::vector<Position>{14});
  EXPECT_EQ(u.progress, Progress(12, {14, 15}));
  // A finished position that was still listed does not complete (it was finished already).
  EXPECT_FALSE(complete_positions(Progress(10, {11}, {11}), {11}).write);
}

// ---- finish_positions ----

TEST(FinishPositionsTest, AnInFlightPositionLeavesTheListAndTheCursorPassesIt) {
  const auto u = finish_positions(Progress(10, {12}, {11, 13}), {11});
  EXPECT_EQ(u.positions, std::vector<Position>{11});
  EXPECT_EQ(u.progress, Progress(12, {}, {13}));
  EXPECT_TRUE(u.write);
}

TEST(FinishPositionsTest, APositionNotInFlightIsFinishedToo) {
  // ABSENT, DEFER and PARK finish positions nobody claimed.
  const auto u = finish_positions(Progress(10, {}, {13}), {12, 11});
  EXPECT_EQ(u.positions, (std::vector<Position>{11, 12}));
  EXPECT_EQ(u.progress, Progress(12, {}, {13}));
}

TEST(FinishPositionsTest, FinishedBelowOrBeyondTheWindowIsIgnored) {
  const LaneProgress start = Progress(10, {12}, {11});
  const auto u = finish_positions(start, {10, 12, 10 + kPositionWindow + 1});
  EXPECT_TRUE(u.positions.empty());
  EXPECT_FALSE(u.write);
  EXPECT_EQ(u.progress, start);
  // The window's last position is inside.
  EXPECT_EQ(finish_positions(start, {10 + kPositionWindow}).positions,
            std::vector<Position>{10 + kPositionWindow});
}

TEST(FinishPositionsTest, FinishAndCompleteShareTheCursorArithmetic) {
  // For positions all in flight, both end in the same progress.
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    LaneProgress p = Progress(100);
    std::vector<Position> chosen;
    for (Position q = 101; q <= 100 + kPositionWindow; ++q) {
      switch (rng() % 3) {
        case 0:
          p.done.insert(q);
          break;
        case 1:
          p.in_flight.insert(q);
          if (rng() % 2) chosen.push_back(q);
          break;
        default:
          break;
      }
    }
    const auto completed = complete_positions(p, chosen);
    const auto finished = finish_positions(p, chosen);
    EXPECT_EQ(completed.progress, finished.progress);
    EXPECT_EQ(completed.positions, finished.positions);
  }
}

// ---- plan_lane ----

TEST(PlanLaneTest, DueUnkeyedPositionsArePickedInAscendingOrderUpToTheRoom) {
  const auto plan = Plan(Progress(0), {Unkeyed(1), Unkeyed(2), Unkeyed(3), Unkeyed(4)}, 3);
  EXPECT_EQ(plan.actions, (Actions{PICK, PICK, PICK, WAIT}));
  EXPECT_EQ(plan.picks, 3);
  EXPECT_EQ(plan.progress, Progress(0, {}, {1, 2, 3}));
  EXPECT_TRUE(plan.write);
}

TEST(PlanLaneTest, EntriesAreDecidedInAscendingOrderWhateverOrderTheyArePassedIn) {
  const auto plan = Plan(Progress(0), {Unkeyed(3), Unkeyed(1), Unkeyed(2)}, 2);
  EXPECT_EQ(plan.actions, (Actions{WAIT, PICK, PICK}));
}

TEST(PlanLaneTest, TheLaneCapBoundsThePicksWhateverTheBatchRoom) {
  std::vector<Position> running;
  for (Position p = 1; p <= kMaxInFlightPerLane - 2; ++p) running.push_back(p);
  std::vector<WindowEntry> window;
  for (Position p = 1; p <= kMaxInFlightPerLane + 5; ++p) window.push_back(Unkeyed(p));
  const auto plan = Plan(Progress(0, {}, running), window, 1000);
  EXPECT_EQ(plan.picks, 2);
  EXPECT_EQ(plan.progress.in_flight.size(), static_cast<std::size_t>(kMaxInFlightPerLane));
  EXPECT_EQ(plan.actions[kMaxInFlightPerLane - 2], PICK);
  EXPECT_EQ(plan.actions[kMaxInFlightPerLane - 1], PICK);
  EXPECT_EQ(plan.actions[kMaxInFlightPerLane], WAIT);
}

TEST(PlanLaneTest, NoBatchRoomOrANegativeOnePicksNothing) {
  for (int room : {0, -5}) {
    const auto plan = Plan(Progress(0), {Unkeyed(1)}, room);
    EXPECT_EQ(plan.actions, Actions{WAIT}) << room;
    EXPECT_FALSE(plan.write) << room;
    EXPECT_EQ(plan.progress, Progress(0)) << room;
  }
}

TEST(PlanLaneTest, InFlightAndFinishedPositionsAreSkipped) {
  const auto plan =
      Plan(Progress(2, {4}, {3}), {Unkeyed(1), Unkeyed(2), Unkeyed(3), Unkeyed(4), Unkeyed(5)});
  EXPECT_EQ(plan.actions, (Actions{SKIP, SKIP, SKIP, SKIP, PICK}));
  EXPECT_EQ(plan.progress, Progress(2, {4}, {3, 5}));
}

TEST(PlanLaneTest, NothingToDoWritesNothing) {
  const LaneProgress start = Progress(2, {4}, {3});
  const auto plan = Plan(start, {Unkeyed(3), Unkeyed(4)});
  EXPECT_EQ(plan.actions, (Actions{SKIP, SKIP}));
  EXPECT_FALSE(plan.write);
  EXPECT_EQ(plan.progress, start);
}

TEST(PlanLaneTest, AbsentPositionsAreFinishedAndTheCursorPassesThem) {
  const auto plan = Plan(Progress(0), {Absent(1), Absent(2), Unkeyed(3), Absent(4)}, 0);
  EXPECT_EQ(plan.actions, (Actions{ABSENT, ABSENT, WAIT, ABSENT}));
  EXPECT_EQ(plan.progress, Progress(2, {4}));
  EXPECT_TRUE(plan.write);
}

TEST(PlanLaneTest, AKeyedAbsentPositionBlocksNothing) {
  WindowEntry gone = Absent(1);
  gone.key = "k";
  const auto plan = Plan(Progress(0), {gone, Keyed(2, "k")});
  EXPECT_EQ(plan.actions, (Actions{ABSENT, PICK}));
}

TEST(PlanLaneTest, ANotDueUnkeyedPositionDefersAndTheCursorPassesIt) {
  const auto plan = Plan(Progress(0), {NotDue(Unkeyed(1)), Unkeyed(2)});
  EXPECT_EQ(plan.actions, (Actions{DEFER, PICK}));
  EXPECT_EQ(plan.progress, Progress(1, {}, {2}));
}

TEST(PlanLaneTest, DueMeansAvailableAtOrBeforeNow) {
  WindowEntry at_now = Unkeyed(1);
  at_now.available_at_us = kNow;
  const auto plan = Plan(Progress(0), {at_now, NotDue(Unkeyed(2))});
  EXPECT_EQ(plan.actions, (Actions{PICK, DEFER}));
}

TEST(PlanLaneTest, ADeliveryPublishedWithoutADelayIsDueOnceVisibleWhateverTheClaimsClock) {
  // Published by a transaction that began after the claim's: its available_at (the
  // publisher's now()) is later than the claim's now, yet it was never delayed.
  WindowEntry undelayed = NotDue(Keyed(1, "k"));
  undelayed.due_when_visible = true;
  const auto plan = Plan(Progress(0), {undelayed, NotDue(Unkeyed(2))});
  EXPECT_EQ(plan.actions, (Actions{PICK, DEFER})) << "picked, not moved to an exception row";
  EXPECT_EQ(plan.progress, Progress(0, {2}, {1}));
}

TEST(PlanLaneTest, ANotDueKeyedPositionDefersAndParksTheLaterOnesOfItsKey) {
  const auto plan = Plan(Progress(0), {NotDue(Keyed(1, "k")), Keyed(2, "k"), Keyed(3, "other"),
                                       NotDue(Keyed(4, "k"))});
  EXPECT_EQ(plan.actions, (Actions{DEFER, PARK, PICK, PARK}));
  EXPECT_EQ(plan.progress, Progress(2, {4}, {3}));
}

TEST(PlanLaneTest, APendingExceptionRowParksEveryLaterPositionOfItsKey) {
  const auto plan =
      Plan(Progress(0), {Keyed(1, "k"), Unkeyed(2), Keyed(3, "k"), Keyed(4, "j")}, 100, {"k"});
  EXPECT_EQ(plan.actions, (Actions{PARK, PICK, PARK, PICK}));
  EXPECT_EQ(plan.progress, Progress(1, {3}, {2, 4}));
}

TEST(PlanLaneTest, ParkingDoesNotNeedRoom) {
  const auto plan = Plan(Progress(0), {Keyed(1, "k"), NotDue(Unkeyed(2)), Absent(3)}, 0, {"k"});
  EXPECT_EQ(plan.actions, (Actions{PARK, DEFER, ABSENT}));
  EXPECT_EQ(plan.progress, Progress(3));
}

TEST(PlanLaneTest, AKeyInFlightHoldsItsLaterPositionsDueOrNot) {
  const auto plan = Plan(Progress(0, {}, {1}),
                         {Keyed(1, "k"), Keyed(2, "k"), NotDue(Keyed(3, "k")), Keyed(4, "j")});
  EXPECT_EQ(plan.actions, (Actions{SKIP, WAIT, WAIT, PICK}));
  EXPECT_EQ(plan.progress, Progress(0, {}, {1, 4}));
}

TEST(PlanLaneTest, OnePositionOfAKeyPerBatch) {
  const auto plan = Plan(Progress(0), {Keyed(1, "k"), Keyed(2, "k"), Keyed(3, "j")});
  EXPECT_EQ(plan.actions, (Actions{PICK, WAIT, PICK}));
}

TEST(PlanLaneTest, AKeyAlreadyInTheBatchTakesNoPositionHere) {
  const auto plan =
      Plan(Progress(0), {Keyed(1, "k"), NotDue(Keyed(2, "k")), Keyed(3, "j")}, 100, {}, {"k"});
  EXPECT_EQ(plan.actions, (Actions{WAIT, WAIT, PICK}));
}

TEST(PlanLaneTest, AKeyLeftWaitingForRoomHoldsItsLaterPositions) {
  // With no room left, 1 waits; 2 must neither run nor move behind an exception row ahead
  // of 1, and a not-due 3 must not be deferred past 1 either.
  const auto plan = Plan(
      Progress(0), {Keyed(1, "k"), Keyed(2, "k"), NotDue(Keyed(3, "k")), NotDue(Keyed(4, "j"))}, 0);
  EXPECT_EQ(plan.actions, (Actions{WAIT, WAIT, WAIT, DEFER}));
  EXPECT_EQ(plan.progress, Progress(0, {4}));
}

TEST(PlanLaneTest, ABlockedPositionWaitsEvenWhenItsKeyHasAPendingExceptionRow) {
  // In flight 1 of k came first; 2 stays in the window behind it rather than moving to an
  // exception row, so the exception rows of k never get ahead of its window positions.
  const auto plan = Plan(Progress(0, {}, {1}), {Keyed(1, "k"), Keyed(2, "k")}, 100, {"k"});
  EXPECT_EQ(plan.actions, (Actions{SKIP, WAIT}));
  EXPECT_FALSE(plan.write);
}

TEST(PlanLaneTest, AnUnknownPositionBelowBlocksEveryKeyButNotUnkeyedPositions) {
  // 1 is in flight but not passed (its key is unknown): keyed positions above it wait.
  const auto plan =
      Plan(Progress(0, {}, {1}), {Keyed(2, "k"), Unkeyed(3), NotDue(Keyed(4, "j")), Absent(5)});
  EXPECT_EQ(plan.actions, (Actions{WAIT, PICK, WAIT, ABSENT}));
  // A position of the window neither passed nor finished nor in flight is unknown too, and
  // is left alone.
  const auto gap = Plan(Progress(0), {Unkeyed(1), Keyed(3, "k")});
  EXPECT_EQ(gap.actions, (Actions{PICK, WAIT}));
  EXPECT_EQ(gap.progress, Progress(0, {}, {1}));
}

TEST(PlanLaneTest, FinishedPositionsMayBeLeftOut) {
  const auto plan = Plan(Progress(0, {1, 3}), {Keyed(2, "k"), Keyed(4, "k")});
  EXPECT_EQ(plan.actions, (Actions{PICK, WAIT}));
}

TEST(PlanLaneTest, PositionsAboveTheWindowAreNotTouched) {
  const Position last = kPositionWindow;
  const auto plan = Plan(Progress(0), {Absent(last), Absent(last + 1), Unkeyed(last + 2)});
  EXPECT_EQ(plan.actions, (Actions{ABSENT, WAIT, WAIT}));
  EXPECT_EQ(plan.progress, Progress(0, {last}));
}

TEST(PlanLaneTest, PositionsNotPassedAboveTheTailAreNotTouched) {
  // The tail is 3: 4 and beyond are not passed and stay unfinished.
  const auto plan = Plan(Progress(0), {Absent(1), NotDue(Unkeyed(2)), Absent(3)});
  EXPECT_EQ(plan.progress, Progress(3));
  EXPECT_TRUE(lane_idle(plan.progress, 3));
  EXPECT_FALSE(lane_idle(plan.progress, 4));
}

TEST(PlanLaneTest, APositionPassedTwiceIsDecidedOnce) {
  const auto plan = Plan(Progress(0), {Unkeyed(1), Unkeyed(1)});
  EXPECT_EQ(plan.actions, (Actions{PICK, SKIP}));
  EXPECT_EQ(plan.picks, 1);
}

// ---- lane_has_work, lane_idle ----

TEST(LaneWorkTest, ALaneAtItsTailHasNoWorkAndIsIdle) {
  EXPECT_FALSE(lane_has_work(Progress(5), 5));
  EXPECT_TRUE(lane_idle(Progress(5), 5));
  EXPECT_TRUE(lane_idle(Progress(0), 0));
}

TEST(LaneWorkTest, AnUnfinishedPositionAboveTheCursorIsWork) {
  EXPECT_TRUE(lane_has_work(Progress(5), 6));
  EXPECT_FALSE(lane_idle(Progress(5), 6));
  EXPECT_TRUE(lane_has_work(Progress(5, {6, 8}), 8));  // 7
  EXPECT_FALSE(lane_idle(Progress(5, {6, 8}), 8));
}

TEST(LaneWorkTest, InFlightPositionsAreUnfinishedButNoWork) {
  EXPECT_FALSE(lane_has_work(Progress(5, {7}, {6, 8}), 8));
  EXPECT_FALSE(lane_idle(Progress(5, {7}, {6, 8}), 8));
  EXPECT_FALSE(lane_idle(Progress(5, {}, {6}), 5));
}

TEST(LaneWorkTest, OnlyTheWindowCounts) {
  // Everything in the window is in flight or done; positions wait beyond it.
  std::vector<Position> running, done;
  for (Position p = 1; p <= kPositionWindow; ++p) (p % 2 ? running : done).push_back(p);
  const LaneProgress full = Progress(0, done, running);
  EXPECT_FALSE(lane_has_work(full, kPositionWindow + 10));
  EXPECT_FALSE(lane_idle(full, kPositionWindow + 10));
  // Once the lowest completes, the window moves and finds work.
  const auto after = complete_positions(full, {1});
  EXPECT_TRUE(lane_has_work(after.progress, kPositionWindow + 10));
}

TEST(LaneWorkTest, FinishedUpToTheTailIsIdleEvenUnnormalized) {
  EXPECT_TRUE(lane_idle(Progress(5, {6, 7}), 7));
  EXPECT_FALSE(lane_has_work(Progress(5, {6, 7}), 7));
  // A finished position still listed in flight runs nothing.
  EXPECT_TRUE(lane_idle(Progress(5, {6}, {4, 6}), 6));
}

// ---- takeover_of_positions ----

TEST(TakeoverOfPositionsTest, EachInFlightPositionIsChargedOneLostAttemptAndFinished) {
  const RetryPolicy policy;
  const auto t = takeover_of_positions(Progress(10, {12}, {11, 13, 20}), policy, kNow);
  const FailureOutcome rule = after_lost_attempt(policy, 0);
  ASSERT_EQ(t.charged.size(), 3u);
  const Position expected[] = {11, 13, 20};
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(t.charged[i].position, expected[i]);
    EXPECT_EQ(t.charged[i].attempts, 1);
    EXPECT_EQ(t.charged[i].attempts, rule.attempts);
    EXPECT_FALSE(t.charged[i].dead);
    EXPECT_EQ(t.charged[i].available_at_us, kNow);  // no backoff: nothing says it was at fault
  }
  EXPECT_EQ(t.progress, Progress(13, {20}));
  EXPECT_TRUE(t.write);
}

TEST(TakeoverOfPositionsTest, AtTheBudgetsEndTheChargeIsDead) {
  RetryPolicy policy;
  policy.max_attempts = 1;
  const auto t = takeover_of_positions(Progress(0, {}, {1}), policy, kNow);
  ASSERT_EQ(t.charged.size(), 1u);
  EXPECT_TRUE(t.charged[0].dead);
  // A hand-edited budget below 1 is clamped, not obeyed.
  policy.max_attempts = -3;
  EXPECT_TRUE(takeover_of_positions(Progress(0, {}, {1}), policy, kNow).charged[0].dead);
}

TEST(TakeoverOfPositionsTest, NothingInFlightChargesNothingAndWritesNothing) {
  const auto t = takeover_of_positions(Progress(4, {6}), RetryPolicy{}, kNow);
  EXPECT_TRUE(t.charged.empty());
  EXPECT_FALSE(t.write);
  EXPECT_EQ(t.progress, Progress(4, {6}));
}

TEST(TakeoverOfPositionsTest, AFinishedPositionStillListedIsNotCharged) {
  const auto t = takeover_of_positions(Progress(4, {6}, {3, 6, 5}), RetryPolicy{}, kNow);
  ASSERT_EQ(t.charged.size(), 1u);
  EXPECT_EQ(t.charged[0].position, 5);
  EXPECT_EQ(t.progress, Progress(6));
}

// ---- a lane at random, against a model of its deliveries ----

enum class State { kOpen, kInFlight, kCompleted, kAbsent, kExcepted };

bool finished(State s) {
  return s == State::kCompleted || s == State::kAbsent || s == State::kExcepted;
}

struct Delivery {
  bool exists = true;
  std::optional<std::string> key;
  std::int64_t available_at_us = 0;
  State state = State::kOpen;
  int picks = 0;
  int finishes = 0;
};

struct ExceptionRow {
  Position position = 0;
  std::optional<std::string> key;
  std::int64_t available_at_us = 0;
  bool dead = false;
  bool resolved = false;  // ran to completion from the exception row
};

class LaneModel {
 public:
  LaneModel(unsigned seed, Position size) : rng_(seed), d_(size + 1) {
    for (Position p = 1; p <= size; ++p) {
      Delivery& d = d_[p];
      d.exists = !chance(10);
      if (chance(75)) d.key = "k" + std::to_string(rng_() % 5);
      d.available_at_us = chance(12) ? now_ + 1 + static_cast<std::int64_t>(rng_() % 400) : now_;
    }
  }

  Position size() const { return static_cast<Position>(d_.size()) - 1; }

  // One round: publish, time, exception rows run, a plan, completions, failures, takeovers.
  void step(bool draining) {
    tail_ = std::min(size(), tail_ + static_cast<Position>(rng_() % 9));
    now_ += static_cast<std::int64_t>(rng_() % 20);
    if (draining) now_ += 50;
    run_exception_rows();
    check(progress_);

    plan();
    check(progress_);

    complete_some(draining);
    check(progress_);

    if (!draining && chance(8)) fail_one();
    if (!draining && chance(2)) take_over();
    check(progress_);
  }

  bool drained() const {
    if (tail_ != size()) return false;
    for (Position p = 1; p <= size(); ++p)
      if (!finished(d_[p].state)) return false;
    for (const auto& row : rows_)
      if (!row.dead && !row.resolved) return false;
    return true;
  }

  void check_end() const {
    for (Position p = 1; p <= size(); ++p) {
      const Delivery& d = d_[p];
      EXPECT_EQ(d.finishes, 1) << "position " << p;
      EXPECT_LE(d.picks, 1) << "position " << p;
      if (d.state == State::kCompleted) {
        EXPECT_EQ(d.picks, 1) << "position " << p;
      }
      if (!d.exists) {
        EXPECT_EQ(d.state, State::kAbsent) << "position " << p;
      }
    }
    EXPECT_EQ(progress_, Progress(size()));
    EXPECT_TRUE(lane_idle(progress_, size()));
    EXPECT_FALSE(lane_has_work(progress_, size()));
  }

  std::map<WindowAction, int> actions;  // how often the plans chose each
  int exceptions_total = 0;
  int takeovers_charging = 0;

 private:
  bool chance(unsigned percent) { return rng_() % 100 < percent; }

  // A position of `key` below `position` that is not finished.
  bool earlier_unfinished(const std::string& key, Position position) const {
    for (Position q = 1; q < position; ++q)
      if (d_[q].key == key && d_[q].exists && !finished(d_[q].state)) return true;
    return false;
  }

  bool pending_row_of(const std::string& key) const {
    for (const auto& row : rows_)
      if (row.key == key && !row.dead && !row.resolved) return true;
    return false;
  }

  void finish(Position p, State how) {
    Delivery& d = d_[p];
    ASSERT_FALSE(finished(d.state)) << "position " << p << " finished twice";
    d.state = how;
    ++d.finishes;
  }

  // Every exception row of a key stays ahead of the key's unfinished window positions, so
  // the rows of a key can run in position order without looking at the window.
  void except(Position p, bool dead, std::int64_t available_at_us) {
    const Delivery& d = d_[p];
    if (d.key && !dead) {
      EXPECT_FALSE(earlier_unfinished(*d.key, p))
          << "position " << p << " moved to an exception row behind an unfinished one";
    }
    finish(p, State::kExcepted);
    rows_.push_back({p, d.key, available_at_us, dead, false});
    ++exceptions_total;
  }

  void run_exception_rows() {
    // Per key, the lowest pending row runs first; a row runs once due.
    std::sort(rows_.begin(), rows_.end(),
              [](const ExceptionRow& a, const ExceptionRow& b) { return a.position < b.position; });
    std::set<std::string> seen;
    for (auto& row : rows_) {
      if (row.dead || row.resolved) continue;
      if (row.key) {
        if (seen.count(*row.key)) continue;
        seen.insert(*row.key);
      }
      if (row.available_at_us <= now_ && chance(40)) row.resolved = true;
    }
  }

  void plan() {
    std::vector<WindowEntry> window;
    const Position last = std::min(tail_, progress_.acked_upto + kPositionWindow);
    for (Position p = progress_.acked_upto + 1; p <= last; ++p) {
      const Delivery& d = d_[p];
      if (finished(d.state) && chance(50)) continue;  // finished ones may be left out
      WindowEntry e;
      e.position = p;
      e.exists = d.exists;
      e.key = d.key;
      e.available_at_us = d.available_at_us;
      window.push_back(e);
    }
    KeySet pending;
    for (const auto& row : rows_)
      if (row.key && !row.dead && !row.resolved) pending.insert(*row.key);
    KeySet in_batch;
    if (chance(20)) in_batch.insert("k" + std::to_string(rng_() % 5));
    const int batch_room = static_cast<int>(rng_() % 43) - 2;

    const LaneProgress before = progress_;
    const LanePlan plan = plan_lane(before, window, batch_room, now_, pending, in_batch);
    ASSERT_EQ(plan.actions.size(), window.size());

    const int room = std::max(0, std::min(batch_room, lane_room(before.in_flight.size())));
    EXPECT_LE(plan.picks, room);
    std::set<std::string> keys_picked;
    int picks = 0;
    bool changed = false;
    for (std::size_t i = 0; i < window.size(); ++i) {
      const Position p = window[i].position;
      Delivery& d = d_[p];
      const bool due = d.available_at_us <= now_;
      SCOPED_TRACE(::testing::Message() << "position " << p << " " << plan.actions[i]);
      ++actions[plan.actions[i]];
      switch (plan.actions[i]) {
        case WindowAction::kPick:
          ASSERT_EQ(d.state, State::kOpen);
          EXPECT_TRUE(d.exists);
          EXPECT_TRUE(due);
          if (d.key) {
            EXPECT_FALSE(earlier_unfinished(*d.key, p));
            EXPECT_FALSE(pending_row_of(*d.key));
            EXPECT_EQ(in_batch.count(*d.key), 0u);
            EXPECT_TRUE(keys_picked.insert(*d.key).second) << "two of a key in one batch";
            auto& last_pick = last_pick_of_key_[*d.key];
            EXPECT_LT(last_pick, p) << "a key's picks out of order";
            last_pick = p;
          }
          d.state = State::kInFlight;
          ++d.picks;
          ++picks;
          changed = true;
          break;
        case WindowAction::kSkip:
          EXPECT_TRUE(finished(d.state) || d.state == State::kInFlight);
          break;
        case WindowAction::kAbsent:
          EXPECT_FALSE(d.exists);
          finish(p, State::kAbsent);
          changed = true;
          break;
        case WindowAction::kDefer:
          EXPECT_TRUE(d.exists);
          EXPECT_FALSE(due);
          if (d.key) {
            EXPECT_FALSE(pending_row_of(*d.key));
          }
          except(p, false, d.available_at_us);
          changed = true;
          break;
        case WindowAction::kPark:
          EXPECT_TRUE(d.exists);
          ASSERT_TRUE(d.key.has_value());
          EXPECT_TRUE(pending_row_of(*d.key));
          except(p, false, d.available_at_us);
          changed = true;
          break;
        case WindowAction::kWait:
          EXPECT_EQ(d.state, State::kOpen);
          EXPECT_TRUE(d.exists);
          break;
      }
    }
    EXPECT_EQ(plan.picks, picks);
    EXPECT_EQ(plan.write, changed);
    progress_ = plan.progress;
  }

  void complete_some(bool draining) {
    std::vector<Position> asked;
    for (Position p : progress_.in_flight)
      if (draining || chance(35)) asked.push_back(p);
    // Repeats and stale ones: a position already finished, one never claimed.
    if (!asked.empty() && chance(30)) asked.push_back(asked.front());
    if (chance(20)) asked.push_back(1 + static_cast<Position>(rng_() % size()));
    std::shuffle(asked.begin(), asked.end(), rng_);

    std::set<Position> expected;
    for (Position p : asked)
      if (d_[p].state == State::kInFlight) expected.insert(p);
    const ProgressUpdate u = complete_positions(progress_, asked);
    EXPECT_EQ(std::set<Position>(u.positions.begin(), u.positions.end()), expected);
    EXPECT_EQ(u.write, !expected.empty());
    for (Position p : u.positions) finish(p, State::kCompleted);
    progress_ = u.progress;
  }

  void fail_one() {
    if (progress_.in_flight.empty()) return;
    auto it = progress_.in_flight.begin();
    std::advance(it, rng_() % progress_.in_flight.size());
    const Position p = *it;
    const ProgressUpdate u = finish_positions(progress_, {p});
    ASSERT_EQ(u.positions, std::vector<Position>{p});
    except(p, chance(30), now_ + static_cast<std::int64_t>(rng_() % 100));
    progress_ = u.progress;
  }

  void take_over() {
    RetryPolicy policy;
    policy.max_attempts = chance(50) ? 1 : 25;
    const PositionsTakeover t = takeover_of_positions(progress_, policy, now_);
    std::vector<Position> charged;
    for (const auto& c : t.charged) {
      charged.push_back(c.position);
      EXPECT_EQ(c.dead, policy.max_attempts == 1);
      EXPECT_EQ(c.available_at_us, now_);
      except(c.position, c.dead, c.available_at_us);
    }
    EXPECT_EQ(charged,
              std::vector<Position>(progress_.in_flight.begin(), progress_.in_flight.end()));
    EXPECT_TRUE(t.progress.in_flight.empty());
    if (!charged.empty()) ++takeovers_charging;
    progress_ = t.progress;
  }

  // The lane's progress says exactly what the model says, and keeps its bounds.
  void check(const LaneProgress& p) {
    EXPECT_GE(p.acked_upto, last_acked_) << "the cursor went back";
    last_acked_ = p.acked_upto;

    Position prefix = 0;
    while (prefix < size() && finished(d_[prefix + 1].state)) ++prefix;
    EXPECT_EQ(p.acked_upto, prefix);

    std::vector<Position> done(p.done.begin(), p.done.end());
    EXPECT_TRUE(std::is_sorted(done.begin(), done.end()));
    EXPECT_EQ(std::adjacent_find(done.begin(), done.end()), done.end());
    std::set<Position> model_done, model_in_flight;
    std::map<std::string, int> keys_in_flight;
    for (Position q = p.acked_upto + 1; q <= size(); ++q) {
      if (finished(d_[q].state)) model_done.insert(q);
      if (d_[q].state == State::kInFlight) {
        model_in_flight.insert(q);
        if (d_[q].key) {
          EXPECT_EQ(++keys_in_flight[*d_[q].key], 1) << "two of a key in flight";
        }
      }
    }
    EXPECT_EQ(std::set<Position>(done.begin(), done.end()), model_done);
    EXPECT_EQ(std::set<Position>(p.in_flight.begin(), p.in_flight.end()), model_in_flight);
    for (Position d : done) {
      EXPECT_GT(d, p.acked_upto);
      EXPECT_LE(d, p.acked_upto + kPositionWindow);
      EXPECT_LE(d, tail_);
    }
    for (Position f : p.in_flight) {
      EXPECT_GT(f, p.acked_upto);
      EXPECT_LE(f, p.acked_upto + kPositionWindow);
    }
    EXPECT_LE(p.in_flight.size(), static_cast<std::size_t>(kMaxInFlightPerLane));

    bool work = false, idle = p.in_flight.empty();
    for (Position q = p.acked_upto + 1; q <= tail_; ++q) {
      if (!finished(d_[q].state)) idle = false;
      if (q <= p.acked_upto + kPositionWindow && d_[q].state == State::kOpen) work = true;
    }
    EXPECT_EQ(lane_has_work(p, tail_), work);
    EXPECT_EQ(lane_idle(p, tail_), idle);
  }

  std::mt19937 rng_;
  std::vector<Delivery> d_;  // by position; 0 unused
  std::vector<ExceptionRow> rows_;
  std::map<std::string, Position> last_pick_of_key_;
  LaneProgress progress_;
  Position tail_ = 0;
  Position last_acked_ = 0;
  std::int64_t now_ = 1000;
};

TEST(PositionsModelTest, ALaneDrivenAtRandomKeepsEveryRuleAndFinishesEachPositionOnce) {
  std::map<WindowAction, int> actions;
  int exceptions = 0, takeovers = 0;
  for (unsigned seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    LaneModel lane(seed, 200);
    for (int step = 0; step < 400 && !::testing::Test::HasFailure(); ++step) lane.step(false);
    for (int drain = 0; drain < 2000 && !lane.drained() && !::testing::Test::HasFailure(); ++drain)
      lane.step(true);
    ASSERT_TRUE(lane.drained()) << "the lane never finished its positions";
    lane.check_end();
    if (::testing::Test::HasFailure()) return;
    for (const auto& [action, n] : lane.actions) actions[action] += n;
    exceptions += lane.exceptions_total;
    takeovers += lane.takeovers_charging;
  }
  // The runs exercised every decision, not only the happy path.
  for (WindowAction a : {PICK, SKIP, ABSENT, DEFER, PARK, WAIT}) EXPECT_GT(actions[a], 100) << a;
  EXPECT_GT(exceptions, 400);
  EXPECT_GT(takeovers, 20);
  std::cout << "[ model    ] picks " << actions[PICK] << ", skips " << actions[SKIP] << ", absent "
            << actions[ABSENT] << ", deferred " << actions[DEFER] << ", parked " << actions[PARK]
            << ", waits " << actions[WAIT] << ", exception rows " << exceptions
            << ", takeovers that charged " << takeovers << "\n";
}

}  // namespace
}  // namespace relaybus::core
