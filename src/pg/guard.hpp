// The C++/PostgreSQL error boundary, written once.
//
// PostgreSQL reports errors with longjmp, C++ with exceptions; neither may cross the other.
// - Every SQL-callable function is an extern "C" entry (RELAYBUS_SQL_FUNCTION) that runs its
//   C++ body inside run_guarded(): every exception is caught there, and only after the catch
//   block has ended is the error raised with ereport (or re-raised, for a PostgreSQL error).
// - C++ code calls PostgreSQL functions that may ereport only through pg_call(): it runs
//   the call under PG_TRY, copies the error and throws it as PgError, so C++ destructors run
//   normally. Lambdas given to pg_call hold no object with a non-trivial destructor.
#pragma once

#include "postgres.hpp"

namespace relaybus::pg {

// A PostgreSQL error caught by pg_call, carried to the guard to be re-raised unchanged.
struct PgError {
  ErrorData* data;
};

// An exception thrown inside PG_TRY would leave PostgreSQL's exception stack pointing at
// a dead frame; through this it ends the process at once instead.
template <typename F>
void call_noexcept(F& f) noexcept {
  f();
}

template <typename F>
void pg_call(F&& f) {
  MemoryContext volatile caller_context = CurrentMemoryContext;
  ErrorData* volatile error = nullptr;
  PG_TRY();
  { call_noexcept(f); }
  PG_CATCH();
  {
    MemoryContextSwitchTo(caller_context);
    error = CopyErrorData();
    FlushErrorState();
  }
  PG_END_TRY();
  if (error != nullptr) throw PgError{error};
}

using SqlBody = Datum (*)(FunctionCallInfo);

Datum run_guarded(FunctionCallInfo fcinfo, SqlBody body);

// The same boundary for a background worker's main function: an error ends the worker
// (its own error handler reports it and exits with code 1), and the postmaster restarts it.
using WorkerBody = void (*)(Datum);
void run_guarded_worker(WorkerBody body, Datum arg);

// The same boundary for a callback PostgreSQL calls (a transaction callback): an error is
// raised as an ERROR once the C++ code has unwound.
using CallbackBody = void (*)(void*);
void run_guarded_callback(CallbackBody body, void* arg);

}  // namespace relaybus::pg

#define RELAYBUS_SQL_FUNCTION(c_name, body)         \
  extern "C" {                                      \
  PG_FUNCTION_INFO_V1(c_name);                      \
  Datum c_name(PG_FUNCTION_ARGS) {                  \
    return relaybus::pg::run_guarded(fcinfo, body); \
  }                                                 \
  }
