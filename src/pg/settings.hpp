// relaybus's configuration parameters (GUCs). Defined in _PG_init; read at call time.
#pragma once

#include <cstdint>

namespace relaybus::pg::settings {

void define();

// relaybus.completion_history: keep an append-only row per completion.
bool completion_history();
// relaybus.retention_completed, seconds: how long events without deliveries and the
// completion history (0.1.0's completed deliveries included) are kept.
int retention_completed_s();
// relaybus.retention_dead, seconds: how long dead letters are kept.
int retention_dead_s();
// relaybus.max_delay, seconds: how far ahead publish's available_at and fail's retry_at may
// be (src/core/due_time.hpp).
int max_delay_s();

// Background worker (issue 3). Settings of context postmaster exist only when the library is
// preloaded; without it they read as their defaults and no worker runs.

// True when the library was loaded by shared_preload_libraries: in the postmaster, and in
// every backend and worker it starts (they inherit the library's state, or load it again
// the same way under EXEC_BACKEND). False in a backend that loaded the library itself on
// first use: the postmaster settings below are not defined there and no worker runs.
bool preloaded();

// relaybus.database: the databases the background workers serve, a comma-separated list of
// at most kMaxDatabases distinct names (a name listed twice counts once).
inline constexpr int kMaxDatabases = 16;
// The setting as written.
const char* database_setting();
// The distinct names, in the order listed (0 without the preload, or for an empty list).
int database_count();
const char* database_name(int index);
bool serves_database(const char* name);
// The first name listed more than once, or nullptr: reported at startup.
const char* database_listed_twice();
// While preloading: why relaybus.database was refused (nullptr if it was not), and the
// refused value. PostgreSQL itself only warns and keeps the default then.
const char* database_rejection(const char** value);
// relaybus.maintenance_interval, ms: time between maintenance rounds.
int maintenance_interval_ms();
// relaybus.sql_handler_workers: how many workers run in-database handlers.
int sql_handler_workers();
// relaybus.sql_handler_timeout, ms: statement timeout of an in-database handler call, for
// handlers subscribed without their own.
int sql_handler_timeout_ms();
// relaybus.sql_handler_batch: deliveries an in-database handler worker claims at once.
int sql_handler_batch();
// relaybus.sql_handler_poll_interval, ms: how long an idle in-database handler worker waits
// when no wake-up comes.
int sql_handler_poll_interval_ms();
// relaybus.sql_handler_max_payload, in bytes: the largest event (payload plus headers, as
// their uncompressed size) publish accepts for an in-database handler and a handler worker
// loads. The setting is in kB: 16MB by default, at most 1GB (PostgreSQL's own limit).
inline constexpr int kDefaultSqlHandlerMaxPayloadKb = 16 * 1024;
inline constexpr int kMaxSqlHandlerMaxPayloadKb = 1024 * 1024;
std::int64_t sql_handler_max_payload_bytes();
// relaybus.notify: a publish wakes idle workers at commit.
bool notify();
// relaybus.unrouted_publish: what a publish that stores an event for no handler (no
// subscription matches its type) reports, beside counting it.
enum class UnroutedPublish { kIgnore, kNotice, kWarning, kError };
UnroutedPublish unrouted_publish();

}  // namespace relaybus::pg::settings
