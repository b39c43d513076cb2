#include "background.hpp"

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

void maintenance_main(Datum) {
  worker::start("relaybus maintenance");
  static Statement take_over("SELECT relaybus.take_over_expired()", {});
  static Statement purge("SELECT relaybus.purge_expired()", {});
  for (;;) {
    worker::check_signals();
    // Each step in its own short transaction; each is bounded (1,000 lanes, 10,000 rows of
    // each kind), so a round never holds many locks for long.
    bool installed = false;
    worker::in_transaction("relaybus: take over expired lanes", [&] {
      installed = worker::extension_installed();
      if (installed) take_over.run();
    });
    if (installed) {
      worker::in_transaction("relaybus: purge expired", [&] { purge.run(); });
    }
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
