// When a delivery a caller schedules comes due (publish's available_at, fail's retry_at).
//
// A keyed delivery holds back every later delivery of its key and handler until it has run,
// so a due time is a stall a publisher or a worker can impose on everyone sharing the key.
// Judged as a delay from now, the same way in every store: a delay beyond the store's
// maximum is refused, so that the stall has a bound the operator sets; a negative delay (a
// due time in the past) counts as none, so that nobody orders ahead of work already due.
#pragma once

#include <cstdint>
#include <string>

namespace relaybus::core {

// The maximum delay when the operator sets none: 30 days.
inline constexpr std::int64_t kDefaultMaxDelayUs = 30LL * 24 * 3600 * 1'000'000;

// The delay to store for a requested delay_us: 0 for a past due time, delay_us up to
// max_delay_us. Beyond it throws Error(kInvalidParameter) naming `what` ("available_at")
// and, in its hint, `setting` (how the store's operator raises the maximum).
std::int64_t checked_delay_us(std::int64_t delay_us, std::int64_t max_delay_us,
                              const std::string& what, const std::string& setting);

// The same for a delay in milliseconds (the store seam's publish delay and fail's
// retry_after), returned in milliseconds; never overflows in the conversion.
std::int64_t checked_delay_ms(std::int64_t delay_ms, std::int64_t max_delay_us,
                              const std::string& what, const std::string& setting);

}  // namespace relaybus::core
