// PgStore's operator half and maintenance: each is one call of the SQL function of the same
// name (sql/parts/api-0.2.0.sql), which checks its arguments and raises the SQLSTATE that
// error_of() maps back to core's code. Times travel as microseconds since the Unix epoch,
// so no time zone or DateStyle setting of the session changes them.
#include <libpq-fe.h>

#include <cstdlib>
#include <string>

#include "pg_store.hpp"

namespace relaybus::client {

namespace {

std::int64_t int8(pg_result* r, int row, int column) {
  return std::strtoll(PQgetvalue(r, row, column), nullptr, 10);
}

std::optional<std::string> text_or_null(pg_result* r, int row, int column) {
  if (PQgetisnull(r, row, column)) return std::nullopt;
  return std::string(PQgetvalue(r, row, column));
}

std::optional<std::int64_t> int8_or_null(pg_result* r, int row, int column) {
  if (PQgetisnull(r, row, column)) return std::nullopt;
  return int8(r, row, column);
}

// Microseconds since the epoch of a timestamptz expression, as SQL.
std::string epoch_us(const std::string& expression) {
  return "(extract(epoch FROM " + expression + ") * 1000000)::int8";
}

}  // namespace

void PgStore::unsubscribe(const std::string& handler) {
  const char* values[] = {handler.c_str()};
  exec("SELECT relaybus.unsubscribe($1)", 1, values);
}

bool PgStore::pause(const std::string& handler) {
  const char* values[] = {handler.c_str()};
  Result r = exec("SELECT relaybus.pause($1)", 1, values);
  return PQgetvalue(r.get(), 0, 0)[0] == 't';
}

bool PgStore::resume(const std::string& handler) {
  const char* values[] = {handler.c_str()};
  Result r = exec("SELECT relaybus.resume($1)", 1, values);
  return PQgetvalue(r.get(), 0, 0)[0] == 't';
}

bool PgStore::cancel(const std::string& event_id, const std::string& handler) {
  const char* values[] = {event_id.c_str(), handler.c_str()};
  Result r = exec("SELECT relaybus.cancel($1, $2)", 2, values);
  return PQgetvalue(r.get(), 0, 0)[0] == 't';
}

std::int64_t PgStore::requeue_dead(const std::optional<std::string>& handler) {
  const char* values[] = {handler ? handler->c_str() : nullptr};
  Result r = exec("SELECT relaybus.requeue_dead($1)", 1, values);
  return int8(r.get(), 0, 0);
}

std::vector<store::HandlerStatistics> PgStore::statistics() {
  // The history is kept only while relaybus.completion_history is on (off by default; unset
  // when the library is not loaded in this session: then it is the default). The setting
  // applies in the completing session, so this session's value is not the whole answer: a
  // worker's role, or its role in this database, may have it on (ALTER ROLE ... SET), which
  // pg_db_role_setting (readable by every role) shows. A superuser worker's own SET is not
  // seen.
  static const std::string sql =
      "SELECT handler, pending, processing, dead, completed, " + epoch_us("oldest_pending") +
      ", paused, lower(coalesce(current_setting('relaybus.completion_history', true), 'off'))"
      "   IN ('on', 'true', 'yes', '1')"
      " OR EXISTS (SELECT 1 FROM pg_catalog.pg_db_role_setting s, unnest(s.setconfig) c"
      "   WHERE s.setdatabase IN (0, (SELECT oid FROM pg_catalog.pg_database"
      "                               WHERE datname = current_database()))"
      "     AND lower(c) IN ('relaybus.completion_history=on', 'relaybus.completion_history=true',"
      "                      'relaybus.completion_history=yes', 'relaybus.completion_history=1'))"
      " FROM relaybus.statistics()";
  Result r = exec(sql.c_str(), 0, nullptr);
  std::vector<store::HandlerStatistics> out;
  for (int row = 0; row < PQntuples(r.get()); ++row) {
    store::HandlerStatistics s;
    s.handler = PQgetvalue(r.get(), row, 0);
    s.pending = int8(r.get(), row, 1);
    s.processing = int8(r.get(), row, 2);
    s.dead = int8(r.get(), row, 3);
    s.completed = int8(r.get(), row, 4);
    s.oldest_pending_us = int8_or_null(r.get(), row, 5);
    s.paused = PQgetvalue(r.get(), row, 6)[0] == 't';
    s.completed_recorded = PQgetvalue(r.get(), row, 7)[0] == 't';
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<store::ListedDelivery> PgStore::list_deliveries(const store::DeliveryFilter& filter) {
  static const std::string sql = "SELECT event_id, handler, type, key, status, attempts, " +
                                 epoch_us("available_at") + ", last_error, lease_owner, " +
                                 epoch_us("created_at") +
                                 " FROM relaybus.list_deliveries($1, $2, $3::int)";
  const std::string rows = std::to_string(filter.max_rows);
  const char* values[] = {filter.status ? filter.status->c_str() : nullptr,
                          filter.handler ? filter.handler->c_str() : nullptr, rows.c_str()};
  Result r = exec(sql.c_str(), 3, values);
  std::vector<store::ListedDelivery> out;
  for (int row = 0; row < PQntuples(r.get()); ++row) {
    store::ListedDelivery d;
    d.event_id = PQgetvalue(r.get(), row, 0);
    d.handler = PQgetvalue(r.get(), row, 1);
    d.type = PQgetvalue(r.get(), row, 2);
    d.key = text_or_null(r.get(), row, 3);
    d.status = PQgetvalue(r.get(), row, 4);
    d.attempts = std::atoi(PQgetvalue(r.get(), row, 5));
    d.available_at_us = int8_or_null(r.get(), row, 6);
    d.last_error = text_or_null(r.get(), row, 7);
    d.lease_owner = text_or_null(r.get(), row, 8);
    d.created_at_us = int8(r.get(), row, 9);
    out.push_back(std::move(d));
  }
  return out;
}

int PgStore::take_over_expired() {
  Result r = exec("SELECT relaybus.take_over_expired()", 0, nullptr);
  return std::atoi(PQgetvalue(r.get(), 0, 0));
}

std::int64_t PgStore::purge_expired() {
  Result r = exec("SELECT relaybus.purge_expired()", 0, nullptr);
  return int8(r.get(), 0, 0);
}

}  // namespace relaybus::client
