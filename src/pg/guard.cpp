#include "guard.hpp"

#include "../core/error.hpp"

#include <cstring>
#include <new>

namespace relaybus::pg {

namespace {

// The message survives the catch block in static storage: nothing is allocated while an
// exception is in flight, and nothing needs freeing when ereport longjmps away.
char message_buffer[2048];

void keep_message(const char* text) {
  std::strncpy(message_buffer, text, sizeof message_buffer - 1);
  message_buffer[sizeof message_buffer - 1] = '\0';
}

int sqlstate_code(const char* s) {
  return MAKE_SQLSTATE(s[0], s[1], s[2], s[3], s[4]);
}

// Runs body; any exception is caught and, once outside every catch block, raised as a
// PostgreSQL ERROR (a caught PostgreSQL error is re-raised as it was). In a background
// worker that ERROR reaches the worker's top-level handler, which reports it and exits.
template <typename Body>
auto guard(Body&& body) -> decltype(body()) {
  ErrorData* pg_error = nullptr;
  const char* sqlstate = nullptr;
  try {
    return body();
  } catch (const PgError& e) {
    pg_error = e.data;
  } catch (const core::Error& e) {
    sqlstate = e.sqlstate();
    keep_message(e.what());
  } catch (const std::bad_alloc&) {
    sqlstate = "53200";  // out_of_memory
    keep_message("out of memory in relaybus");
  } catch (const std::exception& e) {
    sqlstate = core::sqlstate::kInternal;
    keep_message(e.what());
  } catch (...) {
    sqlstate = core::sqlstate::kInternal;
    keep_message("unknown C++ exception in relaybus");
  }
  // Outside every catch block from here on.
  if (pg_error != nullptr) ReThrowError(pg_error);
  ereport(ERROR, (errcode(sqlstate_code(sqlstate)), errmsg("%s", message_buffer)));
  pg_unreachable();
}

}  // namespace

Datum run_guarded(FunctionCallInfo fcinfo, SqlBody body) {
  return guard([&] { return body(fcinfo); });
}

void run_guarded_worker(WorkerBody body, Datum arg) {
  guard([&] { body(arg); });
}

}  // namespace relaybus::pg
