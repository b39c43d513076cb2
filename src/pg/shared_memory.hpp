// Named structs in PostgreSQL's main shared memory, for the modules of a preloaded
// library: each module reserves its struct from _PG_init, and one pair of PostgreSQL hooks
// (shmem_request_hook, shmem_startup_hook) requests and attaches them all.
#pragma once

#include <cstddef>

namespace relaybus::pg::shared_memory {

// Called once the struct exists, in the postmaster (and in every process under
// EXEC_BACKEND), under AddinShmemInitLock: keep the address, and when `created`,
// initialize the struct (nobody else uses it yet). Must not fail.
using Attach = void (*)(void* memory, bool created);

// From _PG_init, only while shared_preload_libraries is being processed: reserves `size`
// bytes named `name` (unique within the cluster) and calls `attach` once they exist.
void reserve(const char* name, std::size_t size, Attach attach);

}  // namespace relaybus::pg::shared_memory
