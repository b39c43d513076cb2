// The commands that look at deliveries one by one: relaybus list (pending, delayed and in
// flight, with their ages, by handler), relaybus show EVENT_ID [HANDLER] (the event's
// payload and each delivery's state), and relaybus counters (the extension's cumulative
// counters). list works on any store, through list_deliveries; show and counters read
// PostgreSQL through relaybus's own functions and the tables the admin right may read.
#include <libpq-fe.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

#include "client/pg_store.hpp"
#include "client/tool/store_uri.hpp"
#include "commands.hpp"
#include "guided_error.hpp"
#include "json_output.hpp"
#include "operator_store.hpp"
#include "shell_word.hpp"
#include "table_output.hpp"
#include "time_text.hpp"

namespace relaybus::cli {

namespace {

using Result = std::unique_ptr<PGresult, void (*)(PGresult*)>;

// One statement on the operator store's connection; a server error becomes a StoreError.
Result query(PGconn* conn, const char* sql, const std::vector<const char*>& values) {
  Result r(PQexecParams(conn, sql, static_cast<int>(values.size()), nullptr, values.data(), nullptr,
                        nullptr, 0),
           PQclear);
  if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) throw client::error_of(conn, r.get());
  return r;
}

std::optional<std::string> text_or_null(PGresult* r, int row, int column) {
  if (PQgetisnull(r, row, column)) return std::nullopt;
  return std::string(PQgetvalue(r, row, column));
}

std::optional<std::int64_t> int8_or_null(PGresult* r, int row, int column) {
  if (PQgetisnull(r, row, column)) return std::nullopt;
  return std::strtoll(PQgetvalue(r, row, column), nullptr, 10);
}

// show and counters read PostgreSQL only.
void postgresql_only(const std::string& db, const std::string& command, const std::string& hint) {
  if (tool::is_mongodb_uri(db))
    throw GuidedError("relaybus " + command + " works on PostgreSQL only, not on the MongoDB store",
                      hint);
}

std::string state_of(const store::ListedDelivery& d, std::int64_t now) {
  if (d.status == "processing") return "in_flight";
  if (d.status == "pending" && d.available_at_us && *d.available_at_us > now) return "delayed";
  return d.status;
}

// "in 3m12s" for a due time to come, "now" for one that has come.
std::optional<std::string> due_text(const std::string& state,
                                    const std::optional<std::int64_t>& available_at,
                                    std::int64_t now) {
  if (state == "delayed" && available_at) return "in " + human_age(*available_at - now);
  if (state == "pending") return std::string("now");
  return std::nullopt;
}

}  // namespace

int list_command(const tool::Parsed& args) {
  const auto state = args.optional<std::string>("state");
  if (state && *state != "pending" && *state != "delayed" && *state != "in-flight")
    throw tool::UsageError("--state must be pending, delayed or in-flight, not '" + *state + "'");
  const int limit = args.get<int>("limit");
  const auto handler = args.optional<std::string>("handler");
  auto db = open_operator_store(args.get<std::string>("db"), "relaybus list");
  // The store's listing is newest first and filters by stored status: pending (due or not)
  // and processing (in flight) are asked for apart, then merged.
  std::vector<store::ListedDelivery> rows;
  for (const char* status : {"pending", "processing"}) {
    if (state && (*state == "in-flight") != (std::string(status) == "processing")) continue;
    store::DeliveryFilter filter;
    filter.status = status;
    filter.handler = handler;
    filter.max_rows = limit;
    auto got = db->list_deliveries(filter);
    rows.insert(rows.end(), got.begin(), got.end());
  }
  const std::int64_t now = now_us();
  if (state && *state != "in-flight") {
    rows.erase(
        std::remove_if(rows.begin(), rows.end(),
                       [&](const store::ListedDelivery& d) { return state_of(d, now) != *state; }),
        rows.end());
  }
  // By handler, the oldest first in each: what has waited longest is what to look at.
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    if (a.handler != b.handler) return a.handler < b.handler;
    if (a.created_at_us != b.created_at_us) return a.created_at_us < b.created_at_us;
    return a.event_id < b.event_id;
  });
  if (rows.size() > static_cast<std::size_t>(limit)) rows.resize(limit);

  if (args.get<bool>("json")) {
    JsonWriter json;
    json.begin_object().key("deliveries").begin_array();
    for (const auto& d : rows) {
      json.begin_object()
          .key("event_id")
          .value(d.event_id)
          .key("handler")
          .value(d.handler)
          .key("type")
          .value(d.type)
          .key("key")
          .value(d.key)
          .key("state")
          .value(state_of(d, now))
          .key("attempts")
          .value(d.attempts)
          .key("created_at")
          .value(json_time(d.created_at_us))
          .key("age_s")
          .value((now - d.created_at_us) / 1000000)
          .key("available_at");
      if (d.available_at_us) {
        json.value(json_time(*d.available_at_us));
      } else {
        json.null();
      }
      json.key("worker").value(d.lease_owner).key("last_error").value(d.last_error).end_object();
    }
    json.end_array().end_object();
    std::fputs(json.str().c_str(), stdout);
    return 0;
  }
  Table table;
  table.columns = {"handler",  "event_id", "type", "key",    "state",
                   "attempts", "age",      "due",  "worker", "last_error"};
  for (const auto& d : rows) {
    const std::string s = state_of(d, now);
    table.rows.push_back({d.handler, d.event_id, d.type, d.key, s == "in_flight" ? "in flight" : s,
                          std::to_string(d.attempts), human_age(now - d.created_at_us),
                          due_text(s, d.available_at_us, now), d.lease_owner, d.last_error});
  }
  print_table(table);
  return 0;
}

int show_command(const tool::Parsed& args) {
  const auto& words = args.arguments();
  if (words.empty()) throw tool::UsageError("show takes EVENT_ID, and a HANDLER if you like");
  const std::string db = args.get<std::string>("db");
  postgresql_only(db, "show",
                  "relaybus list --handler=H shows the deliveries of a handler on any store");
  const std::string& event_id = words[0];
  auto store = open_operator_store(db, "relaybus show");
  PGconn* conn = client::pg_connection(*store);
  const std::int64_t now = now_us();

  Result event = query(conn,
                       "SELECT type, key, payload::text, headers::text,"
                       " (extract(epoch FROM published_at) * 1000000)::int8"
                       " FROM relaybus.events WHERE id = $1",
                       {event_id.c_str()});
  const bool found = PQntuples(event.get()) == 1;
  std::vector<std::string> handlers;
  if (words.size() == 2) {
    handlers.push_back(words[1]);
  } else {
    Result named = query(conn,
                         "SELECT h FROM relaybus.events e, unnest(e.handlers) h WHERE e.id = $1"
                         " ORDER BY h",
                         {event_id.c_str()});
    for (int i = 0; i < PQntuples(named.get()); ++i)
      handlers.push_back(PQgetvalue(named.get(), i, 0));
  }
  struct Row {
    std::string handler, state;
    int attempts = 0;
    std::optional<std::int64_t> available_at, updated_at;
    std::optional<std::string> worker, last_error;
  };
  std::vector<Row> rows;
  for (const auto& h : handlers) {
    // relaybus's own listing: the same statuses as relaybus list, whatever the version's tables.
    Result d = query(conn,
                     "SELECT status, attempts,"
                     " (extract(epoch FROM available_at) * 1000000)::int8, last_error, lease_owner,"
                     " (extract(epoch FROM updated_at) * 1000000)::int8"
                     " FROM relaybus.list_deliveries(NULL, $2, 2147483647) WHERE event_id = $1",
                     {event_id.c_str(), h.c_str()});
    Row row;
    row.handler = h;
    if (PQntuples(d.get()) == 1) {
      store::ListedDelivery listed;
      listed.status = PQgetvalue(d.get(), 0, 0);
      listed.available_at_us = int8_or_null(d.get(), 0, 2);
      row.state = state_of(listed, now);
      row.attempts = std::atoi(PQgetvalue(d.get(), 0, 1));
      row.available_at = listed.available_at_us;
      row.last_error = text_or_null(d.get(), 0, 3);
      row.worker = text_or_null(d.get(), 0, 4);
      row.updated_at = int8_or_null(d.get(), 0, 5);
    } else {
      Result c = query(conn,
                       "SELECT status, attempts, (extract(epoch FROM created_at) * 1000000)::int8"
                       " FROM relaybus.list_deliveries('completed', $2, 2147483647)"
                       " WHERE event_id = $1 LIMIT 1",
                       {event_id.c_str(), h.c_str()});
      if (PQntuples(c.get()) == 1) {
        row.state = PQgetvalue(c.get(), 0, 0);  // completed, or cancelled
        row.attempts = std::atoi(PQgetvalue(c.get(), 0, 1));
        row.updated_at = int8_or_null(c.get(), 0, 2);
      } else {
        // No delivery left and no history of it: completed (or cancelled) while the history
        // was off, or never one of this event's handlers.
        row.state = found ? "done (no delivery left)" : "none";
      }
    }
    rows.push_back(std::move(row));
  }
  if (!found &&
      std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.state == "none"; }))
    throw GuidedError("event \"" + event_id + "\" not found: never published, or purged",
                      "relaybus list shows the deliveries waiting or in flight, relaybus dead list "
                      "the dead letters");

  if (args.get<bool>("json")) {
    JsonWriter json;
    json.begin_object().key("event");
    if (found) {
      json.begin_object()
          .key("id")
          .value(event_id)
          .key("type")
          .value(std::string(PQgetvalue(event.get(), 0, 0)))
          .key("key")
          .value(text_or_null(event.get(), 0, 1))
          .key("payload")
          .raw(PQgetvalue(event.get(), 0, 2))
          .key("headers");
      if (PQgetisnull(event.get(), 0, 3)) {
        json.null();
      } else {
        json.raw(PQgetvalue(event.get(), 0, 3));
      }
      json.key("published_at").value(json_time(*int8_or_null(event.get(), 0, 4))).end_object();
    } else {
      json.null();
    }
    json.key("deliveries").begin_array();
    for (const auto& r : rows) {
      json.begin_object()
          .key("handler")
          .value(r.handler)
          .key("state")
          .value(r.state)
          .key("attempts")
          .value(r.attempts)
          .key("available_at");
      if (r.available_at) {
        json.value(json_time(*r.available_at));
      } else {
        json.null();
      }
      json.key("updated_at");
      if (r.updated_at) {
        json.value(json_time(*r.updated_at));
      } else {
        json.null();
      }
      json.key("worker").value(r.worker).key("last_error").value(r.last_error).end_object();
    }
    json.end_array().end_object();
    std::fputs(json.str().c_str(), stdout);
    return 0;
  }
  std::printf("event:        %s\n", one_line(event_id).c_str());
  if (found) {
    const std::int64_t published = *int8_or_null(event.get(), 0, 4);
    std::printf("type:         %s\n", one_line(std::string(PQgetvalue(event.get(), 0, 0))).c_str());
    std::printf("key:          %s\n", one_line(text_or_null(event.get(), 0, 1)).c_str());
    std::printf("published_at: %s (%s ago)\n", human_time(published).c_str(),
                human_age(now - published).c_str());
    std::printf("payload:      %s\n", one_line(std::string(PQgetvalue(event.get(), 0, 2))).c_str());
    std::printf("headers:      %s\n", one_line(text_or_null(event.get(), 0, 3)).c_str());
  } else {
    std::printf("(the event itself is purged)\n");
  }
  std::printf("\n");
  Table table;
  table.columns = {"handler", "state", "attempts", "due", "worker", "updated_at", "last_error"};
  for (const auto& r : rows)
    table.rows.push_back(
        {r.handler, r.state == "in_flight" ? "in flight" : r.state, std::to_string(r.attempts),
         due_text(r.state, r.available_at, now), r.worker,
         r.updated_at ? std::optional<std::string>(human_time(*r.updated_at)) : std::nullopt,
         r.last_error});
  print_table(table);
  return 0;
}

std::optional<std::vector<UnroutedType>> unrouted_types(store::Store& store,
                                                        const std::string& db) {
  if (tool::is_mongodb_uri(db)) return std::nullopt;
  PGconn* conn = client::pg_connection(store);
  Result known =
      query(conn, "SELECT to_regprocedure('relaybus.unrouted_counters()') IS NOT NULL", {});
  if (std::string(PQgetvalue(known.get(), 0, 0)) != "t") return std::nullopt;  // before 0.3.0
  Result r(nullptr, PQclear);
  try {
    r = query(conn,
              "SELECT type, events FROM relaybus.unrouted_counters() WHERE events > 0"
              " ORDER BY events DESC, type",
              {});
  } catch (const store::StoreError& e) {
    if (e.native_code() == "55000") return std::nullopt;  // not preloaded: nothing counted
    throw;
  }
  std::vector<UnroutedType> out;
  for (int i = 0; i < PQntuples(r.get()); ++i)
    out.push_back(
        {PQgetvalue(r.get(), i, 0), std::strtoll(PQgetvalue(r.get(), i, 1), nullptr, 10)});
  return out;
}

int counters_command(const tool::Parsed& args) {
  const std::string db = args.get<std::string>("db");
  postgresql_only(db, "counters", "relaybus stats shows the counts per handler on any store");
  auto store = open_operator_store(db, "relaybus counters");
  PGconn* conn = client::pg_connection(*store);
  Result r(nullptr, PQclear);
  try {
    r = query(conn,
              "SELECT name, value, (extract(epoch FROM since) * 1000000)::int8"
              " FROM relaybus.counters() ORDER BY name",
              {});
  } catch (const store::StoreError& e) {
    if (e.native_code() != "55000") throw;
    throw GuidedError(
        "relaybus keeps its counters only when the server preloads it, and this one does not",
        "add relaybus to shared_preload_libraries in postgresql.conf and restart the server; "
        "relaybus stats works without it");
  }
  const int n = PQntuples(r.get());
  std::optional<std::int64_t> since;
  if (n > 0) since = int8_or_null(r.get(), 0, 2);
  if (args.get<bool>("json")) {
    JsonWriter json;
    json.begin_object().key("since");
    if (since) {
      json.value(json_time(*since));
    } else {
      json.null();
    }
    json.key("counters").begin_object();
    for (int i = 0; i < n; ++i)
      json.key(PQgetvalue(r.get(), i, 0))
          .value(std::strtoll(PQgetvalue(r.get(), i, 1), nullptr, 10));
    json.end_object().end_object();
    std::fputs(json.str().c_str(), stdout);
    return 0;
  }
  Table table;
  table.columns = {"counter", "value"};
  for (int i = 0; i < n; ++i)
    table.rows.push_back(
        {std::string(PQgetvalue(r.get(), i, 0)), std::string(PQgetvalue(r.get(), i, 1))});
  print_table(table);
  if (since)
    std::printf("counting since %s (%s ago: the server's start or relaybus.reset_counters())\n",
                human_time(*since).c_str(), human_age(now_us() - *since).c_str());
  return 0;
}

}  // namespace relaybus::cli
