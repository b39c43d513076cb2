// Wake-ups: a publish that commits wakes idle workers so they claim at once instead of at
// their next poll. Polling stays the correctness path; a lost wake-up only costs latency.
// - External workers: NOTIFY on channel "relaybus" with the handler as payload.
//   PostgreSQL folds identical notifications of one transaction, so it is one per
//   transaction and handler, sent at commit, never for a rolled-back publish.
// - In-database handler workers cannot LISTEN: at commit, the publishing backend sets
//   their latches, found in shared memory (only when the library is preloaded).
#pragma once

#include <string>
#include <vector>

namespace relaybus::pg::wakeup {

// From _PG_init: the transaction callback always; shared memory when preloading.
void install(bool preloading);

// From publish, once per event: the handlers that got a delivery, and whether any of them
// is an in-database handler.
void published(const std::vector<std::string>& handlers, bool in_database);

// In-database handler worker `slot` registers its latch (and removes it when it exits).
void register_sql_worker(int slot);

// Upper bound on in-database handler workers (the shared memory is sized for it).
inline constexpr int kMaxSqlWorkers = 32;

}  // namespace relaybus::pg::wakeup
