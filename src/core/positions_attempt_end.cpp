#include "positions_attempt_end.hpp"

#include <limits>

namespace relaybus::core {

PositionAttemptEnd end_position_attempt(Ending ending, const PositionToken& token,
                                        const std::optional<PositionLane>& lane,
                                        bool delivery_found,
                                        const std::optional<ExceptionView>& exception,
                                        const RetryPolicy& policy, bool retry_at_given) {
  PositionAttemptEnd out;
  const FenceView fence = position_fence(token, lane, delivery_found, exception);
  const Listed listed = lane ? listed_as(*lane, token.position) : Listed::kNowhere;
  // A window pick starts from 0 attempts: it has never been charged.
  const std::int32_t attempts_before =
      listed == Listed::kRetry && exception ? exception->attempts : 0;
  out.end = end_attempt(ending, fence_token(token), fence, policy, attempts_before, retry_at_given);
  if (out.end.result == AttemptResult::kLost) return out;

  out.listed = listed;
  out.charged = out.end.attempts - attempts_before;
  out.lane = *lane;
  if (listed == Listed::kWindow) {
    out.claims = 1;
    out.lane.progress = finish_positions(lane->progress, {token.position}).progress;
    // Only a row edited by hand lists a position in flight beyond the window, which
    // finish_positions leaves alone; its attempt has ended all the same.
    out.lane.progress.in_flight.erase(token.position);
  } else {
    // Saturated: a counter at its top stays there rather than wrapping to a value an old
    // token could carry (unreachable in practice: one claim per attempt).
    out.claims =
        token.claims < std::numeric_limits<std::int32_t>::max() ? token.claims + 1 : token.claims;
    out.lane.retrying.erase(token.position);
  }
  if (out.end.result == AttemptResult::kRetry)
    out.due = out.end.use_delay ? DueAt::kAfterDelay : DueAt::kRetryAt;
  return out;
}

}  // namespace relaybus::core
