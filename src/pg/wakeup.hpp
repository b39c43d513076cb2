// Wake-ups: a publish that commits wakes idle workers so they claim at once instead of at
// their next poll. Polling stays the correctness path; a lost wake-up only costs latency.
// - External workers: NOTIFY on channel "relaybus" with the handler as payload (only for
//   handlers without sql_function).
//   PostgreSQL folds identical notifications of one transaction, so it is one per
//   transaction and handler, sent at commit, never for a rolled-back publish.
// - In-database handler workers cannot LISTEN: at commit, the publishing backend sets
//   their latches, found in shared memory (only when the library is preloaded). Only the
//   workers serving the publisher's own database are woken.
#pragma once

#include <string>
#include <vector>

namespace relaybus::pg::wakeup {

// From _PG_init: the transaction callback always; shared memory when preloading.
void install(bool preloading);

// From publish, once per event: the external handlers that got a delivery (NOTIFY), and
// whether an in-database handler got one (latches at commit).
void published(const std::vector<std::string>& external_handlers, bool in_database);

// In-database handler worker `slot` of its database (worker::database_index()) registers
// its latch (and removes it when it exits).
void register_sql_worker(int slot);

// Upper bound on in-database handler workers per database (the shared memory is sized for
// it).
inline constexpr int kMaxSqlWorkers = 32;

}  // namespace relaybus::pg::wakeup
