#include "retry_policy.hpp"

#include "error.hpp"

#include <algorithm>
#include <limits>

namespace relaybus::core {

std::int64_t backoff_us(const RetryPolicy& policy, std::int32_t failed_attempts) {
  if (failed_attempts <= 0 || policy.backoff_base_us <= 0) return 0;
  std::int64_t delay = policy.backoff_base_us;
  // Doubling stops at the cap, so the loop is short and never overflows.
  for (std::int32_t i = 1; i < failed_attempts && delay < policy.backoff_max_us; ++i) {
    delay =
        delay > std::numeric_limits<std::int64_t>::max() / 2 ? policy.backoff_max_us : delay * 2;
  }
  return delay < policy.backoff_max_us ? delay : policy.backoff_max_us;
}

FailureOutcome after_failed_attempt(const RetryPolicy& policy, std::int32_t attempts_before) {
  FailureOutcome outcome;
  outcome.attempts = attempts_before < std::numeric_limits<std::int32_t>::max()
                         ? attempts_before + 1
                         : attempts_before;
  outcome.dead = outcome.attempts >= policy.max_attempts;
  outcome.delay_us = outcome.dead ? 0 : backoff_us(policy, outcome.attempts);
  return outcome;
}

FailureOutcome after_lost_attempt(const RetryPolicy& policy, std::int32_t attempts_before) {
  FailureOutcome outcome = after_failed_attempt(policy, attempts_before);
  outcome.delay_us = 0;
  return outcome;
}

void validate(const RetryPolicy& policy) {
  if (policy.max_attempts < 1)
    throw Error(ErrorCode::kInvalidParameter, "max_attempts must be at least 1");
  if (policy.backoff_base_us < 0)
    throw Error(ErrorCode::kInvalidParameter, "backoff_base must not be negative");
  if (policy.backoff_max_us < policy.backoff_base_us)
    throw Error(ErrorCode::kInvalidParameter, "backoff_max must not be less than backoff_base");
  if (policy.backoff_base_us > kMaxBackoffUs)
    throw Error(ErrorCode::kInvalidParameter, "backoff_base must be at most 365 days");
  if (policy.backoff_max_us > kMaxBackoffUs)
    throw Error(ErrorCode::kInvalidParameter, "backoff_max must be at most 365 days");
}

RetryPolicy clamped(RetryPolicy policy) noexcept {
  policy.max_attempts = std::max<std::int32_t>(policy.max_attempts, 1);
  policy.backoff_base_us = std::clamp<std::int64_t>(policy.backoff_base_us, 0, kMaxBackoffUs);
  policy.backoff_max_us =
      std::clamp<std::int64_t>(policy.backoff_max_us, policy.backoff_base_us, kMaxBackoffUs);
  return policy;
}

}  // namespace relaybus::core
