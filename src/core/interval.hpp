// One conversion of an interval to microseconds for every interval the API takes or
// stores: a month counts 30 days and a day 24 hours (as PostgreSQL compares intervals),
// in checked 64-bit arithmetic, so a value too large for that is refused, never wrapped.
#pragma once

#include <cstdint>
#include <string_view>

namespace relaybus::core {

// The three fields of a PostgreSQL interval, kept apart as PostgreSQL keeps them.
struct IntervalParts {
  std::int32_t months = 0;
  std::int32_t days = 0;
  std::int64_t micros = 0;
};

inline constexpr std::int64_t kMicrosPerDay = 24LL * 3600 * 1'000'000;
inline constexpr std::int64_t kDaysPerMonth = 30;

// The interval in microseconds; throws core::Error 22023 "<what> is out of range" when the
// total does not fit in 64 bits.
std::int64_t interval_us(const IntervalParts& interval, std::string_view what);

// The same total saturated to the int64 range instead of throwing: for values read back
// from storage, which are then clamped to their bounds and must never make a statement fail.
std::int64_t interval_us_saturated(const IntervalParts& interval) noexcept;

}  // namespace relaybus::core
