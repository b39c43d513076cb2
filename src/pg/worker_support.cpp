#include "worker_support.hpp"

#include "settings.hpp"
#include "wakeup.hpp"

#include <algorithm>
#include <cstring>

extern "C" {
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/snapmgr.h"
}

namespace relaybus::pg::worker {

namespace {

volatile sig_atomic_t shutdown_flag = 0;
const char* handler_search_path_value = "\"$user\", public";
volatile sig_atomic_t in_call = 0;
bool sql_handler_worker = false;
int database_index_value = -1;

// Per worker (its database's index in relaybus.database, and its slot: 0 the maintenance
// worker, 1 + n handler worker n): whether it is connecting, and how many of its
// incarnations in a row failed to. A registered worker runs as one process at a time, so a
// slot has one writer; the state outlives the process, which a failed connection ends.
struct ConnectSlot {
  bool connecting;
  std::uint32_t failures;
};
struct ConnectState {
  ConnectSlot slots[settings::kMaxDatabases][1 + wakeup::kMaxSqlWorkers];
};
ConnectState* connect_state = nullptr;
shmem_request_hook_type previous_request_hook = nullptr;
shmem_startup_hook_type previous_startup_hook = nullptr;
constexpr int kMaxConnectDelayS = 60;

void request_shared_memory() {
  if (previous_request_hook != nullptr) previous_request_hook();
  RequestAddinShmemSpace(MAXALIGN(sizeof(ConnectState)));
}

void attach_shared_memory() {
  if (previous_startup_hook != nullptr) previous_startup_hook();
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  bool found = false;
  connect_state = static_cast<ConnectState*>(
      ShmemInitStruct("relaybus worker connections", sizeof(ConnectState), &found));
  if (!found) memset(connect_state, 0, sizeof(ConnectState));
  LWLockRelease(AddinShmemInitLock);
}

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

void install_shared_state() {
  previous_request_hook = shmem_request_hook;
  shmem_request_hook = request_shared_memory;
  previous_startup_hook = shmem_startup_hook;
  shmem_startup_hook = attach_shared_memory;
}

int database_index() noexcept {
  return database_index_value;
}

namespace {

// Before connecting: if this worker's predecessor died while connecting (a failed
// connection is FATAL: the dying process gets no chance to count it), count a failure; after
// failures, wait 1 s, 2 s, 4 s, ... up to a minute (SIGTERM and postmaster death end the
// wait). The postmaster's own restart delay comes on top.
void wait_for_connect_turn(const Target& target) {
  if (connect_state == nullptr) return;
  ConnectSlot& slot = connect_state->slots[target.database_index][target.worker_slot];
  if (slot.connecting) ++slot.failures;
  slot.connecting = false;
  if (slot.failures > 0) {
    const int delay_s =
        std::min(kMaxConnectDelayS, 1 << std::min<std::uint32_t>(slot.failures - 1, 6));
    if (target.worker_slot == 0)
      ereport(LOG, (errmsg("relaybus: %u connection attempts to database \"%s\" failed; its "
                           "workers try again in %d s",
                           slot.failures, target.database, delay_s),
                    errhint("Create the database, or remove it from relaybus.database and "
                            "restart the server.")));
    const TimestampTz until = GetCurrentTimestamp() + static_cast<TimestampTz>(delay_s) * 1000000;
    for (;;) {
      CHECK_FOR_INTERRUPTS();
      if (shutdown_flag) proc_exit(1);
      const long left_ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), until);
      if (left_ms <= 0) break;
      (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, left_ms,
                      PG_WAIT_EXTENSION);
      ResetLatch(MyLatch);
    }
  }
  slot.connecting = true;
}

void connected(const Target& target) {
  if (connect_state == nullptr) return;
  ConnectSlot& slot = connect_state->slots[target.database_index][target.worker_slot];
  slot.connecting = false;
  slot.failures = 0;
}

// The workers connect without a user name, as the bootstrap superuser, and PostgreSQL then
// applies the database's settings and that role's settings in it. A database owner who is
// not a superuser may ALTER DATABASE ... SET role, or SET session_authorization (which a
// login overrides but a worker's connection does not), to itself: the workers' own
// statements would run as the owner, fail, and the workers would restart for good. So
// both are set back to the role the worker connected as, session first (the role's reset
// value is the session user), as overrides no later setting replaces.
void pin_identity() {
  StartTransactionCommand();  // the role's name comes from the catalog
  const char* connected_as = GetUserNameFromId(GetAuthenticatedUserId(), false);
  SetConfigOption("session_authorization", connected_as, PGC_SUSET, PGC_S_OVERRIDE);
  SetConfigOption("role", "none", PGC_SUSET, PGC_S_OVERRIDE);
  CommitTransactionCommand();
  if (GetSessionUserId() != GetAuthenticatedUserId() || GetUserId() != GetAuthenticatedUserId())
    ereport(FATAL, (errcode(ERRCODE_INTERNAL_ERROR),
                    errmsg("relaybus: the worker could not restore the role it connected as")));
}

}  // namespace

void start(const char* application_name, Shutdown shutdown) {
  Target target;
  std::memcpy(&target, MyBgworkerEntry->bgw_extra, sizeof target);
  target.database[NAMEDATALEN - 1] = '\0';
  database_index_value = target.database_index;
  pg_call([&] {
    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    pqsignal(SIGTERM, shutdown == Shutdown::kAtOnce ? die : on_sigterm);
    BackgroundWorkerUnblockSignals();
    wait_for_connect_turn(target);
    BackgroundWorkerInitializeConnection(target.database, nullptr, 0);
    connected(target);
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
    pin_identity();
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

Installed installed_schema() {
  // The row-lease 0.1.0 has no lanes and its own semantics: not run. Every other version
  // is one of the two protocols the workers speak through the SQL API; a version this
  // build does not know is not run either.
  static Statement installed(
      "SELECT CASE WHEN extversion IN ('0.2.0', '0.2.1') THEN 1"
      " WHEN extversion = '0.3.0' THEN 2 ELSE 0 END"
      " FROM pg_catalog.pg_extension WHERE extname = 'relaybus'",
      {});
  if (installed.run() != 1) return Installed::kNone;
  switch (row::int4(0, 1)) {
    case 1:
      return Installed::kLanes;
    case 2:
      return Installed::kPositions;
    default:
      return Installed::kNone;
  }
}

void wait(int timeout_ms) {
  pg_call([&] {
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, timeout_ms,
                    PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
  });
}

}  // namespace relaybus::pg::worker
