#include "wakeup.hpp"

#include "guard.hpp"
#include "settings.hpp"

extern "C" {
#include "access/xact.h"
#include "commands/async.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
}

namespace relaybus::pg::wakeup {

namespace {

struct SharedState {
  slock_t mutex;
  Latch* sql_worker_latches[kMaxSqlWorkers];
};

SharedState* shared = nullptr;
shmem_request_hook_type previous_request_hook = nullptr;
shmem_startup_hook_type previous_startup_hook = nullptr;
bool wake_sql_workers_at_commit = false;

void request_shared_memory() {
  if (previous_request_hook != nullptr) previous_request_hook();
  RequestAddinShmemSpace(MAXALIGN(sizeof(SharedState)));
}

void attach_shared_memory() {
  if (previous_startup_hook != nullptr) previous_startup_hook();
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  bool found = false;
  shared = static_cast<SharedState*>(ShmemInitStruct("relaybus", sizeof(SharedState), &found));
  if (!found) {
    SpinLockInit(&shared->mutex);
    for (auto& latch : shared->sql_worker_latches) latch = nullptr;
  }
  LWLockRelease(AddinShmemInitLock);
}

// Runs in every backend at the end of every transaction: must not fail.
void at_transaction_end(XactEvent event, void*) {
  if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT) {
    if (wake_sql_workers_at_commit && shared != nullptr) {
      Latch* latches[kMaxSqlWorkers];
      SpinLockAcquire(&shared->mutex);
      for (int i = 0; i < kMaxSqlWorkers; ++i) latches[i] = shared->sql_worker_latches[i];
      SpinLockRelease(&shared->mutex);
      for (Latch* latch : latches)
        if (latch != nullptr) SetLatch(latch);
    }
    wake_sql_workers_at_commit = false;
  } else if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT) {
    wake_sql_workers_at_commit = false;
  }
}

void unregister_sql_worker(int, Datum slot) {
  if (shared == nullptr) return;
  SpinLockAcquire(&shared->mutex);
  shared->sql_worker_latches[DatumGetInt32(slot)] = nullptr;
  SpinLockRelease(&shared->mutex);
}

}  // namespace

void install(bool preloading) {
  RegisterXactCallback(at_transaction_end, nullptr);
  if (preloading) {
    previous_request_hook = shmem_request_hook;
    shmem_request_hook = request_shared_memory;
    previous_startup_hook = shmem_startup_hook;
    shmem_startup_hook = attach_shared_memory;
  }
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
  if (shared == nullptr || slot < 0 || slot >= kMaxSqlWorkers) return;
  SpinLockAcquire(&shared->mutex);
  shared->sql_worker_latches[slot] = MyLatch;
  SpinLockRelease(&shared->mutex);
  before_shmem_exit(unregister_sql_worker, Int32GetDatum(slot));
}

}  // namespace relaybus::pg::wakeup
