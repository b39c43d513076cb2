#include "handler_call.hpp"

#include "worker_support.hpp"

#include <cstdio>
#include <cstring>

extern "C" {
#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "commands/async.h"
#include "commands/prepare.h"
#include "commands/sequence.h"
#include "commands/trigger.h"
#include "mb/pg_wchar.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "utils/inval.h"
#include "utils/portal.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timeout.h"
}

namespace relaybus::pg::handler_call {

namespace {

TimeoutId deadline_timeout = MAX_TIMEOUTS;
volatile sig_atomic_t deadline_passed = 0;

// The deadline fired: the handler went on for kCancelGraceMs after its cancellation. Ending
// the process is the only way to stop code that catches every cancellation, so this asks
// for what pg_terminate_backend would ask for (a FATAL error at the next interrupt check).
// Runs in the SIGALRM handler: signal-safe assignments only.
void on_deadline() {
  deadline_passed = 1;
  ProcDiePending = true;
  InterruptPending = true;
  SetLatch(MyLatch);
}

// What a rollback keeps: prepared statements, session advisory locks, the sequence values
// lastval() and currval() report (another owner's lastval() would name the sequence), and
// the seed of random() (setseed() would make another owner's random() predictable).
void clear_non_transactional_state() {
  DropAllPreparedStatements();
  LockReleaseSession(USER_LOCKMETHOD);
  ResetSequenceCaches();
  double seed = 0;
  std::uint64_t bits = 0;
  if (pg_strong_random(&bits, sizeof bits)) seed = static_cast<double>(bits >> 11) / (1ULL << 53);
  (void)DirectFunctionCall1(setseed, Float8GetDatum(seed * 2 - 1));
}

// The owner of `function` as the catalog says now (after pending invalidations), or an
// error when it no longer exists.
Oid current_owner(Oid function) {
  AcceptInvalidationMessages();
  HeapTuple tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(function));
  if (!HeapTupleIsValid(tuple))
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_FUNCTION), errmsg("%s", kFunctionGone)));
  const Oid owner = reinterpret_cast<Form_pg_proc>(GETSTRUCT(tuple))->proowner;
  ReleaseSysCache(tuple);
  return owner;
}

// "message (SQLSTATE xxxxx)" in out, the message cut (never inside a multibyte character)
// so that the SQLSTATE always fits.
void describe_error(const ErrorData* error, char* out, std::size_t size) {
  char suffix[32];
  snprintf(suffix, sizeof suffix, " (SQLSTATE %s)", unpack_sql_state(error->sqlerrcode));
  const char* message = error->message != nullptr ? error->message : "error";
  const int room = static_cast<int>(size - strlen(suffix) - 1);
  const int length = pg_mbcliplen(message, static_cast<int>(strlen(message)), room);
  snprintf(out, size, "%.*s%s", length, message, suffix);
}

// What PostgreSQL lets a restricted call leave behind in the session, removed still as the
// owner and inside the restriction. Each would otherwise be visible to, or block, the next
// handler, whose owner may be another role: a portal (and the query behind it, which would
// be finished as the worker at commit), a prepared statement, a session advisory lock, a
// listener, a temporary object.
void clear_session_leftovers() {
  PortalHashTableDeleteAll();
  clear_non_transactional_state();
  Async_UnlistenAll();
  ResetTempTableNamespace();
}

// SET CONSTRAINTS ALL IMMEDIATE, without parsing it on every call: fires what is pending
// (as the current user) and makes every deferrable constraint immediate for the rest of
// the transaction.
void all_constraints_immediate() {
  ConstraintsSetStmt all_immediate{};
  all_immediate.type = T_ConstraintsSetStmt;
  all_immediate.constraints = NIL;
  all_immediate.deferred = false;
  AfterTriggerSetState(&all_immediate);
}

void stop_timers() {
  disable_timeout(deadline_timeout, false);
  disable_timeout(STATEMENT_TIMEOUT, false);
}

// The deadline fired after the call had already returned or raised: the call is failed
// for having overrun (below), not the worker ended.
bool take_late_deadline() {
  if (!deadline_passed) return false;
  deadline_passed = 0;
  ProcDiePending = false;  // a shutdown asked for meanwhile is still seen (worker::call_ended)
  return true;
}

}  // namespace

void install() {
  if (deadline_timeout == MAX_TIMEOUTS)
    deadline_timeout = RegisterTimeout(USER_TIMEOUT, on_deadline);
}

bool overran() noexcept {
  return deadline_passed != 0;
}

namespace {

// The caller's identity and where the call started from, restored whichever way it ends.
struct CallFrame {
  MemoryContext context;
  ResourceOwner owner;
  Oid user;
  int security_context;
};

// function(event) as the function's owner, restricted, under the timeout, with every
// setting it changes undone; back as the worker when it returns. Raises what the call
// raised (the caller's PG_TRY catches it).
void call_restricted(const CallFrame& frame, Oid function, int timeout_ms, Datum event) {
  // Deferrable constraints are checked at the end of each of the handler's statements:
  // inside the restriction PostgreSQL refuses to queue a deferred trigger event (it would
  // fire after the call, as the worker), so a deferrable foreign key or unique constraint
  // must not be deferred. A handler that defers one itself gets 42501 from PostgreSQL.
  all_constraints_immediate();
  // The owner from the same catalog entry fmgr_info and the language handler read the
  // function from (no invalidation is taken in between).
  const Oid owner = current_owner(function);
  FmgrInfo flinfo;
  fmgr_info(function, &flinfo);
  SetUserIdAndSecContext(
      owner, frame.security_context | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
  const int guc_nest_level = NewGUCNestLevel();
  (void)set_config_option("search_path", worker::handler_search_path(), PGC_SUSET, PGC_S_SESSION,
                          GUC_ACTION_SAVE, true, 0, false);
  LOCAL_FCINFO(fcinfo, 1);
  InitFunctionCallInfoData(*fcinfo, &flinfo, 1, InvalidOid, nullptr, nullptr);
  fcinfo->args[0].value = event;
  fcinfo->args[0].isnull = false;
  worker::call_started();
  enable_timeout_after(STATEMENT_TIMEOUT, timeout_ms);
  enable_timeout_after(deadline_timeout, timeout_ms + kCancelGraceMs);
  (void)FunctionCallInvoke(fcinfo);  // the result, NULL or not, is ignored
  // Still as the owner, restricted and under the timeout.
  all_constraints_immediate();
  clear_session_leftovers();
  stop_timers();
  if (take_late_deadline())
    ereport(ERROR, (errcode(ERRCODE_QUERY_CANCELED),
                    errmsg("canceling statement due to statement timeout: the handler went on "
                           "after its cancellation")));
  QueryCancelPending = false;  // a timeout that fired as the call returned cancels nothing
  worker::call_ended();
  AtEOXact_GUC(false, guc_nest_level);
  SetUserIdAndSecContext(frame.user, frame.security_context);
}

// As the worker: complete(token) with the kept plan; true if the lease still held.
bool complete_delivery(SPIPlanPtr complete, Datum token) {
  Datum values[1] = {token};
  if (SPI_execute_plan(complete, values, nullptr, false, 1) != SPI_OK_SELECT || SPI_processed != 1)
    return false;
  bool is_null = true;
  const Datum d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &is_null);
  return !is_null && DatumGetBool(d);
}

// After an error of the call (or of its completion): back as the worker, the
// subtransaction rolled back (which also unwinds the GUC level and the snapshot, and drops
// the call's portals), what a rollback keeps cleared, and the error described in `out`.
void recover(const CallFrame& frame, CallOutcome* out) {
  stop_timers();
  (void)take_late_deadline();
  QueryCancelPending = false;
  worker::call_ended();
  SetUserIdAndSecContext(frame.user, frame.security_context);
  MemoryContextSwitchTo(frame.context);
  ErrorData* error = CopyErrorData();
  FlushErrorState();
  RollbackAndReleaseCurrentSubTransaction();
  MemoryContextSwitchTo(frame.context);
  CurrentResourceOwner = frame.owner;
  clear_non_transactional_state();
  describe_error(error, out->error, sizeof out->error);
  FreeErrorData(error);
  out->outcome = Outcome::kFailed;
}

}  // namespace

void run(Oid function, int timeout_ms, const handler_event::Fields* event, SPIPlanPtr load,
         std::int64_t max_bytes, SPIPlanPtr complete, Datum token, CallOutcome* out) {
  CallFrame frame{CurrentMemoryContext, CurrentResourceOwner, InvalidOid, 0};
  GetUserIdAndSecContext(&frame.user, &frame.security_context);
  BeginInternalSubTransaction(nullptr);
  MemoryContextSwitchTo(frame.context);
  PG_TRY();
  {
    PushActiveSnapshot(GetTransactionSnapshot());
    // As the worker, which may read relaybus's tables.
    call_restricted(frame, function, timeout_ms, handler_event::load(event, load, max_bytes));
    const bool completed = complete_delivery(complete, token);
    PopActiveSnapshot();
    if (completed) {
      ReleaseCurrentSubTransaction();
      out->outcome = Outcome::kCompleted;
    } else {
      // The lease was lost while the handler ran: its writes must not commit.
      RollbackAndReleaseCurrentSubTransaction();
      out->outcome = Outcome::kLeaseLost;
    }
    MemoryContextSwitchTo(frame.context);
    CurrentResourceOwner = frame.owner;
  }
  PG_CATCH();
  { recover(frame, out); }
  PG_END_TRY();
}

}  // namespace relaybus::pg::handler_call
