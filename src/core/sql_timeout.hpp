// Bounds of an in-database handler's sql_timeout (subscribe's argument, and the value the
// handler workers read back): the workers lease the handler's lanes for the timeout plus a
// margin, and a lease is at most a day, so the timeout is kept well inside that.
#pragma once

#include <cstdint>

namespace relaybus::core {

// One source: scripts/build-sql writes them into the 0.2.0 scripts as @SQL_TIMEOUT_MIN@ and
// @SQL_TIMEOUT_MAX@ (as interval text, '1 ms' and '1 hour': subscribe's comment), and
// src/pg/settings.cpp bounds relaybus.sql_handler_timeout (in ms) by them.
inline constexpr std::int64_t kMinSqlTimeoutUs = 1'000;               // 1 ms
inline constexpr std::int64_t kMaxSqlTimeoutUs = 3600LL * 1'000'000;  // 1 hour

// Throws core::Error 22023 outside kMinSqlTimeoutUs .. kMaxSqlTimeoutUs.
void validate_sql_timeout(std::int64_t timeout_us);

// A stored timeout brought into those bounds (a row edited by hand or written by an older
// version must not stop the workers).
std::int64_t clamped_sql_timeout(std::int64_t timeout_us) noexcept;

}  // namespace relaybus::core
