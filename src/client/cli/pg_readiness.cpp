#include "pg_readiness.hpp"

#include "core/sql_quote.hpp"

#include <memory>

#include <libpq-fe.h>

#include "client/pg_store.hpp"
#include "client/setup_hints.hpp"
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
// The admin check is the privilege itself, which is what the SQL functions check, however
// the role got it (the admin right, a role holding it, superuser): EXECUTE on
// relaybus.statistics(), which only the admin right gives, and USAGE on the schema. Found
// by name in the catalogs, so that a missing schema or a schema without USAGE does not fail
// the query. Last, the roles holding that EXECUTE of which the role is a member without
// their privileges (NOINHERIT): a GRANT would change nothing for it.
constexpr const char* kReadiness =
    "SELECT current_database(), current_user,"
    " (SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'relaybus'),"
    " coalesce((SELECT pg_catalog.has_schema_privilege(n.oid, 'USAGE')"
    "                  AND pg_catalog.has_function_privilege(p.oid, 'EXECUTE')"
    "           FROM pg_catalog.pg_proc p"
    "           JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace"
    "           WHERE n.nspname = 'relaybus' AND p.proname = 'statistics'"
    "             AND p.pronargs = 0), false),"
    " (SELECT pg_catalog.string_agg(DISTINCT pg_catalog.quote_ident(r.rolname), ', ')"
    "    FROM pg_catalog.pg_proc p"
    "    JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace"
    "    CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a"
    "    JOIN pg_catalog.pg_roles r ON r.oid = a.grantee"
    "   WHERE n.nspname = 'relaybus' AND p.proname = 'statistics' AND p.pronargs = 0"
    "     AND a.privilege_type = 'EXECUTE'"
    "     AND pg_catalog.pg_has_role(current_user, r.oid, 'MEMBER')"
    "     AND NOT pg_catalog.pg_has_role(current_user, r.oid, 'USAGE'))";

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
    const bool by_name = client::rights_by_name(ready.version);
    const std::string problem =
        "role \"" + ready.user + "\" lacks " +
        (by_name ? "relaybus's admin right in database \"" + ready.database + "\""
                 : std::string("relaybus_admin")) +
        ", which " + command + " needs (" + where(conn.get()) + ")";
    // A NOINHERIT member has the role but not its privileges: GRANT would change nothing.
    if (!PQgetisnull(r.get(), 0, 4)) {
      const std::string holders = PQgetvalue(r.get(), 0, 4);
      throw GuidedError(problem + ": it is a member of " + holders +
                            ", which has it, but does not inherit its privileges",
                        "as a superuser run ALTER ROLE " + role +
                            " INHERIT; (or connect as a role that inherits " + holders + ")");
    }
    if (by_name)
      throw GuidedError(problem,
                        "as a superuser, or a role with the admin right, run SELECT "
                        "relaybus.grant_rights(" +
                            client::role_literal(ready.user) + ", 'admin') in database " +
                            core::sql_identifier(ready.database) +
                            "; (or connect as a role that has it)");
    throw GuidedError(problem, "as a superuser run GRANT relaybus_admin TO " + role +
                                   "; (or connect as a role that has it)");
  }
  return ready;
}

}  // namespace relaybus::cli
