#include "positions_cancel.hpp"

namespace relaybus::core {

ProgressUpdate finish_unclaimed_position(const PositionLane& lane, Position position,
                                         bool delivery_exists) {
  if (!delivery_exists || listed_as(lane, position) == Listed::kWindow)
    return finish_positions(lane.progress, {});  // takes nothing: write false
  // Below the cursor, in done or beyond the window: finish_positions takes nothing.
  return finish_positions(lane.progress, {position});
}

}  // namespace relaybus::core
