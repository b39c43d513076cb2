// Retention of a handler that is no longer subscribed (purge_expired): its deliveries
// published more than relaybus.retention_dead ago are finished, as 0.2 deleted them, so
// that their events can go too and nothing of the handler outlives its retention. A
// finish moves the lane's cursor; the positions it passes are never run. Subscribing the
// handler again before then resumes them.
#pragma once

#include <vector>

#include "positions.hpp"
#include "positions_fence.hpp"

namespace relaybus::core {

// A position above a lane's cursor as the store read it, ascending from the cursor.
struct RetentionEntry {
  Position position = 0;
  bool expired = false;  // published before the retention's cutoff
};

// The finish of the lane's expired positions: from the cursor up to the first position that
// is not expired (positions are in commit order, so a later one that is expired waits for
// it), or that the scan did not reach. Nothing while the lane runs anything (an in-flight or
// retrying position: its attempt would end on a finished position), nor where the scan
// does not start right above the cursor. update.write false: nothing written.
ProgressUpdate retire_expired_positions(const PositionLane& lane,
                                        const std::vector<RetentionEntry>& above_cursor);

}  // namespace relaybus::core
