#include "pg_readiness.hpp"

#include <memory>

#include <libpq-fe.h>

#include "client/pg_store.hpp"
#include "core/sql_quote.hpp"
#include "guided_error.hpp"
#include "pg_connection_source.hpp"

namespace relaybus::cli {

namespace {

using Connection = std::unique_ptr<PGconn, void (*)(PGconn*)>;

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::string or_unknown(const char* text) {
  return text && *text ? text : "?";
}

// "database "app" as user "ops" on /tmp:5432": what libpq resolved (and tried).
std::string where(PGconn* conn) {
  return "database \"" + or_unknown(PQdb(conn)) + "\" as user \"" + or_unknown(PQuser(conn)) +
         "\" on " + or_unknown(PQhost(conn)) + ":" + or_unknown(PQport(conn));
}

// The extension is looked up in the connected database only: each database has its own.
constexpr const char* kReadiness =
    "SELECT current_database(), current_user,"
    " (SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'relaybus'),"
    " coalesce((SELECT pg_catalog.pg_has_role(current_user, r.oid, 'USAGE')"
    "           FROM pg_catalog.pg_roles r WHERE r.rolname = 'relaybus_admin'), false),"
    " coalesce((SELECT pg_catalog.pg_has_role(current_user, r.oid, 'MEMBER')"
    "           FROM pg_catalog.pg_roles r WHERE r.rolname = 'relaybus_admin'), false)";

}  // namespace

PgReadiness check_pg_ready(const std::string& conninfo, const std::string& command,
                           bool needs_admin) {
  // libpq's parse errors quote the text they could not parse, a password included: an
  // unparsable --db gets a message of its own, and no connection is tried.
  if (!client::conninfo_parses(conninfo))
    throw GuidedError(
        "cannot connect to PostgreSQL: --db is not a valid libpq connection "
        "string or URI",
        "the connection settings came from " + connection_source(conninfo));
  Connection conn(PQconnectdb(conninfo.c_str()), PQfinish);
  if (!conn) throw GuidedError("cannot connect to PostgreSQL: out of memory", "");
  if (PQstatus(conn.get()) != CONNECTION_OK)
    throw GuidedError("cannot connect to PostgreSQL (" + where(conn.get()) +
                          "): " + trimmed(PQerrorMessage(conn.get())),
                      "the connection settings came from " + connection_source(conninfo));
  // The tool reads and prints UTF-8 (names, ids, --json) whatever the database's encoding.
  if (PQsetClientEncoding(conn.get(), "UTF8") != 0)
    throw GuidedError(
        "cannot use UTF-8 on " + where(conn.get()) + ": " + trimmed(PQerrorMessage(conn.get())),
        "");
  std::unique_ptr<PGresult, void (*)(PGresult*)> r(PQexec(conn.get(), kReadiness), PQclear);
  if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) throw client::error_of(conn.get(), r.get());
  PgReadiness ready;
  ready.database = PQgetvalue(r.get(), 0, 0);
  ready.user = PQgetvalue(r.get(), 0, 1);
  if (PQgetisnull(r.get(), 0, 2))
    throw GuidedError("relaybus is not installed in " + where(conn.get()),
                      "connect to database " + core::sql_identifier(ready.database) +
                          " as a superuser and run CREATE EXTENSION relaybus; (or point --db "
                          "or PGDATABASE at the database that has it)");
  ready.version = PQgetvalue(r.get(), 0, 2);
  if (needs_admin && PQgetvalue(r.get(), 0, 3)[0] != 't') {
    const std::string role = core::sql_identifier(ready.user);
    const std::string problem = "role \"" + ready.user + "\" lacks relaybus_admin, which " +
                                command + " needs (" + where(conn.get()) + ")";
    // A NOINHERIT member has the role but not its privileges: GRANT would change nothing.
    if (PQgetvalue(r.get(), 0, 4)[0] == 't')
      throw GuidedError(problem + ": it is a member but does not inherit its privileges",
                        "as a superuser run ALTER ROLE " + role +
                            " INHERIT; (or connect as a role that inherits relaybus_admin)");
    throw GuidedError(problem, "as a superuser run GRANT relaybus_admin TO " + role +
                                   "; (or connect as a role that has it)");
  }
  return ready;
}

}  // namespace relaybus::cli
