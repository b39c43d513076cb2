#include "interval.hpp"

#include "error.hpp"

#include <limits>
#include <optional>
#include <string>

namespace relaybus::core {

namespace {

// months * 30 + days, in days, then * kMicrosPerDay + micros; nullopt on overflow.
std::optional<std::int64_t> checked_total(const IntervalParts& interval) noexcept {
  std::int64_t days = 0;
  std::int64_t us = 0;
  std::int64_t total = 0;
  if (__builtin_mul_overflow(static_cast<std::int64_t>(interval.months), kDaysPerMonth, &days) ||
      __builtin_add_overflow(days, static_cast<std::int64_t>(interval.days), &days) ||
      __builtin_mul_overflow(days, kMicrosPerDay, &us) ||
      __builtin_add_overflow(us, interval.micros, &total))
    return std::nullopt;
  return total;
}

}  // namespace

std::int64_t interval_us(const IntervalParts& interval, std::string_view what) {
  const std::optional<std::int64_t> total = checked_total(interval);
  if (!total) throw Error(ErrorCode::kInvalidParameter, std::string(what) + " is out of range");
  return *total;
}

std::int64_t interval_us_saturated(const IntervalParts& interval) noexcept {
  if (const std::optional<std::int64_t> total = checked_total(interval)) return *total;
  // Overflowed: the exact total, which a long double holds well enough for its sign,
  // says which end to saturate to.
  const long double exact =
      (static_cast<long double>(interval.months) * kDaysPerMonth + interval.days) * kMicrosPerDay +
      static_cast<long double>(interval.micros);
  return exact < 0 ? std::numeric_limits<std::int64_t>::min()
                   : std::numeric_limits<std::int64_t>::max();
}

}  // namespace relaybus::core
