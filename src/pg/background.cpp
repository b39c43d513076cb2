#include "background.hpp"

#include "error_codes.hpp"
#include "settings.hpp"
#include "worker_support.hpp"

#include <cstdio>
#include <cstring>

extern "C" {
#include "lib/ilist.h"
#include "postmaster/bgworker.h"
#include "postmaster/bgworker_internals.h"
}

namespace relaybus::pg::background {

namespace {

// Seconds before the postmaster restarts a worker that died. An in-database handler worker
// also ends itself when a handler ignores its timeout (handler_call.hpp): it comes back
// after one second, so the other handlers it serves wait for at most the timeout, the
// grace and this.
constexpr int kRestartSeconds = 5;
constexpr int kSqlHandlerRestartSeconds = 1;

void register_one(const char* name, const char* type, const char* function, int slot,
                  int restart_seconds, const worker::Target& target) {
  BackgroundWorker worker = {};
  worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
  worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
  worker.bgw_restart_time = restart_seconds;
  snprintf(worker.bgw_library_name, BGW_MAXLEN, "relaybus");
  snprintf(worker.bgw_function_name, BGW_MAXLEN, "%s", function);
  snprintf(worker.bgw_name, BGW_MAXLEN, "%s", name);
  snprintf(worker.bgw_type, BGW_MAXLEN, "%s", type);
  worker.bgw_main_arg = Int32GetDatum(slot);
  std::memcpy(worker.bgw_extra, &target, sizeof target);
  RegisterBackgroundWorker(&worker);
}

// One step of a round in a transaction of its own. A step that fails is logged and
// rolled back, and the round goes on: the next round tries again, where exiting would
// stop maintenance for everyone until the postmaster's restart.
template <typename Body>
void maintenance_step(const char* activity, Body&& body) {
  // Copied out: the error may live in the transaction's memory, gone after the abort.
  std::string message;
  int code = 0;
  try {
    worker::in_transaction(activity, body);
    return;
  } catch (const PgError& e) {
    message = e.data != nullptr && e.data->message != nullptr ? e.data->message : "error";
    code = e.data != nullptr ? e.data->sqlerrcode : ERRCODE_INTERNAL_ERROR;
  } catch (const core::Error& e) {
    message = e.what();
    code = sqlerrcode_of(e.code());
  }
  worker::abort_transaction();
  pg_call([&] {
    ereport(WARNING, (errmsg("relaybus: maintenance step \"%s\" failed", activity),
                      errdetail("%s (SQLSTATE %s)", message.c_str(), unpack_sql_state(code)),
                      errhint("The next round, after relaybus.maintenance_interval, tries "
                              "again.")));
  });
}

void maintenance_main(Datum) {
  worker::start("relaybus maintenance");
  static Statement take_over("SELECT relaybus.take_over_expired()", {});
  static Statement purge("SELECT relaybus.purge_expired()", {});
  // What a round allocates outside its transactions (errors it reports) goes with it.
  MemoryContext round_context = nullptr;
  pg_call([&] {
    round_context = AllocSetContextCreate(TopMemoryContext, "relaybus maintenance round",
                                          ALLOCSET_DEFAULT_SIZES);
  });
  for (;;) {
    worker::check_signals();
    MemoryContextSwitchTo(round_context);
    // Each step in its own short transaction; each is bounded (1,000 lanes, 10,000 rows of
    // each kind), so a round never holds many locks for long.
    bool installed = false;
    maintenance_step("relaybus: take over expired lanes", [&] {
      installed = worker::extension_installed();
      if (installed) take_over.run();
    });
    if (installed) maintenance_step("relaybus: purge expired", [&] { purge.run(); });
    MemoryContextSwitchTo(TopMemoryContext);
    MemoryContextReset(round_context);
    worker::wait(settings::maintenance_interval_ms());
  }
}

// The pool left to relaybus: max_worker_processes less the workers registered before it
// (PostgreSQL's logical replication launcher, libraries listed earlier in
// shared_preload_libraries). Parallel query and logical replication's own workers take from
// it at run time too. If relaybus needs more, some of its workers do not run at all.
void warn_if_pool_too_small(int needed) {
  int registered = 0;
  // slist_foreach's type check does not compile as C++.
  for (const slist_node* node = BackgroundWorkerList.head.next; node != nullptr; node = node->next)
    ++registered;
  const int left = max_worker_processes - registered;
  if (needed <= left) return;
  ereport(WARNING,
          (errmsg("relaybus needs %d background workers, but max_worker_processes leaves %d",
                  needed, left),
           errdetail("relaybus.database lists %d databases; each gets 1 maintenance worker and "
                     "relaybus.sql_handler_workers = %d handler workers. max_worker_processes is "
                     "%d and %d workers are registered already.",
                     settings::database_count(), settings::sql_handler_workers(),
                     max_worker_processes, registered),
           errhint("Raise max_worker_processes (parallel query and logical replication share it), "
                   "or list fewer databases, or lower relaybus.sql_handler_workers.")));
}

}  // namespace

void register_workers() {
  // PostgreSQL only warned about a value relaybus.database's check hook refused, and kept
  // the default: serving 'postgres' instead of what was listed would be a silent surprise.
  // In the postmaster, while preloading, this ends the server's start with the message.
  const char* refused_value = nullptr;
  if (const char* reason = settings::database_rejection(&refused_value))
    ereport(FATAL,
            (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
             errmsg("invalid value for parameter \"relaybus.database\": \"%s\"", refused_value),
             errdetail("%s", reason),
             errhint("Separate database names with commas; double-quote a name that "
                     "holds a comma, a space or a double quote (doubled).")));
  if (IsBinaryUpgrade) return;
  worker::install_shared_state();
  const int databases = settings::database_count();
  const int handlers = settings::sql_handler_workers();
  if (const char* twice = settings::database_listed_twice())
    ereport(WARNING,
            (errmsg("relaybus.database lists \"%s\" more than once; its workers run once", twice)));
  if (databases == 0) {
    ereport(LOG, (errmsg("relaybus.database is empty: no relaybus background worker runs")));
    return;
  }
  warn_if_pool_too_small(databases * (1 + handlers));
  for (int d = 0; d < databases; ++d) {
    worker::Target target = {};
    target.database_index = d;
    strlcpy(target.database, settings::database_name(d), sizeof target.database);
    // BGW_MAXLEN (96) holds the longest: "relaybus sql handler 31 [" + 63 bytes + "]".
    char name[BGW_MAXLEN];
    snprintf(name, sizeof name, "relaybus maintenance [%s]", target.database);
    target.worker_slot = 0;
    register_one(name, "relaybus maintenance", "relaybus_maintenance_main", 0, kRestartSeconds,
                 target);
    for (int i = 0; i < handlers; ++i) {
      target.worker_slot = 1 + i;
      snprintf(name, sizeof name, "relaybus sql handler %d [%s]", i, target.database);
      register_one(name, "relaybus sql handler", "relaybus_sql_handler_main", i,
                   kSqlHandlerRestartSeconds, target);
    }
  }
}

}  // namespace relaybus::pg::background

extern "C" {
PGDLLEXPORT void relaybus_maintenance_main(Datum arg);
void relaybus_maintenance_main(Datum arg) {
  relaybus::pg::run_guarded_worker(relaybus::pg::background::maintenance_main, arg);
}
}
