// The workers that run in-database handlers (subscriptions with sql_function).
//
// A round claims a batch for one in-database handler (the next one, in turn, that has due
// work), so a slow handler only holds up its own deliveries, then handles the batch in one
// transaction (one commit per batch, not per delivery). Each delivery gets a subtransaction
// of its own in which the handler function runs, as the function's owner, under the
// handler's statement timeout, and then complete() deletes the delivery: the handler's
// writes and its completion commit together or not at all (effectively-once). If the
// function raises, or the completion finds the lease lost, only that subtransaction is
// rolled back; a raise then goes through fail() (backoff, then dead letter). How one call
// is isolated from this superuser process is handler_call.hpp's subject.
//
// The claim reads no payload: each delivery's payload and headers are loaded inside its
// subtransaction, just before its call, and freed after it (handler_event.hpp). So a worker
// holds one event at a time whatever its batch holds, and an event it cannot load (too
// large for relaybus.sql_handler_max_payload, or memory runs out) fails that delivery,
// charged an attempt, instead of ending the worker in the claim over and over.
//
// A worker that ends in the middle of a batch (a handler that ignored its cancellation, a
// SIGTERM during a call) loses the batch's transaction. Its exit callback then hands the
// batch back at once, in a transaction of its own: the overrunning delivery is failed with
// the reason, every other one is released without charge, and the lanes are relinquished,
// so nothing waits for the lease to expire and no bystander of the batch pays an attempt.
#include "counters.hpp"
#include "handler_call.hpp"
#include "handler_turns.hpp"
#include "settings.hpp"
#include "spi.hpp"
#include "subtransaction.hpp"
#include "wakeup.hpp"
#include "worker_support.hpp"

#include "../core/claim_request.hpp"
#include "../core/lease_token.hpp"
#include "../core/sql_timeout.hpp"

#include <chrono>
#include <cstdio>

extern "C" {
#include "postmaster/postmaster.h"
#include "storage/ipc.h"
#include "storage/pmsignal.h"
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
  Oid function = InvalidOid;  // its owner is read just before the call
  int timeout_ms = 0;
  // The event's columns, made one jsonb value inside the call's subtransaction with the
  // payload and headers, which are read there (handler_event.hpp): a batch holds no payload.
  std::string event_id;
  std::string type;
  std::optional<std::string> key;
  int attempts = 0;
  TimestampTz published_at = 0;
};

// The batch whose transaction is open, for the exit callback: jobs[first..] are what an
// exit now would leave unfinished (those before `running` ran in the lost transaction).
struct BatchInProgress {
  const std::vector<Job>* jobs = nullptr;  // nullptr: no batch transaction is open
  std::size_t first = 0;
  std::size_t running = 0;
  bool calling = false;  // inside jobs[running]'s handler call
  const std::string* worker = nullptr;
};
BatchInProgress in_progress;

class SqlHandlerWorker {
 public:
  explicit SqlHandlerWorker(int slot)
      : slot_(slot),
        name_(std::string(core::kSqlHandlerWorkerPrefix) + std::to_string(slot)),
        turn_(handler_turns::load(slot).value_or(static_cast<std::uint64_t>(slot))) {}

  // Claims and handles one batch; returns how many deliveries it handled.
  std::size_t round();

 private:
  std::vector<Job> claim();
  void handle(const Job& job);
  void lock_lanes(const std::string& handler);
  void hand_back(const std::vector<Job>& jobs, std::size_t from);
  std::size_t run_batch(const std::vector<Job>& jobs);
  void run_one_by_one(const std::vector<Job>& jobs);

  int slot_;
  // A stable name per slot: a restarted worker reuses it, and the claim takes over the
  // lanes its dead predecessor held at once (their holder backend is gone).
  std::string name_;
  // Which handler to try first: workers start at different ones, and a restarted worker
  // after the one its predecessor was running (handler_turns.hpp).
  std::uint64_t turn_;
  // The handler whose lanes this worker may still hold from a batch that ended (kept for the
  // next batch of the same handler), "" once a cut-short batch handed them all back.
  // kept_unknown_ at start: a predecessor of the same name may have left any.
  std::string kept_for_;
  bool kept_unknown_ = true;
};

// The statement timeout of a handler's calls, from its stored sql_timeout (column c of row
// r) converted as every interval is (30-day months) and clamped to 1 ms .. 1 hour: a row
// edited by hand or written by an older version must never stop the workers. NULL means
// the relaybus.sql_handler_timeout setting.
int sql_timeout_ms(std::uint64_t r, int c) {
  const std::optional<std::int64_t> stored_us = row::stored_interval_us(r, c);
  if (!stored_us) return settings::sql_handler_timeout_ms();
  return static_cast<int>(core::clamped_sql_timeout(*stored_us) / 1000);
}

void report_failed_claim(const std::string& handler, ErrorData* error) {
  const char* message = error->message != nullptr ? error->message : "error";
  const int code = error->sqlerrcode;
  pg_call([&] {
    ereport(WARNING,
            (errmsg("relaybus: claiming for in-database handler \"%s\" failed", handler.c_str()),
             errdetail("%s (SQLSTATE %s)", message, unpack_sql_state(code)),
             errhint("The worker goes on with the other handlers and tries this one "
                     "again at its next turn.")));
    FreeErrorData(error);
  });
}

std::vector<Job> SqlHandlerWorker::claim() {
  static Statement handlers(
      "SELECT s.handler, s.sql_timeout"
      " FROM relaybus.subscriptions s WHERE s.sql_function IS NOT NULL"
      " ORDER BY s.handler COLLATE \"C\"",
      {});
  // The handler list is re-read inside the claim statement: one that was unsubscribed or
  // turned into an external handler meanwhile is simply not claimed (an empty list claims
  // nothing). The function may still vanish before the call: see handle(). The event's
  // columns come as they are; nothing is made of them here, and the payload and headers
  // are not even read: each call loads its own (see handler_event.hpp).
  static Statement claim(
      "SELECT c.lease_token, c.handler, s.sql_function::oid, s.sql_timeout,"
      " c.event_id, c.type, c.key, c.attempts, c.published_at"
      " FROM relaybus.claim($1, $2, $3, ARRAY(SELECT x.handler FROM relaybus.subscriptions x"
      "  WHERE x.handler = $4 AND x.sql_function IS NOT NULL))"
      " WITH ORDINALITY AS c(lease_token, event_id, handler, type, key, payload, headers,"
      "  attempts, published_at, n)"
      " LEFT JOIN relaybus.subscriptions s ON s.handler = c.handler"
      " ORDER BY c.n",
      {TEXTOID, INT4OID, INTERVALOID, TEXTOID});
  std::vector<Job> jobs;
  worker::in_transaction("relaybus: claim for in-database handlers", [&] {
    if (!worker::extension_installed()) return;
    const std::uint64_t count = handlers.run();
    std::vector<std::pair<std::string, std::int64_t>> in_database;
    for (std::uint64_t r = 0; r < count; ++r)
      in_database.emplace_back(row::text(r, 1), sql_timeout_ms(r, 2));
    std::uint64_t n = 0;
    for (std::size_t tried = 0; tried < in_database.size() && n == 0; ++tried) {
      const auto& [handler, timeout_ms] = in_database[turn_++ % in_database.size()];
      handler_turns::store(slot_, turn_);  // before the call that might end this worker
      const std::int64_t lease_ms = timeout_ms + kLeaseMarginMs;
      Params params;
      params.text(name_);
      params.int4(settings::sql_handler_batch());
      params.interval_us(lease_ms * 1000);
      params.text(handler);
      // A claim for one handler that raises (whatever the cause) is rolled back, reported
      // and passed over: it must not end the worker and stop the other handlers.
      ErrorData* error = in_subtransaction([&] { n = claim.run(params); });
      if (error != nullptr) {
        n = 0;
        report_failed_claim(handler, error);
      }
    }
    for (std::uint64_t r = 0; r < n; ++r) {
      Job job;
      job.token = row::text(r, 1);
      job.handler = row::text(r, 2);
      bool null = false;
      const Datum function = row::datum(r, 3, &null);
      job.function = null ? InvalidOid : DatumGetObjectId(function);
      job.timeout_ms = sql_timeout_ms(r, 4);
      job.event_id = row::text(r, 5);
      job.type = row::text(r, 6);
      job.key = row::text_or_null(r, 7);
      job.attempts = row::int4(r, 8);
      job.published_at = DatumGetTimestampTz(row::datum(r, 9, &null));
      jobs.push_back(std::move(job));
    }
    // The lanes kept after another handler's last batch run nothing now (that batch
    // committed): back they go with this claim's commit, so that other workers can run that
    // handler's work while this batch runs, however long it takes. The lanes just claimed
    // run something and stay. After the jobs are read: a statement replaces the result.
    if (!jobs.empty() &&
        (kept_unknown_ || (!kept_for_.empty() && kept_for_ != jobs.front().handler))) {
      static Statement relinquish("SELECT relaybus.relinquish($1)", {TEXTOID});
      Params name;
      name.text(name_);
      relinquish.run(name);
    }
  });
  if (!jobs.empty()) {
    kept_for_ = jobs.front().handler;
    kept_unknown_ = false;
  }
  return jobs;
}

// First statement of a batch: lock the batch handler's lanes of this worker until the batch
// commits. A takeover skips locked lanes (FOR UPDATE SKIP LOCKED), so no lease can be lost
// under a running handler however long the batch takes; a lock, unlike a renewal, writes no
// new row version. If the lease has run out by the commit, the next takeover finds only
// completed deliveries in the lanes and charges nothing. Only that handler's: locking every
// lane of the worker's name kept another handler's lanes from a takeover for as long as a
// slow handler ran (the claim hands those back first, see claim()).
void SqlHandlerWorker::lock_lanes(const std::string& handler) {
  static Statement lock(
      "SELECT count(*) FROM (SELECT 1 FROM relaybus.lanes l WHERE l.lease_owner = $1"
      " AND l.handler = $2 FOR NO KEY UPDATE) locked",
      {TEXTOID, TEXTOID});
  Params params;
  params.text(name_);
  params.text(handler);
  lock.run(params);
}

void SqlHandlerWorker::handle(const Job& job) {
  static Statement complete("SELECT relaybus.complete($1)", {TEXTOID});
  static Statement fail("SELECT relaybus.fail($1, $2)", {TEXTOID, TEXTOID});
  static Statement load("SELECT e.payload, e.headers FROM relaybus.events e WHERE e.id = $1",
                        {TEXTOID});
  if (job.function == InvalidOid) {
    // Unsubscribed (or made an external handler) between the claim and now: a failed
    // attempt, with a reason, rather than a delivery left in flight until its lease expires.
    Params params;
    params.text(job.token);
    params.text(handler_call::kFunctionGone);
    fail.run(params);
    return;
  }
  Params token;
  token.text(job.token);
  const SPIPlanPtr complete_plan = complete.plan();
  handler_event::Fields event;
  event.id = job.event_id.c_str();
  event.handler = job.handler.c_str();
  event.type = job.type.c_str();
  event.key = job.key ? job.key->c_str() : nullptr;
  event.attempts = job.attempts;
  event.published_at = job.published_at;
  const SPIPlanPtr load_plan = load.plan();
  const std::int64_t max_bytes = settings::sql_handler_max_payload_bytes();
  handler_call::CallOutcome call;
  // The call's own memory (the payload loaded for it, the event built from it, what the
  // call leaves in the caller's context), freed after it: kept to the batch's commit, it
  // added one copy of every payload of the batch.
  MemoryContext call_memory = nullptr;
  MemoryContext previous = nullptr;
  pg_call([&] {
    call_memory = AllocSetContextCreate(CurrentMemoryContext, "relaybus handler call",
                                        ALLOCSET_DEFAULT_SIZES);
    previous = MemoryContextSwitchTo(call_memory);
  });
  in_progress.calling = true;
  pg_call([&] {
    handler_call::run(job.function, job.timeout_ms, &event, load_plan, max_bytes, complete_plan,
                      token.values()[0], &call);
  });
  in_progress.calling = false;
  pg_call([&] {
    MemoryContextSwitchTo(previous);
    MemoryContextDelete(call_memory);
  });
  if (call.outcome == handler_call::Outcome::kFailed) {
    counters::add(counters::kHandlerWorkerErrors, job.handler);
    Params params;
    params.text(job.token);
    params.text(std::string_view(call.error));
    fail.run(params);
  } else if (call.outcome == handler_call::Outcome::kLeaseLost) {
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
  in_progress = {&jobs, 0, 0, false, &name_};
  lock_lanes(jobs.front().handler);
  while (done < jobs.size() && !worker::shutdown_requested()) {
    worker::check_signals();
    const auto started = std::chrono::steady_clock::now();
    in_progress.running = done;
    handle(jobs[done++]);
    // After a slow call the rest goes back, for other workers to run meanwhile.
    if (std::chrono::steady_clock::now() - started > std::chrono::milliseconds(kSlowCallMs)) break;
  }
  if (done < jobs.size()) hand_back(jobs, done);
  worker::commit_transaction();
  if (done < jobs.size()) kept_for_.clear();  // all handed back
  in_progress.jobs = nullptr;
  return done;
}

// After a failed batch commit: each delivery in a transaction of its own, and one whose
// commit still fails is failed (with the reason) in a fresh transaction.
void SqlHandlerWorker::run_one_by_one(const std::vector<Job>& jobs) {
  static Statement fail("SELECT relaybus.fail($1, $2)", {TEXTOID, TEXTOID});
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const Job& job = jobs[i];
    try {
      worker::begin_transaction("relaybus: running an in-database handler alone");
      in_progress = {&jobs, i, i, false, &name_};
      lock_lanes(job.handler);
      handle(job);
      worker::commit_transaction();
      in_progress.jobs = nullptr;
    } catch (const PgError& e) {
      const std::string reason = std::string("commit failed: ") +
                                 (e.data != nullptr && e.data->message ? e.data->message : "error");
      worker::abort_transaction();
      in_progress.jobs = nullptr;
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
  // However the round ends, the exit callback must not see its jobs once they are gone
  // (an exception other than PgError leaves run_batch without clearing them).
  struct Forget {
    ~Forget() { in_progress.jobs = nullptr; }
  } forget;
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
    in_progress.jobs = nullptr;
    run_one_by_one(jobs);
    return jobs.size();
  }
}

// before_shmem_exit, so it runs before PostgreSQL's own cleanup aborts the transaction:
// abort it here, then hand the unfinished batch back in a transaction of its own (as
// PostgreSQL's removal of temporary relations at exit does). An error here is FATAL and
// ends the cleanup; the lanes are then taken over when their lease expires, charging one
// attempt to each delivery, as after a crash.
void hand_back_at_exit(int, Datum) {
  const BatchInProgress batch = in_progress;
  in_progress.jobs = nullptr;
  if (batch.jobs == nullptr || !PostmasterIsAlive()) return;
  static Statement fail("SELECT relaybus.fail($1, $2)", {TEXTOID, TEXTOID});
  static Statement release("SELECT relaybus.release($1)", {TEXTOID});
  static Statement relinquish("SELECT relaybus.relinquish($1)", {TEXTOID});
  // Everything the hand-back will lock, taken first without waiting. An exiting process
  // holds off interrupts, so no lock_timeout could end a wait: a row somebody else keeps
  // locked in an open transaction (a worker role completing a guessed token, say) would
  // keep this worker from ending. NOWAIT raises instead, which ends the hand-back.
  static Statement lock_lanes_nowait(
      "SELECT count(*) FROM (SELECT 1 FROM relaybus.lanes l WHERE l.lease_owner = $1"
      " AND l.holder IS NULL FOR NO KEY UPDATE NOWAIT) locked",
      {TEXTOID});
  static Statement lock_deliveries_nowait(
      "SELECT count(*) FROM (SELECT 1 FROM relaybus.deliveries d"
      " WHERE (d.event_id, d.handler) IN (SELECT t.event_id, t.handler"
      "  FROM unnest($1::text[], $2::text[]) AS t(event_id, handler)) FOR UPDATE NOWAIT) locked",
      {TEXTARRAYOID, TEXTARRAYOID});
  const bool overran = batch.calling && handler_call::overran();
  try {
    pg_call([] {
      disable_all_timeouts(false);
      AbortOutOfAnyTransaction();
    });
    const std::vector<Job>& jobs = *batch.jobs;
    worker::in_transaction("relaybus: handing back an unfinished batch", [&] {
      Params lanes;
      lanes.text(*batch.worker);
      lock_lanes_nowait.run(lanes);
      // 0.2 locks each delivery row as well; 0.3.0's release and fail write only under the
      // lane's lock (and its tokens name no event).
      if (worker::installed_schema() == worker::Installed::kLanes) {
        std::vector<std::string> event_ids, handlers;
        for (std::size_t i = batch.first; i < jobs.size(); ++i) {
          const core::LeaseToken token = core::parse_lease_token(jobs[i].token);
          event_ids.push_back(token.event_id);
          handlers.push_back(token.handler);
        }
        Params deliveries;
        deliveries.text_array(event_ids);
        deliveries.text_array(handlers);
        lock_deliveries_nowait.run(deliveries);
      }
      for (std::size_t i = batch.first; i < jobs.size(); ++i) {
        Params params;
        params.text(jobs[i].token);
        if (overran && i == batch.running) {
          params.text("the call went on for " + std::to_string(handler_call::kCancelGraceMs) +
                      " ms after its sql_timeout cancelled it, and its worker was ended "
                      "(SQLSTATE 57014)");
          fail.run(params);
        } else {
          release.run(params);
        }
      }
      Params params;
      params.text(*batch.worker);
      relinquish.run(params);
    });
    if (overran) {
      const char* handler = jobs[batch.running].handler.c_str();
      pg_call([&] {
        ereport(WARNING,
                (errmsg("relaybus: in-database handler \"%s\" went on after its timeout "
                        "cancelled it; its worker ended",
                        handler),
                 errdetail("The delivery counts as a failed attempt; the rest of its batch "
                           "was released."),
                 errhint("A handler must not catch query_canceled.")));
      });
    }
  } catch (...) {
    // Nothing more can be done in an exiting process; see above.
  }
}

void sql_handler_main(Datum arg) {
  const int slot = DatumGetInt32(arg);
  worker::mark_sql_handler_worker();
  worker::start("relaybus sql handler", worker::Shutdown::kBetweenCalls);
  wakeup::register_sql_worker(slot);
  handler_call::install();
  pg_call([] { before_shmem_exit(hand_back_at_exit, 0); });
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
