#include "pg_connection_source.hpp"

#include <cstdlib>
#include <memory>
#include <set>

#include <libpq-fe.h>

namespace relaybus::cli {

namespace {

using Options = std::unique_ptr<PQconninfoOption, void (*)(PQconninfoOption*)>;

// libpq marks secrets (the password) with display character '*'.
bool secret(const PQconninfoOption& o) {
  return o.dispchar && o.dispchar[0] == '*';
}

// The PG* variables that are set, for the keywords not in `given`: "PGHOST=/tmp PGPORT=5432".
std::string environment(const std::set<std::string>& given) {
  Options defaults(PQconndefaults(), PQconninfoFree);
  std::string out;
  for (const PQconninfoOption* o = defaults.get(); o && o->keyword; ++o) {
    if (!o->envvar || given.count(o->keyword)) continue;
    const char* value = std::getenv(o->envvar);
    if (!value) continue;
    out += (out.empty() ? "" : " ") + std::string(o->envvar) + "=" + (secret(*o) ? "***" : value);
  }
  return out;
}

}  // namespace

std::string connection_source(const std::string& conninfo) {
  const std::string vars = "PGHOST, PGPORT, PGDATABASE and PGUSER";
  if (conninfo.empty()) {
    const std::string env = environment({});
    if (env.empty())
      return "libpq's defaults (no --db given and no PG* variable set: the local socket, your "
             "login name as user and database); set " + vars + ", or pass --db CONN";
    return "libpq's environment (no --db given): " + env + "; set " + vars +
           " right, or pass --db CONN";
  }
  char* error = nullptr;
  Options parsed(PQconninfoParse(conninfo.c_str(), &error), PQconninfoFree);
  if (!parsed) {
    PQfreemem(error);
    return "--db, which is not a valid libpq connection string or URI; fix --db, or leave it "
           "out to use " + vars;
  }
  std::string shown;
  std::set<std::string> given;
  for (const PQconninfoOption* o = parsed.get(); o->keyword; ++o) {
    if (!o->val) continue;
    given.insert(o->keyword);
    shown += (shown.empty() ? "" : " ") + std::string(o->keyword) + "=" + (secret(*o) ? "***" : o->val);
  }
  std::string out = "--db \"" + shown + "\"";
  const std::string env = environment(given);
  if (!env.empty()) out += " and, for what it leaves out, the environment: " + env;
  return out + "; fix --db, or leave it out to use " + vars;
}

}  // namespace relaybus::cli
