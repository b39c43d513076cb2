// Reading the worker name of claim, extend_lease and relinquish. Names starting with
// core::kSqlHandlerWorkerPrefix belong to relaybus's in-database handler workers: any other
// caller that used one could take those workers' lanes, or lock them and stall every
// in-database handler, so only the workers' own statements may use them (not a session,
// and not a handler function running inside a worker).
#pragma once

#include "spi.hpp"
#include "worker_support.hpp"

#include "../core/claim_request.hpp"
#include "../core/error.hpp"

namespace relaybus::pg {

inline std::string worker_arg(FunctionCallInfo fcinfo, int n) {
  if (PG_ARGISNULL(n)) throw core::Error(core::ErrorCode::kNullValue, "worker must not be NULL");
  std::string worker = text_of(PG_GETARG_DATUM(n));
  core::validate_worker(worker);
  if (core::is_sql_handler_worker_name(worker) && !worker::acting_as_sql_handler_worker())
    throw core::Error(core::ErrorCode::kPermissionDenied,
                      "worker names starting with \"" + std::string(core::kSqlHandlerWorkerPrefix) +
                          "\" are reserved for relaybus's in-database handler workers");
  return worker;
}

}  // namespace relaybus::pg

namespace relaybus::pg {

// The optional holder argument (claim, extend_lease, relinquish): NULL binds to the
// backend, a string to (worker, holder); an empty or over-long one is 22023.
inline std::optional<std::string> holder_arg(FunctionCallInfo fcinfo, int n) {
  if (PG_NARGS() <= n || PG_ARGISNULL(n)) return std::nullopt;
  std::string holder = text_of(PG_GETARG_DATUM(n));
  core::validate_name("holder", holder);
  return holder;
}

}  // namespace relaybus::pg
