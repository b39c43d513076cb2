// One call of an in-database handler function, made by a worker whose session user is a
// superuser on behalf of the function's owner, who may be hostile. The owner is read just
// before the call, from the catalog entry the call then runs: a function handed to another
// owner after the claim runs as its new owner, never its new code as the old one.
//
// The call runs as the owner inside a security-restricted operation, the mechanism
// PostgreSQL itself uses when it runs code it does not trust for a more privileged session
// (VACUUM, CREATE INDEX and REFRESH MATERIALIZED VIEW run index and view functions this
// way). PostgreSQL then refuses what would outlive the call and run later with the session
// user's privileges: WITH HOLD cursors (materialized at commit), deferred trigger events
// (fired at commit or at a later SET CONSTRAINTS), temporary tables, LISTEN, SET ROLE and
// SET SESSION AUTHORIZATION. What PostgreSQL still allows and would survive the call is
// undone after it, still as the owner: settings (a GUC nest level), portals, prepared
// statements, session advisory locks, listeners, temporary objects, the sequence values
// lastval() and currval() would show, and the seed of random().
//
// The call is bounded: at its timeout it is cancelled (57014); a handler that catches the
// cancellation and goes on is still running kCancelGraceMs later, and then the worker
// terminates itself (a FATAL error, which no handler can catch). See sql_handler_worker.cpp
// for what happens to its batch then.
#pragma once

#include "handler_event.hpp"
#include "postgres.hpp"

namespace relaybus::pg::handler_call {

// After the timeout's cancellation, how long a call may go on before its worker ends.
inline constexpr int kCancelGraceMs = 1000;

enum class Outcome { kCompleted, kFailed, kLeaseLost };

// The failure of a delivery whose function was dropped or unsubscribed after the claim.
inline constexpr const char* kFunctionGone = "the handler's sql_function no longer exists";

struct CallOutcome {
  Outcome outcome = Outcome::kFailed;
  char error[1024] = {0};
};

// Once per worker process, before the first call: registers the deadline timeout.
void install();

// In a subtransaction of the current transaction: function(event) as the function's owner,
// restricted and under `timeout_ms`, then, as the worker, complete(token) with the kept
// plan `complete`. The event is loaded (with the kept plan `load`, at most max_bytes) and
// built from `event` inside the subtransaction (handler_event.hpp), so one that cannot be
// loaded or built fails this delivery only. The handler's writes and the completion are
// released together; an error of the handler, or a lost lease, rolls back the
// subtransaction. Holds no C++ object with a destructor: PostgreSQL errors are caught here
// with PG_TRY.
void run(Oid function, int timeout_ms, const handler_event::Fields* event, SPIPlanPtr load,
         std::int64_t max_bytes, SPIPlanPtr complete, Datum token, CallOutcome* out);

// True from the moment a call overran its grace until the worker ends (the worker's exit
// callback reads it to fail that delivery with a reason).
bool overran() noexcept;

}  // namespace relaybus::pg::handler_call
