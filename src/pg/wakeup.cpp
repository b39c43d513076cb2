#include "wakeup.hpp"

#include "guard.hpp"
#include "settings.hpp"
#include "shared_memory.hpp"
#include "worker_support.hpp"

extern "C" {
#include "access/xact.h"
#include "commands/async.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/spin.h"
}

namespace relaybus::pg::wakeup {

namespace {

// One row per database of relaybus.database, by its index in the list. A publish wakes only
// the workers of its own database: the row whose OID is the publisher's MyDatabaseId. The
// OID is written by the row's workers once connected (the postmaster knows only names).
struct DatabaseWorkers {
  Oid database;
  Latch* sql_worker_latches[kMaxSqlWorkers];
};

struct SharedState {
  slock_t mutex;
  DatabaseWorkers databases[settings::kMaxDatabases];
};

SharedState* shared = nullptr;
bool wake_sql_workers_at_commit = false;

void attach_shared_memory(void* memory, bool created) {
  shared = static_cast<SharedState*>(memory);
  if (!created) return;
  SpinLockInit(&shared->mutex);
  for (auto& row : shared->databases) {
    row.database = InvalidOid;
    for (auto& latch : row.sql_worker_latches) latch = nullptr;
  }
}

// Runs in every backend at the end of every transaction: must not fail.
void at_transaction_end(XactEvent event, void*) {
  if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT) {
    if (wake_sql_workers_at_commit && shared != nullptr) {
      Latch* latches[kMaxSqlWorkers] = {};
      SpinLockAcquire(&shared->mutex);
      for (const auto& row : shared->databases) {
        if (row.database != MyDatabaseId) continue;
        for (int i = 0; i < kMaxSqlWorkers; ++i) latches[i] = row.sql_worker_latches[i];
        break;
      }
      SpinLockRelease(&shared->mutex);
      for (Latch* latch : latches)
        if (latch != nullptr) SetLatch(latch);
    }
    wake_sql_workers_at_commit = false;
  } else if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT) {
    wake_sql_workers_at_commit = false;
  }
}

// slot: database index * kMaxSqlWorkers + worker slot.
void unregister_sql_worker(int, Datum slot) {
  if (shared == nullptr) return;
  const int position = DatumGetInt32(slot);
  SpinLockAcquire(&shared->mutex);
  shared->databases[position / kMaxSqlWorkers].sql_worker_latches[position % kMaxSqlWorkers] =
      nullptr;
  SpinLockRelease(&shared->mutex);
}

}  // namespace

void install(bool preloading) {
  RegisterXactCallback(at_transaction_end, nullptr);
  if (preloading) shared_memory::reserve("relaybus", sizeof(SharedState), attach_shared_memory);
}

void published(const std::vector<std::string>& handlers, bool in_database) {
  if (!settings::notify()) return;
  if (in_database) wake_sql_workers_at_commit = true;
  for (const auto& handler : handlers) {
    const char* payload = handler.c_str();
    pg_call([&] { Async_Notify("relaybus", payload); });
  }
}

void register_sql_worker(int slot) {
  const int index = worker::database_index();
  if (shared == nullptr || slot < 0 || slot >= kMaxSqlWorkers || index < 0 ||
      index >= settings::kMaxDatabases)
    return;
  SpinLockAcquire(&shared->mutex);
  // The same OID from every worker of the row, unless the database was dropped and created
  // again under its name: then the newest connection is right.
  shared->databases[index].database = MyDatabaseId;
  shared->databases[index].sql_worker_latches[slot] = MyLatch;
  SpinLockRelease(&shared->mutex);
  before_shmem_exit(unregister_sql_worker, Int32GetDatum(index * kMaxSqlWorkers + slot));
}

}  // namespace relaybus::pg::wakeup
