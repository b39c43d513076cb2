// The workers that run in-database handlers (subscriptions with sql_function).
//
// A round claims a batch for one in-database handler (the next one, in turn, that has due
// work), so a slow handler only holds up its own deliveries, then handles each delivery in
// a transaction of its own: the handler function runs in a subtransaction, as the function's
// owner, under the handler's statement timeout; if it returns, complete() deletes the
// delivery in the same transaction, so the handler's writes and the completion commit
// together (effectively-once); if it raises, its writes are rolled back and fail() charges
// the attempt (backoff, then dead letter). A completion that finds the lease lost rolls the
// whole transaction back: the delivery runs again elsewhere.
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

struct CallOutcome {
  bool ok = false;
  char error[1024] = {0};
};

// Calls function(event) in a subtransaction as `owner` with a statement timeout. Holds no
// C++ object with a destructor: PostgreSQL errors are caught here with PG_TRY.
void call_handler(Oid function, Oid owner, int timeout_ms, Datum event, CallOutcome* out) {
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
    ReleaseCurrentSubTransaction();
    MemoryContextSwitchTo(outer_context);
    CurrentResourceOwner = outer_owner;
    out->ok = true;
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
    out->ok = false;
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
  void handle(const Job& job, std::int64_t lease_ms);
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
  static Statement claim(
      "SELECT c.lease_token, c.handler, s.sql_function::oid, p.proowner,"
      " coalesce((extract(epoch FROM s.sql_timeout) * 1000)::int4, $5),"
      " jsonb_build_object('id', c.event_id, 'handler', c.handler, 'type', c.type,"
      "  'key', c.key, 'payload', c.payload, 'headers', c.headers, 'attempts', c.attempts,"
      "  'published_at', c.published_at)::text"
      " FROM relaybus.claim($1, $2, $3, $4) WITH ORDINALITY AS c(lease_token, event_id,"
      "  handler, type, key, payload, headers, attempts, published_at, n)"
      " JOIN relaybus.subscriptions s ON s.handler = c.handler"
      " JOIN pg_catalog.pg_proc p ON p.oid = s.sql_function"
      " ORDER BY c.n",
      {TEXTOID, INT4OID, INTERVALOID, TEXTARRAYOID, INT4OID});
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
      params.text_array(std::vector<std::string>{handler});
      params.int4(settings::sql_handler_timeout_ms());
      n = claim.run(params);
    }
    for (std::uint64_t r = 0; r < n; ++r) {
      Job job;
      job.token = row::text(r, 1);
      job.handler = row::text(r, 2);
      bool null = false;
      job.function = DatumGetObjectId(row::datum(r, 3, &null));
      job.owner = DatumGetObjectId(row::datum(r, 4, &null));
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
  const auto now = std::chrono::steady_clock::now();
  if (now - renewed_ < std::chrono::milliseconds(lease_ms / 3)) return;
  Params params;
  params.text(name_);
  params.interval_us(lease_ms * 1000);
  extend.run(params);
  renewed_ = now;
}

void SqlHandlerWorker::handle(const Job& job, std::int64_t lease_ms) {
  static Statement complete("SELECT relaybus.complete($1)", {TEXTOID});
  static Statement fail("SELECT relaybus.fail($1, $2)", {TEXTOID, TEXTOID});
  worker::begin_transaction("relaybus: running an in-database handler");
  renew_if_due(lease_ms);
  Datum event = 0;
  const char* event_text = job.event.c_str();
  pg_call([&] { event = DirectFunctionCall1(jsonb_in, CStringGetDatum(event_text)); });
  CallOutcome outcome;
  pg_call([&] { call_handler(job.function, job.owner, job.timeout_ms, event, &outcome); });
  if (outcome.ok) {
    Params params;
    params.text(job.token);
    complete.run(params);
    if (!row::boolean(0, 1)) {
      // The lease was lost while the handler ran: its writes must not commit.
      SpiConnection::finish_current();
      pg_call([&] {
        ereport(LOG, (errmsg("relaybus: lease lost while handler \"%s\" ran; rolled back",
                             job.handler.c_str())));
        PopActiveSnapshot();
        AbortCurrentTransaction();
      });
      return;
    }
  } else {
    Params params;
    params.text(job.token);
    params.text(std::string_view(outcome.error));
    fail.run(params);
  }
  worker::commit_transaction();
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
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    worker::check_signals();
    const auto started = std::chrono::steady_clock::now();
    handle(jobs[i], lease_ms);
    const auto took = std::chrono::steady_clock::now() - started;
    if (took > std::chrono::milliseconds(kSlowCallMs) && i + 1 < jobs.size()) {
      hand_back(jobs, i + 1);
      return i + 1;
    }
  }
  return jobs.size();
}

void sql_handler_main(Datum arg) {
  const int slot = DatumGetInt32(arg);
  worker::start("relaybus sql handler");
  wakeup::register_sql_worker(slot);
  SqlHandlerWorker worker(slot);
  for (;;) {
    worker::check_signals();
    if (worker.round() == 0) worker::wait(settings::sql_handler_poll_interval_ms());
  }
}

}  // namespace

}  // namespace relaybus::pg

extern "C" {
PGDLLEXPORT void relaybus_sql_handler_main(Datum arg);
void relaybus_sql_handler_main(Datum arg) {
  relaybus::pg::run_guarded_worker(relaybus::pg::sql_handler_main, arg);
}
}
