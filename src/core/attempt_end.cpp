#include "attempt_end.hpp"

namespace relaybus::core {

bool lane_holds(const LeaseToken& token, const FenceView& fence) noexcept {
  return fence.lane_found && fence.lane_epoch == token.epoch && fence.listed_in_flight;
}

bool token_holds(const LeaseToken& token, const FenceView& fence) noexcept {
  return lane_holds(token, fence) && fence.delivery_found && fence.delivery_pending &&
         fence.delivery_claims == token.claims;
}

AttemptEnd end_attempt(Ending ending, const LeaseToken& token, const FenceView& fence,
                       const RetryPolicy& policy, std::int32_t attempts_before,
                       bool retry_at_given) noexcept {
  AttemptEnd end;
  if (!token_holds(token, fence)) return end;  // kLost
  end.attempts = attempts_before;
  if (ending == Ending::kRelease) {
    end.result = AttemptResult::kReleased;
    return end;
  }
  const FailureOutcome outcome = after_failed_attempt(clamped(policy), attempts_before);
  end.attempts = outcome.attempts;
  end.dead = outcome.dead || ending == Ending::kBury;
  end.result = end.dead ? AttemptResult::kDead : AttemptResult::kRetry;
  if (!end.dead && !retry_at_given) {
    end.delay_us = outcome.delay_us;
    end.use_delay = true;
  }
  return end;
}

bool relinquish_covers(bool lane_has_holder, bool same_holder, bool caller_has_holder) noexcept {
  return caller_has_holder ? lane_has_holder && same_holder : !lane_has_holder;
}

bool relinquishes(std::size_t live_in_flight) noexcept {
  return live_in_flight == 0;
}

bool requeues(bool dead) noexcept {
  return dead;
}

CancelVerdict cancel_verdict(bool dead, bool in_flight) noexcept {
  return !dead && in_flight ? CancelVerdict::kInFlight : CancelVerdict::kCancel;
}

}  // namespace relaybus::core
