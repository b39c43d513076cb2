#!/usr/bin/env bash
# The update 0.2.1 -> 0.3.0 (positions and cursors), against the running test cluster
# ($PGHOST/$PGPORT):
#  - a fresh 0.3.0 and an updated 0.2.1 (empty, and reached from 0.1.0 through every
#    update) have identical catalogs;
#  - while a lease is live, the update refuses (55006) and changes nothing;
#  - under data (pending, delayed, retrying, in flight under an expired lease, dead and
#    completed deliveries; keyed and not; a paused handler; rights granted to a role): every
#    delivery left is there once; an expired lease's delivery is charged one attempt (dead at
#    max_attempts); a key's deliveries keep their order; the pause and the rights stay; and a
#    worker then runs every pending delivery exactly once, in key order, nothing dead runs
#    until requeued, nothing completed runs again; purge_expired then deletes the events
#    0.2.1 completed (no delivery row left) and one no handler had, and keeps the rest.
# The role made here is named relaybus_up3_* and dropped at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok - $1"; }
not_ok() { failed=$((failed + 1)); echo "not ok - $1"; }
q() { local db=$1; shift; psql -qXAt -v ON_ERROR_STOP=1 -d "$db" -c "$*"; }
check() { if [ "$(q "$1" "$3")" = t ]; then ok "$2"; else not_ok "$2"; fi; }
fresh_db() { q postgres "DROP DATABASE IF EXISTS $1" >/dev/null; q postgres "CREATE DATABASE $1" >/dev/null; }
catalog() { psql -qXAt -v ON_ERROR_STOP=1 -d "$1" -f test/integration/catalog.sql; }
databases="relaybus_up3_fresh relaybus_up3_empty relaybus_up3_chain relaybus_up3_live relaybus_up3_data relaybus_up3_dep"
drop_all() {
  local db
  for db in $databases; do q postgres "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true; done
  q postgres "DROP ROLE IF EXISTS relaybus_up3_pub, relaybus_up3_admin, relaybus_up3_monitor" >/dev/null 2>&1 || true
}
drop_all
trap drop_all EXIT

# Catalogs.
fresh_db relaybus_up3_fresh
q relaybus_up3_fresh "CREATE EXTENSION relaybus VERSION '0.3.0'" >/dev/null
fresh_db relaybus_up3_empty
q relaybus_up3_empty "CREATE EXTENSION relaybus VERSION '0.2.1'" >/dev/null
q relaybus_up3_empty "ALTER EXTENSION relaybus UPDATE TO '0.3.0'" >/dev/null
fresh_db relaybus_up3_chain
q relaybus_up3_chain "CREATE EXTENSION relaybus VERSION '0.1.0'" >/dev/null
q relaybus_up3_chain "ALTER EXTENSION relaybus UPDATE TO '0.3.0'" >/dev/null
if diff <(catalog relaybus_up3_fresh) <(catalog relaybus_up3_empty); then
  ok "CREATE EXTENSION ... VERSION '0.3.0' and 0.2.1 + UPDATE TO '0.3.0' give identical catalogs ($(catalog relaybus_up3_fresh | wc -l) facts)"
else
  not_ok "identical catalogs after the update from 0.2.1"
fi
if diff <(catalog relaybus_up3_fresh) <(catalog relaybus_up3_chain) >/dev/null; then
  ok "0.1.0 updated through 0.2.0 and 0.2.1 to 0.3.0 gives the same catalog"
else
  not_ok "identical catalogs after 0.1.0 -> 0.3.0"
fi

# A live lease: refused, nothing changed.
fresh_db relaybus_up3_live
q relaybus_up3_live "CREATE EXTENSION relaybus VERSION '0.2.1'" >/dev/null
q relaybus_up3_live "SELECT relaybus.subscribe('h', ARRAY['t'])" >/dev/null
q relaybus_up3_live "SELECT relaybus.publish('t', '{}', NULL, 'e1')" >/dev/null
q relaybus_up3_live "SELECT count(*) FROM relaybus.claim('w', 1)" >/dev/null
out=$(psql -qXAt -d relaybus_up3_live -c "ALTER EXTENSION relaybus UPDATE TO '0.3.0'" 2>&1 || true)
state=$(q relaybus_up3_live "SELECT (SELECT extversion FROM pg_extension WHERE extname = 'relaybus')
                              || ',' || (SELECT count(*) FROM relaybus.deliveries)
                              || ',' || (SELECT count(*) FROM relaybus.lanes WHERE cardinality(in_flight) = 1)")
if [[ $out == *"lanes are still leased"* && $state == "0.2.1,1,1" ]]; then
  ok "a live lease refuses the update (55006), and nothing changed"
else
  not_ok "a live lease refuses the update: got '$out' and '$state'"
fi
sqlstate=$(psql -qXAt -d relaybus_up3_live -v VERBOSITY=verbose -c "ALTER EXTENSION relaybus UPDATE TO '0.3.0'" 2>&1 | grep -o '55006' | head -1 || true)
[ "$sqlstate" = 55006 ] && ok "its SQLSTATE is 55006 (object_in_use)" || not_ok "SQLSTATE 55006, got '$sqlstate'"

# A view on metrics(), whose result 0.3.0 changes: refused, saying what to drop; nothing
# changed. Without the view the update runs.
fresh_db relaybus_up3_dep
q relaybus_up3_dep "CREATE EXTENSION relaybus VERSION '0.2.1'" >/dev/null
q relaybus_up3_dep "CREATE VIEW public.watch AS SELECT handler, pending FROM relaybus.metrics()" >/dev/null
out=$(psql -qXAt -d relaybus_up3_dep -v VERBOSITY=verbose -c "ALTER EXTENSION relaybus UPDATE TO '0.3.0'" 2>&1 || true)
version=$(q relaybus_up3_dep "SELECT extversion FROM pg_extension WHERE extname = 'relaybus'")
if [[ $out == *2BP01* && $out == *"view public.watch"* && $out == *"Drop those objects"* && $version == 0.2.1 ]]; then
  ok "a view on metrics() refuses the update (2BP01, naming the view, with a hint), and nothing changed"
else
  not_ok "a view on metrics() refuses the update: got '$out', version $version"
fi
q relaybus_up3_dep "DROP VIEW public.watch; ALTER EXTENSION relaybus UPDATE TO '0.3.0'" >/dev/null
check relaybus_up3_dep "once the view is dropped the update runs" \
  "SELECT extversion = '0.3.0' FROM pg_extension WHERE extname = 'relaybus'"

# Under data.
db=relaybus_up3_data
fresh_db $db
q $db "CREATE EXTENSION relaybus VERSION '0.2.1'" >/dev/null
q postgres "CREATE ROLE relaybus_up3_pub" >/dev/null
q postgres "CREATE ROLE relaybus_up3_admin; CREATE ROLE relaybus_up3_monitor" >/dev/null
psql -qX -v ON_ERROR_STOP=1 -d $db >/dev/null <<'SQL'
SET relaybus.completion_history = on;
SELECT relaybus.subscribe('live', ARRAY['t']);
SELECT relaybus.subscribe('poisoned', ARRAY['t'], 2);
SELECT relaybus.subscribe('paused', ARRAY['t']);
SELECT relaybus.pause('paused');
SELECT relaybus.grant_rights('relaybus_up3_pub', 'publisher');
SELECT relaybus.grant_rights('relaybus_up3_admin', 'admin');
-- A monitoring role given metrics() alone, as docs/operations.md shows.
GRANT USAGE ON SCHEMA relaybus TO relaybus_up3_monitor;
GRANT EXECUTE ON FUNCTION relaybus.metrics() TO relaybus_up3_monitor;
-- And statistics() through the admin, who was given it with the grant option: the update
-- must neither fail on that chain nor undo it.
GRANT EXECUTE ON FUNCTION relaybus.statistics() TO relaybus_up3_admin WITH GRANT OPTION;
SET ROLE relaybus_up3_admin;
GRANT EXECUTE ON FUNCTION relaybus.statistics() TO relaybus_up3_monitor;
RESET ROLE;
-- An event only live had, completed (0.2.1 deletes the delivery), and one nobody had.
SELECT relaybus.publish('t', '{}', NULL, 'done-021', ARRAY['live']);
SELECT relaybus.complete(lease_token) FROM relaybus.claim('w-done', 1, '30 seconds', ARRAY['live']);
SELECT relaybus.publish('t.none', '{}', NULL, 'none-021');
-- 60 events, half keyed over 6 keys, one delayed an hour.
SELECT relaybus.publish('t', jsonb_build_object('n', g), CASE WHEN g % 2 = 0 THEN 'k' || (g % 6) END, 'e' || g)
  FROM generate_series(1, 60) g;
SELECT relaybus.publish('t', '{}', NULL, 'delayed', available_at => now() + interval '1 hour');
-- live: one batch claimed; e1 completed, e2 failed (retry later), e3 buried, the rest left in flight.
CREATE TABLE c_live AS SELECT * FROM relaybus.claim('w-live', 20, '30 seconds', ARRAY['live']);
SELECT relaybus.complete(lease_token) FROM c_live WHERE event_id = 'e1';
SELECT relaybus.fail(lease_token, 'boom', now() + interval '1 second') FROM c_live WHERE event_id = 'e2';
SELECT relaybus.bury(lease_token, 'bad') FROM c_live WHERE event_id = 'e3';
-- poisoned: e4 failed once (attempts 1 of 2), then claimed again and left in flight.
CREATE TABLE c_p1 AS SELECT * FROM relaybus.claim('w-p', 1, '30 seconds', ARRAY['poisoned']);
SELECT relaybus.fail(lease_token, 'first') FROM c_p1;
UPDATE relaybus.deliveries SET available_at = now() WHERE handler = 'poisoned' AND attempts = 1;
CREATE TABLE c_p2 AS SELECT * FROM relaybus.claim('w-p', 1, '30 seconds', ARRAY['poisoned']);
-- What was there before the update.
CREATE TABLE before_update AS
  SELECT d.event_id, d.handler, d.key, d.sequence, d.status, d.attempts,
         EXISTS (SELECT FROM relaybus.lanes l WHERE l.handler = d.handler AND l.lane = d.lane
                   AND d.event_id = ANY (l.in_flight)) AS in_flight
    FROM relaybus.deliveries d;
CREATE TABLE rights_before AS SELECT * FROM relaybus.rights();
-- Every lease expires (the workers stopped).
UPDATE relaybus.lanes SET lease_expires_at = now() - interval '1 second' WHERE lease_owner IS NOT NULL;
ALTER EXTENSION relaybus UPDATE TO '0.3.0';
SQL
check $db "the update ran" "SELECT extversion = '0.3.0' FROM pg_extension WHERE extname = 'relaybus'"
check $db "it kept its time for purge_expired (0.2.1's completed events have no delivery row)" \
  "SELECT count(*) = 1 FROM relaybus.events_from_021 WHERE published_before <= now()"
check $db "every delivery left is there once, in its handler's lane" \
  "SELECT (SELECT count(*) FROM relaybus.deliveries) = (SELECT count(*) FROM before_update)
      AND NOT EXISTS (SELECT event_id, handler FROM before_update
                      EXCEPT SELECT event_id, handler FROM relaybus.deliveries)
      AND NOT EXISTS (SELECT FROM relaybus.deliveries d WHERE d.lane <> relaybus.lane_of(coalesce(d.key, d.event_id)))"
check $db "each lane's positions are 1..n, and its cursor passes exactly its exception rows" \
  "SELECT NOT EXISTS (SELECT FROM (SELECT handler, lane, count(*) n, max(position) m FROM relaybus.deliveries
                                   GROUP BY 1, 2) x WHERE n <> m)
      AND NOT EXISTS (SELECT FROM relaybus.lane_state l WHERE l.acked_upto <>
                        (SELECT count(*) FROM relaybus.exceptions x WHERE x.handler = l.handler AND x.lane = l.lane))
      AND NOT EXISTS (SELECT FROM relaybus.exceptions x JOIN relaybus.lane_state l USING (handler, lane)
                       WHERE x.position > l.acked_upto)"
check $db "a key's deliveries keep their sequence order in positions" \
  "SELECT NOT EXISTS (
     SELECT FROM before_update a JOIN before_update b ON a.handler = b.handler AND a.key = b.key
       JOIN relaybus.deliveries da ON da.event_id = a.event_id AND da.handler = a.handler
       JOIN relaybus.deliveries db ON db.event_id = b.event_id AND db.handler = b.handler
      WHERE a.sequence < b.sequence AND da.position > db.position)"
check $db "a delivery in flight under an expired lease is charged one attempt; at max_attempts it is dead" \
  "SELECT (SELECT status = 'dead' AND attempts = 2 AND last_error LIKE 'lease lost%' FROM relaybus.exceptions
            WHERE handler = 'poisoned' AND event_id = (SELECT event_id FROM c_p2))
      AND NOT EXISTS (SELECT FROM before_update b JOIN relaybus.exceptions x USING (event_id, handler)
                       WHERE b.in_flight AND b.handler = 'live' AND (x.status <> 'pending' OR x.attempts <> b.attempts + 1))
      AND (SELECT count(*) FROM before_update WHERE in_flight AND handler = 'live') = 17"
check $db "dead stays dead, a retry keeps its attempts and due time" \
  "SELECT (SELECT status = 'dead' AND attempts = 1 AND last_error = 'bad' FROM relaybus.exceptions WHERE event_id = 'e3' AND handler = 'live')
      AND (SELECT status = 'pending' AND attempts = 1 AND last_error = 'boom' FROM relaybus.exceptions WHERE event_id = 'e2' AND handler = 'live')"
check $db "the paused handler stays paused, the rights stay" \
  "SELECT (SELECT paused FROM relaybus.statistics() WHERE handler = 'paused')
      AND NOT EXISTS (SELECT * FROM rights_before EXCEPT SELECT * FROM relaybus.rights())
      AND NOT EXISTS (SELECT * FROM relaybus.rights() EXCEPT SELECT * FROM rights_before)"
check $db "metrics() is replaced (oldest_in_flight_age) and keeps its grants: the monitoring role may still run it" \
  "SELECT has_function_privilege('relaybus_up3_monitor', 'relaybus.metrics()', 'EXECUTE')
      AND NOT has_function_privilege('relaybus_up3_monitor', 'relaybus.counters()', 'EXECUTE')
      AND NOT has_function_privilege('relaybus_up3_pub', 'relaybus.metrics()', 'EXECUTE')
      AND NOT has_function_privilege('public', 'relaybus.metrics()', 'EXECUTE')
      AND (SELECT proargnames @> ARRAY['oldest_in_flight_age'] FROM pg_proc
            WHERE oid = 'relaybus.metrics()'::regprocedure)"
check $db "the admin right now includes the functions 0.3.0 adds; publisher does not" \
  "SELECT has_function_privilege('relaybus_up3_admin', 'relaybus.handler_counters()', 'EXECUTE')
      AND has_function_privilege('relaybus_up3_admin', 'relaybus.completion_latency()', 'EXECUTE')
      AND has_function_privilege('relaybus_up3_admin', 'relaybus.unrouted_counters()', 'EXECUTE')
      AND NOT has_function_privilege('relaybus_up3_pub', 'relaybus.handler_counters()', 'EXECUTE')
      AND has_function_privilege('relaybus_up3_monitor', 'relaybus.statistics()', 'EXECUTE')
      AND has_function_privilege('relaybus_up3_admin', 'relaybus.statistics()', 'EXECUTE WITH GRANT OPTION')
      AND NOT has_function_privilege('public', 'relaybus.unrouted_counters()', 'EXECUTE')"
check $db "statistics count what was left: live 59 (1 dead), poisoned 60 (1 dead), paused 61" \
  "SELECT array_agg(handler || ':' || pending + processing || '/' || dead ORDER BY handler)
          = ARRAY['live:59/1', 'paused:61/0', 'poisoned:60/1'] FROM relaybus.statistics()"
check $db "0.2's tables are gone" \
  "SELECT to_regclass('relaybus.key_counters') IS NULL AND to_regclass('relaybus.deliveries_020') IS NULL
      AND to_regclass('relaybus.lanes_020') IS NULL AND to_regclass('relaybus.upgrade_030') IS NULL"

# A worker drains live after the update: each pending delivery once, keys in sequence order.
psql -qX -v ON_ERROR_STOP=1 -d $db >/dev/null <<'SQL'
SET relaybus.completion_history = on;
CREATE TABLE handled (n serial, event_id text, handler text, attempts int);
-- e2's retry (due a second after its fail) must be due when the loop's transaction starts:
-- claims judge due times by now(), which stands still inside one transaction.
SELECT pg_sleep(1.2);
DO $$
DECLARE
  r record;
  got int;
BEGIN
  FOR i IN 1..200 LOOP
    got := 0;
    FOR r IN SELECT * FROM relaybus.claim('after', 7, '30 seconds', ARRAY['live']) LOOP
      INSERT INTO handled (event_id, handler, attempts) VALUES (r.event_id, r.handler, r.attempts);
      PERFORM relaybus.complete(r.lease_token);
      got := got + 1;
    END LOOP;
    EXIT WHEN got = 0 AND NOT EXISTS (SELECT FROM relaybus.exceptions x WHERE x.handler = 'live'
                                        AND x.status = 'pending' AND x.available_at < now() + interval '1 minute');
    PERFORM pg_sleep(0.05);
  END LOOP;
END
$$;
SQL
check $db "after the update every pending delivery of live runs once; dead, completed and delayed ones do not" \
  "SELECT (SELECT count(*) FROM handled) = (SELECT count(DISTINCT event_id) FROM handled)
      AND NOT EXISTS (SELECT event_id FROM before_update WHERE handler = 'live' AND status = 'pending'
                      AND event_id <> 'delayed' EXCEPT SELECT event_id FROM handled)
      AND NOT EXISTS (SELECT FROM handled WHERE event_id IN ('e1', 'e3', 'delayed'))"
check $db "in key order: a key's deliveries ran in sequence order" \
  "SELECT NOT EXISTS (
     SELECT FROM handled ha JOIN before_update a ON a.event_id = ha.event_id AND a.handler = 'live'
       JOIN before_update b ON b.handler = 'live' AND b.key = a.key AND b.sequence > a.sequence
       JOIN handled hb ON hb.event_id = b.event_id WHERE hb.n < ha.n)"
check $db "a requeued dead delivery runs" \
  "SELECT relaybus.requeue('e3', 'live')
      AND (SELECT count(*) = 1 FROM relaybus.claim('after', 5, '30 seconds', ARRAY['live']) WHERE event_id = 'e3')"

# Retention (zero here): what 0.2.1 finished, and what went to nobody, goes; the rest stays.
q $db "DO \$\$ BEGIN PERFORM set_config('relaybus.retention_completed', '0', true);
        WHILE relaybus.purge_expired() > 0 LOOP END LOOP; END \$\$" >/dev/null
check $db "purge_expired deletes the events 0.2.1 completed and one nobody had, then forgets the update's time; events still pending stay" \
  "SELECT NOT EXISTS (SELECT FROM relaybus.events WHERE id IN ('done-021', 'none-021'))
      AND NOT EXISTS (SELECT FROM relaybus.events_from_021)
      AND (SELECT count(*) FROM relaybus.events WHERE id ~ '^e[0-9]+$') = 60"

echo "upgrade_030: $passed passed, $failed failed"
[ $failed = 0 ]
