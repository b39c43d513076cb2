// The workers that run in-database handlers (subscriptions with sql_function).
//
// A round claims a batch for one in-database handler (the next one, in turn, that has due
// work), so a slow handler only holds up its own deliveries, then handles the batch in one
// transaction (one commit per batch, not per delivery). Each delivery gets a subtransaction
// of its own in which the handler function runs, as the function's owner, under the
// handler's statement timeout, and then complete() deletes the delivery: the handler's
// writes and its completion commit together or not at all (effectively-once). If the
// function raises, or the completion finds the lease lost, only that subtransaction is
// rolled back; a raise then goes through fail() (backoff, then dead letter).
#include "settings.hpp"
#include "spi.hpp"
#include "wakeup.hpp"
#include "worker_support.hpp"

#include <chrono>
#include <cstdio>

extern "C" {
#include "catalog/namespace.h"
#include "commands/async.h"
#include "mb/pg_wchar.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
}

namespace relaybus::pg {

namespace {

// After a call this slow, the rest of the batch is handed back (release, then relinquish),
// so other workers can run it instead of waiting behind a slow handler.
constexpr std::int64_t kSlowCallMs = 1000;
// Lease of a claim beyond the handler's timeout, covering the gap between the claim's commit
// and the batch's first statement, which locks the lanes for the rest of the batch.
constexpr std::int64_t kLeaseMarginMs = 10000;

struct Job {
  std::string token;
  std::string handler;
  Oid function = InvalidOid;
  Oid owner = InvalidOid;
  int timeout_ms = 0;
  std::string event;  // the event as JSON text (claims and handling are separate transactions)
};

enum class Outcome { kCompleted, kFailed, kLeaseLost };

struct CallOutcome {
  Outcome outcome = Outcome::kFailed;
  char error[1024] = {0};
};

// In a subtransaction: function(event) as `owner` under a statement timeout, then
// complete(token) with the kept plan `complete`. Holds no C++ object with a destructor:
// PostgreSQL errors are caught here with PG_TRY.
//
// The function runs as its owner in a GUC nest level that is unwound afterwards, so nothing
// it sets (search_path, role, timeouts) outlives it in this superuser process; its
// temporary objects and LISTENs are dropped after the call. (Not as a security-restricted
// operation: PostgreSQL refuses deferred triggers there, so a handler could not write to a
// table with a deferred foreign key.) Deferred constraints are checked before the
// completion, as the owner, under the timeout and inside the same subtransaction, so they
// fail this delivery alone.
void call_handler(Oid function, Oid owner, int timeout_ms, Datum event, SPIPlanPtr complete,
                  Datum token, CallOutcome* out) {
  MemoryContext outer_context = CurrentMemoryContext;
  ResourceOwner outer_owner = CurrentResourceOwner;
  Oid saved_user = InvalidOid;
  int saved_context = 0;
  GetUserIdAndSecContext(&saved_user, &saved_context);
  BeginInternalSubTransaction(nullptr);
  MemoryContextSwitchTo(outer_context);
  PG_TRY();
  {
    PushActiveSnapshot(GetTransactionSnapshot());
    SetUserIdAndSecContext(owner, saved_context | SECURITY_LOCAL_USERID_CHANGE);
    const int guc_nest_level = NewGUCNestLevel();
    (void)set_config_option("search_path", worker::handler_search_path(), PGC_SUSET, PGC_S_SESSION,
                            GUC_ACTION_SAVE, true, 0, false);
    FmgrInfo flinfo;
    fmgr_info(function, &flinfo);
    LOCAL_FCINFO(fcinfo, 1);
    InitFunctionCallInfoData(*fcinfo, &flinfo, 1, InvalidOid, nullptr, nullptr);
    fcinfo->args[0].value = event;
    fcinfo->args[0].isnull = false;
    worker::call_started();
    enable_timeout_after(STATEMENT_TIMEOUT, timeout_ms);
    (void)FunctionCallInvoke(fcinfo);  // the result, NULL or not, is ignored
    // Still as the owner and under the timeout: deferred constraints are checked now, so a
    // violation fails this delivery alone; temporary objects and LISTENs of the handler go,
    // so none can shadow another handler's tables or pin the notification queue.
    SPI_execute("SET CONSTRAINTS ALL IMMEDIATE", false, 0);
    ResetTempTableNamespace();
    Async_UnlistenAll();
    disable_timeout(STATEMENT_TIMEOUT, false);
    QueryCancelPending = false;  // a timeout that fired as the call returned cancels nothing
    worker::call_ended();
    AtEOXact_GUC(false, guc_nest_level);
    SetUserIdAndSecContext(saved_user, saved_context);
    Datum values[1] = {token};
    bool completed = false;
    if (SPI_execute_plan(complete, values, nullptr, false, 1) == SPI_OK_SELECT &&
        SPI_processed == 1) {
      bool is_null = true;
      Datum d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &is_null);
      completed = !is_null && DatumGetBool(d);
    }
    PopActiveSnapshot();
    if (completed) {
      ReleaseCurrentSubTransaction();
      out->outcome = Outcome::kCompleted;
    } else {
      // The lease was lost while the handler ran: its writes must not commit.
      RollbackAndReleaseCurrentSubTransaction();
      out->outcome = Outcome::kLeaseLost;
    }
    MemoryContextSwitchTo(outer_context);
    CurrentResourceOwner = outer_owner;
  }
  PG_CATCH();
  {
    disable_timeout(STATEMENT_TIMEOUT, false);
    QueryCancelPending = false;
    worker::call_ended();
    SetUserIdAndSecContext(saved_user, saved_context);
    MemoryContextSwitchTo(outer_context);
    ErrorData* error = CopyErrorData();
    FlushErrorState();
    RollbackAndReleaseCurrentSubTransaction();  // also unwinds the GUC level and snapshot
    MemoryContextSwitchTo(outer_context);
    CurrentResourceOwner = outer_owner;
    snprintf(out->error, sizeof out->error, "%s (SQLSTATE %s)",
             error->message != nullptr ? error->message : "error",
             unpack_sql_state(error->sqlerrcode));
    // snprintf may have cut a multibyte character in two.
    out->error[pg_mbcliplen(out->error, static_cast<int>(strlen(out->error)),
                            sizeof out->error - 1)] = '\0';
    FreeErrorData(error);
    out->outcome = Outcome::kFailed;
  }
  PG_END_TRY();
}

class SqlHandlerWorker {
 public:
  explicit SqlHandlerWorker(int slot)
      : name_("relaybus-sql-" + std::to_string(slot)), turn_(static_cast<std::size_t>(slot)) {}

  // Claims and handles one batch; returns how many deliveries it handled.
  std::size_t round();

 private:
  std::vector<Job> claim();
  void handle(const Job& job);
  void lock_lanes();
  void hand_back(const std::vector<Job>& jobs, std::size_t from);
  std::size_t run_batch(const std::vector<Job>& jobs);
  void run_one_by_one(const std::vector<Job>& jobs);

  // A stable name per slot: a restarted worker reuses it, and the claim takes over the
  // lanes its dead predecessor held at once (their holder backend is gone).
  std::string name_;
  std::size_t turn_;  // which handler to try first; workers start at different ones
};

std::vector<Job> SqlHandlerWorker::claim() {
  static Statement handlers(
      "SELECT s.handler, coalesce((extract(epoch FROM s.sql_timeout) * 1000)::int8, $1)"
      " FROM relaybus.subscriptions s WHERE s.sql_function IS NOT NULL"
      " ORDER BY s.handler COLLATE \"C\"",
      {INT8OID});
  // The handler list is re-read inside the claim statement: one that was unsubscribed or
  // turned into an external handler meanwhile is simply not claimed (an empty list claims
  // nothing). The function may still vanish before the call: see handle().
  static Statement claim(
      "SELECT c.lease_token, c.handler, s.sql_function::oid, p.proowner,"
      " coalesce((extract(epoch FROM s.sql_timeout) * 1000)::int4, $5),"
      " jsonb_build_object('id', c.event_id, 'handler', c.handler, 'type', c.type,"
      "  'key', c.key, 'payload', c.payload, 'headers', c.headers, 'attempts', c.attempts,"
      "  'published_at', c.published_at)::text"
      " FROM relaybus.claim($1, $2, $3, ARRAY(SELECT x.handler FROM relaybus.subscriptions x"
      "  WHERE x.handler = $4 AND x.sql_function IS NOT NULL))"
      " WITH ORDINALITY AS c(lease_token, event_id, handler, type, key, payload, headers,"
      "  attempts, published_at, n)"
      " LEFT JOIN relaybus.subscriptions s ON s.handler = c.handler"
      " LEFT JOIN pg_catalog.pg_proc p ON p.oid = s.sql_function"
      " ORDER BY c.n",
      {TEXTOID, INT4OID, INTERVALOID, TEXTOID, INT4OID});
  std::vector<Job> jobs;
  worker::in_transaction("relaybus: claim for in-database handlers", [&] {
    if (!worker::extension_installed()) return;
    Params handler_params;
    handler_params.int8(settings::sql_handler_timeout_ms());
    const std::uint64_t count = handlers.run(handler_params);
    std::vector<std::pair<std::string, std::int64_t>> in_database;
    for (std::uint64_t r = 0; r < count; ++r)
      in_database.emplace_back(row::text(r, 1), row::int8(r, 2));
    std::uint64_t n = 0;
    for (std::size_t tried = 0; tried < in_database.size() && n == 0; ++tried) {
      const auto& [handler, timeout_ms] = in_database[turn_++ % in_database.size()];
      const std::int64_t lease_ms = timeout_ms + kLeaseMarginMs;
      Params params;
      params.text(name_);
      params.int4(settings::sql_handler_batch());
      params.interval_us(lease_ms * 1000);
      params.text(handler);
      params.int4(settings::sql_handler_timeout_ms());
      n = claim.run(params);
    }
    for (std::uint64_t r = 0; r < n; ++r) {
      Job job;
      job.token = row::text(r, 1);
      job.handler = row::text(r, 2);
      bool null = false;
      const Datum function = row::datum(r, 3, &null);
      job.function = null ? InvalidOid : DatumGetObjectId(function);
      const Datum owner = row::datum(r, 4, &null);
      job.owner = null ? InvalidOid : DatumGetObjectId(owner);
      job.timeout_ms = row::int4(r, 5);
      job.event = row::text(r, 6);
      jobs.push_back(std::move(job));
    }
  });
  return jobs;
}

// First statement of a batch: lock this worker's lanes until the batch commits. A takeover
// skips locked lanes (FOR UPDATE SKIP LOCKED), so no lease can be lost under a running
// handler however long the batch takes; a lock, unlike a renewal, writes no new row version.
// If the lease has run out by the commit, the next takeover finds only completed
// deliveries in the lanes and charges nothing.
void SqlHandlerWorker::lock_lanes() {
  static Statement lock(
      "SELECT count(*) FROM (SELECT 1 FROM relaybus.lanes l WHERE l.lease_owner = $1"
      " FOR NO KEY UPDATE) locked",
      {TEXTOID});
  Params params;
  params.text(name_);
  lock.run(params);
}

void SqlHandlerWorker::handle(const Job& job) {
  static Statement complete("SELECT relaybus.complete($1)", {TEXTOID});
  static Statement fail("SELECT relaybus.fail($1, $2)", {TEXTOID, TEXTOID});
  if (job.function == InvalidOid || job.owner == InvalidOid) {
    // Dropped (or unsubscribed) between the claim and now: a failed attempt, with a reason,
    // rather than a delivery left in flight until its lease expires.
    Params params;
    params.text(job.token);
    params.text("the handler's sql_function no longer exists");
    fail.run(params);
    return;
  }
  Params token;
  token.text(job.token);
  const SPIPlanPtr complete_plan = complete.plan();
  Datum event = 0;
  const char* event_text = job.event.c_str();
  pg_call([&] { event = DirectFunctionCall1(jsonb_in, CStringGetDatum(event_text)); });
  CallOutcome call;
  pg_call([&] {
    call_handler(job.function, job.owner, job.timeout_ms, event, complete_plan, token.values()[0],
                 &call);
  });
  if (call.outcome == Outcome::kFailed) {
    Params params;
    params.text(job.token);
    params.text(std::string_view(call.error));
    fail.run(params);
  } else if (call.outcome == Outcome::kLeaseLost) {
    const char* handler = job.handler.c_str();
    pg_call([&] {
      ereport(LOG, (errmsg("relaybus: lease lost while handler \"%s\" ran; its writes were "
                           "rolled back and it will run again",
                           handler)));
    });
  }
}

// Inside the batch transaction, when a batch is cut short (a slow call, or a shutdown):
// what was not started goes back without costing an attempt, and every lane that runs
// nothing is handed back for other workers. After a full batch the lanes stay held: the
// next claim goes on with them (and hands back those that ran dry).
void SqlHandlerWorker::hand_back(const std::vector<Job>& jobs, std::size_t from) {
  static Statement release("SELECT relaybus.release($1)", {TEXTOID});
  static Statement relinquish("SELECT relaybus.relinquish($1)", {TEXTOID});
  for (std::size_t i = from; i < jobs.size(); ++i) {
    Params params;
    params.text(jobs[i].token);
    release.run(params);
  }
  Params params;
  params.text(name_);
  relinquish.run(params);
}

// The batch in one transaction. Returns how many deliveries it ran; throws PgError when the
// commit fails (the deliveries are still leased to this worker then).
std::size_t SqlHandlerWorker::run_batch(const std::vector<Job>& jobs) {
  std::size_t done = 0;
  worker::begin_transaction("relaybus: running in-database handlers");
  lock_lanes();
  while (done < jobs.size() && !worker::shutdown_requested()) {
    worker::check_signals();
    const auto started = std::chrono::steady_clock::now();
    handle(jobs[done++]);
    // After a slow call the rest goes back, for other workers to run meanwhile.
    if (std::chrono::steady_clock::now() - started > std::chrono::milliseconds(kSlowCallMs)) break;
  }
  if (done < jobs.size()) hand_back(jobs, done);
  worker::commit_transaction();
  return done;
}

// After a failed batch commit: each delivery in a transaction of its own, and one whose
// commit still fails is failed (with the reason) in a fresh transaction.
void SqlHandlerWorker::run_one_by_one(const std::vector<Job>& jobs) {
  static Statement fail("SELECT relaybus.fail($1, $2)", {TEXTOID, TEXTOID});
  for (const Job& job : jobs) {
    try {
      worker::begin_transaction("relaybus: running an in-database handler alone");
      lock_lanes();
      handle(job);
      worker::commit_transaction();
    } catch (const PgError& e) {
      const std::string reason = std::string("commit failed: ") +
                                 (e.data != nullptr && e.data->message ? e.data->message : "error");
      worker::abort_transaction();
      worker::in_transaction("relaybus: failing a delivery whose commit failed", [&] {
        Params params;
        params.text(job.token);
        params.text(reason);
        fail.run(params);
      });
    }
  }
}

std::size_t SqlHandlerWorker::round() {
  const std::vector<Job> jobs = claim();
  if (jobs.empty()) return 0;
  try {
    return run_batch(jobs);
  } catch (const PgError& e) {
    // Typically a handler's deferred work failing at commit: the whole batch was rolled
    // back, so run it again one by one and let only the culprit fail.
    const char* message = e.data != nullptr && e.data->message ? e.data->message : "error";
    pg_call([&] {
      ereport(LOG, (errmsg("relaybus: a batch of in-database handlers failed to commit (%s); "
                           "running it one delivery at a time",
                           message)));
    });
    worker::abort_transaction();
    run_one_by_one(jobs);
    return jobs.size();
  }
}

void sql_handler_main(Datum arg) {
  const int slot = DatumGetInt32(arg);
  worker::start("relaybus sql handler", worker::Shutdown::kBetweenCalls);
  wakeup::register_sql_worker(slot);
  SqlHandlerWorker worker(slot);
  while (!worker::shutdown_requested()) {
    worker::check_signals();
    if (worker.round() == 0 && !worker::shutdown_requested())
      worker::wait(settings::sql_handler_poll_interval_ms());
  }
  worker::exit_for_restart();
}

}  // namespace

}  // namespace relaybus::pg

extern "C" {
PGDLLEXPORT void relaybus_sql_handler_main(Datum arg);
void relaybus_sql_handler_main(Datum arg) {
  relaybus::pg::run_guarded_worker(relaybus::pg::sql_handler_main, arg);
}
}
