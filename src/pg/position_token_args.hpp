// Reading 0.3.0's lease tokens (core::PositionToken) from SQL arguments: NULL is an error
// (22004), a malformed token is an error (22023, a token of relaybus 0.2 included), a
// well-formed one is judged against its lane by the caller.
#pragma once

#include "../core/error.hpp"
#include "../core/lease_token.hpp"

#include "spi.hpp"

namespace relaybus::pg {

inline core::PositionToken position_token_arg(FunctionCallInfo fcinfo, int n) {
  if (PG_ARGISNULL(n))
    throw core::Error(core::ErrorCode::kNullValue, "lease_token must not be NULL");
  return core::parse_position_token(text_of(PG_GETARG_DATUM(n)));
}

}  // namespace relaybus::pg
