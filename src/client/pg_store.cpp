#include "pg_store.hpp"

#include <poll.h>

#include <cstdlib>
#include <stdexcept>

#include <libpq-fe.h>

#include "setup_error.hpp"
#include "setup_hints.hpp"

namespace relaybus::client {

namespace {

// Statement names and texts. Prepared once per connection: the hot path sends only
// parameters.
struct Statement {
  const char* name;
  const char* text;
};
constexpr Statement kClaim{"relaybus_claim",
                           "SELECT lease_token, event_id, handler, type, key, payload::text, "
                           "attempts, published_at::text "
                           "FROM relaybus.claim($1, $2::int, $3::interval, $4::text[], $5)"};
constexpr Statement kCompleteMany{"relaybus_complete_many",
                                  "SELECT relaybus.complete_many($1::text[])"};
constexpr Statement kFail{"relaybus_fail", "SELECT relaybus.fail($1, $2, now() + $3::interval)"};
constexpr Statement kBury{"relaybus_bury", "SELECT relaybus.bury($1, $2)"};
constexpr Statement kRelease{"relaybus_release", "SELECT relaybus.release($1)"};
constexpr Statement kRelinquish{"relaybus_relinquish", "SELECT relaybus.relinquish($1, $2)"};
constexpr Statement kExtendLease{"relaybus_extend_lease",
                                 "SELECT relaybus.extend_lease($1, $2::interval, $3)"};
constexpr Statement kAll[] = {kClaim,   kCompleteMany, kFail,       kBury,
                              kRelease, kRelinquish,   kExtendLease};
// The same without the holder, for relaybus 0.1.0 (the benchmarks' baseline), whose
// row leases have no incarnation to bind.
constexpr Statement kWithoutHolder[] = {
    {"relaybus_claim",
     "SELECT lease_token, event_id, handler, type, key, payload::text, attempts, "
     "published_at::text FROM relaybus.claim($1, $2::int, $3::interval, $4::text[])"},
    kCompleteMany,
    kFail,
    kBury,
    kRelease,
    {"relaybus_relinquish", "SELECT relaybus.relinquish($1)"},
    {"relaybus_extend_lease", "SELECT relaybus.extend_lease($1, $2::interval)"}};

// A transaction on the store's connection. complete() runs complete() inside it: the lane's
// FOR KEY SHARE lock keeps a takeover out until it ends.
class PgTransaction final : public Transaction {
 public:
  explicit PgTransaction(PGconn* conn) : conn_(conn) { command("BEGIN"); }
  ~PgTransaction() override {
    if (open_) PQclear(PQexec(conn_, "ROLLBACK"));
  }
  bool complete(const std::string& token) override {
    const char* values[] = {token.c_str()};
    PGresult* r = PQexecParams(conn_, "SELECT relaybus.complete($1)", 1, nullptr, values, nullptr,
                               nullptr, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
      StoreError e = error_of(conn_, r);
      PQclear(r);
      throw e;
    }
    const bool done = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    return done;
  }
  void commit() override {
    open_ = false;
    command("COMMIT");
  }
  void rollback() override {
    open_ = false;
    command("ROLLBACK");
  }

 private:
  void command(const char* sql) {
    PGresult* r = PQexec(conn_, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
      StoreError e = error_of(conn_, r);
      PQclear(r);
      throw e;
    }
    PQclear(r);
  }
  PGconn* conn_;
  bool open_ = true;
};

// An empty holder is none: lanes bound to this connection's backend.
const char* holder_or_null(const Worker& worker) {
  return worker.holder.empty() ? nullptr : worker.holder.c_str();
}

}  // namespace

StoreError error_of(PGconn* conn, PGresult* res) {
  const char* state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  std::string message = res ? PQresultErrorMessage(res) : PQerrorMessage(conn);
  if (message.empty()) message = PQerrorMessage(conn);
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  const std::string sqlstate = state ? state : "";
  return StoreError(error_code_of_sqlstate(sqlstate), message, sqlstate);
}

bool conninfo_parses(const std::string& conninfo) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &error);
  PQfreemem(error);
  if (!options) return false;
  PQconninfoFree(options);
  return true;
}

StoreError connection_error_of(PGconn* conn, const std::string& conninfo) {
  if (!conninfo_parses(conninfo))
    return StoreError(core::ErrorCode::kInvalidParameter,
                      "the connection string is not a valid libpq connection string or URI");
  return error_of(conn, nullptr);
}

core::ErrorCode error_code_of_sqlstate(const std::string& sqlstate) {
  using core::ErrorCode;
  if (sqlstate.empty() || sqlstate.compare(0, 2, "08") == 0 || sqlstate == "57P01")
    return ErrorCode::kUnavailable;
  if (sqlstate == "22023") return ErrorCode::kInvalidParameter;
  if (sqlstate == "22004") return ErrorCode::kNullValue;
  if (sqlstate == "42704") return ErrorCode::kUndefinedObject;
  if (sqlstate == "42883") return ErrorCode::kUndefinedFunction;
  if (sqlstate == "42501") return ErrorCode::kPermissionDenied;
  if (sqlstate == "55006") return ErrorCode::kObjectInUse;
  // A value over a limit the server sets (an event too large for an in-database handler).
  if (sqlstate == "54000") return ErrorCode::kInvalidParameter;
  if (sqlstate == "40001" || sqlstate == "40P01") return ErrorCode::kConflict;
  // Other data exceptions (a value out of range, bad JSON) are invalid input too.
  if (sqlstate.compare(0, 2, "22") == 0) return ErrorCode::kInvalidParameter;
  return ErrorCode::kInternal;
}

void PgStore::ResultDeleter::operator()(pg_result* r) const {
  PQclear(r);
}

PgStore::PgStore(const std::string& conninfo) : conninfo_(conninfo) {
  connect();
}

PgStore::~PgStore() {
  if (conn_) PQfinish(conn_);
}

void PgStore::connect() {
  if (conn_) PQfinish(conn_);
  // fallback_application_name names the connection in pg_stat_activity unless the
  // connection string or PGAPPNAME chose a name. An empty conninfo is libpq's defaults.
  const char* const keywords[] = {"dbname", "fallback_application_name", nullptr};
  const char* const values[] = {conninfo_.c_str(), application_name_.c_str(), nullptr};
  conn_ = PQconnectdbParams(keywords, values, 1);
  if (PQstatus(conn_) != CONNECTION_OK) throw connection_error_of(conn_, conninfo_);
  // The runtime's strings are UTF-8 whatever the database's encoding: the server converts.
  if (PQsetClientEncoding(conn_, "UTF8") != 0) throw error_of(conn_, nullptr);
  check_extension();
  for (const auto& s : holders_ ? kAll : kWithoutHolder) {
    Result r(PQprepare(conn_, s.name, s.text, 0, nullptr));
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) throw error_of(conn_, r.get());
  }
  if (listening_) {
    Result r(PQexec(conn_, "LISTEN relaybus"));
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) throw error_of(conn_, r.get());
  }
}

// Before any statement names relaybus's functions: without the extension, or without USAGE
// on its schema, the server's errors ("schema relaybus does not exist", "permission denied
// for schema relaybus") name the symptom, not the fix. Read from the catalogs by name, so
// that neither case fails the query itself.
void PgStore::check_extension() {
  {
    Result r(
        PQexec(conn_,
               "SELECT current_database(), current_user,"
               " (SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'relaybus'),"
               " coalesce((SELECT pg_catalog.has_schema_privilege(oid, 'USAGE')"
               "             FROM pg_catalog.pg_namespace WHERE nspname = 'relaybus'), false)"));
    if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) throw error_of(conn_, r.get());
    database_ = PQgetvalue(r.get(), 0, 0);
    user_ = PQgetvalue(r.get(), 0, 1);
    if (PQgetisnull(r.get(), 0, 2))
      throw SetupError(SetupError::Kind::kNotInstalled,
                       "relaybus is not installed in database \"" + database_ +
                           "\": a superuser runs CREATE EXTENSION relaybus in that database (and "
                           "the server needs the relaybus package installed)");
    version_ = PQgetvalue(r.get(), 0, 2);
    if (PQgetvalue(r.get(), 0, 3)[0] != 't')
      throw SetupError(SetupError::Kind::kPermission,
                       "role \"" + user_ + "\" may not use schema relaybus in database \"" +
                           database_ +
                           "\": a worker needs the worker right there, a publisher the publisher "
                           "right (an admin runs: " +
                           grant_statement("worker", user_, version_) + ")");
  }
  // 0.2.0 and later take a holder; 0.1.0 (the benchmarks' baseline) has none.
  Result r(PQexec(conn_,
                  "SELECT to_regprocedure('relaybus.claim(text,integer,interval,text[],text)')"
                  " IS NOT NULL,"
                  " to_regprocedure('relaybus.claim(text,integer,interval,text[])') IS NOT NULL"));
  if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) throw error_of(conn_, r.get());
  holders_ = PQgetvalue(r.get(), 0, 0)[0] == 't';
  if (!holders_ && PQgetvalue(r.get(), 0, 1)[0] != 't')
    throw SetupError(SetupError::Kind::kOutdated,
                     "relaybus " + version_ + " in database \"" + database_ +
                         "\" has no relaybus.claim that this runtime can call: a superuser runs "
                         "ALTER EXTENSION relaybus UPDATE in that database");
}

bool PgStore::application_name_chosen() const {
  std::unique_ptr<PQconninfoOption, void (*)(PQconninfoOption*)> options(PQconninfo(conn_),
                                                                         PQconninfoFree);
  for (const PQconninfoOption* o = options.get(); o && o->keyword; ++o)
    if (std::string(o->keyword) == "application_name") return o->val && *o->val;
  return false;
}

void PgStore::identify(const std::string& name) {
  application_name_ = name;  // a reconnect uses it too
  if (application_name_chosen()) return;
  const char* values[] = {name.c_str()};
  exec("SELECT pg_catalog.set_config('application_name', $1, false)", 1, values);
}

namespace {
// The worker right's functions, as has_function_privilege names them.
constexpr const char* kWorkerFunctions =
    "{\"relaybus.claim(text,integer,interval,text[],text)\","
    "\"relaybus.complete(text)\",\"relaybus.complete_many(text[])\","
    "\"relaybus.fail(text,text,timestamptz)\",\"relaybus.bury(text,text)\","
    "\"relaybus.release(text)\",\"relaybus.extend_lease(text,interval,text)\","
    "\"relaybus.relinquish(text,text)\"}";
// 0.1.0's, without holders.
constexpr const char* kWorkerFunctionsWithoutHolder =
    "{\"relaybus.claim(text,integer,interval,text[])\","
    "\"relaybus.complete(text)\",\"relaybus.complete_many(text[])\","
    "\"relaybus.fail(text,text,timestamptz)\",\"relaybus.bury(text,text)\","
    "\"relaybus.release(text)\",\"relaybus.extend_lease(text,interval)\","
    "\"relaybus.relinquish(text)\"}";

std::string quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "\"" : ", \"") + n + "\"";
  return out;
}
}  // namespace

void PgStore::check_worker(const Worker& worker, const std::vector<std::string>& handlers,
                           std::chrono::milliseconds lease) {
  {
    const char* values[] = {holders_ ? kWorkerFunctions : kWorkerFunctionsWithoutHolder};
    Result r = exec(
        "SELECT coalesce(string_agg(split_part(f, '(', 1), ', '), '') FROM unnest($1::text[]) f"
        " WHERE NOT pg_catalog.has_function_privilege(f, 'EXECUTE')",
        1, values);
    const std::string missing = PQgetvalue(r.get(), 0, 0);
    if (!missing.empty())
      throw SetupError(
          SetupError::Kind::kPermission,
          "role \"" + user_ + "\" may not use " + missing + ": it needs " +
              (rights_by_name(version_) ? "the worker right in database \"" + database_ + "\""
                                        : std::string("relaybus_worker")) +
              " (an admin runs: " + grant_statement("worker", user_, version_) + ")");
  }
  // A claim that is rolled back: relaybus checks the names, the worker, the holder and the
  // lease as the claim loop will send them, and nothing is kept. All handlers in one claim
  // first; only when one is missing, each alone, to name every one that is.
  auto claims = [&](const std::vector<std::string>& names) {
    try {
      PgTransaction tx(conn_);
      claim(worker, 1, lease, names);
      return true;  // tx rolls back
    } catch (const StoreError& e) {
      if (e.code() != core::ErrorCode::kUndefinedObject) throw;
      return false;
    }
  };
  if (handlers.empty() || claims(handlers)) return;
  std::vector<std::string> missing;
  for (const auto& h : handlers)
    if (!claims({h})) missing.push_back(h);
  if (missing.empty()) return;  // subscribed meanwhile
  std::string fix;
  for (const auto& h : missing) fix += (fix.empty() ? "" : "; ") + subscribe_statement(h);
  throw SetupError(SetupError::Kind::kNotSubscribed,
                   (missing.size() == 1 ? "handler " + quoted_list(missing) + " is"
                                        : "handlers " + quoted_list(missing) + " are") +
                       " not subscribed in database \"" + database_ + "\": an admin must run " +
                       fix +
                       " first (or, if the name is misspelled, fix it in the worker's handlers)",
                   "42704");
}

PgStore::Result PgStore::run(const char* statement, int n, const char* const* values) {
  // A broken connection is reopened once. The lanes stay held: they are bound to the
  // worker's holder, not to this connection's backend.
  if (PQstatus(conn_) == CONNECTION_BAD) connect();
  Result r(PQexecPrepared(conn_, statement, n, values, nullptr, nullptr, 0));
  if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) throw error_of(conn_, r.get());
  return r;
}

std::vector<Delivery> PgStore::claim(const Worker& worker, int batch,
                                     std::chrono::milliseconds lease,
                                     const std::vector<std::string>& handlers) {
  const std::string batch_text = std::to_string(batch);
  const std::string lease_text = interval_literal(lease);
  const std::string handlers_text = text_array_literal(handlers);
  const char* values[] = {worker.name.c_str(), batch_text.c_str(), lease_text.c_str(),
                          handlers.empty() ? nullptr : handlers_text.c_str(),
                          holder_or_null(worker)};
  Result r = run(kClaim.name, holders_ ? 5 : 4, values);
  std::vector<Delivery> out;
  const int rows = PQntuples(r.get());
  out.reserve(rows);
  for (int i = 0; i < rows; ++i) {
    Delivery d;
    d.token = PQgetvalue(r.get(), i, 0);
    d.event_id = PQgetvalue(r.get(), i, 1);
    d.handler = PQgetvalue(r.get(), i, 2);
    d.type = PQgetvalue(r.get(), i, 3);
    d.has_key = !PQgetisnull(r.get(), i, 4);
    d.key = PQgetvalue(r.get(), i, 4);
    d.payload = PQgetvalue(r.get(), i, 5);
    d.attempts = std::atoi(PQgetvalue(r.get(), i, 6));
    d.published_at = PQgetvalue(r.get(), i, 7);
    out.push_back(std::move(d));
  }
  return out;
}

int PgStore::complete_many(const std::vector<std::string>& tokens) {
  const std::string array = text_array_literal(tokens);
  const char* values[] = {array.c_str()};
  Result r = run(kCompleteMany.name, 1, values);
  return std::atoi(PQgetvalue(r.get(), 0, 0));
}

FailOutcome PgStore::fail(const std::string& token, const std::string& error,
                          std::optional<std::chrono::milliseconds> retry_after) {
  const std::string delay = retry_after ? interval_literal(*retry_after) : std::string();
  const char* values[] = {token.c_str(), error.c_str(), retry_after ? delay.c_str() : nullptr};
  Result r = run(kFail.name, 3, values);
  const std::string word = PQgetvalue(r.get(), 0, 0);
  if (word == "retry") return FailOutcome::kRetry;
  if (word == "dead") return FailOutcome::kDead;
  if (word == "lost") return FailOutcome::kLost;
  throw StoreError(core::ErrorCode::kInternal, "relaybus.fail returned \"" + word + "\"");
}

bool PgStore::bury(const std::string& token, const std::string& error) {
  const char* values[] = {token.c_str(), error.c_str()};
  Result r = run(kBury.name, 2, values);
  return PQgetvalue(r.get(), 0, 0)[0] == 't';
}

bool PgStore::release(const std::string& token) {
  const char* values[] = {token.c_str()};
  Result r = run(kRelease.name, 1, values);
  return PQgetvalue(r.get(), 0, 0)[0] == 't';
}

int PgStore::relinquish(const Worker& worker) {
  const char* values[] = {worker.name.c_str(), holder_or_null(worker)};
  Result r = run(kRelinquish.name, holders_ ? 2 : 1, values);
  return std::atoi(PQgetvalue(r.get(), 0, 0));
}

int PgStore::extend_lease(const Worker& worker, std::chrono::milliseconds lease) {
  const std::string lease_text = interval_literal(lease);
  const char* values[] = {worker.name.c_str(), lease_text.c_str(), holder_or_null(worker)};
  Result r = run(kExtendLease.name, holders_ ? 3 : 2, values);
  return std::atoi(PQgetvalue(r.get(), 0, 0));
}

PgStore::Result PgStore::exec(const char* sql, int n, const char* const* values) {
  if (PQstatus(conn_) == CONNECTION_BAD) connect();
  Result r(PQexecParams(conn_, sql, n, nullptr, values, nullptr, nullptr, 0));
  const auto status = PQresultStatus(r.get());
  if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) throw error_of(conn_, r.get());
  return r;
}

std::unique_ptr<Transaction> PgStore::begin() {
  if (PQstatus(conn_) == CONNECTION_BAD) connect();
  return std::make_unique<PgTransaction>(conn_);
}

std::string PgStore::publish(const Event& event) {
  const std::string handlers = event.handlers ? text_array_literal(*event.handlers) : "";
  const std::string delay = event.delay ? interval_literal(*event.delay) : "";
  const char* values[] = {event.type.c_str(),
                          event.payload.c_str(),
                          event.key ? event.key->c_str() : nullptr,
                          event.event_id ? event.event_id->c_str() : nullptr,
                          event.handlers ? handlers.c_str() : nullptr,
                          event.delay ? delay.c_str() : nullptr};
  Result r =
      exec("SELECT relaybus.publish($1, $2::jsonb, $3, $4, $5::text[], now() + $6::interval)", 6,
           values);
  return PQgetvalue(r.get(), 0, 0);
}

std::vector<std::string> PgStore::publish_batch(const std::vector<Event>& events) {
  const std::string json = events_json(events);
  const char* values[] = {json.c_str()};
  // publish_batch takes due times, not delays: each delay_ms becomes now() + delay here.
  Result r = exec(
      "SELECT relaybus.publish_batch(coalesce((SELECT jsonb_agg(CASE WHEN e ? 'delay_ms'"
      " THEN (e - 'delay_ms') || jsonb_build_object('available_at',"
      "  now() + (e->>'delay_ms')::bigint * interval '1 millisecond') ELSE e END ORDER BY n)"
      " FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS t(e, n)), '[]'))",
      1, values);
  std::vector<std::string> ids;
  for (int i = 0; i < PQntuples(r.get()); ++i) ids.push_back(PQgetvalue(r.get(), i, 0));
  return ids;
}

void PgStore::subscribe(const store::Subscription& s) {
  const std::string types = text_array_literal(s.event_types);
  const std::string attempts = std::to_string(s.retry.max_attempts);
  const std::string base = std::to_string(s.retry.backoff_base_us) + " microseconds";
  const std::string max = std::to_string(s.retry.backoff_max_us) + " microseconds";
  const char* values[] = {s.handler.c_str(), types.c_str(), attempts.c_str(), base.c_str(),
                          max.c_str()};
  exec("SELECT relaybus.subscribe($1, $2::text[], $3::int, $4::interval, $5::interval)", 5, values);
}

bool PgStore::requeue(const std::string& event_id, const std::string& handler) {
  const char* values[] = {event_id.c_str(), handler.c_str()};
  Result r = exec("SELECT relaybus.requeue($1, $2)", 2, values);
  return PQgetvalue(r.get(), 0, 0)[0] == 't';
}

std::optional<store::DeliveryState> PgStore::lookup(const std::string& event_id,
                                                    const std::string& handler) {
  const char* values[] = {event_id.c_str(), handler.c_str()};
  // The seam's states are the stored ones, pending and dead: list_deliveries calls a pending
  // delivery in some lane's in-flight list "processing", which is still pending.
  Result r = exec(
      "SELECT CASE d.status WHEN 'processing' THEN 'pending' ELSE d.status END, d.attempts"
      " FROM relaybus.list_deliveries(NULL, $2, 2147483647) d WHERE d.event_id = $1",
      2, values);
  if (PQntuples(r.get()) == 0) return std::nullopt;
  store::DeliveryState state;
  state.status = PQgetvalue(r.get(), 0, 0);
  state.attempts = std::atoi(PQgetvalue(r.get(), 0, 1));
  return state;
}

void PgStore::listen() {
  if (listening_) return;
  Result r(PQexec(conn_, "LISTEN relaybus"));
  if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) throw error_of(conn_, r.get());
  listening_ = true;
}

// Notifications that arrived with earlier results are already buffered: take those first.
bool PgStore::drain_notifications() {
  bool any = false;
  while (PGnotify* n = PQnotifies(conn_)) {
    any = true;
    PQfreemem(n);
  }
  return any;
}

// Takes every notification that has arrived, buffered or still in the socket, so that all
// of them count as one wake-up; waits up to `timeout` only when there is none.
bool PgStore::wait_for_wakeup(std::chrono::milliseconds timeout) {
  pollfd fd{PQsocket(conn_), POLLIN, 0};
  if (!listening_ || fd.fd < 0) {
    // Nothing to listen on: plain sleep (poll with no descriptors).
    ::poll(nullptr, 0, static_cast<int>(timeout.count()));
    return false;
  }
  const bool buffered = drain_notifications();
  if (::poll(&fd, 1, buffered ? 0 : static_cast<int>(timeout.count())) <= 0) return buffered;
  if (!PQconsumeInput(conn_)) throw error_of(conn_, nullptr);
  return drain_notifications() || buffered;
}

namespace {
void append_json_string(std::string& out, const std::string& text) {
  static const char hex[] = "0123456789abcdef";
  out += '"';
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += "\\u00";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}
}  // namespace

std::string events_json(const std::vector<Event>& events) {
  std::string out = "[";
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    if (i) out += ',';
    out += "{\"type\":";
    append_json_string(out, e.type);
    out += ",\"payload\":" + e.payload;
    if (e.key) {
      out += ",\"key\":";
      append_json_string(out, *e.key);
    }
    if (e.event_id) {
      out += ",\"id\":";
      append_json_string(out, *e.event_id);
    }
    if (e.handlers) {
      out += ",\"handlers\":[";
      for (std::size_t h = 0; h < e.handlers->size(); ++h) {
        if (h) out += ',';
        append_json_string(out, (*e.handlers)[h]);
      }
      out += ']';
    }
    if (e.delay) out += ",\"delay_ms\":" + std::to_string(e.delay->count());
    out += '}';
  }
  out += ']';
  return out;
}

std::string text_array_literal(const std::vector<std::string>& items) {
  std::string out = "{";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += ',';
    out += '"';
    for (char c : items[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

StoreFactory pg_store_factory(std::string conninfo) {
  return [conninfo = std::move(conninfo)] { return std::unique_ptr<Store>(new PgStore(conninfo)); };
}

pg_conn* pg_connection(Store& store) {
  auto* pg = dynamic_cast<PgStore*>(&store);
  if (pg == nullptr)
    throw std::invalid_argument(
        "relaybus: pg_connection() needs a PgStore; this handler runs "
        "on another store");
  return pg->connection();
}

std::string interval_literal(std::chrono::milliseconds ms) {
  return std::to_string(ms.count()) + " milliseconds";
}

}  // namespace relaybus::client
