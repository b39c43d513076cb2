#include "shared_memory.hpp"

#include "postgres.hpp"

extern "C" {
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
}

// Plain PostgreSQL code, entered from PostgreSQL: nothing here throws a C++ exception
// (see guard.hpp); a failure in the hooks is PostgreSQL's own ereport.
namespace relaybus::pg::shared_memory {

namespace {

struct Reservation {
  const char* name;
  std::size_t size;
  Attach attach;
};

// As many as relaybus's modules reserve: filled from _PG_init and read by the postmaster's
// hooks, a fixed array needs no allocation.
constexpr int kMaxReservations = 8;
Reservation reservations[kMaxReservations];
int reserved = 0;

shmem_request_hook_type previous_request_hook = nullptr;
shmem_startup_hook_type previous_startup_hook = nullptr;

void request_shared_memory() {
  if (previous_request_hook != nullptr) previous_request_hook();
  for (int i = 0; i < reserved; ++i) RequestAddinShmemSpace(MAXALIGN(reservations[i].size));
}

void attach_shared_memory() {
  if (previous_startup_hook != nullptr) previous_startup_hook();
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  for (int i = 0; i < reserved; ++i) {
    bool found = false;
    void* memory = ShmemInitStruct(reservations[i].name, reservations[i].size, &found);
    reservations[i].attach(memory, !found);
  }
  LWLockRelease(AddinShmemInitLock);
}

}  // namespace

void reserve(const char* name, std::size_t size, Attach attach) {
  if (reserved == kMaxReservations)
    elog(ERROR, "relaybus: more than %d shared memory reservations", kMaxReservations);
  if (reserved == 0) {
    previous_request_hook = shmem_request_hook;
    shmem_request_hook = request_shared_memory;
    previous_startup_hook = shmem_startup_hook;
    shmem_startup_hook = attach_shared_memory;
  }
  reservations[reserved++] = {name, size, attach};
}

}  // namespace relaybus::pg::shared_memory
