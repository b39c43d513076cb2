#include "settings.hpp"

#include "postgres.hpp"
#include "wakeup.hpp"

#include "../core/sql_timeout.hpp"

namespace relaybus::pg::settings {

namespace {
bool completion_history_value = false;
int retention_completed_value = 7 * 24 * 3600;
int retention_dead_value = 14 * 24 * 3600;
char* database_value = nullptr;
int maintenance_interval_value = 1000;
int sql_handler_workers_value = 2;
int sql_handler_timeout_value = 30000;
int sql_handler_batch_value = 10;
int sql_handler_poll_interval_value = 1000;
bool notify_value = true;

// relaybus.sql_handler_timeout is the sql_timeout of handlers subscribed without one: the
// same bounds, in the setting's unit.
constexpr int kMinSqlTimeoutMs = static_cast<int>(core::kMinSqlTimeoutUs / 1000);
constexpr int kMaxSqlTimeoutMs = static_cast<int>(core::kMaxSqlTimeoutUs / 1000);
static_assert(core::kMinSqlTimeoutUs % 1000 == 0 && core::kMaxSqlTimeoutUs % 1000 == 0);
}  // namespace

void define() {
  // PGC_SUSET: set in postgresql.conf, ALTER SYSTEM/DATABASE, or by a superuser session;
  // an ordinary worker must not switch history or retention for everybody.
  DefineCustomBoolVariable(
      "relaybus.completion_history", "Keeps an append-only history row per completed delivery.",
      "Off by default: it costs one insert per completion.", &completion_history_value, false,
      PGC_SUSET, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable("relaybus.retention_completed",
                          "How long events without deliveries and completion history are kept.",
                          "purge_expired deletes them once older than this. Keep it longer "
                          "than the longest redelivery window of your brokers: a repeat of a "
                          "purged event id is a new event.",
                          &retention_completed_value, 7 * 24 * 3600, 0, INT_MAX, PGC_SUSET,
                          GUC_UNIT_S, nullptr, nullptr, nullptr);
  DefineCustomIntVariable("relaybus.retention_dead", "How long dead letters are kept.",
                          "purge_expired deletes dead deliveries not updated for this long.",
                          &retention_dead_value, 14 * 24 * 3600, 0, INT_MAX, PGC_SUSET, GUC_UNIT_S,
                          nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "relaybus.maintenance_interval", "Time between the background worker's maintenance rounds.",
      "Each round takes over expired lanes and applies retention.", &maintenance_interval_value,
      1000, 10, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS, nullptr, nullptr, nullptr);
  DefineCustomIntVariable("relaybus.sql_handler_timeout",
                          "Statement timeout of one in-database handler call.",
                          "For handlers subscribed without sql_timeout. A call that runs "
                          "longer is cancelled and counts as a failed attempt.",
                          &sql_handler_timeout_value, 30000, kMinSqlTimeoutMs, kMaxSqlTimeoutMs,
                          PGC_SIGHUP, GUC_UNIT_MS, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "relaybus.sql_handler_batch", "Deliveries an in-database handler worker claims at once.",
      nullptr, &sql_handler_batch_value, 10, 1, 50, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable("relaybus.sql_handler_poll_interval",
                          "How long an idle in-database handler worker waits for work.",
                          "Wake-ups end the wait early; this is the fallback.",
                          &sql_handler_poll_interval_value, 1000, 10, 3600 * 1000, PGC_SIGHUP,
                          GUC_UNIT_MS, nullptr, nullptr, nullptr);
  DefineCustomBoolVariable("relaybus.notify", "Wakes idle workers when a publish commits.",
                           "Sends NOTIFY relaybus with the handler as payload (one per "
                           "transaction and handler) and wakes the in-database handler "
                           "workers. Polling stays the correctness path.",
                           &notify_value, true, PGC_SUSET, 0, nullptr, nullptr, nullptr);
  // Settings of context postmaster may only be defined while the library is preloaded.
  if (process_shared_preload_libraries_in_progress) {
    DefineCustomStringVariable(
        "relaybus.database", "Database the relaybus background workers connect to.",
        "relaybus must be installed there for them to do anything.", &database_value, "postgres",
        PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("relaybus.sql_handler_workers",
                            "Number of background workers running in-database handlers.", nullptr,
                            &sql_handler_workers_value, 2, 0, wakeup::kMaxSqlWorkers, PGC_POSTMASTER, 0,
                            nullptr, nullptr, nullptr);
  }
  MarkGUCPrefixReserved("relaybus");
}

bool completion_history() {
  return completion_history_value;
}
int retention_completed_s() {
  return retention_completed_value;
}
int retention_dead_s() {
  return retention_dead_value;
}
const char* database() {
  return database_value != nullptr ? database_value : "postgres";
}
int maintenance_interval_ms() {
  return maintenance_interval_value;
}
int sql_handler_workers() {
  return sql_handler_workers_value;
}
int sql_handler_timeout_ms() {
  return sql_handler_timeout_value;
}
int sql_handler_batch() {
  return sql_handler_batch_value;
}
int sql_handler_poll_interval_ms() {
  return sql_handler_poll_interval_value;
}
bool notify() {
  return notify_value;
}

}  // namespace relaybus::pg::settings
