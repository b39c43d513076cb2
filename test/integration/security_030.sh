#!/usr/bin/env bash
# relaybus 0.3.0 against hostile roles, where a database of its own is needed (the pgTAP side
# is test/pgtap-0.3.0/04_security.sql), against the running test cluster ($PGHOST/$PGPORT):
#  - the update 0.2.1 -> 0.3.0 keeps each right: an admin still reads every table (the update
#    makes deliveries, lanes and exceptions anew; they used to be left unreadable to it), the
#    rights listed are the same, and nothing is granted to PUBLIC;
#  - a role that is not a superuser cannot install 0.3.0 nor run the update, not even in a
#    database it owns (42501), and nothing changes;
#  - the update refuses a schema relaybus in which another role may create, or that holds an
#    object planted by one (42501, before changing anything), and runs once it is clean;
#  - DROP EXTENSION after a publish in the same transaction commits, and DROP and CREATE
#    EXTENSION after a publish leave no delivery without its event in the new tables, in a
#    backend that had committed a publish before (the statement that writes staged
#    deliveries was kept, by name, from that commit).
# Roles and databases made here are named relaybus_sec030_* and dropped at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok - $1"; }
not_ok() { failed=$((failed + 1)); echo "not ok - $1"; }
q() { local db=$1; shift; psql -qXAt -v ON_ERROR_STOP=1 -d "$db" -c "$*"; }
check() { if [ "$(q "$1" "$3")" = t ]; then ok "$2"; else not_ok "$2"; fi; }
# expect_state DB SQLSTATE DESCRIPTION SQL [USER]: SQL fails with SQLSTATE.
expect_state() {
  local db=$1 state=$2 what=$3 sql=$4 user=${5:-${PGUSER:-postgres}} err
  if err=$(psql -qXAt -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -U "$user" -d "$db" -c "$sql" 2>&1); then
    not_ok "$what: it was accepted"
    return
  fi
  case "$err" in
    *"ERROR:  $state:"*) ok "$what ($state)" ;;
    *) not_ok "$what: not $state: $err" ;;
  esac
}
databases="relaybus_sec030_up relaybus_sec030_own relaybus_sec030_guard relaybus_sec030_drop"
roles="relaybus_sec030_adm relaybus_sec030_pub relaybus_sec030_dbo relaybus_sec030_plant"
drop_all() {
  local x
  for x in $databases; do q postgres "DROP DATABASE IF EXISTS $x" >/dev/null 2>&1 || true; done
  for x in $roles; do q postgres "DROP ROLE IF EXISTS $x" >/dev/null 2>&1 || true; done
}
drop_all
trap drop_all EXIT
for r in $roles; do q postgres "CREATE ROLE $r LOGIN" >/dev/null; done

# 1. The update keeps each right, and grants nothing to PUBLIC.
db=relaybus_sec030_up
q postgres "CREATE DATABASE $db" >/dev/null
q $db "CREATE EXTENSION relaybus VERSION '0.2.1'" >/dev/null
q $db "SELECT relaybus.grant_rights('relaybus_sec030_adm', 'admin'), relaybus.grant_rights('relaybus_sec030_pub', 'publisher')" >/dev/null
q $db "CREATE TABLE rights_before AS SELECT * FROM relaybus.rights()" >/dev/null
q $db "ALTER EXTENSION relaybus UPDATE TO '0.3.0'" >/dev/null
check $db "the update ran" "SELECT extversion = '0.3.0' FROM pg_extension WHERE extname = 'relaybus'"
check $db "after the update the admin reads every relaybus table and view, the new deliveries, lanes, lane_progress, lane_state, exceptions, purge_horizons and events_from_021 included" \
  "SELECT bool_and(has_table_privilege('relaybus_sec030_adm', c.oid, 'SELECT')) AND count(*) = 10
     FROM pg_class c WHERE c.relnamespace = 'relaybus'::regnamespace AND c.relkind IN ('r', 'v')"
if psql -qXAt -v ON_ERROR_STOP=1 -U relaybus_sec030_adm -d $db \
     -c "SELECT count(*) FROM relaybus.exceptions" -c "SELECT count(*) FROM relaybus.lanes" >/dev/null 2>&1; then
  ok "the admin, logged in, reads exceptions and lanes"
else
  not_ok "the admin, logged in, reads exceptions and lanes"
fi
check $db "the publisher reads none of them, and no right writes any" \
  "SELECT NOT bool_or(has_table_privilege('relaybus_sec030_pub', c.oid, 'SELECT')
                      OR has_table_privilege(r, c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE, TRIGGER'))
     FROM pg_class c, unnest(ARRAY['relaybus_sec030_adm', 'relaybus_sec030_pub']) r
    WHERE c.relnamespace = 'relaybus'::regnamespace AND c.relkind = 'r'"
check $db "the rights listed are those before the update" \
  "SELECT NOT EXISTS (SELECT * FROM rights_before EXCEPT SELECT * FROM relaybus.rights())
      AND NOT EXISTS (SELECT * FROM relaybus.rights() EXCEPT SELECT * FROM rights_before)"
check $db "after the update nothing in relaybus or relaybus_internal is granted to PUBLIC (unfinished and finish_position included)" \
  "SELECT NOT EXISTS (SELECT FROM pg_proc p WHERE p.pronamespace IN ('relaybus'::regnamespace, 'relaybus_internal'::regnamespace)
                        AND (p.proacl IS NULL OR EXISTS (SELECT FROM aclexplode(p.proacl) a WHERE a.grantee = 0)))
      AND NOT EXISTS (SELECT FROM pg_class c WHERE c.relnamespace IN ('relaybus'::regnamespace, 'relaybus_internal'::regnamespace)
                        AND c.relkind IN ('r', 'S', 'v', 'm')
                        AND (c.relacl IS NULL OR EXISTS (SELECT FROM aclexplode(c.relacl) a WHERE a.grantee = 0)))
      AND NOT EXISTS (SELECT FROM pg_namespace n, aclexplode(n.nspacl) a
                       WHERE n.nspname IN ('relaybus', 'relaybus_internal') AND a.grantee = 0)
      AND to_regprocedure('relaybus_internal.finish_position(text,smallint,bigint)') IS NOT NULL"
check $db "and the admin executes no helper of relaybus_internal" \
  "SELECT NOT has_schema_privilege('relaybus_sec030_adm', 'relaybus_internal', 'USAGE')
      AND NOT bool_or(has_function_privilege('relaybus_sec030_adm', p.oid, 'EXECUTE'))
     FROM pg_proc p WHERE p.pronamespace = 'relaybus_internal'::regnamespace"

# 2. Not a superuser: no install, no update, even in its own database.
db=relaybus_sec030_own
q postgres "CREATE DATABASE $db OWNER relaybus_sec030_dbo" >/dev/null
expect_state $db 42501 "the database's owner, not a superuser, cannot CREATE EXTENSION relaybus VERSION '0.3.0'" \
  "CREATE EXTENSION relaybus VERSION '0.3.0'" relaybus_sec030_dbo
q $db "CREATE EXTENSION relaybus VERSION '0.2.1'" >/dev/null
q $db "SELECT relaybus.grant_rights('relaybus_sec030_dbo', 'admin')" >/dev/null
expect_state $db 42501 "the database's owner, an admin of relaybus there, cannot update it to 0.3.0" \
  "ALTER EXTENSION relaybus UPDATE TO '0.3.0'" relaybus_sec030_dbo
expect_state $db 42501 "nor drop it" "DROP EXTENSION relaybus" relaybus_sec030_dbo
check $db "it is still 0.2.1, with 0.2's tables" \
  "SELECT extversion = '0.2.1' AND to_regclass('relaybus.key_counters') IS NOT NULL
     FROM pg_extension WHERE extname = 'relaybus'"

# 3. A planted schema: refused before anything changes, then updated once clean.
db=relaybus_sec030_guard
q postgres "CREATE DATABASE $db" >/dev/null
q $db "CREATE EXTENSION relaybus VERSION '0.2.1'" >/dev/null
q $db "SELECT relaybus.subscribe('h', ARRAY['t']); SELECT relaybus.publish('t', '{}', NULL, 'g1')" >/dev/null
q $db "GRANT USAGE, CREATE ON SCHEMA relaybus TO relaybus_sec030_plant" >/dev/null
q $db "SET ROLE relaybus_sec030_plant;
       CREATE FUNCTION relaybus.publish(type text, payload text) RETURNS text LANGUAGE sql AS 'SELECT ''planted''';
       CREATE FUNCTION relaybus.complete(lease_token varchar) RETURNS boolean LANGUAGE sql AS 'SELECT true'" >/dev/null
expect_state $db 42501 "the update refuses a schema relaybus in which another role may create" \
  "ALTER EXTENSION relaybus UPDATE TO '0.3.0'"
q $db "REVOKE CREATE ON SCHEMA relaybus FROM relaybus_sec030_plant" >/dev/null
expect_state $db 42501 "and one that holds functions another role planted there" "ALTER EXTENSION relaybus UPDATE TO '0.3.0'"
check $db "the refused updates changed nothing (0.2.1, 0.2's deliveries, the planted functions still there)" \
  "SELECT extversion = '0.2.1' AND to_regclass('relaybus.key_counters') IS NOT NULL
          AND (SELECT count(*) FROM relaybus.deliveries WHERE event_id = 'g1') = 1
          AND to_regprocedure('relaybus.publish(text, text)') IS NOT NULL
     FROM pg_extension WHERE extname = 'relaybus'"
q $db "DROP FUNCTION relaybus.publish(text, text), relaybus.complete(varchar);
       REVOKE USAGE ON SCHEMA relaybus FROM relaybus_sec030_plant" >/dev/null
q $db "ALTER EXTENSION relaybus UPDATE TO '0.3.0'" >/dev/null
check $db "once the planted functions are gone the update runs, and the delivery is in 0.3.0's table" \
  "SELECT extversion = '0.3.0' AND (SELECT count(*) FROM relaybus.deliveries WHERE event_id = 'g1') = 1
     FROM pg_extension WHERE extname = 'relaybus'"

# 4. DROP (and CREATE) EXTENSION in the transaction that published, in a backend that had
#    committed a publish before.
db=relaybus_sec030_drop
q postgres "CREATE DATABASE $db" >/dev/null
q $db "CREATE EXTENSION relaybus VERSION '0.3.0'" >/dev/null
out=$(psql -qXAt -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -d $db 2>&1 <<'SQL' || true
SELECT relaybus.subscribe('h', ARRAY['t']);
SELECT relaybus.publish('t', '{}', NULL, 'before');
BEGIN;
SELECT relaybus.publish('t', '{}', NULL, 'dropped');
DROP EXTENSION relaybus;
CREATE EXTENSION relaybus VERSION '0.3.0';
COMMIT;
SQL
)
check $db "DROP and CREATE EXTENSION after a publish in one transaction: the new tables hold no delivery (orphaned: none of its event)" \
  "SELECT (SELECT count(*) FROM relaybus.deliveries) = 0 AND (SELECT count(*) FROM relaybus.events) = 0"
[[ $out != *ERROR* ]] && ok "and the transaction committed" || not_ok "the transaction committed: $out"
out=$(psql -qXAt -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -d $db 2>&1 <<'SQL' || true
SELECT relaybus.subscribe('h', ARRAY['t']);
SELECT relaybus.publish('t', '{}', NULL, 'before');
BEGIN;
SELECT relaybus.publish('t', '{}', NULL, 'dropped');
DROP EXTENSION relaybus;
COMMIT;
SQL
)
[[ $out != *ERROR* ]] && ok "DROP EXTENSION after a publish in the same transaction commits" \
  || not_ok "DROP EXTENSION after a publish in the same transaction commits: $out"
check $db "and the extension is gone" "SELECT NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'relaybus')"

echo "security_030: $passed passed, $failed failed"
[ $failed = 0 ]
