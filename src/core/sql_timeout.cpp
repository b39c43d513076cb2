#include "sql_timeout.hpp"

#include "error.hpp"

#include <algorithm>

namespace relaybus::core {

void validate_sql_timeout(std::int64_t timeout_us) {
  if (timeout_us < kMinSqlTimeoutUs)
    throw Error(ErrorCode::kInvalidParameter, "sql_timeout must be at least 1 ms");
  if (timeout_us > kMaxSqlTimeoutUs)
    throw Error(ErrorCode::kInvalidParameter, "sql_timeout must be at most 1 hour");
}

std::int64_t clamped_sql_timeout(std::int64_t timeout_us) noexcept {
  return std::clamp(timeout_us, kMinSqlTimeoutUs, kMaxSqlTimeoutUs);
}

}  // namespace relaybus::core
