// Reading a handler's retry policy from a statement result. Statements select
// RELAYBUS_POLICY_COLUMNS_SQL (three columns, subscriptions aliased `s`, which may be missing
// after unsubscribe: then core's defaults apply).
#pragma once

#include "spi.hpp"

#include "../core/retry_policy.hpp"

#define RELAYBUS_POLICY_COLUMNS_SQL                                       \
  "s.max_attempts, (extract(epoch FROM s.backoff_base) * 1000000)::int8," \
  " (extract(epoch FROM s.backoff_max) * 1000000)::int8"

namespace relaybus::pg {

// The policy in columns first_column .. first_column + 2 of row r.
inline core::RetryPolicy policy_of_row(std::uint64_t r, int first_column) {
  core::RetryPolicy policy;
  if (row::is_null(r, first_column)) return policy;
  policy.max_attempts = row::int4(r, first_column);
  policy.backoff_base_us = row::int8(r, first_column + 1);
  policy.backoff_max_us = row::int8(r, first_column + 2);
  return policy;
}

}  // namespace relaybus::pg
