#!/usr/bin/env bash
# The updates from 0.1.0 and 0.2.0, against the running test cluster ($PGHOST/$PGPORT):
#  - a fresh install, an updated 0.1.0 and an updated 0.2.0 have identical catalogs (at the
#    default version, relaybus.control's);
#  - 0.1.0 under data (pending, in flight, completed and dead deliveries; keyed and not;
#    three handlers), updated to 0.2.1 (0.1.0's row leases to 0.2's lane leases): the update
#    keeps every promise: every pending and in-flight delivery runs exactly once, in key
#    order; nothing completed runs again; dead ones stay dead until requeued; two copies
#    upgrade to the same state; (upgrade_030.sh takes 0.2.1 under data on to 0.3.0);
#  - while a 0.1.0 lease is live, the upgrade refuses (55006) and changes nothing;
#  - a 0.1.0 in-database handler nobody checked: updated to the default version, it stays
#    paused, without its function;
#  - 0.2.0 under data, with roles that are members of the cluster-wide relaybus_publisher,
#    relaybus_worker and relaybus_admin, updated to 0.2.1 (where the rights change and the
#    storage does not): each member holds the same right by name in that database
#    afterwards, and nothing more; the three roles hold nothing there; a WARNING names the
#    members; every delivery stays, and the converted roles log in and do their jobs, down
#    to the last delivery; (security_030.sh checks that 0.2.1 -> 0.3.0 keeps the rights);
#  - pg_dump and restore keep every relaybus row (at the default version).
# The databases share the cluster's roles: the roles made here are named relaybus_up_* and
# dropped at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok - $1"; }
not_ok() { failed=$((failed + 1)); echo "not ok - $1"; }
q() { local db=$1; shift; psql -qXAt -v ON_ERROR_STOP=1 -d "$db" -c "$*"; }
check() { if [ "$(q "$1" "$3")" = t ]; then ok "$2"; else not_ok "$2"; fi; }
fresh_db() { q postgres "DROP DATABASE IF EXISTS $1" >/dev/null; q postgres "CREATE DATABASE $1 $2" >/dev/null; }
catalog() { psql -qXAt -v ON_ERROR_STOP=1 -d "$1" -f test/integration/catalog.sql; }
default_version=$(sed -n "s/^default_version = '\(.*\)'$/\1/p" relaybus.control)
# The roles this script makes: a member of relaybus_admin left by a run that stopped early
# would hold the admin right in every database this run updates, so they go first, with
# the databases that name them.
databases="relaybus_up_fresh relaybus_up_empty relaybus_up_empty020 relaybus_up_data relaybus_up_copy
           relaybus_up_live relaybus_up_sqlfn relaybus_up_rights relaybus_up_restored"
roles="relaybus_up_eve relaybus_up_mallory relaybus_up_pub relaybus_up_wrk relaybus_up_adm relaybus_up_both"
drop_all() {
  local db role
  for db in $databases; do q postgres "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true; done
  for role in $roles; do q postgres "DROP ROLE IF EXISTS $role" >/dev/null 2>&1 || true; done
}
drop_all
trap drop_all EXIT

# Catalogs.
fresh_db relaybus_up_fresh ""
q relaybus_up_fresh "CREATE EXTENSION relaybus" >/dev/null
fresh_db relaybus_up_empty ""
q relaybus_up_empty "CREATE EXTENSION relaybus VERSION '0.1.0'" >/dev/null
q relaybus_up_empty "ALTER EXTENSION relaybus UPDATE" >/dev/null
if diff <(catalog relaybus_up_fresh) <(catalog relaybus_up_empty); then
  ok "CREATE EXTENSION and CREATE ... VERSION '0.1.0' + ALTER EXTENSION UPDATE give identical catalogs ($(catalog relaybus_up_fresh | wc -l) facts)"
else
  not_ok "identical catalogs after upgrade"
fi
# From 0.2.0, with no member in the cluster's three roles (a member would hold its right
# here afterwards, and the ACLs would name it).
fresh_db relaybus_up_empty020 ""
q relaybus_up_empty020 "CREATE EXTENSION relaybus VERSION '0.2.0'" >/dev/null
members=$(q postgres "SELECT count(*) FROM pg_auth_members am JOIN pg_roles g ON g.oid = am.roleid
                       JOIN pg_roles m ON m.oid = am.member
                      WHERE g.rolname IN ('relaybus_publisher', 'relaybus_worker', 'relaybus_admin')
                        AND m.rolname NOT IN ('relaybus_publisher', 'relaybus_worker', 'relaybus_admin')")
q relaybus_up_empty020 "ALTER EXTENSION relaybus UPDATE" >/dev/null
if [ "$members" != 0 ]; then
  not_ok "CREATE ... VERSION '0.2.0' + ALTER EXTENSION UPDATE: the cluster's relaybus roles have $members members left by something else; cannot compare"
elif diff <(catalog relaybus_up_fresh) <(catalog relaybus_up_empty020); then
  ok "CREATE EXTENSION and CREATE ... VERSION '0.2.0' + ALTER EXTENSION UPDATE give identical catalogs"
else
  not_ok "identical catalogs after the update from 0.2.0"
fi

# A 0.1.0 database with every kind of delivery, made through the 0.1.0 API.
fresh_db relaybus_up_data ""
q relaybus_up_data "CREATE EXTENSION relaybus VERSION '0.1.0'" >/dev/null
psql -qX -v ON_ERROR_STOP=1 -d relaybus_up_data >/dev/null <<'SQL'
SELECT relaybus.subscribe('billing', ARRAY['order']);
SELECT relaybus.subscribe('mail', ARRAY['order']);
SELECT relaybus.subscribe('audit', ARRAY['*'], max_attempts => 2);
-- 30 keyed orders (3 keys, in order), 10 unkeyed notes
SELECT relaybus.publish('order', jsonb_build_object('n', i), 'k' || (i % 3), 'o' || i)
  FROM generate_series(1, 30) i ORDER BY i;
SELECT relaybus.publish('note', jsonb_build_object('n', i), NULL, 'note' || i)
  FROM generate_series(1, 10) i ORDER BY i;
-- completed under 0.1.0: the first batch of each handler
SELECT relaybus.complete(lease_token) FROM relaybus.claim('old-1', 12, '1 hour');
-- dead under 0.1.0
SELECT relaybus.bury(lease_token, 'poison') FROM relaybus.claim('old-2', 1, '1 hour', ARRAY['audit']);
-- in flight under 0.1.0, leases expired by the time of the upgrade
SELECT count(*) FROM relaybus.claim('old-3', 10, '1 millisecond');
SELECT pg_sleep(0.05);
CREATE TABLE before_upgrade AS
  SELECT event_id, handler, key, sequence, status, attempts FROM relaybus.deliveries;
SQL
echo "# before: $(q relaybus_up_data "SELECT string_agg(status || '=' || n, ' ' ORDER BY status) FROM (SELECT status, count(*) n FROM relaybus.deliveries GROUP BY status) s")"
check relaybus_up_data "the 0.1.0 database has pending, processing, completed and dead deliveries" \
  "SELECT count(DISTINCT status) = 4 FROM relaybus.deliveries"
fresh_db relaybus_up_copy "TEMPLATE relaybus_up_data"
fresh_db relaybus_up_live "TEMPLATE relaybus_up_data"

# A live 0.1.0 lease: the upgrade refuses and nothing changes.
q relaybus_up_live "SELECT count(*) FROM relaybus.claim('still-running', 1, '1 hour')" >/dev/null
live_before=$(q relaybus_up_live "SELECT md5(string_agg(d::text, ',' ORDER BY event_id, handler)) FROM relaybus.deliveries d")
err=$(psql -qXAt -d relaybus_up_live -v VERBOSITY=verbose -c "ALTER EXTENSION relaybus UPDATE" 2>&1 || true)
case "$err" in *55006*) ok "a live 0.1.0 lease makes the upgrade fail with 55006" ;;
  *) not_ok "a live 0.1.0 lease makes the upgrade fail with 55006 (got: $err)" ;; esac
check relaybus_up_live "and nothing changed (still 0.1.0, same rows)" \
  "SELECT (SELECT extversion FROM pg_extension WHERE extname = 'relaybus') = '0.1.0'
      AND (SELECT md5(string_agg(d::text, ',' ORDER BY event_id, handler)) FROM relaybus.deliveries d) = '$live_before'"

# The upgrade, on two copies, to 0.2.1: what it checks is 0.1.0's row leases becoming 0.2's
# lane leases (deliveries with a status, attempts and a per-key sequence).
for db in relaybus_up_data relaybus_up_copy; do q $db "ALTER EXTENSION relaybus UPDATE TO '0.2.1'" >/dev/null; done
check relaybus_up_data "the upgraded database is at 0.2.1" \
  "SELECT extversion = '0.2.1' FROM pg_extension WHERE extname = 'relaybus'"
state="SELECT count(*) || ' ' || md5(string_agg(format('%s %s %s %s %s %s %s', event_id, handler, lane, key, sequence, status, attempts), ',' ORDER BY event_id, handler)) FROM relaybus.deliveries"
state_data=$(q relaybus_up_data "$state" || true)
[ -n "$state_data" ] && [ "$state_data" = "$(q relaybus_up_copy "$state" || true)" ] \
  && ok "two copies upgrade to the same state" || not_ok "two copies upgrade to the same state"
check relaybus_up_data "in-flight deliveries became pending with their attempt kept" \
  "SELECT bool_and(d.status = 'pending' AND d.attempts = b.attempts AND d.attempts = 1)
     FROM before_upgrade b JOIN relaybus.deliveries d USING (event_id, handler) WHERE b.status = 'processing'"
check relaybus_up_data "every delivery has the lane a new one would get" \
  "SELECT bool_and(lane = relaybus.lane_of(coalesce(key, event_id))) FROM relaybus.deliveries"
check relaybus_up_data "events remember every handler, completed ones included" \
  "SELECT bool_and(e.handlers = (SELECT array_agg(b.handler ORDER BY b.handler) FROM before_upgrade b WHERE b.event_id = e.id))
     FROM relaybus.events e"
check relaybus_up_data "every handler has its 256 lanes" \
  "SELECT count(*) = 3 * 256 FROM relaybus.lanes"
check relaybus_up_data "completed 0.1.0 deliveries stay listable" \
  "SELECT (SELECT count(*) FROM relaybus.list_deliveries('completed', max_rows => 1000))
        = (SELECT count(*) FROM before_upgrade WHERE status = 'completed')"
check relaybus_up_data "completed 0.1.0 deliveries moved to the completion history, each once" \
  "SELECT NOT EXISTS (SELECT 1 FROM relaybus.deliveries d JOIN before_upgrade b USING (event_id, handler)
                      WHERE b.status = 'completed')
      AND (SELECT array_agg(c.event_id || '/' || c.handler || '/' || c.attempts ORDER BY 1)
             FROM relaybus.completions c)
        = (SELECT array_agg(b.event_id || '/' || b.handler || '/' || b.attempts ORDER BY 1)
             FROM before_upgrade b WHERE b.status = 'completed')"

# Drain with 0.2.1, recording each handling in the completion's own transaction.
psql -qX -v ON_ERROR_STOP=1 -d relaybus_up_data >/dev/null <<'SQL'
CREATE TABLE handled (id bigserial, event_id text, handler text, key text, n int);
CREATE PROCEDURE drain() LANGUAGE plpgsql AS $$
DECLARE
  r record;
  got int;
BEGIN
  LOOP
    got := 0;
    FOR r IN SELECT * FROM relaybus.claim('new', 50) LOOP
      INSERT INTO handled (event_id, handler, key, n)
        VALUES (r.event_id, r.handler, r.key, (r.payload->>'n')::int);
      PERFORM relaybus.complete(r.lease_token);
      got := got + 1;
    END LOOP;
    COMMIT;
    EXIT WHEN got = 0;
  END LOOP;
END $$;
CALL drain();
SQL
check relaybus_up_data "every pending and in-flight 0.1.0 delivery ran exactly once" \
  "SELECT (SELECT count(*) FROM handled) = (SELECT count(*) FROM before_upgrade WHERE status IN ('pending', 'processing'))
      AND NOT EXISTS (SELECT 1 FROM handled GROUP BY event_id, handler HAVING count(*) > 1)
      AND NOT EXISTS (SELECT event_id, handler FROM before_upgrade WHERE status IN ('pending', 'processing')
                      EXCEPT SELECT event_id, handler FROM handled)"
check relaybus_up_data "nothing completed under 0.1.0 ran again" \
  "SELECT NOT EXISTS (SELECT 1 FROM handled h JOIN before_upgrade b USING (event_id, handler) WHERE b.status <> 'pending' AND b.status <> 'processing')"
check relaybus_up_data "in key order" \
  "SELECT NOT EXISTS (SELECT 1 FROM (SELECT n < lag(n) OVER (PARTITION BY handler, key ORDER BY id) AS back
                                       FROM handled WHERE key IS NOT NULL) o WHERE back)"
q relaybus_up_data "SELECT relaybus.publish('order', '{}', 'k1', 'o1')" >/dev/null
check relaybus_up_data "publishing a completed event again adds nothing" \
  "SELECT count(*) = 0 FROM relaybus.deliveries WHERE event_id = 'o1' AND status = 'pending'"
check relaybus_up_data "the dead letter stays dead" \
  "SELECT status = 'dead' FROM relaybus.deliveries WHERE (event_id, handler) IN (SELECT event_id, handler FROM before_upgrade WHERE status = 'dead')"
q relaybus_up_data "SELECT relaybus.requeue_dead()" >/dev/null
check relaybus_up_data "and runs once requeued" \
  "SELECT count(*) = 1 FROM relaybus.claim('new', 10)"

# An in-database handler subscribed under 0.1.0, which never checked who owns the function
# and never ran it: the upgrade must not start running it as that owner. Here a role with
# no rights over eve subscribed eve's function; 0.2.0's subscribe refuses exactly that.
fresh_db relaybus_up_sqlfn ""
q relaybus_up_sqlfn "CREATE EXTENSION relaybus VERSION '0.1.0'" >/dev/null
psql -qX -v ON_ERROR_STOP=1 -d relaybus_up_sqlfn >/dev/null <<'SQL'
SET client_min_messages = warning;
CREATE ROLE relaybus_up_eve;
CREATE ROLE relaybus_up_mallory IN ROLE relaybus_admin;
CREATE TABLE ran (who text);
GRANT INSERT ON ran TO PUBLIC;
CREATE FUNCTION public.eve_handler(e jsonb) RETURNS void LANGUAGE sql
  AS 'INSERT INTO public.ran VALUES (current_user)';
ALTER FUNCTION public.eve_handler(jsonb) OWNER TO relaybus_up_eve;
SET ROLE relaybus_up_mallory;
SELECT relaybus.subscribe('planted', ARRAY['t'], sql_function => 'public.eve_handler(jsonb)');
SELECT relaybus.publish('t', '{"n": 1}', NULL, 'p1');
RESET ROLE;
SQL
warned=$(psql -qXAt -v ON_ERROR_STOP=1 -d relaybus_up_sqlfn -c "ALTER EXTENSION relaybus UPDATE" 2>&1)
case "$warned" in *'handler "planted"'*eve_handler*) ok "the upgrade warns about the 0.1.0 in-database handler" ;;
  *) not_ok "the upgrade warns about the 0.1.0 in-database handler (got: $warned)" ;; esac
check relaybus_up_sqlfn "and keeps it paused, without its function, its delivery pending" \
  "SELECT s.sql_function IS NULL AND s.paused_at IS NOT NULL
          AND (SELECT count(*) = 1 FROM relaybus.list_deliveries('pending', 'planted'))
     FROM relaybus.subscriptions s WHERE s.handler = 'planted'"
check relaybus_up_sqlfn "so no claim hands it out" \
  "SELECT count(*) = 0 FROM relaybus.claim('w', 10)"
err=$(psql -qXAt -d relaybus_up_sqlfn -v VERBOSITY=verbose -c "SET ROLE relaybus_up_mallory" \
  -c "SELECT relaybus.subscribe('planted', ARRAY['t'], sql_function => 'public.eve_handler(jsonb)')" 2>&1 || true)
# mallory was a member of relaybus_admin: the update made that the admin right here, so
# the refusal is subscribe's own, not a missing EXECUTE.
check relaybus_up_sqlfn "relaybus_admin's member holds the admin right after the update" \
  "SELECT rights = '{admin,publisher,worker}' FROM relaybus.rights() WHERE role = 'relaybus_up_mallory'"
case "$err" in *42501*'sql_function runs as its owner'*) ok "subscribing it again needs the owner's privileges (42501)" ;;
  *) not_ok "subscribing it again needs the owner's privileges (got: $err)" ;; esac
q relaybus_up_sqlfn "SELECT relaybus.subscribe('planted', ARRAY['t'], sql_function => 'public.eve_handler(jsonb)')" >/dev/null
q relaybus_up_sqlfn "SELECT relaybus.resume('planted')" >/dev/null
check relaybus_up_sqlfn "which a role with them can do, then resume it" \
  "SELECT sql_function = 'public.eve_handler(jsonb)'::regprocedure AND paused_at IS NULL
     FROM relaybus.subscriptions WHERE handler = 'planted'"
q postgres "DROP DATABASE relaybus_up_sqlfn" >/dev/null
q postgres "DROP ROLE relaybus_up_mallory" >/dev/null
q postgres "DROP ROLE relaybus_up_eve" >/dev/null

# 0.2.0 -> 0.2.1, under data and with members of the cluster-wide roles. 0.2.0 granted each
# database's relaybus objects to relaybus_publisher, relaybus_worker and relaybus_admin; the
# update gives each member the same right by name in this database, and the three roles
# nothing here. It changes no storage, so every row stays as it was. (0.3.0's storage is
# new: the update 0.2.1 -> 0.3.0 under data is upgrade_030.sh's, and the rights across it
# security_030.sh's.)
fresh_db relaybus_up_rights ""
q relaybus_up_rights "CREATE EXTENSION relaybus VERSION '0.2.0'" >/dev/null
psql -qX -v ON_ERROR_STOP=1 -d relaybus_up_rights >/dev/null <<'SQL'
SET client_min_messages = warning;
CREATE ROLE relaybus_up_pub LOGIN IN ROLE relaybus_publisher;
CREATE ROLE relaybus_up_wrk LOGIN IN ROLE relaybus_worker;
CREATE ROLE relaybus_up_adm LOGIN IN ROLE relaybus_admin;
CREATE ROLE relaybus_up_both LOGIN IN ROLE relaybus_publisher, relaybus_worker;
SELECT relaybus.subscribe('live', ARRAY['e']);
SELECT relaybus.subscribe('paused', ARRAY['e']);
SELECT relaybus.subscribe('poisoned', ARRAY['e'], max_attempts => 1);
SELECT relaybus.publish('e', jsonb_build_object('n', i), 'k' || (i % 10), 'e' || i)
  FROM generate_series(1, 20) i ORDER BY i;
SELECT relaybus.pause('paused');
-- dead letters
SELECT relaybus.bury(lease_token, 'poison') FROM relaybus.claim('old-dead', 5, '1 hour', ARRAY['poisoned']);
SELECT relaybus.relinquish('old-dead');
-- in flight at the update, their leases expired by then
SELECT count(*) FROM relaybus.claim('old-busy', 8, '1 millisecond', ARRAY['live']);
SELECT pg_sleep(0.01);
CREATE TABLE before_update AS SELECT event_id, handler, status FROM relaybus.deliveries;
CREATE TABLE handled (event_id text, handler text);
GRANT INSERT ON handled TO PUBLIC;
-- Drains as the role that calls it: claims and completes until nothing is left.
CREATE PROCEDURE drain(worker text) LANGUAGE plpgsql AS $$
DECLARE
  r record;
  got int;
BEGIN
  LOOP
    got := 0;
    FOR r IN SELECT * FROM relaybus.claim(worker, 50, '1 minute') LOOP
      INSERT INTO public.handled VALUES (r.event_id, r.handler);
      PERFORM relaybus.complete(r.lease_token);
      got := got + 1;
    END LOOP;
    COMMIT;
    EXIT WHEN got = 0;
  END LOOP;
END $$;
SQL
# Every ACL entry of relaybus's schemas, their functions, tables, sequences and types that
# names one of the three roles.
old_role_acls="SELECT count(*) FROM (
    SELECT a.grantee FROM pg_namespace n, aclexplode(n.nspacl) a WHERE n.nspname IN ('relaybus', 'relaybus_internal')
    UNION ALL SELECT a.grantee FROM pg_proc p, aclexplode(p.proacl) a
     WHERE p.pronamespace IN (SELECT oid FROM pg_namespace WHERE nspname IN ('relaybus', 'relaybus_internal'))
    UNION ALL SELECT a.grantee FROM pg_class c, aclexplode(c.relacl) a
     WHERE c.relnamespace IN (SELECT oid FROM pg_namespace WHERE nspname IN ('relaybus', 'relaybus_internal'))
    UNION ALL SELECT a.grantee FROM pg_type t, aclexplode(t.typacl) a
     WHERE t.typnamespace IN (SELECT oid FROM pg_namespace WHERE nspname IN ('relaybus', 'relaybus_internal'))
  ) g JOIN pg_roles r ON r.oid = g.grantee
  WHERE r.rolname IN ('relaybus_publisher', 'relaybus_worker', 'relaybus_admin')"
# What the update must not touch: every row of deliveries, lanes (in-flight lists, leases),
# subscriptions (the pause) and events, and the statistics they make.
rows="SELECT md5(string_agg(t, ',' ORDER BY t)) FROM (
        SELECT to_jsonb(d)::text AS t FROM relaybus.deliveries d UNION ALL
        SELECT to_jsonb(l)::text FROM relaybus.lanes l UNION ALL
        SELECT to_jsonb(s)::text FROM relaybus.subscriptions s UNION ALL
        SELECT to_jsonb(e)::text FROM relaybus.events e) x"
stats="SELECT string_agg(format('%s pending=%s processing=%s dead=%s', handler, pending, processing, dead), '; ' ORDER BY handler) FROM relaybus.statistics()"
check relaybus_up_rights "the 0.2.0 database has pending, in-flight and dead deliveries, and a paused handler" \
  "SELECT (SELECT bool_and(pending > 0) AND sum(processing) > 0 AND sum(dead) > 0 FROM relaybus.statistics())
      AND (SELECT paused_at IS NOT NULL FROM relaybus.subscriptions WHERE handler = 'paused')"
check relaybus_up_rights "and there relaybus's objects are granted to the three roles" \
  "SELECT ($old_role_acls) > 0"
rows_before=$(q relaybus_up_rights "$rows")
stats_before=$(q relaybus_up_rights "$stats")
echo "# before: $stats_before"
warned=$(psql -qXAt -v ON_ERROR_STOP=1 -d relaybus_up_rights -c "ALTER EXTENSION relaybus UPDATE TO '0.2.1'" 2>&1)
case "$warned" in
  *WARNING:*'relaybus_publisher, relaybus_worker and relaybus_admin'*relaybus_up_adm*relaybus_up_both*relaybus_up_pub*relaybus_up_wrk*)
    ok "the update warns, naming each member and its rights" ;;
  *) not_ok "the update warns, naming each member and its rights (got: $warned)" ;;
esac
check relaybus_up_rights "the database is at 0.2.1" \
  "SELECT extversion = '0.2.1' FROM pg_extension WHERE extname = 'relaybus'"
check relaybus_up_rights "each member holds exactly its role's right in this database (relaybus.rights())" \
  "SELECT array_agg(role || '=' || rights::text ORDER BY role)
        = ARRAY['relaybus_up_adm={admin,publisher,worker}', 'relaybus_up_both={publisher,worker}',
                'relaybus_up_pub={publisher}', 'relaybus_up_wrk={worker}']
     FROM relaybus.rights()"
check relaybus_up_rights "relaybus_publisher, relaybus_worker and relaybus_admin hold no privilege on any object of relaybus" \
  "SELECT ($old_role_acls) = 0"
[ "$(q relaybus_up_rights "$rows")" = "$rows_before" ] \
  && ok "every delivery, lane, subscription and event is as it was" \
  || not_ok "every delivery, lane, subscription and event is as it was"
stats_after=$(q relaybus_up_rights "$stats")
[ "$stats_after" = "$stats_before" ] && ok "and so are the statistics (pending, in flight, dead)" \
  || not_ok "and so are the statistics (before: $stats_before; after: $stats_after)"
# The converted roles log in and do their jobs.
as() { local role=$1; shift; psql -qXAt -v ON_ERROR_STOP=1 -U "$role" -d relaybus_up_rights -c "$*"; }
as relaybus_up_pub "SELECT relaybus.publish('e', '{\"n\": 21}', 'k1', 'e21')" >/dev/null \
  && ok "relaybus_publisher's member publishes, logged in as itself" \
  || not_ok "relaybus_publisher's member publishes, logged in as itself"
err=$(as relaybus_up_pub "SELECT count(*) FROM relaybus.claim('nope')" 2>&1 || true)
case "$err" in *'permission denied for function claim'*) ok "and may not claim" ;;
  *) not_ok "and may not claim (got: $err)" ;; esac
as relaybus_up_adm "SELECT relaybus.resume('paused')" >/dev/null \
  && as relaybus_up_adm "SELECT relaybus.requeue_dead('poisoned')" >/dev/null \
  && ok "relaybus_admin's member resumes the paused handler and requeues the dead letters" \
  || not_ok "relaybus_admin's member resumes the paused handler and requeues the dead letters"
as relaybus_up_wrk "CALL drain('converted')" >/dev/null \
  && ok "relaybus_worker's member claims and completes, logged in as itself" \
  || not_ok "relaybus_worker's member claims and completes, logged in as itself"
check relaybus_up_rights "it handled every delivery of before the update (pending, in flight, dead), and the new one, each once" \
  "SELECT NOT EXISTS (SELECT FROM relaybus.deliveries)
      AND (SELECT count(*) FROM handled) = (SELECT count(*) + 3 FROM before_update)
      AND NOT EXISTS (SELECT event_id, handler FROM before_update
                      UNION ALL SELECT 'e21', h FROM unnest(ARRAY['live', 'paused', 'poisoned']) h
                      EXCEPT SELECT event_id, handler FROM handled)"
q postgres "DROP DATABASE relaybus_up_rights" >/dev/null
q postgres "DROP ROLE relaybus_up_pub, relaybus_up_wrk, relaybus_up_adm, relaybus_up_both" >/dev/null

# pg_dump keeps relaybus's rows (the tables are extension configuration tables), at the
# default version: the copy of the 0.1.0 database, updated on. (Only there: pg_dump writes
# CREATE EXTENSION without a version, so a restore makes the default version's tables.)
q relaybus_up_copy "ALTER EXTENSION relaybus UPDATE" >/dev/null
check relaybus_up_copy "the copy updates on to the default version, $default_version" \
  "SELECT extversion = '$default_version' FROM pg_extension WHERE extname = 'relaybus'"
# Every row of every table of schema relaybus, whichever the version's tables are.
all_rows() {
  local tables
  tables=$(q "$1" "SELECT string_agg(format('SELECT %L || to_jsonb(t)::text AS t FROM relaybus.%I t', c.relname, c.relname),
                                     ' UNION ALL ' ORDER BY c.relname)
                     FROM pg_class c WHERE c.relnamespace = 'relaybus'::regnamespace AND c.relkind = 'r'")
  q "$1" "SELECT count(*) || ' rows of $(q "$1" "SELECT count(*) FROM pg_class WHERE relnamespace = 'relaybus'::regnamespace AND relkind = 'r'") tables, md5 '
                 || md5(string_agg(t, ',' ORDER BY t)) FROM ($tables) x"
}
fresh_db relaybus_up_restored ""
pg_dump -d relaybus_up_copy | psql -qX -v ON_ERROR_STOP=1 -d relaybus_up_restored >/dev/null 2>&1 \
  || not_ok "the dump restores"
before=$(all_rows relaybus_up_copy || true)
after=$(all_rows relaybus_up_restored || true)
[ -n "$before" ] && [ "$before" = "$after" ] \
  && ok "pg_dump and restore keep every relaybus row ($before)" \
  || not_ok "pg_dump and restore keep every relaybus row (before: $before; after: $after)"

for db in relaybus_up_fresh relaybus_up_empty relaybus_up_empty020 relaybus_up_data relaybus_up_copy relaybus_up_live relaybus_up_restored; do
  q postgres "DROP DATABASE $db" >/dev/null
done
echo "upgrade: $passed passed, $failed failed"
[ $failed = 0 ]
