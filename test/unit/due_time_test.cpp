// The due-time rule every store applies to publish's available_at and fail's retry_at.
#include "core/due_time.hpp"

#include "expect_core_error.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace relaybus::core {
namespace {

using testing::ThrowsInvalidParameter;

constexpr std::int64_t kSecond = 1'000'000;
constexpr std::int64_t kDay = 86'400 * kSecond;

TEST(DueTime, APastDueTimeCountsAsNow) {
  EXPECT_EQ(checked_delay_us(-1, kDay, "available_at", "s"), 0);
  EXPECT_EQ(checked_delay_us(-2'000 * 365 * kDay, kDay, "available_at", "s"), 0);  // 2,000 years ago
  EXPECT_EQ(checked_delay_us(std::numeric_limits<std::int64_t>::min(), kDay, "available_at", "s"), 0);
  EXPECT_EQ(checked_delay_us(0, kDay, "available_at", "s"), 0);
}

TEST(DueTime, ADelayUpToTheMaximumIsKept) {
  EXPECT_EQ(checked_delay_us(1, kDay, "available_at", "s"), 1);
  EXPECT_EQ(checked_delay_us(kDay, kDay, "available_at", "s"), kDay);
}

TEST(DueTime, ADelayBeyondTheMaximumIsRefused) {
  EXPECT_TRUE(ThrowsInvalidParameter([] { checked_delay_us(kDay + 1, kDay, "available_at", "s"); }));
  EXPECT_TRUE(ThrowsInvalidParameter(
      [] { checked_delay_us(std::numeric_limits<std::int64_t>::max(), kDefaultMaxDelayUs, "x", "s"); }));
}

TEST(DueTime, TheRefusalNamesTheValueTheMaximumAndTheSetting) {
  try {
    checked_delay_us(31 * kDay, kDefaultMaxDelayUs, "retry_at", "relaybus.max_delay");
    FAIL() << "did not throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "retry_at is more than 30 days from now");
    EXPECT_EQ(e.hint(), "Schedule it sooner, or raise relaybus.max_delay.");
  }
  try {
    checked_delay_us(2 * kSecond, 1500 * 1000, "available_at", "s");
    FAIL() << "did not throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "available_at is more than 1500 ms from now");
  }
}

TEST(DueTime, MillisecondsFollowTheSameRuleWithoutOverflow) {
  EXPECT_EQ(checked_delay_ms(-5, kDay, "retry_after", "s"), 0);
  EXPECT_EQ(checked_delay_ms(1500, kDay, "retry_after", "s"), 1500);
  EXPECT_EQ(checked_delay_ms(kDay / 1000, kDay, "retry_after", "s"), kDay / 1000);
  EXPECT_TRUE(ThrowsInvalidParameter([] { checked_delay_ms(kDay / 1000 + 1, kDay, "retry_after", "s"); }));
  // 9.2e15 ms would overflow as microseconds: refused, not wrapped into the past.
  EXPECT_TRUE(ThrowsInvalidParameter(
      [] { checked_delay_ms(std::numeric_limits<std::int64_t>::max(), kDay, "retry_after", "s"); }));
}

}  // namespace
}  // namespace relaybus::core
