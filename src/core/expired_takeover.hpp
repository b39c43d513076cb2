// The maintenance takeover: lanes whose lease expired and that no claim has taken, taken
// over so that what was in flight on them is charged (a crashed worker's deliveries reach
// their budget and the dead-letter queue even when nobody claims their lanes again). The
// PostgreSQL extension's background worker runs it as take_over_expired(); a store without
// a background worker runs it when an operator does (`relaybus maintain`).
//
// The steps, as run_claim takes over a lane, but picking nothing:
//   kLocks (the lanes are locked by the caller): charge every in-flight delivery one lost
//     attempt, then hand the lanes back at a new epoch (plan_lane_write, kExpired).
//   kConditionalWrites: hand the lanes back at a new epoch, each write conditional on the
//     lane as read, recording its in-flight deliveries (and a lost list left behind) as
//     lost; then charge the lost lists of the lanes whose write took effect, and clear them.
//     A lane whose write failed changed hands meanwhile: its new holder charges.
#pragma once

#include <vector>

#include "claim_protocol.hpp"

namespace relaybus::core {

// Takes over `expired` (lanes core::due_for_takeover chose, as read; ClaimStore::write_lanes
// conditional on that read in kConditionalWrites mode). Returns how many were taken over.
int take_over_expired_lanes(ClaimStore& store, const std::vector<LaneSnapshot>& expired);

}  // namespace relaybus::core
