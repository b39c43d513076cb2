// Reading a handler's retry policy from a statement result. Statements select
// RELAYBUS_POLICY_COLUMNS_SQL (three columns, subscriptions aliased `s`, which may be missing
// after unsubscribe: then core's defaults apply).
#pragma once

#include "spi.hpp"

#include "../core/retry_policy.hpp"

// The raw intervals, converted in C++ with the API's calendar (30-day months): SQL's
// extract(epoch) counts a year as 365.25 days and its casts can overflow.
#define RELAYBUS_POLICY_COLUMNS_SQL "s.max_attempts, s.backoff_base, s.backoff_max"

namespace relaybus::pg {

// The policy in columns first_column .. first_column + 2 of row r, clamped to the bounds
// subscribe enforces: a row edited by hand or written by an older version must never make
// fail or a takeover raise. A NULL (a hand edit again) keeps core's default.
inline core::RetryPolicy policy_of_row(std::uint64_t r, int first_column) {
  core::RetryPolicy policy;
  bool null = false;
  const Datum max_attempts = row::datum(r, first_column, &null);
  if (null) return policy;  // no subscription
  policy.max_attempts = DatumGetInt32(max_attempts);
  if (auto base = row::stored_interval_us(r, first_column + 1)) policy.backoff_base_us = *base;
  if (auto max = row::stored_interval_us(r, first_column + 2)) policy.backoff_max_us = *max;
  return core::clamped(policy);
}

}  // namespace relaybus::pg
