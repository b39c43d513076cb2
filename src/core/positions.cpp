#include "positions.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

#include "lane_lease.hpp"

namespace relaybus::core {

namespace {

constexpr Position kMaxPosition = std::numeric_limits<Position>::max();

// The last position of the window above `acked_upto`. Saturates: a cursor read near the
// top of the range (only a corrupt row has one) must not overflow.
Position window_end(Position acked_upto) noexcept {
  return acked_upto > kMaxPosition - kPositionWindow ? kMaxPosition : acked_upto + kPositionWindow;
}

// Moves the cursor over every contiguous finished position and drops what it passed, and
// takes finished positions off the in-flight list. Everything here ends with it.
void normalize(LaneProgress& p) {
  p.done.erase(p.done.begin(), p.done.upper_bound(p.acked_upto));
  auto next = p.done.begin();
  while (next != p.done.end() && p.acked_upto < kMaxPosition && *next == p.acked_upto + 1) {
    ++p.acked_upto;
    ++next;
  }
  p.done.erase(p.done.begin(), next);
  p.in_flight.erase(p.in_flight.begin(), p.in_flight.upper_bound(p.acked_upto));
  for (Position d : p.done) p.in_flight.erase(d);
}

// The positions of `positions` that `takes_effect` accepts, each once, finished: off the
// in-flight list, into done, the cursor moved. complete_positions and finish_positions
// differ only in what takes effect.
template <typename Accept>
ProgressUpdate finish_where(const LaneProgress& progress, const std::vector<Position>& positions,
                            Accept takes_effect) {
  ProgressUpdate update;
  update.progress = progress;
  normalize(update.progress);
  PositionSet asked(positions.begin(), positions.end());
  for (Position p : asked)
    if (takes_effect(update.progress, p)) update.positions.push_back(p);
  for (Position p : update.positions) {
    update.progress.in_flight.erase(p);
    update.progress.done.insert(p);
  }
  normalize(update.progress);
  update.write = !update.positions.empty();
  return update;
}

bool finishable(const LaneProgress& p, Position position) noexcept {
  return position > p.acked_upto && position <= window_end(p.acked_upto) &&
         p.done.count(position) == 0;
}

}  // namespace

bool operator==(const LaneProgress& a, const LaneProgress& b) noexcept {
  return a.acked_upto == b.acked_upto && a.done == b.done && a.in_flight == b.in_flight;
}

ProgressUpdate complete_positions(const LaneProgress& progress,
                                  const std::vector<Position>& positions) {
  return finish_where(progress, positions, [](const LaneProgress& p, Position position) {
    return p.in_flight.count(position) != 0;
  });
}

ProgressUpdate finish_positions(const LaneProgress& progress,
                                const std::vector<Position>& positions) {
  return finish_where(progress, positions, finishable);
}

LanePlan plan_lane(const LaneProgress& progress, const std::vector<WindowEntry>& window,
                   int batch_room, std::int64_t now_us, const KeySet& keys_with_pending_exceptions,
                   const KeySet& keys_already_in_batch) {
  LanePlan plan;
  plan.progress = progress;
  normalize(plan.progress);
  const Position cursor = plan.progress.acked_upto;
  const Position last = window_end(cursor);
  const PositionSet done = plan.progress.done;
  const PositionSet in_flight = plan.progress.in_flight;
  int room = std::max(0, std::min(batch_room, lane_room(in_flight.size())));

  // Ascending, whatever order the caller passed them in (a stable sort keeps the first of
  // a repeated position first).
  std::vector<std::size_t> order(window.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return window[a].position < window[b].position;
  });

  plan.actions.assign(window.size(), WindowAction::kWait);
  KeySet blocked = keys_already_in_batch;
  KeySet pending = keys_with_pending_exceptions;
  bool unknown_below = false;  // a position below this one was neither passed nor finished
  Position unseen = cursor;    // every position of the window <= it has been looked at
  std::optional<Position> previous;
  std::vector<Position> finished;

  for (std::size_t index : order) {
    const WindowEntry& entry = window[index];
    WindowAction& action = plan.actions[index];
    const Position position = entry.position;
    if (previous && *previous == position) {
      action = WindowAction::kSkip;
      continue;
    }
    previous = position;
    if (position <= cursor || done.count(position) != 0) {
      action = WindowAction::kSkip;
      continue;
    }
    if (position > last) {
      action = WindowAction::kWait;
      continue;
    }
    for (Position q = unseen + 1; q < position && !unknown_below; ++q)
      if (done.count(q) == 0) unknown_below = true;
    unseen = position;

    if (in_flight.count(position) != 0) {
      action = WindowAction::kSkip;
      if (entry.key) blocked.insert(*entry.key);
      continue;
    }
    if (!entry.exists) {
      action = WindowAction::kAbsent;
      finished.push_back(position);
      continue;
    }
    const bool due = entry.due_when_visible || entry.available_at_us <= now_us;
    if (entry.key) {
      const std::string& key = *entry.key;
      if (unknown_below || blocked.count(key) != 0) {
        action = WindowAction::kWait;
        blocked.insert(key);
        continue;
      }
      if (pending.count(key) != 0) {
        action = WindowAction::kPark;
        finished.push_back(position);
        continue;
      }
      if (!due) {
        action = WindowAction::kDefer;
        finished.push_back(position);
        pending.insert(key);
        continue;
      }
      blocked.insert(key);  // picked or left waiting, it is unfinished
    } else if (!due) {
      action = WindowAction::kDefer;
      finished.push_back(position);
      continue;
    }
    if (room > 0) {
      action = WindowAction::kPick;
      --room;
      ++plan.picks;
      plan.progress.in_flight.insert(position);
    } else {
      action = WindowAction::kWait;
    }
  }

  for (Position p : finished) plan.progress.done.insert(p);
  normalize(plan.progress);
  plan.write = plan.picks > 0 || !finished.empty();
  return plan;
}

bool lane_has_work(const LaneProgress& progress, Position tail) noexcept {
  const Position last = std::min(tail, window_end(progress.acked_upto));
  for (Position p = progress.acked_upto; p < last;) {
    ++p;
    if (progress.done.count(p) == 0 && progress.in_flight.count(p) == 0) return true;
  }
  return false;
}

Position last_finished(const LaneProgress& progress) noexcept {
  return progress.done.empty() ? progress.acked_upto
                               : std::max(progress.acked_upto, *progress.done.rbegin());
}

bool lane_idle(const LaneProgress& progress, Position tail) noexcept {
  const Position acked = progress.acked_upto;
  const bool runs_something =
      std::any_of(progress.in_flight.begin(), progress.in_flight.end(),
                  [&](Position p) { return p > acked && progress.done.count(p) == 0; });
  if (runs_something) return false;
  if (tail <= acked) return true;
  // Every position in (acked, tail] is in done (done holds each once).
  const auto first = progress.done.upper_bound(acked);
  const auto end = progress.done.upper_bound(tail);
  return static_cast<std::uint64_t>(end - first) ==
         static_cast<std::uint64_t>(tail) - static_cast<std::uint64_t>(acked);
}

PositionsTakeover takeover_of_positions(const LaneProgress& progress, const RetryPolicy& policy,
                                        std::int64_t now_us) {
  PositionsTakeover takeover;
  takeover.progress = progress;
  normalize(takeover.progress);
  const RetryPolicy rule = clamped(policy);
  std::vector<Position> lost(takeover.progress.in_flight.begin(),
                             takeover.progress.in_flight.end());
  for (Position position : lost) {
    const FailureOutcome outcome = after_lost_attempt(rule, 0);
    LostPosition charged;
    charged.position = position;
    charged.attempts = outcome.attempts;
    charged.dead = outcome.dead;
    charged.available_at_us = now_us + outcome.delay_us;
    takeover.charged.push_back(charged);
    takeover.progress.done.insert(position);
  }
  takeover.progress.in_flight.clear();
  normalize(takeover.progress);
  takeover.write = !lost.empty();
  return takeover;
}

}  // namespace relaybus::core
