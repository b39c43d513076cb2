// Issue 9, finding 5: sql_timeout has one set of bounds (1 ms .. 1 hour), enforced at
// subscribe (22023) and applied by clamping to what the handler workers read back.
#include "core/sql_timeout.hpp"

#include "expect_core_error.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace relaybus::core {
namespace {

using testing::ThrowsInvalidParameter;

constexpr std::int64_t kMs = 1'000;
constexpr std::int64_t kHour = 3600LL * 1'000'000;
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kInt64Min = std::numeric_limits<std::int64_t>::min();

TEST(SqlTimeoutTest, BoundsAreOneMillisecondAndOneHour) {
  EXPECT_EQ(kMinSqlTimeoutUs, kMs);
  EXPECT_EQ(kMaxSqlTimeoutUs, kHour);
}

TEST(SqlTimeoutTest, ValidateAcceptsTheBoundsAndBetween) {
  EXPECT_NO_THROW(validate_sql_timeout(kMs));
  EXPECT_NO_THROW(validate_sql_timeout(300 * kMs));
  EXPECT_NO_THROW(validate_sql_timeout(kHour));
}

TEST(SqlTimeoutTest, ValidateRejectsOutside) {
  for (std::int64_t us :
       {kInt64Min, std::int64_t{-1}, std::int64_t{0}, kMs - 1, kHour + 1, kInt64Max})
    EXPECT_TRUE(ThrowsInvalidParameter([&] { validate_sql_timeout(us); })) << us;
}

TEST(SqlTimeoutTest, ClampedBringsStoredValuesIntoBounds) {
  EXPECT_EQ(clamped_sql_timeout(kInt64Min), kMs);
  EXPECT_EQ(clamped_sql_timeout(0), kMs);
  EXPECT_EQ(clamped_sql_timeout(1), kMs);
  EXPECT_EQ(clamped_sql_timeout(kMs), kMs);
  EXPECT_EQ(clamped_sql_timeout(300 * kMs), 300 * kMs);
  EXPECT_EQ(clamped_sql_timeout(kHour), kHour);
  EXPECT_EQ(clamped_sql_timeout(kHour + 1), kHour);
  EXPECT_EQ(clamped_sql_timeout(kInt64Max), kHour);
}

}  // namespace
}  // namespace relaybus::core
