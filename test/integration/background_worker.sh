#!/usr/bin/env bash
# The background workers, on a throwaway cluster of their own (short intervals, restarts):
# visible in pg_stat_activity, surviving a reload, taking over expired lanes and charging
# attempts, dead-lettering a poison delivery after max_attempts takeovers, purging by
# retention, running in-database handlers exactly once in key order with retries, dead
# letters and timeouts, a slow handler not holding up another, a paused handler left
# alone until resumed, wake-ups beating a long
# poll interval, NOTIFY once per transaction and handler, restart after termination, and a
# prompt fast shutdown.
set -euo pipefail
cd "$(dirname "$0")/../.."

port=$(( ${PGPORT:-54329} + 1 ))
dir=/tmp/relaybus-bgw-$port
export RELAYBUS_CLUSTER_SETTINGS="relaybus.maintenance_interval = '100ms'
relaybus.sql_handler_poll_interval = '100ms'
relaybus.sql_handler_workers = 2"
scripts/cluster start "$dir" "$port"
trap 'scripts/cluster stop "$dir"' EXIT
export PGHOST=$dir PGPORT=$port PGUSER=postgres PGDATABASE=postgres

. test/integration/lib/checks.bash
# What is left of each delivery, read through the SQL API (list_deliveries lists the
# unfinished ones, pending, processing or dead, on every storage version: 0.3.0 keeps no
# status or attempts in relaybus.deliveries).
deliveries="relaybus.list_deliveries(max_rows => 1000000)"
workers() { q "SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity WHERE backend_type LIKE 'relaybus%'"; }

check "one maintenance and two sql handler workers run" \
  "SELECT count(*) FILTER (WHERE backend_type = 'relaybus maintenance') = 1
      AND count(*) FILTER (WHERE backend_type = 'relaybus sql handler') = 2
     FROM pg_stat_activity"

q "CREATE EXTENSION relaybus" >/dev/null
before=$(workers)
q "ALTER SYSTEM SET relaybus.maintenance_interval = '50ms'" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null
sleep 0.5
[ "$(workers)" = "$before" ] && ok "the workers survive pg_reload_conf() with changed settings" \
  || not_ok "the workers survive pg_reload_conf() with changed settings"

# Takeover of an expired lane, with the attempt charged.
q "SELECT relaybus.subscribe('ext', ARRAY['ext.t'])" >/dev/null
q "SELECT relaybus.publish('ext.t', '{}', event_id => 'x1')" >/dev/null
check "a worker claims x1 with a 200 ms lease" \
  "SELECT count(*) = 1 FROM relaybus.claim('vanished', 1, '200 ms', ARRAY['ext'])"
wait_for "the maintenance worker takes the expired lane over and charges one attempt" \
  "SELECT NOT EXISTS (SELECT 1 FROM relaybus.lanes WHERE handler = 'ext' AND lease_owner IS NOT NULL)
      AND (SELECT attempts = 1 AND status = 'pending' FROM $deliveries WHERE event_id = 'x1')" 3

# A poison delivery whose worker dies every time ends dead after max_attempts takeovers.
q "SELECT relaybus.subscribe('poison', ARRAY['poison.t'], max_attempts => 3)" >/dev/null
q "SELECT relaybus.publish('poison.t', '{}', event_id => 'p1')" >/dev/null
for i in 1 2 3; do
  check "crash $i: a worker claims p1 and vanishes" \
    "SELECT count(*) = 1 FROM relaybus.claim('crashy-$i', 1, '100 ms', ARRAY['poison'])"
  wait_for "crash $i: the lane is taken over" \
    "SELECT NOT EXISTS (SELECT 1 FROM relaybus.lanes WHERE handler = 'poison' AND lease_owner IS NOT NULL)" 3
done
check "after 3 takeovers p1 is dead with 3 attempts" \
  "SELECT status = 'dead' AND attempts = 3 FROM $deliveries WHERE event_id = 'p1'"

# In-database handlers.
q "CREATE TABLE handled (id bigserial PRIMARY KEY, event_id text, handler text, key text, n int,
                         at timestamptz DEFAULT clock_timestamp())" >/dev/null
q "CREATE FUNCTION record(e jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
   BEGIN
     IF e->'payload'->>'raise' = 'yes' THEN RAISE EXCEPTION 'refusing %', e->>'id'; END IF;
     IF e->'payload' ? 'sleep' THEN PERFORM pg_sleep((e->'payload'->>'sleep')::float8); END IF;
     INSERT INTO handled (event_id, handler, key, n)
       VALUES (e->>'id', e->>'handler', e->>'key', (e->'payload'->>'n')::int);
   END \$\$" >/dev/null
q "SELECT relaybus.subscribe('recorder', ARRAY['rec.t'], max_attempts => 3, backoff_base => '50 ms',
     backoff_max => '100 ms', sql_function => 'record(jsonb)', sql_timeout => '300 ms')" >/dev/null
q "SELECT count(relaybus.publish('rec.t', jsonb_build_object('n', i), 'k' || (i % 7), 'r' || i))
     FROM generate_series(1, 300) i" >/dev/null
q "SELECT relaybus.publish('rec.t', '{\"raise\": \"yes\"}', event_id => 'raises')" >/dev/null
q "SELECT relaybus.publish('rec.t', '{\"sleep\": 30}', event_id => 'loops')" >/dev/null
wait_for "300 events to an in-database handler are all handled" \
  "SELECT count(*) >= 300 FROM handled WHERE handler = 'recorder'" 20
check "each exactly once" \
  "SELECT count(*) = 300 AND count(DISTINCT event_id) = 300 FROM handled WHERE handler = 'recorder'"
check "in per-key order" \
  "SELECT NOT EXISTS (SELECT 1 FROM (SELECT n < lag(n) OVER (PARTITION BY key ORDER BY id) AS back
                                       FROM handled WHERE handler = 'recorder') o WHERE back)"
wait_for "a handler that raises is retried with backoff and dead-lettered" \
  "SELECT status = 'dead' AND attempts = 3 AND last_error LIKE 'refusing raises%'
     FROM $deliveries WHERE event_id = 'raises'" 10
wait_for "a handler that exceeds its timeout is failed (57014), not hung" \
  "SELECT status = 'dead' AND attempts = 3 AND last_error LIKE '%statement timeout%57014%'
     FROM $deliveries WHERE event_id = 'loops'" 10
check "neither left a side effect" \
  "SELECT NOT EXISTS (SELECT 1 FROM handled WHERE event_id IN ('raises', 'loops'))"

# A slow handler does not hold up another handler.
q "SELECT relaybus.subscribe('slowpoke', ARRAY['slow.t'], sql_function => 'record(jsonb)',
     sql_timeout => '10 s')" >/dev/null
q "SELECT relaybus.subscribe('quick', ARRAY['quick.t'], sql_function => 'record(jsonb)')" >/dev/null
q "SELECT relaybus.publish('slow.t', '{\"sleep\": 3}', event_id => 'snail')" >/dev/null
sleep 0.3
q "SELECT count(relaybus.publish('quick.t', jsonb_build_object('n', i), event_id => 'q' || i))
     FROM generate_series(1, 20) i" >/dev/null
wait_for "20 deliveries of another handler are handled while a 3 s handler runs" \
  "SELECT count(*) = 20 FROM handled WHERE handler = 'quick'" 2
wait_for "the slow one completes too" "SELECT count(*) = 1 FROM handled WHERE event_id = 'snail'" 6

# A paused in-database handler: its deliveries wait, another handler's run; resume runs them.
q "SELECT relaybus.subscribe('sleeper', ARRAY['sleep.t'], sql_function => 'record(jsonb)')" >/dev/null
q "SELECT relaybus.pause('sleeper')" >/dev/null
q "SELECT count(relaybus.publish('sleep.t', '{}', event_id => 'z' || i)) FROM generate_series(1, 5) i" >/dev/null
q "SELECT relaybus.publish('quick.t', '{}', event_id => 'q-during-pause')" >/dev/null
wait_for "while one handler is paused, another's delivery is handled" \
  "SELECT count(*) = 1 FROM handled WHERE event_id = 'q-during-pause'" 3
sleep 1  # ten polls of the workers
check "the paused handler's 5 deliveries are kept and none ran (ten polls later)" \
  "SELECT (SELECT count(*) FROM handled WHERE handler = 'sleeper') = 0
      AND (SELECT pending = 5 AND paused FROM relaybus.statistics() WHERE handler = 'sleeper')"
q "SELECT relaybus.resume('sleeper')" >/dev/null
wait_for "after resume the workers handle all 5" \
  "SELECT count(*) = 5 FROM handled WHERE handler = 'sleeper'" 3

# A function dropped after subscribing: a failed attempt with a reason, not a delivery left
# in flight until its lease expires.
q "CREATE FUNCTION fragile(e jsonb) RETURNS void LANGUAGE sql AS 'SELECT'" >/dev/null
q "SELECT relaybus.subscribe('fragile', ARRAY['fragile.t'], max_attempts => 1,
     sql_function => 'fragile(jsonb)')" >/dev/null
q "DROP FUNCTION fragile(jsonb)" >/dev/null
q "SELECT relaybus.publish('fragile.t', '{}', event_id => 'orphaned')" >/dev/null
wait_for "a delivery whose function was dropped fails, saying so" \
  "SELECT status = 'dead' AND last_error LIKE '%sql_function no longer exists%'
     FROM $deliveries WHERE event_id = 'orphaned'" 5

# Handlers run as their owner in a settings level of their own: nothing they set outlives
# them in the (superuser) worker.
q "CREATE TABLE seen (path text)" >/dev/null
q "CREATE FUNCTION meddle(e jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
   BEGIN
     INSERT INTO seen VALUES (current_setting('search_path'));
     PERFORM set_config('search_path', 'public, pg_catalog', false);
     PERFORM set_config('lock_timeout', '1ms', false);
   END \$\$" >/dev/null
q "SELECT relaybus.subscribe('meddler', ARRAY['meddle.t'], sql_function => 'meddle(jsonb)')" >/dev/null
q "SELECT count(relaybus.publish('meddle.t', '{}')) FROM generate_series(1, 12)" >/dev/null
wait_for "12 handlers that change session settings are handled" "SELECT count(*) = 12 FROM seen" 5
check "each saw the database's default search_path, none a previous handler's change" \
  "SELECT bool_and(path = '\"\$user\", public') FROM seen"

# A deferred constraint that fails fails its own delivery, not the batch it ran in.
q "CREATE TABLE ledger (ref text CONSTRAINT ledger_ref_unique UNIQUE DEFERRABLE INITIALLY DEFERRED)" >/dev/null
q "CREATE FUNCTION book(e jsonb) RETURNS void LANGUAGE sql AS
   'INSERT INTO ledger VALUES (e->''payload''->>''ref'')'" >/dev/null
q "SELECT relaybus.subscribe('booker', ARRAY['book.t'], max_attempts => 2, backoff_base => '10 ms',
     sql_function => 'book(jsonb)')" >/dev/null
q "SELECT count(relaybus.publish('book.t', jsonb_build_object('ref', CASE WHEN i = 5 THEN 'r1' ELSE 'r' || i END),
     event_id => 'book' || i)) FROM generate_series(1, 10) i" >/dev/null
wait_for "9 bookings commit and the one that violates a deferred constraint is dead-lettered" \
  "SELECT (SELECT count(*) FROM ledger) = 9
      AND (SELECT status = 'dead' AND last_error LIKE '%ledger_ref_unique%'
             FROM $deliveries WHERE event_id IN ('book1', 'book5') AND status = 'dead')" 5
q "CREATE TABLE accounts (id int PRIMARY KEY)" >/dev/null
q "INSERT INTO accounts VALUES (1)" >/dev/null
q "CREATE TABLE postings (account int REFERENCES accounts DEFERRABLE INITIALLY DEFERRED)" >/dev/null
q "CREATE FUNCTION post(e jsonb) RETURNS void LANGUAGE sql AS
   'INSERT INTO postings VALUES ((e->''payload''->>''account'')::int)'" >/dev/null
q "SELECT relaybus.subscribe('poster', ARRAY['post.t'], max_attempts => 1, sql_function => 'post(jsonb)')" >/dev/null
q "SELECT count(relaybus.publish('post.t', jsonb_build_object('account', CASE WHEN i = 3 THEN 2 ELSE 1 END),
     event_id => 'post' || i)) FROM generate_series(1, 6) i" >/dev/null
wait_for "with a deferred foreign key, 5 postings commit and the dangling one is dead-lettered" \
  "SELECT (SELECT count(*) FROM postings) = 5
      AND (SELECT status = 'dead' AND last_error LIKE '%foreign key%'
             FROM $deliveries WHERE event_id = 'post3')" 5

# Terminating the handler workers in the middle of batches: each batch is one transaction,
# so what was handled but not committed runs again, and still exactly once.
q "SELECT relaybus.subscribe('napper', ARRAY['nap.t'], sql_function => 'record(jsonb)')" >/dev/null
q "SELECT count(relaybus.publish('nap.t', jsonb_build_object('sleep', 0.05, 'n', i), event_id => 'nap' || i))
     FROM generate_series(1, 40) i" >/dev/null
sleep 0.4
q "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE backend_type = 'relaybus sql handler'" >/dev/null
wait_for "after the workers were terminated mid-batch, all 40 are handled (restart and takeover)" \
  "SELECT count(*) >= 40 FROM handled WHERE handler = 'napper'" 20
check "exactly once each" \
  "SELECT count(*) = 40 AND count(DISTINCT event_id) = 40 FROM handled WHERE handler = 'napper'"

# Wake-ups: with a 60 s poll interval, only a wake-up can make this fast.
q "ALTER SYSTEM SET relaybus.sql_handler_poll_interval = '60s'" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null
sleep 1
q "SELECT relaybus.publish('rec.t', '{\"n\": 0}', event_id => 'wake-1')" >/dev/null
wait_for "an idle in-database handler is woken by the publish (well before the 60 s poll)" \
  "SELECT EXISTS (SELECT 1 FROM handled WHERE event_id = 'wake-1')" 3
echo "# publish to handled, wake-ups on: $(q "SELECT round(extract(epoch FROM h.at - e.published_at) * 1000)
      FROM handled h JOIN relaybus.events e ON e.id = h.event_id WHERE h.event_id = 'wake-1'") ms"
q "ALTER SYSTEM SET relaybus.notify = off" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null
sleep 0.5
q "SELECT relaybus.publish('rec.t', '{\"n\": 0}', event_id => 'wake-2')" >/dev/null
sleep 1.5
check "with relaybus.notify off, the same publish waits for the poll" \
  "SELECT NOT EXISTS (SELECT 1 FROM handled WHERE event_id = 'wake-2')"
q "ALTER SYSTEM SET relaybus.notify = on" >/dev/null
q "ALTER SYSTEM SET relaybus.sql_handler_poll_interval = '100ms'" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null

# NOTIFY for external workers: once per transaction and handler, none for a rollback.
notes=$(psql -qX -c "LISTEN relaybus" -c "BEGIN" \
  -c "SELECT relaybus.publish('ext.t', '{}') FROM generate_series(1, 3)" -c "COMMIT" \
  -c "BEGIN" -c "SELECT relaybus.publish('ext.t', '{}')" -c "ROLLBACK" -c "SELECT 1" 2>&1 \
  | grep -c 'Asynchronous notification "relaybus" with payload "ext"' || true)
[ "$notes" = 1 ] && ok "three publishes in one transaction send one NOTIFY; a rollback sends none" \
  || not_ok "three publishes in one transaction send one NOTIFY; a rollback sends none (got $notes)"

# Retention.
q "ALTER SYSTEM SET relaybus.retention_dead = 0" >/dev/null
q "ALTER SYSTEM SET relaybus.retention_completed = 0" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null
wait_for "the maintenance worker purges dead letters and events without deliveries" \
  "SELECT NOT EXISTS (SELECT 1 FROM $deliveries WHERE status = 'dead')
      AND NOT EXISTS (SELECT 1 FROM relaybus.events WHERE id IN ('p1', 'r1', 'snail'))" 3
check "events that still have a pending delivery are kept" \
  "SELECT EXISTS (SELECT 1 FROM relaybus.events WHERE id = 'x1')"

# A maintenance step that fails (here a trigger refuses the purge) is logged and retried the
# next round; the worker does not exit, and the takeover step of every round goes on.
pid=$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'relaybus maintenance'")
q "CREATE FUNCTION refuse_purge() RETURNS trigger LANGUAGE plpgsql AS \$\$
   BEGIN RAISE EXCEPTION 'purge refused by a trigger'; END \$\$;
   CREATE TRIGGER refuse_purge BEFORE DELETE ON relaybus.events FOR EACH ROW EXECUTE FUNCTION refuse_purge()" >/dev/null
q "SELECT relaybus.publish('ext.t', '{}', event_id => 'unpurgeable')" >/dev/null
# An event in the lane of 'after-failed-rounds' (as one of the three unnamed ext.t events
# above may be): w-purge hands back the lanes it leaves idle, or 'vanishing' finds that lane
# held for 30 s.
q "SELECT relaybus.publish('ext.t', '{}', event_id => (SELECT 'beside-' || i
     FROM generate_series(1, 100000) i
    WHERE relaybus.lane_of('beside-' || i) = relaybus.lane_of('after-failed-rounds') LIMIT 1))" >/dev/null
q "SELECT relaybus.complete(lease_token) FROM relaybus.claim('w-purge', 10, '30 s', ARRAY['ext']);
   SELECT relaybus.relinquish('w-purge')" >/dev/null
q "SELECT relaybus.publish('ext.t', '{}', event_id => 'after-failed-rounds')" >/dev/null
check "a worker claims a delivery with a 300 ms lease while purging fails" \
  "SELECT count(*) = 1 FROM relaybus.claim('vanishing', 1, '300 ms', ARRAY['ext'])"
wait_for "the failing purge does not stop the takeover step of the following rounds" \
  "SELECT NOT EXISTS (SELECT 1 FROM relaybus.lanes WHERE handler = 'ext' AND lease_owner = 'vanishing')" 3
check "the maintenance worker did not exit (same process), and the event is still there" \
  "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $pid)
      AND EXISTS (SELECT 1 FROM relaybus.events WHERE id = 'unpurgeable')"
grep -q 'maintenance step "relaybus: purge expired" failed' "$dir/server.log" \
  && ok "the failed step is reported in the server log" || not_ok "the failed step is reported in the server log"
q "DROP TRIGGER refuse_purge ON relaybus.events" >/dev/null
wait_for "once the trigger is gone, the next round purges" \
  "SELECT NOT EXISTS (SELECT 1 FROM relaybus.events WHERE id = 'unpurgeable')" 3

# Subscribing an in-database handler where no worker serves it says so (NOTICE), and still
# subscribes (an external worker may claim it by name).
q "CREATE DATABASE unserved" >/dev/null
out=$(psql -qXAt -d unserved -c "CREATE EXTENSION relaybus" \
  -c "CREATE FUNCTION h(e jsonb) RETURNS void LANGUAGE sql AS 'SELECT'" \
  -c "SELECT relaybus.subscribe('h', ARRAY['t'], sql_function => 'h(jsonb)')" \
  -c "SELECT count(*) FROM relaybus.subscriptions" 2>&1)
[[ "$out" == *'no background worker runs in-database handlers in database "unserved"'*1 ]] \
  && ok "subscribing an in-database handler in a database no worker serves raises a NOTICE, and subscribes" \
  || not_ok "subscribing an in-database handler in a database no worker serves raises a NOTICE, and subscribes (got: $out)"
q "DROP DATABASE unserved" >/dev/null

# Termination and restart.
pid=$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'relaybus maintenance'")
q "SELECT pg_terminate_backend($pid)" >/dev/null
wait_for "the maintenance worker exits promptly on pg_terminate_backend" \
  "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $pid)" 2
wait_for "and is restarted" \
  "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE backend_type = 'relaybus maintenance')" 10

start=$(date +%s%N)
runuser -u postgres -- "$(pg_config --bindir)/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 \
  || "$(pg_config --bindir)/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ $ms -lt 5000 ] && ok "pg_ctl stop -m fast returns promptly (${ms} ms)" \
  || not_ok "pg_ctl stop -m fast returns promptly (${ms} ms)"

echo "background worker: $passed passed, $failed failed"
[ $failed = 0 ]
