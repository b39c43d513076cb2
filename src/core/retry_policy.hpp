// What happens to a delivery when an attempt ends without completing: charged one attempt,
// then retried after an exponential backoff or dead-lettered once the budget is spent.
// Every store applies this one rule (fail, bury, lane takeover).
#pragma once

#include <cstdint>

namespace relaybus::core {

// Longest backoff_base and backoff_max: a year of 365 days. With it, now() + any backoff
// stays far inside the timestamp range. One source: scripts/build-sql writes it into the
// 0.2.0 scripts as @BACKOFF_LIMIT@ (as interval text, '365 days': subscribe's comment).
inline constexpr std::int64_t kMaxBackoffUs = 365LL * 24 * 3600 * 1'000'000;

// The default policy (RetryPolicy{}: subscribe's defaults, and the policy of a delivery
// whose handler is not subscribed). One source: scripts/build-sql writes them into the
// 0.2.0 scripts as @RETRY_MAX_ATTEMPTS@, @RETRY_BACKOFF_BASE@ and @RETRY_BACKOFF_MAX@ (the
// backoffs as interval text, '1 second' and '1 hour'): the DEFAULTs of the subscriptions
// columns and of subscribe's arguments. The 0.1.0 baseline spells them out too; its
// subscriptions DEFAULTs survive the upgrade, so test/unit/sql_constants_test.cpp fails
// when they differ from these and the upgrade does not set them again.
inline constexpr std::int32_t kDefaultMaxAttempts = 25;
inline constexpr std::int64_t kDefaultBackoffBaseUs = 1'000'000;     // 1 second
inline constexpr std::int64_t kDefaultBackoffMaxUs = 3'600'000'000;  // 1 hour

struct RetryPolicy {
  std::int32_t max_attempts = kDefaultMaxAttempts;
  std::int64_t backoff_base_us = kDefaultBackoffBaseUs;
  std::int64_t backoff_max_us = kDefaultBackoffMaxUs;
};

struct FailureOutcome {
  bool dead = false;
  std::int32_t attempts = 0;  // the delivery's attempt count after this failure
  std::int64_t delay_us = 0;  // when not dead: wait this long before the next attempt
};

// attempts_before: the attempts already charged. The failed attempt is charged here.
FailureOutcome after_failed_attempt(const RetryPolicy& policy, std::int32_t attempts_before);

// A delivery that was in flight in a lane taken over (its holder's lease expired, or its
// incarnation is gone): the attempt was lost, so it is charged like a failure and
// dead-lettered at max_attempts, but with no backoff. Nothing says the delivery was at
// fault (most takeovers follow a crash of its worker), so it stays due and the next claim
// runs it at once; a poison delivery that crashes every worker still ends dead after
// max_attempts takeovers.
FailureOutcome after_lost_attempt(const RetryPolicy& policy, std::int32_t attempts_before);

// Backoff before attempt n+1 after n failed attempts: base * 2^(n-1), capped at max.
std::int64_t backoff_us(const RetryPolicy& policy, std::int32_t failed_attempts);

// Rejects a policy no store should accept (non-positive budget, negative intervals,
// backoff_max below backoff_base, either above kMaxBackoffUs); throws core::Error 22023.
void validate(const RetryPolicy& policy);

// A policy read back from storage, brought into the bounds validate() enforces (budget at
// least 1, 0 <= base <= max <= kMaxBackoffUs): a row edited by hand or written by an older
// version must never make fail or a takeover raise.
RetryPolicy clamped(RetryPolicy policy) noexcept;

}  // namespace relaybus::core
