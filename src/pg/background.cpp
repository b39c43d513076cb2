#include "background.hpp"

#include "error_codes.hpp"
#include "settings.hpp"
#include "worker_support.hpp"

#include <cstdio>

extern "C" {
#include "postmaster/bgworker.h"
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
                  int restart_seconds) {
  BackgroundWorker worker = {};
  worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
  worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
  worker.bgw_restart_time = restart_seconds;
  snprintf(worker.bgw_library_name, BGW_MAXLEN, "relaybus");
  snprintf(worker.bgw_function_name, BGW_MAXLEN, "%s", function);
  snprintf(worker.bgw_name, BGW_MAXLEN, "%s", name);
  snprintf(worker.bgw_type, BGW_MAXLEN, "%s", type);
  worker.bgw_main_arg = Int32GetDatum(slot);
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

}  // namespace

void register_workers() {
  if (IsBinaryUpgrade) return;
  register_one("relaybus maintenance", "relaybus maintenance", "relaybus_maintenance_main", 0,
               kRestartSeconds);
  for (int i = 0; i < settings::sql_handler_workers(); ++i) {
    char name[BGW_MAXLEN];
    snprintf(name, sizeof name, "relaybus sql handler %d", i);
    register_one(name, "relaybus sql handler", "relaybus_sql_handler_main", i,
                 kSqlHandlerRestartSeconds);
  }
}

}  // namespace relaybus::pg::background

extern "C" {
PGDLLEXPORT void relaybus_maintenance_main(Datum arg);
void relaybus_maintenance_main(Datum arg) {
  relaybus::pg::run_guarded_worker(relaybus::pg::background::maintenance_main, arg);
}
}
