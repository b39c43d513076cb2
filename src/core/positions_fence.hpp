// The fence of a 0.3.0 token (src/core/positions.hpp, PositionToken): whether a token still
// holds the attempt it was handed out for, judged from its lane row and, for a retry, its
// exception row, as a store read them under the lane's lock. complete, complete_many, fail,
// bury and release all judge their tokens here; relinquish asks what a lane still runs.
//
// A lane's holder runs two kinds of attempts:
//   window pick  a position of the window, listed in `in_flight` and unfinished; it has no
//                exception row, so its token carries claims 0;
//   retry        the position of an exception row, listed in `retrying`; its token carries
//                the row's claims counter, which every attempt ending without completing
//                moves (fail, bury, release, a takeover's charge).
// A position is one or the other, never both: a window pick is unfinished, a position with
// an exception row is finished (the cursor passed it, or it sits in done).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "attempt_end.hpp"
#include "lease_token.hpp"
#include "positions.hpp"

namespace relaybus::core {

// A lane row as a store read it under its lock: the fence (epoch) and what its holder runs.
struct PositionLane {
  std::int64_t epoch = 0;
  LaneProgress progress;
  PositionSet retrying;  // positions of exception rows its holder runs
};

// Where a lane lists a position as run by its holder.
enum class Listed {
  kNowhere,
  kWindow,  // in in_flight, above the cursor and not in done
  kRetry,   // in retrying, and not a window pick
};

// A position listed in both lists (a row edited by hand) counts as a window pick while it is
// unfinished, and as a retry once finished: the progress decides, as everywhere in
// positions.hpp.
Listed listed_as(const PositionLane& lane, Position position) noexcept;

// How many attempts the lane's holder still runs: unfinished window picks plus retries.
// relinquish hands a lane back only when this is 0 (core::relinquishes).
std::size_t running_positions(const PositionLane& lane) noexcept;

// A position's exception row as the store read it.
struct ExceptionView {
  bool pending = false;  // status pending (a dead row runs nothing)
  std::int32_t claims = 0;
  std::int32_t attempts = 0;
};

// The FenceView (attempt_end.hpp) of `token`: its lane half from the lane row (nullopt: no
// row of the token's lane with its epoch), its delivery half from what the lane lists it as.
// A window pick is a pending delivery with claims 0 when its delivery row exists
// (`delivery_found`; without one there is nothing to end); a retry is its exception row
// (`exception`, nullopt when there is none).
FenceView position_fence(const PositionToken& token, const std::optional<PositionLane>& lane,
                         bool delivery_found, const std::optional<ExceptionView>& exception);

// The fence's rule (core::token_holds and lane_holds of attempt_end.hpp) for an r3 token: a
// takeover moves the lane's epoch, every attempt ending without completing moves the claims
// counter (a window pick's position leaves in_flight for an exception row with claims 1),
// so a token of an older attempt never changes a newer one.
bool token_holds(const PositionToken& token, const FenceView& fence) noexcept;
bool lane_holds(const PositionToken& token, const FenceView& fence) noexcept;

// The r3 token as the r1 fence sees it (lane, epoch, claims; no names): the rule reads only
// the epoch and the claims counter of either, so it is written once, in attempt_end.cpp.
LeaseToken fence_token(const PositionToken& token) noexcept;

}  // namespace relaybus::core
