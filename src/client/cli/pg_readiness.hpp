// Before an operator command runs on PostgreSQL: can the tool connect, is relaybus installed
// in that database, and may the role run the command. Each failure is a GuidedError that
// says what to do (which --db or PG* variables were used; CREATE EXTENSION relaybus in
// which database; relaybus.grant_rights(role, 'admin'), or on 0.2.0 GRANT relaybus_admin,
// for which role). Checked up front, on a connection
// of its own, because the store's own errors for these cases ("schema relaybus does not
// exist", "permission denied for function statistics") name the symptom, not the fix.
#pragma once

#include <string>

namespace relaybus::cli {

struct PgReadiness {
  std::string database;
  std::string user;
  std::string version;  // relaybus's installed version
};

// `command` ("relaybus stats") names what needs the admin right in the error. The role
// check asks whether the role may execute relaybus.statistics(), which only the admin right
// gives: what the SQL functions will check, whether the role holds the right, inherits it
// from a role that does, or is a superuser.
PgReadiness check_pg_ready(const std::string& conninfo, const std::string& command,
                           bool needs_admin);

}  // namespace relaybus::cli
