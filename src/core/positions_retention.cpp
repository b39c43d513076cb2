#include "positions_retention.hpp"

namespace relaybus::core {

ProgressUpdate retire_expired_positions(const PositionLane& lane,
                                        const std::vector<RetentionEntry>& above_cursor) {
  ProgressUpdate update;
  update.progress = lane.progress;
  if (!lane.progress.in_flight.empty() || !lane.retrying.empty()) return update;
  Position through = lane.progress.acked_upto;
  for (const RetentionEntry& entry : above_cursor) {
    // Contiguous from the cursor: a gap is a position the scan did not read.
    if (entry.position != through + 1) break;
    // A position finished already (done) is passed whatever its age.
    if (!entry.expired && lane.progress.done.count(entry.position) == 0) break;
    through = entry.position;
  }
  if (through == lane.progress.acked_upto) return update;
  update.progress.acked_upto = through;
  // Normalized as every finish leaves a lane: done positions at or below the cursor
  // dropped, those right above it passed too.
  update.progress = finish_positions(update.progress, {}).progress;
  update.write = true;
  return update;
}

}  // namespace relaybus::core
