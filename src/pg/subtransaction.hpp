// Running a step in an internal subtransaction so that a PostgreSQL error in it undoes only
// that step: for maintenance that must go on for everyone else when one item fails (see
// take_over_expired). The pattern is PL/pgSQL's exception block, on the C++ side of the
// boundary of guard.hpp: errors arrive as PgError from pg_call, never as a longjmp.
#pragma once

#include "guard.hpp"

extern "C" {
#include "utils/resowner.h"
}

namespace relaybus::pg {

// Runs body in a subtransaction. Returns nullptr when body succeeded (the subtransaction is
// released into the caller's transaction). When body raised a PostgreSQL error, rolls the
// subtransaction back and returns that error, copied into the caller's memory context.
// A query cancel is not swallowed: it rolls back and propagates, as do C++ exceptions.
// Results (SPI_tuptable) of statements run inside body are gone after a rollback.
template <typename Body>
ErrorData* in_subtransaction(Body&& body) {
  MemoryContext const context = CurrentMemoryContext;
  ResourceOwner const owner = CurrentResourceOwner;
  auto restore = [&] {
    MemoryContextSwitchTo(context);
    CurrentResourceOwner = owner;
  };
  auto rollback = [&] {
    pg_call([] { RollbackAndReleaseCurrentSubTransaction(); });
    restore();
  };
  pg_call([] { BeginInternalSubTransaction(nullptr); });
  MemoryContextSwitchTo(context);
  ErrorData* error = nullptr;
  try {
    body();
  } catch (const PgError& e) {
    error = e.data;
  } catch (...) {
    rollback();
    throw;
  }
  if (error == nullptr) {
    pg_call([] { ReleaseCurrentSubTransaction(); });
    restore();
    return nullptr;
  }
  rollback();
  if (error->sqlerrcode == ERRCODE_QUERY_CANCELED) throw PgError{error};
  return error;
}

}  // namespace relaybus::pg
