// What fail, bury and release of every version share at the SQL boundary: the optional error
// argument, and fail's answer as the text the API returns.
#pragma once

#include "../core/attempt_end.hpp"

#include "spi.hpp"

namespace relaybus::pg {

// NULL: no error given (the exception row or delivery keeps the one it had, if any).
inline std::optional<std::string> optional_text_arg(FunctionCallInfo fcinfo, int n) {
  if (PG_ARGISNULL(n)) return std::nullopt;
  return text_of(PG_GETARG_DATUM(n));
}

// fail's return value: 'retry', 'dead' or 'lost' (a release is no answer of fail's).
inline Datum fail_result_datum(core::AttemptResult result) {
  const char* word = result == core::AttemptResult::kRetry  ? "retry"
                     : result == core::AttemptResult::kDead ? "dead"
                                                            : "lost";
  Datum out = 0;
  pg_call([&] { out = PointerGetDatum(cstring_to_text(word)); });
  return out;
}

}  // namespace relaybus::pg
