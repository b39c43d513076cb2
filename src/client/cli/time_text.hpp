// How the tool writes the store's times (microseconds since the Unix epoch), always in UTC so
// that the output does not depend on the machine's time zone.
#pragma once

#include <cstdint>
#include <string>

namespace relaybus::cli {

// "2026-12-01 12:00:00.000+00", as psql shows a timestamptz in UTC (milliseconds).
std::string human_time(std::int64_t us);
// "2026-12-01T12:00:00.000000Z": RFC 3339, every microsecond the store keeps.
std::string json_time(std::int64_t us);
// A duration, coarse enough to read at a glance: "0s", "45s", "3m12s", "2h05m", "4d03h".
// A negative one is shown as 0s.
std::string human_age(std::int64_t us);
// Now, in microseconds since the Unix epoch, by this machine's clock.
std::int64_t now_us();

}  // namespace relaybus::cli
