// The retry rule every store applies when an attempt ends without completing.
#include "core/retry_policy.hpp"

#include "expect_core_error.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace relaybus::core {
namespace {

using testing::ThrowsInvalidParameter;

constexpr std::int64_t kSecond = 1'000'000;
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int32_t kInt32Max = std::numeric_limits<std::int32_t>::max();

RetryPolicy Policy(std::int32_t max_attempts, std::int64_t base_us, std::int64_t max_us) {
  RetryPolicy p;
  p.max_attempts = max_attempts;
  p.backoff_base_us = base_us;
  p.backoff_max_us = max_us;
  return p;
}

TEST(RetryPolicyTest, DefaultsAreValid) {
  const RetryPolicy p;
  EXPECT_EQ(p.max_attempts, 25);
  EXPECT_EQ(p.backoff_base_us, 1 * kSecond);
  EXPECT_EQ(p.backoff_max_us, 3600 * kSecond);
  EXPECT_NO_THROW(validate(p));
}

TEST(RetryPolicyTest, ChargesExactlyOneAttempt) {
  const RetryPolicy p = Policy(100, kSecond, 3600 * kSecond);
  for (std::int32_t before = 0; before < 99; ++before)
    EXPECT_EQ(after_failed_attempt(p, before).attempts, before + 1) << "before " << before;
}

TEST(RetryPolicyTest, DeadExactlyWhenAttemptsReachTheBudget) {
  const RetryPolicy p = Policy(5, kSecond, 3600 * kSecond);
  for (std::int32_t before = 0; before < 4; ++before) {
    const FailureOutcome o = after_failed_attempt(p, before);
    EXPECT_FALSE(o.dead) << "attempts after failure: " << o.attempts;
    EXPECT_GT(o.delay_us, 0) << "a retried delivery waits with a positive base";
  }
  const FailureOutcome last = after_failed_attempt(p, 4);
  EXPECT_TRUE(last.dead);
  EXPECT_EQ(last.attempts, 5);
}

TEST(RetryPolicyTest, SingleAttemptBudgetDeadLettersTheFirstFailure) {
  const FailureOutcome o = after_failed_attempt(Policy(1, kSecond, kSecond), 0);
  EXPECT_TRUE(o.dead);
  EXPECT_EQ(o.attempts, 1);
}

TEST(RetryPolicyTest, AlreadyOverBudgetIsDead) {
  // A handler's budget may be lowered while deliveries have already used more.
  const RetryPolicy p = Policy(3, kSecond, 3600 * kSecond);
  for (std::int32_t before : {3, 4, 10, 1000}) {
    const FailureOutcome o = after_failed_attempt(p, before);
    EXPECT_TRUE(o.dead) << "before " << before;
    EXPECT_EQ(o.attempts, before + 1);
  }
}

TEST(RetryPolicyTest, AttemptCountDoesNotOverflow) {
  const FailureOutcome o =
      after_failed_attempt(Policy(kInt32Max, kSecond, 3600 * kSecond), kInt32Max);
  EXPECT_TRUE(o.dead);
  EXPECT_EQ(o.attempts, kInt32Max);  // saturates instead of wrapping negative

  const FailureOutcome almost =
      after_failed_attempt(Policy(kInt32Max, kSecond, 3600 * kSecond), kInt32Max - 1);
  EXPECT_TRUE(almost.dead);
  EXPECT_EQ(almost.attempts, kInt32Max);

  const FailureOutcome before_last =
      after_failed_attempt(Policy(kInt32Max, kSecond, 3600 * kSecond), kInt32Max - 2);
  EXPECT_FALSE(before_last.dead);
  EXPECT_EQ(before_last.attempts, kInt32Max - 1);
  EXPECT_EQ(before_last.delay_us, 3600 * kSecond);
}

TEST(RetryPolicyTest, RetryWaitsTheBackoffOfTheChargedAttempts) {
  const RetryPolicy p = Policy(25, kSecond, 3600 * kSecond);
  EXPECT_EQ(after_failed_attempt(p, 0).delay_us, 1 * kSecond);  // first failure: base
  EXPECT_EQ(after_failed_attempt(p, 1).delay_us, 2 * kSecond);
  EXPECT_EQ(after_failed_attempt(p, 2).delay_us, 4 * kSecond);
  for (std::int32_t before = 0; before < 24; ++before)
    EXPECT_EQ(after_failed_attempt(p, before).delay_us, backoff_us(p, before + 1));
}

TEST(RetryPolicyTest, BackoffDoublesFromBase) {
  const RetryPolicy p = Policy(25, kSecond, 3600 * kSecond);
  EXPECT_EQ(backoff_us(p, 1), 1 * kSecond);
  EXPECT_EQ(backoff_us(p, 2), 2 * kSecond);
  EXPECT_EQ(backoff_us(p, 3), 4 * kSecond);
  EXPECT_EQ(backoff_us(p, 4), 8 * kSecond);
  EXPECT_EQ(backoff_us(p, 10), 512 * kSecond);
  EXPECT_EQ(backoff_us(p, 12), 2048 * kSecond);

  const RetryPolicy odd = Policy(25, 3, kInt64Max);
  std::int64_t expected = 3;
  for (std::int32_t n = 1; n <= 62; ++n) {  // 3 * 2^61 still fits
    EXPECT_EQ(backoff_us(odd, n), expected) << "n = " << n;
    if (n < 62) expected *= 2;
  }
}

TEST(RetryPolicyTest, BackoffIsCappedAtMax) {
  const RetryPolicy p = Policy(25, kSecond, 3600 * kSecond);
  EXPECT_EQ(backoff_us(p, 13), 3600 * kSecond);  // 4096 s > 1 h
  EXPECT_EQ(backoff_us(p, 25), 3600 * kSecond);
  EXPECT_EQ(backoff_us(p, 1000), 3600 * kSecond);

  // A cap that is not a power-of-two multiple of base is hit exactly.
  const RetryPolicy q = Policy(25, 100, 1000);
  EXPECT_EQ(backoff_us(q, 4), 800);
  EXPECT_EQ(backoff_us(q, 5), 1000);
  EXPECT_EQ(backoff_us(q, 6), 1000);

  // base == max: no growth at all.
  const RetryPolicy flat = Policy(25, 5 * kSecond, 5 * kSecond);
  for (std::int32_t n = 1; n < 100; ++n) EXPECT_EQ(backoff_us(flat, n), 5 * kSecond);
}

TEST(RetryPolicyTest, BackoffNeverExceedsMaxAndNeverShrinks) {
  const RetryPolicy policies[] = {
      Policy(25, 1, 1),
      Policy(25, 1, kInt64Max),
      Policy(25, 3, kInt64Max),
      Policy(25, kSecond, 3600 * kSecond),
      Policy(25, 7, 1'000'003),
      Policy(25, kInt64Max / 3, kInt64Max),
      Policy(25, kInt64Max, kInt64Max),
  };
  for (const RetryPolicy& p : policies) {
    std::int64_t previous = 0;
    for (std::int32_t n = 1; n <= 300; ++n) {
      const std::int64_t d = backoff_us(p, n);
      ASSERT_GE(d, p.backoff_base_us) << "base " << p.backoff_base_us << " n " << n;
      ASSERT_LE(d, p.backoff_max_us) << "base " << p.backoff_base_us << " n " << n;
      ASSERT_GE(d, previous) << "base " << p.backoff_base_us << " n " << n;
      previous = d;
    }
  }
}

TEST(RetryPolicyTest, BackoffDoesNotOverflowForHugeAttemptCounts) {
  EXPECT_EQ(backoff_us(Policy(25, kSecond, 3600 * kSecond), kInt32Max), 3600 * kSecond);
  EXPECT_EQ(backoff_us(Policy(25, 1, kInt64Max), 63), std::int64_t{1} << 62);
  EXPECT_EQ(backoff_us(Policy(25, 1, kInt64Max), 64), kInt64Max);
  EXPECT_EQ(backoff_us(Policy(25, 1, kInt64Max), 65), kInt64Max);
  EXPECT_EQ(backoff_us(Policy(25, 1, kInt64Max), kInt32Max), kInt64Max);
  EXPECT_EQ(backoff_us(Policy(25, 3, kInt64Max), 63), kInt64Max);  // 3 * 2^62 > int64 max
}

TEST(RetryPolicyTest, BackoffDoesNotOverflowForHugeBase) {
  const std::int64_t huge = kInt64Max / 2 + 1;  // doubling it overflows
  EXPECT_EQ(backoff_us(Policy(25, huge, kInt64Max), 1), huge);
  EXPECT_EQ(backoff_us(Policy(25, huge, kInt64Max), 2), kInt64Max);
  EXPECT_EQ(backoff_us(Policy(25, huge, kInt64Max), kInt32Max), kInt64Max);
  EXPECT_EQ(backoff_us(Policy(25, kInt64Max, kInt64Max), 1), kInt64Max);
  EXPECT_EQ(backoff_us(Policy(25, kInt64Max, kInt64Max), 2), kInt64Max);
  EXPECT_EQ(backoff_us(Policy(25, kInt64Max, kInt64Max), kInt32Max), kInt64Max);
  EXPECT_EQ(after_failed_attempt(Policy(kInt32Max, kInt64Max, kInt64Max), 40).delay_us, kInt64Max);
}

TEST(RetryPolicyTest, ZeroBaseMeansNoWait) {
  for (const RetryPolicy& p : {Policy(25, 0, 0), Policy(25, 0, 3600 * kSecond)}) {
    for (std::int32_t n : {1, 2, 10, 64, 1000, kInt32Max}) EXPECT_EQ(backoff_us(p, n), 0);
    const FailureOutcome o = after_failed_attempt(p, 3);
    EXPECT_FALSE(o.dead);
    EXPECT_EQ(o.delay_us, 0);
  }
}

TEST(RetryPolicyTest, NoFailedAttemptsMeansNoWait) {
  EXPECT_EQ(backoff_us(Policy(25, kSecond, 3600 * kSecond), 0), 0);
}

TEST(RetryPolicyTest, ValidateRejectsNonPositiveBudget) {
  for (std::int32_t max_attempts : {0, -1, std::numeric_limits<std::int32_t>::min()})
    EXPECT_TRUE(ThrowsInvalidParameter([&] { validate(Policy(max_attempts, kSecond, kSecond)); }))
        << "max_attempts " << max_attempts;
}

TEST(RetryPolicyTest, ValidateRejectsNegativeBase) {
  for (std::int64_t base : {std::int64_t{-1}, -kSecond, std::numeric_limits<std::int64_t>::min()})
    EXPECT_TRUE(ThrowsInvalidParameter([&] { validate(Policy(25, base, 3600 * kSecond)); }))
        << "base " << base;
}

TEST(RetryPolicyTest, ValidateRejectsMaxBelowBase) {
  EXPECT_TRUE(ThrowsInvalidParameter([] { validate(Policy(25, 10, 9)); }));
  EXPECT_TRUE(ThrowsInvalidParameter([] { validate(Policy(25, 2 * kSecond, kSecond)); }));
  EXPECT_TRUE(ThrowsInvalidParameter([] { validate(Policy(25, 0, -1)); }));
  EXPECT_TRUE(ThrowsInvalidParameter([] { validate(Policy(25, kInt64Max, kInt64Max - 1)); }));
}

TEST(RetryPolicyTest, ValidateAcceptsValidPolicies) {
  EXPECT_NO_THROW(validate(Policy(1, 0, 0)));
  EXPECT_NO_THROW(validate(Policy(1, kSecond, kSecond)));
  EXPECT_NO_THROW(validate(Policy(25, kSecond, 3600 * kSecond)));
  EXPECT_NO_THROW(validate(Policy(25, 0, 3600 * kSecond)));
  EXPECT_NO_THROW(validate(Policy(kInt32Max, 1, kMaxBackoffUs)));
  EXPECT_NO_THROW(validate(Policy(kInt32Max, kMaxBackoffUs, kMaxBackoffUs)));
}

// Issue 9, finding 5: a backoff longer than a year was accepted, and now() + backoff
// then overflowed in fail() (22008) and in takeovers.
TEST(RetryPolicyTest, BackoffIsAtMost365Days) {
  EXPECT_EQ(kMaxBackoffUs, 365 * 86'400 * kSecond);
  EXPECT_TRUE(ThrowsInvalidParameter([] { validate(Policy(25, 0, kMaxBackoffUs + 1)); }));
  EXPECT_TRUE(
      ThrowsInvalidParameter([] { validate(Policy(25, kMaxBackoffUs + 1, kMaxBackoffUs + 1)); }));
  EXPECT_TRUE(ThrowsInvalidParameter([] { validate(Policy(kInt32Max, 1, kInt64Max)); }));
  EXPECT_TRUE(ThrowsInvalidParameter([] { validate(Policy(kInt32Max, kInt64Max, kInt64Max)); }));
}

TEST(RetryPolicyTest, ClampedLeavesValidPoliciesAlone) {
  for (const RetryPolicy& p : {Policy(1, 0, 0), Policy(25, kSecond, 3600 * kSecond),
                               Policy(kInt32Max, kMaxBackoffUs, kMaxBackoffUs)}) {
    const RetryPolicy c = clamped(p);
    EXPECT_EQ(c.max_attempts, p.max_attempts);
    EXPECT_EQ(c.backoff_base_us, p.backoff_base_us);
    EXPECT_EQ(c.backoff_max_us, p.backoff_max_us);
  }
}

TEST(RetryPolicyTest, ClampedBringsStoredPoliciesIntoBounds) {
  const RetryPolicy huge = clamped(Policy(25, kInt64Max, kInt64Max));
  EXPECT_EQ(huge.backoff_base_us, kMaxBackoffUs);
  EXPECT_EQ(huge.backoff_max_us, kMaxBackoffUs);
  const RetryPolicy huge_max = clamped(Policy(25, kSecond, kInt64Max));
  EXPECT_EQ(huge_max.backoff_base_us, kSecond);
  EXPECT_EQ(huge_max.backoff_max_us, kMaxBackoffUs);
  const RetryPolicy negative =
      clamped(Policy(0, -kSecond, std::numeric_limits<std::int64_t>::min()));
  EXPECT_EQ(negative.max_attempts, 1);
  EXPECT_EQ(negative.backoff_base_us, 0);
  EXPECT_EQ(negative.backoff_max_us, 0);
  const RetryPolicy inverted = clamped(Policy(25, 10 * kSecond, kSecond));
  EXPECT_EQ(inverted.backoff_base_us, 10 * kSecond);
  EXPECT_EQ(inverted.backoff_max_us, 10 * kSecond);
  for (const RetryPolicy& p : {huge, huge_max, negative, inverted}) EXPECT_NO_THROW(validate(p));
}

}  // namespace
}  // namespace relaybus::core

namespace relaybus::core {
namespace {

// A takeover charges the lost attempt but applies no backoff (retry_policy.hpp); the budget
// and the dead letter are the same as for a failure.
TEST(RetryPolicyTest, ALostAttemptIsChargedWithoutBackoff) {
  RetryPolicy policy;
  policy.max_attempts = 3;
  policy.backoff_base_us = 5'000'000;
  for (std::int32_t before = 0; before < 3; ++before) {
    const FailureOutcome lost = after_lost_attempt(policy, before);
    const FailureOutcome failed = after_failed_attempt(policy, before);
    EXPECT_EQ(lost.attempts, failed.attempts);
    EXPECT_EQ(lost.dead, failed.dead);
    EXPECT_EQ(lost.delay_us, 0);
  }
  EXPECT_GT(after_failed_attempt(policy, 0).delay_us, 0);
  EXPECT_TRUE(after_lost_attempt(policy, 2).dead);
}

}  // namespace
}  // namespace relaybus::core
