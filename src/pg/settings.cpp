#include "settings.hpp"

#include "postgres.hpp"

namespace relaybus::pg::settings {

namespace {
bool completion_history_value = false;
int retention_completed_value = 7 * 24 * 3600;
int retention_dead_value = 14 * 24 * 3600;
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

}  // namespace relaybus::pg::settings
