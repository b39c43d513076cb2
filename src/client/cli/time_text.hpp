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

}  // namespace relaybus::cli
