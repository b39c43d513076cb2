#include "pg_store.hpp"

#include <poll.h>

#include <cstdlib>

#include <libpq-fe.h>

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
constexpr Statement kFail{"relaybus_fail", "SELECT relaybus.fail($1, $2)"};
constexpr Statement kRelease{"relaybus_release", "SELECT relaybus.release($1)"};
constexpr Statement kRelinquish{"relaybus_relinquish", "SELECT relaybus.relinquish($1, $2)"};
constexpr Statement kExtendLease{"relaybus_extend_lease",
                                 "SELECT relaybus.extend_lease($1, $2::interval, $3)"};
constexpr Statement kAll[] = {kClaim, kCompleteMany, kFail, kRelease, kRelinquish, kExtendLease};
// The same without the holder, for relaybus 0.1.0 (the benchmarks' baseline), whose
// row leases have no incarnation to bind.
constexpr Statement kWithoutHolder[] = {
    {"relaybus_claim",
     "SELECT lease_token, event_id, handler, type, key, payload::text, attempts, "
     "published_at::text FROM relaybus.claim($1, $2::int, $3::interval, $4::text[])"},
    kCompleteMany,
    kFail,
    kRelease,
    {"relaybus_relinquish", "SELECT relaybus.relinquish($1)"},
    {"relaybus_extend_lease", "SELECT relaybus.extend_lease($1, $2::interval)"}};

StoreError error_of(PGconn* conn, PGresult* res) {
  const char* state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  std::string message = res ? PQresultErrorMessage(res) : PQerrorMessage(conn);
  if (message.empty()) message = PQerrorMessage(conn);
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  return StoreError(state ? state : "", message);
}

}  // namespace

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
  conn_ = PQconnectdb(conninfo_.c_str());
  if (PQstatus(conn_) != CONNECTION_OK) throw error_of(conn_, nullptr);
  {
    Result r(PQexec(conn_,
                    "SELECT to_regprocedure('relaybus.claim(text,integer,interval,text[],text)') "
                    "IS NOT NULL"));
    if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) throw error_of(conn_, r.get());
    holders_ = PQgetvalue(r.get(), 0, 0)[0] == 't';
  }
  for (const auto& s : holders_ ? kAll : kWithoutHolder) {
    Result r(PQprepare(conn_, s.name, s.text, 0, nullptr));
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) throw error_of(conn_, r.get());
  }
  if (listening_) {
    Result r(PQexec(conn_, "LISTEN relaybus"));
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) throw error_of(conn_, r.get());
  }
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
                          worker.holder.c_str()};
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

std::string PgStore::fail(const std::string& token, const std::string& error) {
  const char* values[] = {token.c_str(), error.c_str()};
  Result r = run(kFail.name, 2, values);
  return PQgetvalue(r.get(), 0, 0);
}

bool PgStore::release(const std::string& token) {
  const char* values[] = {token.c_str()};
  Result r = run(kRelease.name, 1, values);
  return PQgetvalue(r.get(), 0, 0)[0] == 't';
}

int PgStore::relinquish(const Worker& worker) {
  const char* values[] = {worker.name.c_str(), worker.holder.c_str()};
  Result r = run(kRelinquish.name, holders_ ? 2 : 1, values);
  return std::atoi(PQgetvalue(r.get(), 0, 0));
}

int PgStore::extend_lease(const Worker& worker, std::chrono::milliseconds lease) {
  const std::string lease_text = interval_literal(lease);
  const char* values[] = {worker.name.c_str(), lease_text.c_str(), worker.holder.c_str()};
  Result r = run(kExtendLease.name, holders_ ? 3 : 2, values);
  return std::atoi(PQgetvalue(r.get(), 0, 0));
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

bool PgStore::wait_for_wakeup(std::chrono::milliseconds timeout) {
  if (listening_ && drain_notifications()) return true;
  pollfd fd{PQsocket(conn_), POLLIN, 0};
  if (!listening_ || fd.fd < 0) {
    // Nothing to listen on: plain sleep (poll with no descriptors).
    ::poll(nullptr, 0, static_cast<int>(timeout.count()));
    return false;
  }
  if (::poll(&fd, 1, static_cast<int>(timeout.count())) <= 0) return false;
  if (!PQconsumeInput(conn_)) throw error_of(conn_, nullptr);
  return drain_notifications();
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

std::string interval_literal(std::chrono::milliseconds ms) {
  return std::to_string(ms.count()) + " milliseconds";
}

}  // namespace relaybus::client
