// What relaybus's background workers share: starting up like a PostgreSQL worker, one
// transaction per unit of work, and finding out whether relaybus is installed.
#pragma once

#include "spi.hpp"

extern "C" {
#include "postmaster/bgworker.h"
}

namespace relaybus::pg::worker {

enum class Shutdown {
  kAtOnce,        // SIGTERM ends the worker at the next interrupt check (PostgreSQL's die)
  kBetweenCalls,  // SIGTERM during a handler call (call_started..call_ended) ends it at
                  // once; otherwise it sets shutdown_requested() and the worker finishes
                  // its unit of work first
};

// What a worker serves, written into its bgw_extra when it is registered (the postmaster
// knows database names only; the OID is found by connecting).
struct Target {
  int database_index;  // in relaybus.database
  int worker_slot;     // 0: its maintenance worker (which reports connection retries); 1 + n:
                       // its handler worker n
  char database[NAMEDATALEN];
};
static_assert(sizeof(Target) <= BGW_EXTRALEN, "a worker's target must fit into bgw_extra");

// From register_workers, while preloading: the shared memory of the connection retries.
void install_shared_state();

// Signal handlers (SIGHUP reloads, SIGTERM as `shutdown` says), then the connection to the
// worker's database (its Target). PostgreSQL ends a worker whose connection fails (FATAL:
// no such database, or one that refuses connections) and the postmaster restarts it every
// few seconds; so after failed connections a worker first waits, doubling from 1 s up to
// 1 minute, and the maintenance worker logs that it does.
void start(const char* application_name, Shutdown shutdown = Shutdown::kAtOnce);

// The index in relaybus.database of the database this worker serves (-1 before start()).
int database_index() noexcept;

// From an in-database handler worker's main: this process is one of them.
void mark_sql_handler_worker() noexcept;
// True in an in-database handler worker's own statements; false in every other process,
// and inside a handler call (a security-restricted operation), where the handler's code
// runs as its owner.
bool acting_as_sql_handler_worker() noexcept;

// kBetweenCalls: SIGTERM arrived.
bool shutdown_requested();

// The search_path a handler function runs with: the database's default for a session,
// captured before the worker pinned its own.
const char* handler_search_path() noexcept;

// kBetweenCalls: around a handler function call (which may run for its whole timeout),
// SIGTERM ends the worker at once; elsewhere the worker finishes its unit of work first.
// Signal-safe flags only: these may be called inside PG_TRY.
void call_started() noexcept;
void call_ended() noexcept;

// Ends the worker with exit code 1, so the postmaster restarts it (unless it is shutting
// down).
[[noreturn]] void exit_for_restart();

// Applies a pending configuration reload and ends the worker if it was asked to.
void check_signals();

// Runs body in a transaction of its own with SPI connected and a snapshot, shown in
// pg_stat_activity as `activity`. An error escapes as an exception (ending the worker).
template <typename Body>
void in_transaction(const char* activity, Body&& body);

// Which relaybus the workers find in this database: none they run (not installed, or the
// row-lease 0.1.0, which they leave alone), 0.2's lane leases (0.2.0, 0.2.1), or 0.3.0's
// positions and cursors. The workers wait until one they run is installed. Read per
// transaction: an ALTER EXTENSION UPDATE changes it between two rounds.
enum class Installed { kNone, kLanes, kPositions };
Installed installed_schema();
inline bool extension_installed() {
  return installed_schema() != Installed::kNone;
}

// Waits for the latch, the timeout or postmaster death.
void wait(int timeout_ms);

void begin_transaction(const char* activity);
void commit_transaction();
// After an error escaped a transaction (as a PgError): abort it and leave no SPI or
// snapshot behind.
void abort_transaction();

template <typename Body>
void in_transaction(const char* activity, Body&& body) {
  begin_transaction(activity);
  body();
  commit_transaction();
}

}  // namespace relaybus::pg::worker
