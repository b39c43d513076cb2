#include "due_time.hpp"

#include "settings.hpp"

#include "../core/due_time.hpp"
#include "../core/error.hpp"

extern "C" {
#include "access/xact.h"
}

namespace relaybus::pg {

std::optional<TimestampTz> checked_due_time(const std::optional<TimestampTz>& at,
                                            const std::string& what) {
  if (!at) return std::nullopt;
  // 'infinity' would hold back every later delivery of the key for good, '-infinity' sort
  // before every other (and overflow the difference below).
  if (TIMESTAMP_NOT_FINITE(*at))
    throw core::Error(core::ErrorCode::kInvalidParameter, what + " must be a finite timestamp");
  const TimestampTz now = GetCurrentTransactionStartTimestamp();
  const std::int64_t delay_us = core::checked_delay_us(
      *at - now, static_cast<std::int64_t>(settings::max_delay_s()) * 1'000'000, what,
      "relaybus.max_delay");
  return now + delay_us;
}

}  // namespace relaybus::pg
