// Reading lease tokens from SQL arguments: NULL is an error, a malformed token is an error
// (SQLSTATE 22023), a well-formed one is checked against the lane by the statement.
#pragma once

#include "spi.hpp"

#include "../core/error.hpp"
#include "../core/lease_token.hpp"

namespace relaybus::pg {

inline core::LeaseToken token_arg(FunctionCallInfo fcinfo, int n) {
  if (PG_ARGISNULL(n))
    throw core::Error(core::ErrorCode::kNullValue, "lease_token must not be NULL");
  return core::parse_lease_token(text_of(PG_GETARG_DATUM(n)));
}

}  // namespace relaybus::pg
