// complete and complete_many over positions: which tokens of one lane take effect, and the
// lane row they leave. A window pick completes through complete_positions (the cursor moves
// over every contiguous finished position); a retry completes by its exception row being
// deleted and its position leaving `retrying` (the cursor passed it long ago). A token that
// does not hold (positions_fence.hpp) completes nothing, so a repeated or stale completion
// leaves the lane row alone: no write, no new row version.
//
// The store locks the lane, reads the exception rows of the positions retries_to_read names,
// calls complete_lane, then deletes the exception rows of `retries` and writes the lane when
// `write` says so.
#pragma once

#include <boost/container/flat_map.hpp>

#include <cstddef>
#include <vector>

#include "lease_token.hpp"
#include "positions.hpp"
#include "positions_fence.hpp"

namespace relaybus::core {

using ExceptionRows = boost::container::flat_map<Position, ExceptionView>;

// The positions of `tokens` the lane lists as retries: their exception rows decide whether
// the tokens hold. Ascending, each once.
std::vector<Position> retries_to_read(const PositionLane& lane,
                                      const std::vector<PositionToken>& tokens);

struct LaneCompletion {
  std::vector<Position> completed;  // window picks that completed, ascending, each once
  std::vector<Position> retries;    // retries that completed (their exception rows go)
  PositionLane lane;                // the lane afterwards
  // false: nothing took effect; the store writes neither the lane row nor an exception row.
  bool write = false;
  std::size_t count() const noexcept { return completed.size() + retries.size(); }
};

// The completion of `tokens` (all of this lane; any order, repeats allowed) against `lane`
// as read under its lock. `exceptions`: the rows read for retries_to_read, by position (a
// position without an entry has no row). A position completes once however many of its
// tokens are passed.
LaneCompletion complete_lane(const PositionLane& lane, const std::vector<PositionToken>& tokens,
                             const ExceptionRows& exceptions);

}  // namespace relaybus::core
