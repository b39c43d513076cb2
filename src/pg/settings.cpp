#include "settings.hpp"

#include "postgres.hpp"
#include "wakeup.hpp"

#include "../core/due_time.hpp"
#include "../core/sql_timeout.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {
#include "utils/varlena.h"
}

namespace relaybus::pg::settings {

namespace {
bool completion_history_value = false;
int retention_completed_value = 7 * 24 * 3600;
int retention_dead_value = 14 * 24 * 3600;
int max_delay_value = static_cast<int>(core::kDefaultMaxDelayUs / 1'000'000);
char* database_value = nullptr;
bool preloaded_value = false;

// relaybus.database, parsed by its check hook (the GUC's "extra": malloc'd, freed by the GUC
// machinery). Plain data only: the hook calls functions that may ereport.
struct DatabaseList {
  int count;
  char names[kMaxDatabases][NAMEDATALEN];
  char duplicate[NAMEDATALEN];  // the first name listed more than once, or ""
};
const DatabaseList* database_list = nullptr;

// Why the check hook refused relaybus.database while the library was being preloaded.
// PostgreSQL then only warns and keeps the default ('postgres'), which would quietly serve a
// database nobody listed; register_workers refuses to start the server instead.
char rejected_value[256];
char rejection[256];
int maintenance_interval_value = 1000;
int sql_handler_workers_value = 2;
int sql_handler_timeout_value = 30000;
int sql_handler_batch_value = 10;
int sql_handler_poll_interval_value = 1000;
int sql_handler_max_payload_value = kDefaultSqlHandlerMaxPayloadKb;
bool notify_value = true;
int unrouted_publish_value = static_cast<int>(UnroutedPublish::kNotice);
const config_enum_entry unrouted_publish_options[] = {
    {"ignore", static_cast<int>(UnroutedPublish::kIgnore), false},
    {"notice", static_cast<int>(UnroutedPublish::kNotice), false},
    {"warning", static_cast<int>(UnroutedPublish::kWarning), false},
    {"error", static_cast<int>(UnroutedPublish::kError), false},
    {nullptr, 0, false}};

// relaybus.sql_handler_timeout is the sql_timeout of handlers subscribed without one: the
// same bounds, in the setting's unit.
constexpr int kMinSqlTimeoutMs = static_cast<int>(core::kMinSqlTimeoutUs / 1000);
constexpr int kMaxSqlTimeoutMs = static_cast<int>(core::kMaxSqlTimeoutUs / 1000);
static_assert(core::kMinSqlTimeoutUs % 1000 == 0 && core::kMaxSqlTimeoutUs % 1000 == 0);

// Splits like PostgreSQL's own list settings (SplitGUCList, as for shared_preload_libraries):
// names separated by commas, whitespace around them ignored, nothing downcased (database
// names are case-sensitive, and a single name must mean what it meant before lists), a
// double-quoted name may hold commas, spaces and doubled double quotes. A name listed twice
// is served once.
bool check_database(char** newval, void** extra, GucSource) {
  const char* reason = nullptr;
  char detail[128] = "";
  char* raw = pstrdup(*newval != nullptr ? *newval : "");
  List* names = NIL;
  auto* list = static_cast<DatabaseList*>(malloc(sizeof(DatabaseList)));
  if (list == nullptr) {
    GUC_check_errcode(ERRCODE_OUT_OF_MEMORY);
    return false;
  }
  memset(list, 0, sizeof *list);
  if (!SplitGUCList(raw, ',', &names)) {
    reason = "List syntax is invalid.";
  } else {
    ListCell* cell;
    foreach (cell, names) {
      const char* name = static_cast<const char*>(lfirst(cell));
      if (strlen(name) >= NAMEDATALEN) {
        snprintf(detail, sizeof detail, "A database name has at most %d bytes.", NAMEDATALEN - 1);
        reason = detail;
        break;
      }
      bool listed = false;
      for (int i = 0; i < list->count && !listed; ++i) listed = strcmp(list->names[i], name) == 0;
      if (listed) {
        if (list->duplicate[0] == '\0') strlcpy(list->duplicate, name, NAMEDATALEN);
        continue;
      }
      if (list->count == kMaxDatabases) {
        snprintf(detail, sizeof detail, "It lists more than %d databases.", kMaxDatabases);
        reason = detail;
        break;
      }
      strlcpy(list->names[list->count++], name, NAMEDATALEN);
    }
  }
  list_free(names);
  pfree(raw);
  if (reason != nullptr) {
    free(list);
    GUC_check_errdetail("%s", reason);
    GUC_check_errhint(
        "Separate database names with commas; double-quote a name that holds a comma, a space "
        "or a double quote (doubled).");
    if (process_shared_preload_libraries_in_progress) {
      strlcpy(rejected_value, *newval != nullptr ? *newval : "", sizeof rejected_value);
      strlcpy(rejection, reason, sizeof rejection);
    }
    return false;
  }
  *extra = list;
  return true;
}

void assign_database(const char*, void* extra) {
  database_list = static_cast<const DatabaseList*>(extra);
}

}  // namespace

void define() {
  preloaded_value = process_shared_preload_libraries_in_progress;
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
  // PGC_SUSET: a publisher must not raise the bound that protects the keys it shares with
  // others; an operator may set it per role or database (ALTER ROLE ... SET).
  DefineCustomIntVariable("relaybus.max_delay",
                          "How far ahead publish's available_at and fail's retry_at may be.",
                          "A keyed delivery holds back the later deliveries of its key until "
                          "it has run: this bounds that stall. A due time in the past counts "
                          "as now.",
                          &max_delay_value, max_delay_value, 1, INT_MAX, PGC_SUSET, GUC_UNIT_S,
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
  // PGC_SIGHUP: publishers and the workers must agree on one value. A session could only set
  // a higher one for its own publishes, whose deliveries the workers would then refuse.
  DefineCustomIntVariable(
      "relaybus.sql_handler_max_payload",
      "Largest event (payload and headers, uncompressed) an in-database handler takes.",
      "publish refuses a larger event for an in-database handler; a handler worker fails a "
      "larger stored one (published before the limit was lowered) without running it.",
      &sql_handler_max_payload_value, kDefaultSqlHandlerMaxPayloadKb, 1, kMaxSqlHandlerMaxPayloadKb,
      PGC_SIGHUP, GUC_UNIT_KB, nullptr, nullptr, nullptr);
  DefineCustomBoolVariable("relaybus.notify", "Wakes idle workers when a publish commits.",
                           "Sends NOTIFY relaybus with the handler as payload (one per "
                           "transaction and handler) and wakes the in-database handler "
                           "workers. Polling stays the correctness path.",
                           &notify_value, true, PGC_SUSET, 0, nullptr, nullptr, nullptr);
  // PGC_USERSET: it only changes what the publishing session is told (the count is kept
  // whatever it says), so a publisher may choose for itself.
  DefineCustomEnumVariable(
      "relaybus.unrouted_publish",
      "What a publish that stores an event no handler is subscribed to reports.",
      "ignore, notice (the default), warning, or error (42704: the event is not stored). Such "
      "events are counted in relaybus.counters() and relaybus.unrouted_counters() whatever "
      "this says.",
      &unrouted_publish_value, static_cast<int>(UnroutedPublish::kNotice), unrouted_publish_options,
      PGC_USERSET, 0, nullptr, nullptr, nullptr);
  // Settings of context postmaster may only be defined while the library is preloaded.
  if (process_shared_preload_libraries_in_progress) {
    DefineCustomStringVariable(
        "relaybus.database", "Databases the relaybus background workers serve.",
        "A comma-separated list; relaybus must be installed in a database for its workers to "
        "do anything. Empty: no worker runs.",
        &database_value, "postgres", PGC_POSTMASTER, 0, check_database, assign_database, nullptr);
    DefineCustomIntVariable("relaybus.sql_handler_workers",
                            "Number of background workers running in-database handlers, per "
                            "database of relaybus.database.",
                            nullptr, &sql_handler_workers_value, 2, 0, wakeup::kMaxSqlWorkers,
                            PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
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
bool preloaded() {
  return preloaded_value;
}
const char* database_setting() {
  return database_value != nullptr ? database_value : "";
}
int database_count() {
  return database_list != nullptr ? database_list->count : 0;
}
const char* database_name(int index) {
  return database_list->names[index];
}
bool serves_database(const char* name) {
  for (int i = 0; i < database_count(); ++i)
    if (strcmp(database_list->names[i], name) == 0) return true;
  return false;
}
const char* database_listed_twice() {
  return database_list != nullptr && database_list->duplicate[0] != '\0' ? database_list->duplicate
                                                                         : nullptr;
}
const char* database_rejection(const char** value) {
  *value = rejected_value;
  return rejection[0] != '\0' ? rejection : nullptr;
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
int max_delay_s() {
  return max_delay_value;
}

int sql_handler_poll_interval_ms() {
  return sql_handler_poll_interval_value;
}
std::int64_t sql_handler_max_payload_bytes() {
  return static_cast<std::int64_t>(sql_handler_max_payload_value) * 1024;
}
UnroutedPublish unrouted_publish() {
  return static_cast<UnroutedPublish>(unrouted_publish_value);
}
bool notify() {
  return notify_value;
}

}  // namespace relaybus::pg::settings
