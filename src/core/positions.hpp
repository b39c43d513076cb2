// Positions and cursors: how a lane acknowledges its deliveries without a write per
// delivery. Every (handler, lane) numbers its deliveries 1, 2, 3, ... in commit order, and
// its lane row holds how far it got: a cursor, the positions finished above it out of
// order, and the positions its holder runs. A completion rewrites that row (a HOT update of
// one small row) instead of deleting the delivery; a delivery that cannot finish on the
// happy path (a failure, a delivery not yet due, a key blocked by an earlier failure) moves
// to an exception row of its own, which the cursor passes.
//
// These are the decisions over that state, as pure functions of values a store read; the
// store reads the lane row and the positions of the window, calls them, and writes what
// they return. No rule here has a copy in SQL.
//
// Words used throughout:
//   finished  completed, or handed over to an exception row, or absent (its position was
//             committed but holds no delivery: rolled back with a subtransaction, or never
//             written). A finished position never runs from the window again.
//   window    (acked_upto, acked_upto + kPositionWindow]: the only positions a claim looks
//             at, so `done` never holds more than kPositionWindow positions and the lane row
//             stays small enough for its updates to stay on its page.
//   tail      the highest position committed in the lane, as the store read it; nothing
//             above it exists yet and nothing here touches it.
#pragma once

#include <boost/container/flat_set.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "retry_policy.hpp"

namespace relaybus::core {

using Position = std::int64_t;
using PositionSet = boost::container::flat_set<Position>;
using KeySet = boost::container::flat_set<std::string>;

// How far above its cursor a lane's claim reaches. Twice kMaxInFlightPerLane, so that a
// lane whose lowest in-flight delivery is slow can still fill its in-flight list from the
// positions behind it; bounded, because `done` holds every finished position of the window
// and lives in the lane row.
inline constexpr int kPositionWindow = 64;

// A lane row's progress. Every function here returns it normalized: `done` all above
// acked_upto and none equal to acked_upto + 1 (the cursor has moved over every contiguous
// finished position); `in_flight` all above acked_upto and disjoint from `done`. Inputs
// need not be: a row written by hand or by an older version is brought into shape, never
// refused, and a position both finished and in flight counts as finished (it must never
// run, or be charged, again).
struct LaneProgress {
  Position acked_upto = 0;  // every position <= it is finished
  PositionSet done;         // finished positions above acked_upto (out of order)
  PositionSet in_flight;    // claimed by the lane's holder, not finished; at most
                            // kMaxInFlightPerLane
};

bool operator==(const LaneProgress& a, const LaneProgress& b) noexcept;
inline bool operator!=(const LaneProgress& a, const LaneProgress& b) noexcept {
  return !(a == b);
}

// What a completion or a finish did to a lane.
struct ProgressUpdate {
  std::vector<Position> positions;  // the ones that took effect, ascending, each once
  LaneProgress progress;            // the lane's progress afterwards
  // false: nothing took effect; the store leaves the lane row alone (no WAL, no dead tuple).
  bool write = false;
};

// complete / complete_many: of `positions` (any order, repeats allowed), those in flight
// complete; they leave `in_flight` and are finished. A position not in flight completes
// nothing: a repeated completion, or a stale one whose position was finished meanwhile (a
// takeover handed it to an exception row). The fence (the token's epoch) is the caller's;
// this is what a completion that passed it does to the row.
ProgressUpdate complete_positions(const LaneProgress& progress,
                                  const std::vector<Position>& positions);

// The same arithmetic for positions finished without completing: moved to an exception row
// (fail, bury, a takeover's charge, DEFER, PARK) or absent. Any position of the window not
// yet finished may be finished, in flight or not; one below the cursor, already in `done`,
// or above the window is ignored (nothing legitimate finishes beyond the window, and
// accepting it would let `done` outgrow it). It cannot tell a stale fail from a live one:
// a fail checks that its position is in flight (and its fence) first.
ProgressUpdate finish_positions(const LaneProgress& progress,
                                const std::vector<Position>& positions);

// A position of the window as the store read it.
struct WindowEntry {
  Position position = 0;
  bool exists = true;                // false: no delivery at this position (ABSENT)
  std::optional<std::string> key;    // nullopt: unordered delivery
  std::int64_t available_at_us = 0;  // due when <= now
  // Published without a delay: its available_at is its publisher's transaction start, so
  // it is due as soon as a claim can see it, even when the claim's clock (its own
  // transaction start) is earlier than the publisher's. Judged by the clock instead, a
  // delivery committed while a claim ran would move to an exception row (DEFER) and wait
  // for a later claim: a write and a delay for a delivery that was never delayed.
  bool due_when_visible = false;
};

// What a claim does with one position of the window.
enum class WindowAction {
  kPick,    // claim it now: it joins in_flight and the batch
  kSkip,    // in flight or already finished (at or below the cursor, or in done): nothing
  kAbsent,  // no delivery: finished as it is
  kDefer,   // not due: moved to an exception row, due at its available_at; finished
  kPark,    // keyed, and its key has a pending exception row: moved to an exception row of
            // its own behind it, due at its available_at; finished
  kWait,    // left for a later claim, unfinished: keyed and blocked (see plan_lane), or no
            // room left, or outside the window
};

struct LanePlan {
  std::vector<WindowAction> actions;  // one per entry passed, in the order passed
  LaneProgress progress;              // in_flight + picks; ABSENT, DEFER, PARK finished
  int picks = 0;
  // false: the plan changed nothing (every entry SKIP or WAIT); the lane's positions need
  // no write. Whether the lane row is written for its lease is plan_lane_write's decision.
  bool write = false;
};

// The claim's decision for one lane. `window`: the positions of the window up to the tail,
// ascending, each once (in another order they are still decided ascending, a repeat once). Finished
// positions may be left out; every other position of the window up to the last one passed must be
// there: an absent one with exists = false, an in-flight one with its key (its key blocks the later
// ones of its key). Positions above the tail are not passed and stay untouched.
//
// Positions are decided in ascending order, each by the first rule that applies:
//  1. at or below the cursor, in done or in flight: SKIP. In flight, its key blocks the
//     later positions of its key. A position passed twice is SKIPped the second time.
//  2. above the window: WAIT (untouched).
//  3. not exists: ABSENT.
//  4. keyed and blocked: WAIT, and its key stays blocked. A key is blocked by an earlier
//     position of the key that is unfinished (in flight, or left to WAIT, or picked in this
//     plan), by being in `keys_already_in_batch` (at most one delivery of a key per batch;
//     the set spans every lane of the batch and the exception rows it claimed: the caller
//     adds the keys this plan picked before it plans the next lane), and every key is
//     blocked once a position of the window below this one was neither passed nor finished
//     (its key is unknown, so it may be this one's). Blocked comes before PARK: a position
//     only moves to an exception row when nothing earlier of its key is left in the window,
//     so the exception rows of a key stay ahead of its unfinished window positions.
//  5. keyed, and its key has a pending exception row (`keys_with_pending_exceptions`, or
//     DEFERred earlier in this plan): PARK. Dead exception rows block nothing; the caller
//     leaves their keys out.
//  6. not due (available_at > now, and not due_when_visible): DEFER; a keyed one adds its key to
//  the pending
//     exception keys for the later positions of this plan.
//  7. room left: PICK; a keyed one blocks its key for the rest of the plan.
//  8. otherwise: WAIT (and a keyed one blocks its key, as in 4).
// Room: at most min(batch_room, lane_room(in_flight)) picks, never below 0. Room bounds
// picks only: ABSENT, DEFER and PARK add nothing to in_flight or the batch, and finishing
// them is what lets the window move on when a lane is full of undue or blocked deliveries.
LanePlan plan_lane(const LaneProgress& progress, const std::vector<WindowEntry>& window,
                   int batch_room, std::int64_t now_us, const KeySet& keys_with_pending_exceptions,
                   const KeySet& keys_already_in_batch);

// Whether a claim has something to decide in the lane's window: a position up to the tail
// and inside the window that is neither finished nor in flight (to pick, or to finish as
// absent, deferred or parked; a blocked one counts too). In-flight positions are unfinished
// but only their holder's completion moves them, so a lane whose window holds nothing else
// has no work even when the tail lies beyond the window. Exception rows are work of their
// own and are not counted here.
bool lane_has_work(const LaneProgress& progress, Position tail) noexcept;

// Whether the lane runs nothing and every position up to the tail is finished: a claim
// hands it back (as plan_lane_write hands back a lane that runs nothing). Positions only;
// the caller adds what it knows of the lane's exception rows.
bool lane_idle(const LaneProgress& progress, Position tail) noexcept;

// The lane's highest finished position (the cursor, or above it the highest in done); 0:
// none. For a lane with nothing running and nothing left (lane_idle), its last delivery.
Position last_finished(const LaneProgress& progress) noexcept;

// An in-flight position charged by a takeover: the store writes it as an exception row.
struct LostPosition {
  Position position = 0;
  std::int32_t attempts = 0;  // after the charge
  bool dead = false;          // the budget is spent: a dead exception row
  std::int64_t available_at_us = 0;
};

struct PositionsTakeover {
  std::vector<LostPosition> charged;  // ascending by position
  LaneProgress progress;              // in_flight empty, the charged positions finished
  bool write = false;                 // false: nothing was in flight
};

// A takeover of a lane (expired lease, orphaned incarnation): each in-flight position lost
// its attempt and is charged one (after_lost_attempt under `policy`, clamped: no backoff,
// dead at max_attempts), and moves to an exception row, available at now_us plus the rule's
// delay. A position in the window has never been charged: a charged attempt always moves a
// delivery to an exception row, so the charge starts from 0 attempts. Moving them out of
// the window (instead of leaving them to be picked again) keeps the charge with the
// delivery, and a pending exception row still holds back the later positions of its key.
PositionsTakeover takeover_of_positions(const LaneProgress& progress, const RetryPolicy& policy,
                                        std::int64_t now_us);

}  // namespace relaybus::core
