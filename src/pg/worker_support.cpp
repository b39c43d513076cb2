#include "worker_support.hpp"

#include "settings.hpp"

extern "C" {
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/snapmgr.h"
}

namespace relaybus::pg::worker {

void start(const char* application_name) {
  pg_call([&] {
    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    pqsignal(SIGTERM, die);
    BackgroundWorkerUnblockSignals();
    BackgroundWorkerInitializeConnection(settings::database(), nullptr, 0);
    pgstat_report_appname(application_name);
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

bool extension_installed() {
  static Statement installed("SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'relaybus'",
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
