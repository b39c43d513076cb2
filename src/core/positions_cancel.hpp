// cancel of a window position (relaybus.cancel through relaybus_internal.finish_position):
// a delivery that no attempt runs and that the cursor has not passed is finished as it is,
// never to run; a later position of its key no longer waits for it. One in flight is
// refused (its attempt is running, core::cancel_verdict); one already finished (completed,
// or moved to an exception row, which cancel removes instead) has nothing left to finish.
#pragma once

#include "positions.hpp"
#include "positions_fence.hpp"

namespace relaybus::core {

// The finish of `position` in `lane` (read under its lock), whose delivery row exists or not
// (`delivery_exists`: a position with no delivery yet may still be written by a publish, and
// finishing it would skip that delivery). update.write false: nothing to finish, nothing
// written.
ProgressUpdate finish_unclaimed_position(const PositionLane& lane, Position position,
                                         bool delivery_exists);

}  // namespace relaybus::core
