#include "guard.hpp"

#include "error_codes.hpp"

#include <cstring>
#include <new>

extern "C" {
#include "mb/pg_wchar.h"
}

namespace relaybus::pg {

namespace {

// The message survives the catch block in static storage: nothing is allocated while an
// exception is in flight, and nothing needs freeing when ereport longjmps away.
char message_buffer[2048];
// Room for a hint that quotes a name of the longest kind (1,000 bytes, every one doubled).
char hint_buffer[4096];
char detail_buffer[4096];

// Cut where it fits, never inside a multibyte character (the server encoding is the
// database's; the messages hold user names, which may be in any script).
void keep(char* buffer, std::size_t size, const char* text) {
  const int length =
      pg_mbcliplen(text, static_cast<int>(std::strlen(text)), static_cast<int>(size - 1));
  std::memcpy(buffer, text, static_cast<std::size_t>(length));
  buffer[length] = '\0';
}

void keep_message(const char* text) {
  keep(message_buffer, sizeof message_buffer, text);
  hint_buffer[0] = '\0';
  detail_buffer[0] = '\0';
}

// Runs body; any exception is caught and, once outside every catch block, raised as a
// PostgreSQL ERROR (a caught PostgreSQL error is re-raised as it was). In a background
// worker that ERROR reaches the worker's top-level handler, which reports it and exits.
template <typename Body>
auto guard(Body&& body) -> decltype(body()) {
  ErrorData* pg_error = nullptr;
  int sqlerrcode = ERRCODE_INTERNAL_ERROR;
  try {
    return body();
  } catch (const PgError& e) {
    pg_error = e.data;
  } catch (const core::Error& e) {
    sqlerrcode = sqlerrcode_of(e.code());
    keep_message(e.what());
    keep(hint_buffer, sizeof hint_buffer, e.hint().c_str());
    keep(detail_buffer, sizeof detail_buffer, e.detail().c_str());
  } catch (const std::bad_alloc&) {
    sqlerrcode = ERRCODE_OUT_OF_MEMORY;
    keep_message("out of memory in relaybus");
  } catch (const std::exception& e) {
    sqlerrcode = ERRCODE_INTERNAL_ERROR;
    keep_message(e.what());
  } catch (...) {
    sqlerrcode = ERRCODE_INTERNAL_ERROR;
    keep_message("unknown C++ exception in relaybus");
  }
  // Outside every catch block from here on.
  if (pg_error != nullptr) ReThrowError(pg_error);
  ereport(ERROR, (errcode(sqlerrcode), errmsg("%s", message_buffer),
                  hint_buffer[0] != '\0' ? errhint("%s", hint_buffer) : 0,
                  detail_buffer[0] != '\0' ? errdetail("%s", detail_buffer) : 0));
  pg_unreachable();
}

}  // namespace

Datum run_guarded(FunctionCallInfo fcinfo, SqlBody body) {
  return guard([&] { return body(fcinfo); });
}

void run_guarded_worker(WorkerBody body, Datum arg) {
  guard([&] { body(arg); });
}

void run_guarded_callback(CallbackBody body, void* arg) {
  guard([&] { body(arg); });
}

}  // namespace relaybus::pg
