#!/usr/bin/env bash
# CREATE EXTENSION and the upgrade from 0.1.0 use an existing schema relaybus as they find
# it. A role that owns it, may create in it, or left objects in it could plant an
# overload of an API function that wins over relaybus's for untyped arguments, or drop
# the extension with the schema. The 0.2.0 scripts refuse such a schema (42501) before
# creating anything; a schema a superuser made, empty, is fine.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/integration/lib/checks.bash
export PGDATABASE=postgres
psql() { command psql -qX -v ON_ERROR_STOP=1 "$@"; }
sql() { psql -qXAt -v ON_ERROR_STOP=1 -d "$1" -c "$2"; }
dbs=(relaybus_it_guard1 relaybus_it_guard2 relaybus_it_guard3 relaybus_it_guard4 relaybus_it_guard5 relaybus_it_guard6)
cleanup() {
  for db in "${dbs[@]}"; do command psql -qX -d postgres -c "DROP DATABASE IF EXISTS $db" 2>/dev/null; done
  command psql -qX -d postgres -c "DROP ROLE IF EXISTS relaybus_it_mallory" 2>/dev/null
  command psql -qX -d postgres -c 'DROP ROLE IF EXISTS "relaybus_it_Mal""ory"' 2>/dev/null
}
cleanup
trap cleanup EXIT
sql postgres "CREATE ROLE relaybus_it_mallory LOGIN"

# expect_refused DB COMMAND WHAT: COMMAND fails with 42501 and leaves no extension behind.
expect_refused() {
  local err
  if err=$(command psql -qXAt -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -d "$1" -c "$2" 2>&1); then
    not_ok "$3: it was accepted"; return
  fi
  case "$err" in
    *42501*) ok "$3: refused with 42501" ;;
    *) not_ok "$3: refused, but not with 42501: $err" ;;
  esac
}

# 1. The database's owner creates schema relaybus before the superuser installs.
sql postgres "CREATE DATABASE ${dbs[0]} OWNER relaybus_it_mallory"
sql "${dbs[0]}" "SET ROLE relaybus_it_mallory; CREATE SCHEMA relaybus"
expect_refused "${dbs[0]}" "CREATE EXTENSION relaybus" "a schema owned by another role"
[ "$(sql "${dbs[0]}" "SELECT count(*) FROM pg_extension WHERE extname = 'relaybus'")" = 0 ] \
  && ok "a schema owned by another role: no extension" || not_ok "a schema owned by another role: installed"

# 2. A superuser's schema in which another role may create.
sql postgres "CREATE DATABASE ${dbs[1]}"
sql "${dbs[1]}" "CREATE SCHEMA relaybus; GRANT CREATE ON SCHEMA relaybus TO relaybus_it_mallory"
expect_refused "${dbs[1]}" "CREATE EXTENSION relaybus" "CREATE on the schema granted to another role"
sql postgres "CREATE DATABASE ${dbs[4]}"
sql "${dbs[4]}" "CREATE SCHEMA relaybus; GRANT CREATE ON SCHEMA relaybus TO PUBLIC"
expect_refused "${dbs[4]}" "CREATE EXTENSION relaybus" "CREATE on the schema granted to PUBLIC"

# 3. An overload planted while the role could create there, the grant revoked since.
sql postgres "CREATE DATABASE ${dbs[2]}"
sql "${dbs[2]}" "CREATE SCHEMA relaybus; GRANT CREATE, USAGE ON SCHEMA relaybus TO relaybus_it_mallory"
sql "${dbs[2]}" "SET ROLE relaybus_it_mallory;
  CREATE FUNCTION relaybus.publish(type text, payload text) RETURNS text LANGUAGE sql AS 'SELECT ''planted'''"
sql "${dbs[2]}" "REVOKE CREATE ON SCHEMA relaybus FROM relaybus_it_mallory"
expect_refused "${dbs[2]}" "CREATE EXTENSION relaybus" "a planted overload of publish"

# 4. The upgrade from 0.1.0 after the schema changed hands.
sql postgres "CREATE DATABASE ${dbs[3]}"
sql "${dbs[3]}" "CREATE EXTENSION relaybus VERSION '0.1.0'; ALTER SCHEMA relaybus OWNER TO relaybus_it_mallory"
expect_refused "${dbs[3]}" "ALTER EXTENSION relaybus UPDATE TO '0.2.0'" "the upgrade into a schema owned by another role"
[ "$(sql "${dbs[3]}" "SELECT extversion FROM pg_extension WHERE extname = 'relaybus'")" = 0.1.0 ] \
  && ok "... which stays at 0.1.0" || not_ok "the refused upgrade changed the version"
sql "${dbs[3]}" "ALTER SCHEMA relaybus OWNER TO postgres"
sql "${dbs[3]}" "ALTER EXTENSION relaybus UPDATE TO '0.2.0'" >/dev/null \
  && ok "back in a superuser's hands, the upgrade runs" || not_ok "the upgrade still fails"

# 5. A superuser's empty schema is fine (and the refused databases install once mended).
sql "${dbs[1]}" "REVOKE CREATE ON SCHEMA relaybus FROM relaybus_it_mallory"
sql "${dbs[1]}" "CREATE EXTENSION relaybus" >/dev/null \
  && ok "a superuser's schema, the grant revoked: installs" || not_ok "a mended schema does not install"

# 6. The roles the refusals name are quoted as identifiers (issue 32, finding 4): an operator
# pastes them into REVOKE or ALTER ... OWNER.
sql postgres 'CREATE ROLE "relaybus_it_Mal""ory"'
sql postgres "CREATE DATABASE ${dbs[5]}"
sql "${dbs[5]}" 'CREATE SCHEMA relaybus; GRANT CREATE, USAGE ON SCHEMA relaybus TO "relaybus_it_Mal""ory"'
err=$(command psql -qXAt -d "${dbs[5]}" -c "CREATE EXTENSION relaybus" 2>&1 || true)
case "$err" in
  *'may create objects in schema relaybus: "relaybus_it_Mal""ory"'*) ok "a creator with an odd name is quoted as an identifier" ;;
  *) not_ok "a creator with an odd name is not quoted: $err" ;;
esac
sql "${dbs[5]}" 'SET ROLE "relaybus_it_Mal""ory"; CREATE TABLE relaybus.t (x int)'
sql "${dbs[5]}" 'REVOKE CREATE ON SCHEMA relaybus FROM "relaybus_it_Mal""ory"'
err=$(command psql -qXAt -d "${dbs[5]}" -c "CREATE EXTENSION relaybus" 2>&1 || true)
case "$err" in
  *'(owner "relaybus_it_Mal""ory")'*) ok "an owner with an odd name is quoted as an identifier" ;;
  *) not_ok "an owner with an odd name is not quoted: $err" ;;
esac
sql "${dbs[5]}" 'DROP TABLE relaybus.t; REVOKE ALL ON SCHEMA relaybus FROM "relaybus_it_Mal""ory"'

echo "schema guard: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
