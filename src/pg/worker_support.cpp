#include "worker_support.hpp"

#include "settings.hpp"

extern "C" {
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/snapmgr.h"
}

namespace relaybus::pg::worker {

namespace {

volatile sig_atomic_t shutdown_flag = 0;
const char* handler_search_path_value = "\"$user\", public";
volatile sig_atomic_t in_call = 0;
bool sql_handler_worker = false;

extern "C" void on_sigterm(SIGNAL_ARGS) {
  const int saved_errno = errno;
  shutdown_flag = 1;
  if (in_call) {
    die(postgres_signal_arg);  // sets the latch and the interrupt flags itself
  } else {
    SetLatch(MyLatch);
  }
  errno = saved_errno;
}

}  // namespace

void mark_sql_handler_worker() noexcept {
  sql_handler_worker = true;
}

bool acting_as_sql_handler_worker() noexcept {
  return sql_handler_worker && !InSecurityRestrictedOperation();
}

bool shutdown_requested() {
  return shutdown_flag != 0;
}

const char* handler_search_path() noexcept {
  return handler_search_path_value;
}

void call_started() noexcept {
  in_call = 1;
}

void call_ended() noexcept {
  in_call = 0;
  // die() ran during the call but the call returned before noticing: finish gracefully.
  if (shutdown_flag) ProcDiePending = false;
}

void exit_for_restart() {
  pg_call([] { proc_exit(1); });
  pg_unreachable();
}

void start(const char* application_name, Shutdown shutdown) {
  pg_call([&] {
    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    pqsignal(SIGTERM, shutdown == Shutdown::kAtOnce ? die : on_sigterm);
    BackgroundWorkerUnblockSignals();
    BackgroundWorkerInitializeConnection(settings::database(), nullptr, 0);
    pgstat_report_appname(application_name);
    // Handlers get the search_path the database would give a session (its defaults
    // included); the workers' own statements run with the pinned one below.
    handler_search_path_value = pstrdup(GetConfigOption("search_path", false, false));
    // Database or role defaults (ALTER DATABASE/ROLE ... SET) must not change how the
    // workers' own statements run.
    const char* pinned[][2] = {{"search_path", "pg_catalog, pg_temp"},
                               {"default_transaction_isolation", "read committed"},
                               {"default_transaction_read_only", "off"},
                               {"statement_timeout", "0"},
                               {"lock_timeout", "0"},
                               {"idle_in_transaction_session_timeout", "0"}};
    for (const auto& setting : pinned)
      SetConfigOption(setting[0], setting[1], PGC_SUSET, PGC_S_OVERRIDE);
  });
}

void check_signals() {
  pg_call([] {
    CHECK_FOR_INTERRUPTS();
    if (ConfigReloadPending) {
      ConfigReloadPending = false;
      ProcessConfigFile(PGC_SIGHUP);
    }
  });
}

void begin_transaction(const char* activity) {
  pg_call([&] {
    SetCurrentStatementStartTimestamp();
    StartTransactionCommand();
    PushActiveSnapshot(GetTransactionSnapshot());
    pgstat_report_activity(STATE_RUNNING, activity);
  });
  SpiConnection spi;
  (void)spi;
}

void commit_transaction() {
  SpiConnection::finish_current();
  pg_call([] {
    PopActiveSnapshot();
    CommitTransactionCommand();
    pgstat_report_stat(false);
    pgstat_report_activity(STATE_IDLE, nullptr);
  });
}

void abort_transaction() {
  pg_call([] {
    MemoryContextSwitchTo(TopMemoryContext);
    AbortCurrentTransaction();
    pgstat_report_activity(STATE_IDLE, nullptr);
  });
}

bool extension_installed() {
  // Only a 0.2.0 schema: the row-lease 0.1.0 has no lanes and its own semantics.
  static Statement installed(
      "SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'relaybus' AND extversion = '0.2.0'",
      {});
  return installed.run() == 1;
}

void wait(int timeout_ms) {
  pg_call([&] {
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, timeout_ms,
                    PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
  });
}

}  // namespace relaybus::pg::worker
