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
#include "utils/snapmgr.h"
#include "utils/timeout.h"
}

namespace relaybus::pg {

namespace {

// After a call this slow, the rest of the batch is handed back (release, then relinquish),
// so other workers can run it instead of waiting behind a slow handler.
constexpr std::int64_t kSlowCallMs = 1000;
// Lease of a batch beyond the longest handler timeout; renewed between deliveries.
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
    SetUserIdAndSecContext(owner, saved_context | SECURITY_LOCAL_USERID_CHANGE);
    enable_timeout_after(STATEMENT_TIMEOUT, timeout_ms);
    FmgrInfo flinfo;
    fmgr_info(function, &flinfo);
    LOCAL_FCINFO(fcinfo, 1);
    InitFunctionCallInfoData(*fcinfo, &flinfo, 1, InvalidOid, nullptr, nullptr);
    fcinfo->args[0].value = event;
    fcinfo->args[0].isnull = false;
    (void)FunctionCallInvoke(fcinfo);  // the result, NULL or not, is ignored
    disable_timeout(STATEMENT_TIMEOUT, false);
    SetUserIdAndSecContext(saved_user, saved_context);
    Datum values[1] = {token};
    bool completed = false;
    if (SPI_execute_plan(complete, values, nullptr, false, 1) == SPI_OK_SELECT &&
        SPI_processed == 1) {
      bool is_null = true;
      Datum d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &is_null);
      completed = !is_null && DatumGetBool(d);
    }
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
    SetUserIdAndSecContext(saved_user, saved_context);
    MemoryContextSwitchTo(outer_context);
    ErrorData* error = CopyErrorData();
    FlushErrorState();
    RollbackAndReleaseCurrentSubTransaction();
    MemoryContextSwitchTo(outer_context);
    CurrentResourceOwner = outer_owner;
    snprintf(out->error, sizeof out->error, "%s (SQLSTATE %s)",
             error->message != nullptr ? error->message : "error",
             unpack_sql_state(error->sqlerrcode));
    FreeErrorData(error);
    out->outcome = Outcome::kFailed;
  }
  PG_END_TRY();
  // A timeout that fired just as the call returned must not cancel what follows.
  QueryCancelPending = false;
}

class SqlHandlerWorker {
 public:
  explicit SqlHandlerWorker(int slot)
      : name_("relaybus-sql-" + std::to_string(slot)), turn_(static_cast<std::size_t>(slot)) {}

  // Claims and handles one batch; returns how many deliveries it handled.
  std::size_t round();

 private:
  std::vector<Job> claim(std::int64_t* lease_ms);
  void handle(const Job& job);
  void hand_back(const std::vector<Job>& jobs, std::size_t from);
  void renew_if_due(std::int64_t lease_ms);

  // A stable name per slot: a restarted worker reuses it, and the claim takes over the
  // lanes its dead predecessor held at once (their holder backend is gone).
  std::string name_;
  std::chrono::steady_clock::time_point renewed_;
  std::size_t turn_;  // which handler to try first; workers start at different ones
};

std::vector<Job> SqlHandlerWorker::claim(std::int64_t* lease_ms) {
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
      *lease_ms = timeout_ms + kLeaseMarginMs;
      Params params;
      params.text(name_);
      params.int4(settings::sql_handler_batch());
      params.interval_us(*lease_ms * 1000);
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
  renewed_ = std::chrono::steady_clock::now();
  return jobs;
}

void SqlHandlerWorker::renew_if_due(std::int64_t lease_ms) {
  static Statement extend("SELECT relaybus.extend_lease($1, $2)", {TEXTOID, INTERVALOID});
  // Renewed before a call once the margin is half used, so every call starts with at least
  // its whole timeout of lease left.
  const auto now = std::chrono::steady_clock::now();
  if (now - renewed_ < std::chrono::milliseconds(kLeaseMarginMs / 2) && lease_ms > 0) return;
  Params params;
  params.text(name_);
  params.interval_us(lease_ms * 1000);
  extend.run(params);
  renewed_ = now;
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

void SqlHandlerWorker::hand_back(const std::vector<Job>& jobs, std::size_t from) {
  static Statement release("SELECT relaybus.release($1)", {TEXTOID});
  static Statement relinquish("SELECT relaybus.relinquish($1)", {TEXTOID});
  worker::in_transaction("relaybus: handing back after a slow handler", [&] {
    for (std::size_t i = from; i < jobs.size(); ++i) {
      Params params;
      params.text(jobs[i].token);
      release.run(params);
    }
    Params params;
    params.text(name_);
    relinquish.run(params);
  });
}

std::size_t SqlHandlerWorker::round() {
  std::int64_t lease_ms = 0;
  const std::vector<Job> jobs = claim(&lease_ms);
  if (jobs.empty()) return 0;
  std::size_t done = 0;
  worker::begin_transaction("relaybus: running in-database handlers");
  while (done < jobs.size() && !worker::shutdown_requested()) {
    worker::check_signals();
    renew_if_due(lease_ms);
    const auto started = std::chrono::steady_clock::now();
    {
      worker::InterruptibleCall call;  // SIGTERM during the call ends the worker at once
      handle(jobs[done++]);
    }
    if (std::chrono::steady_clock::now() - started > std::chrono::milliseconds(kSlowCallMs)) break;
  }
  worker::commit_transaction();
  // After a slow call, or when asked to stop, the rest goes back at no attempt's cost.
  if (done < jobs.size()) hand_back(jobs, done);
  return done;
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
