// PostgreSQL's timestamps count from 2000-01-01; what leaves the server in a token counts
// from the Unix epoch, as every client's clock does.
#pragma once

#include <cstdint>

#include "postgres.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

namespace relaybus::pg {

inline constexpr std::int64_t kUnixToPostgresEpochUs =
    static_cast<std::int64_t>(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;

// Microseconds since the Unix epoch of a finite timestamp.
inline std::int64_t unix_us_of(TimestampTz t) noexcept {
  return static_cast<std::int64_t>(t) + kUnixToPostgresEpochUs;
}

}  // namespace relaybus::pg
