// fail, bury and release over positions: what an attempt that ends without completing
// writes, for a window pick and for a retry. The outcome itself (retry after the backoff or
// at retry_at, dead at the budget, bury, release uncharged) is core::end_attempt's
// (attempt_end.hpp), judged over the fence of positions_fence.hpp; this adds where it goes.
//
// A window pick has no exception row and was never charged (a charged attempt always moves
// a delivery to an exception row): it gets one, with claims 1, and its position is finished
// (finish_positions), so the cursor can pass it and the window picks it never again. A
// released one included: picked again from the window under the same epoch, it would get
// the same token as the attempt just released. A retry's exception row is updated, its claims
// counter moved, and its position leaves `retrying`. Either way the token that ended the
// attempt no longer holds: it names claims the row no longer has.
#pragma once

#include <cstdint>
#include <optional>

#include "attempt_end.hpp"
#include "lease_token.hpp"
#include "positions_fence.hpp"
#include "retry_policy.hpp"

namespace relaybus::core {

// The exception row's available_at after the end.
enum class DueAt {
  // As it was: the delivery row's for a window pick, the exception row's for a retry.
  // Released (it was due when claimed, so it is due at once) and dead.
  kUnchanged,
  kRetryAt,     // fail's own retry time
  kAfterDelay,  // now plus end.delay_us (the backoff)
};

struct PositionAttemptEnd {
  AttemptEnd end;  // end.result kLost: nothing is written, the lane row included
  // kWindow: the store inserts the exception row (event id, key and created_at of the
  // delivery row); kRetry: it updates the existing one.
  Listed listed = Listed::kNowhere;
  std::int32_t claims = 0;   // the exception row's claims counter afterwards
  std::int32_t charged = 0;  // attempts this end charged (0 or 1): the store's counters
  DueAt due = DueAt::kUnchanged;
  PositionLane lane;  // the lane row afterwards
};

// The end of the attempt `token` names, against its lane row as read under the lane's lock
// (nullopt: no row of its lane with its epoch), whether its delivery row exists (a window
// pick without one has nothing to end), its exception row (nullopt: none) and its handler's
// policy. `retry_at_given`: fail was passed its own retry time.
PositionAttemptEnd end_position_attempt(Ending ending, const PositionToken& token,
                                        const std::optional<PositionLane>& lane,
                                        bool delivery_found,
                                        const std::optional<ExceptionView>& exception,
                                        const RetryPolicy& policy, bool retry_at_given);

}  // namespace relaybus::core
