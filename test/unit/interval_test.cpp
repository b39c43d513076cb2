// Issue 9, findings 5, 6 and 8: the one conversion of an interval to microseconds uses the
// 30-day month and 24-hour day, and refuses (22023) what does not fit in 64 bits instead
// of wrapping (finding 6: 2147483647 days - 1075146363699 s wrapped to a 5.48 s lease).
#include "core/interval.hpp"

#include "expect_core_error.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace relaybus::core {
namespace {

using testing::ThrowsInvalidParameter;

constexpr std::int64_t kSecond = 1'000'000;
constexpr std::int64_t kDay = 86'400 * kSecond;
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kInt64Min = std::numeric_limits<std::int64_t>::min();
constexpr std::int32_t kInt32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int32_t kInt32Min = std::numeric_limits<std::int32_t>::min();

IntervalParts Parts(std::int32_t months, std::int32_t days, std::int64_t micros) {
  IntervalParts p;
  p.months = months;
  p.days = days;
  p.micros = micros;
  return p;
}

TEST(IntervalTest, MonthIsThirtyDaysAndDayIs24Hours) {
  EXPECT_EQ(interval_us(Parts(0, 0, 1), "lease"), 1);
  EXPECT_EQ(interval_us(Parts(0, 1, 0), "lease"), kDay);
  EXPECT_EQ(interval_us(Parts(1, 0, 0), "lease"), 30 * kDay);
  EXPECT_EQ(interval_us(Parts(12, 0, 0), "backoff_max"), 360 * kDay);  // '1 year'
  EXPECT_EQ(interval_us(Parts(1, 2, 3), "lease"), 32 * kDay + 3);
}

TEST(IntervalTest, FieldsOfMixedSignsAddUp) {
  // '1 year -360 days 1 ms' is 1 ms under this calendar (finding 5).
  EXPECT_EQ(interval_us(Parts(12, -360, 1000), "sql_timeout"), 1000);
  EXPECT_EQ(interval_us(Parts(0, 1, -25 * 3600 * kSecond), "lease"), -3600 * kSecond);
  EXPECT_EQ(interval_us(Parts(-1, 30, 0), "lease"), 0);
}

TEST(IntervalTest, OverflowIsRefusedNotWrapped) {
  // Finding 6: interval '2147483647 days' + interval '-1075146363699 seconds'.
  const IntervalParts wraps = Parts(0, kInt32Max, -1075146363699LL * kSecond);
  EXPECT_TRUE(ThrowsInvalidParameter([&] { interval_us(wraps, "lease"); }));
  EXPECT_TRUE(ThrowsInvalidParameter([] { interval_us(Parts(kInt32Max, 0, 0), "lease"); }));
  EXPECT_TRUE(ThrowsInvalidParameter([] { interval_us(Parts(kInt32Min, 0, 0), "lease"); }));
  EXPECT_TRUE(ThrowsInvalidParameter([] { interval_us(Parts(0, 1, kInt64Max), "lease"); }));
  EXPECT_TRUE(ThrowsInvalidParameter([] { interval_us(Parts(0, -1, kInt64Min), "lease"); }));
}

TEST(IntervalTest, LargestValuesThatFitAreExact) {
  EXPECT_EQ(interval_us(Parts(0, 0, kInt64Max), "lease"), kInt64Max);
  EXPECT_EQ(interval_us(Parts(0, 0, kInt64Min), "lease"), kInt64Min);
  EXPECT_EQ(interval_us(Parts(0, 106751991, 0), "lease"), 106751991 * kDay);  // ~292271 years
  EXPECT_EQ(interval_us(Parts(0, 1, kInt64Max - kDay), "lease"), kInt64Max);
  // Days and micros that cancel out: each field alone is huge, the total is not.
  EXPECT_EQ(interval_us(Parts(0, 100000000, -100000000 * kDay + 5), "lease"), 5);
}

TEST(IntervalTest, FindingFiveBackoffsFitUnderThe30DayMonth) {
  // '3550000 mons' and '295000 years' overflowed extract(epoch)'s 365.25-day years; here
  // they fit, and the retry policy's 365-day bound refuses them.
  EXPECT_EQ(interval_us(Parts(3550000, 0, 0), "backoff_max"), 3550000LL * 30 * kDay);
  EXPECT_EQ(interval_us(Parts(295000 * 12, 0, 0), "backoff_max"), 295000LL * 360 * kDay);
}

TEST(IntervalTest, OutOfRangeErrorNamesTheArgument) {
  try {
    interval_us(Parts(kInt32Max, kInt32Max, kInt64Max), "backoff_base");
    FAIL() << "overflow accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "backoff_base is out of range");
  }
}

TEST(IntervalTest, SaturatedEqualsCheckedWhenItFits) {
  for (const IntervalParts& p : {Parts(0, 0, 0), Parts(12, -360, 1000), Parts(1, 2, 3),
                                 Parts(0, 0, kInt64Max), Parts(0, 0, kInt64Min)})
    EXPECT_EQ(interval_us_saturated(p), interval_us(p, "x"));
}

TEST(IntervalTest, SaturatedGoesToTheEndOfTheOverflow) {
  EXPECT_EQ(interval_us_saturated(Parts(kInt32Max, 0, 0)), kInt64Max);
  EXPECT_EQ(interval_us_saturated(Parts(kInt32Max, kInt32Max, kInt64Max)), kInt64Max);
  EXPECT_EQ(interval_us_saturated(Parts(kInt32Min, 0, 0)), kInt64Min);
  EXPECT_EQ(interval_us_saturated(Parts(kInt32Min, kInt32Min, kInt64Min)), kInt64Min);
  EXPECT_EQ(interval_us_saturated(Parts(0, 1, kInt64Max)), kInt64Max);
  EXPECT_EQ(interval_us_saturated(Parts(0, -1, kInt64Min)), kInt64Min);
  // Mixed signs: the larger part wins.
  EXPECT_EQ(interval_us_saturated(Parts(kInt32Max, 0, kInt64Min)), kInt64Max);
  EXPECT_EQ(interval_us_saturated(Parts(kInt32Min, 0, kInt64Max)), kInt64Min);
}

}  // namespace
}  // namespace relaybus::core
