#!/usr/bin/env bash
# Several databases in relaybus.database (issue 14), on a throwaway cluster of its own:
# the list with a quoted name and a duplicate, the workers of each listed database, an
# in-database handler run in each, a publish waking only its own database's workers, the
# maintenance worker taking over an expired lane in each, the NOTICE of subscribe in a
# database no worker serves (the list in it quoted as a literal), a listed database
# without the extension and one that does not exist (its workers retry slowly, and connect
# once it is created), and how the server starts with a bad list, an empty one, and too
# few max_worker_processes.
set -euo pipefail
cd "$(dirname "$0")/../.."

port=$(( ${PGPORT:-54329} + 7 ))
dir=/tmp/relaybus-multidb-$port
export RELAYBUS_CLUSTER_SETTINGS="relaybus.maintenance_interval = '100ms'
relaybus.sql_handler_poll_interval = '100ms'
relaybus.sql_handler_workers = 2
max_worker_processes = 20"
scripts/cluster start "$dir" "$port"
trap '[ -n "${KEEP_CLUSTER:-}" ] || scripts/cluster stop "$dir"' EXIT
export PGHOST=$dir PGPORT=$port PGUSER=postgres PGDATABASE=postgres
bindir=$(pg_config --bindir)
as_postgres() { if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi; }

. test/integration/lib/checks.bash
# qd DB SQL: q in database DB.
qd() { PGDATABASE=$1 q "$2"; }
checkd() { if [ "$(qd "$2" "$3")" = t ]; then ok "$1"; else not_ok "$1"; fi; }
wait_ford() { PGDATABASE=$2 wait_for "$1" "$3" "$4"; }
# workers DB TYPE: how many relaybus workers of TYPE are connected to DB.
workers() {
  q "SELECT count(*) FROM pg_stat_activity WHERE datname = '$1' AND backend_type = 'relaybus $2'"
}
pids() {
  q "SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
      WHERE datname = '$1' AND backend_type LIKE 'relaybus%'"
}

# The databases exist before the workers look for them: created, then the list set and the
# server restarted. "db c,noext" needs its quotes (a comma and a space); db_a is listed
# twice; db_late does not exist yet; db_c has relaybus but is not listed.
for db in db_a db_b '"db c,noext"' db_c; do q "CREATE DATABASE $db" >/dev/null; done
for db in db_a db_b db_c; do
  qd $db "CREATE EXTENSION relaybus;
          CREATE TABLE handled (event_id text PRIMARY KEY, at timestamptz DEFAULT clock_timestamp());
          CREATE FUNCTION record(e jsonb) RETURNS void LANGUAGE sql
            AS \$\$INSERT INTO handled (event_id) VALUES (e->>'id')\$\$" >/dev/null
done
q "ALTER SYSTEM SET relaybus.database = 'db_a, db_b, \"db c,noext\", db_late, db_a'" >/dev/null
scripts/cluster restart "$dir"
started=$(date +%s)

wait_for "each listed database that exists gets 1 maintenance and 2 handler workers" \
  "SELECT count(*) = 9 FROM pg_stat_activity WHERE backend_type LIKE 'relaybus%'" 10
for db in db_a db_b 'db c,noext'; do
  m=$(workers "$db" maintenance) h=$(workers "$db" 'sql handler')
  [ "$m/$h" = 1/2 ] && ok "database \"$db\": 1 maintenance and 2 sql handler workers" \
    || not_ok "database \"$db\": 1 maintenance and 2 sql handler workers (got $m/$h)"
done
check "none for a database that is not listed, nor for one that does not exist" \
  "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE backend_type LIKE 'relaybus%'
                       AND datname NOT IN ('db_a', 'db_b', 'db c,noext'))"
grep -q 'relaybus.database lists "db_a" more than once; its workers run once' "$dir/server.log" \
  && ok "a database listed twice is served once, with a WARNING at startup" \
  || not_ok "a database listed twice is served once, with a WARNING at startup"
noext_pids=$(pids 'db c,noext')

# An in-database handler in each database; subscribing it where workers serve it says
# nothing. Deliveries are read through the SQL API (list_deliveries: the unfinished ones, with
# status and attempts), which 0.2 and 0.3.0 answer alike; 0.3.0's relaybus.deliveries keeps
# finished deliveries and has no status or attempts.
for db in db_a db_b; do
  out=$(PGDATABASE=$db psql -qXAt -v ON_ERROR_STOP=1 \
    -c "SELECT relaybus.subscribe('rec', ARRAY['t'], sql_function => 'record(jsonb)')" 2>&1)
  [ -z "$out" ] && ok "$db: subscribing an in-database handler where workers serve it raises no NOTICE" \
    || not_ok "$db: subscribing an in-database handler where workers serve it raises no NOTICE (got: $out)"
  qd $db "SELECT relaybus.publish('t', '{}', event_id => '$db-1')" >/dev/null
done
wait_ford "db_a's workers run its in-database handler" db_a \
  "SELECT EXISTS (SELECT 1 FROM handled WHERE event_id = 'db_a-1')
      AND NOT EXISTS (SELECT 1 FROM relaybus.list_deliveries())" 5
wait_ford "db_b's workers run its in-database handler" db_b \
  "SELECT EXISTS (SELECT 1 FROM handled WHERE event_id = 'db_b-1')
      AND NOT EXISTS (SELECT 1 FROM relaybus.list_deliveries())" 5

# The maintenance worker of each database takes over an expired lane there.
for db in db_a db_b; do
  qd $db "SELECT relaybus.subscribe('ext', ARRAY['ext.t'])" >/dev/null
  qd $db "SELECT relaybus.publish('ext.t', '{}', event_id => 'x1')" >/dev/null
  qd $db "SELECT count(*) FROM relaybus.claim('vanished', 1, '200 ms', ARRAY['ext'])" >/dev/null
done
for db in db_a db_b; do
  wait_ford "$db: the maintenance worker takes the expired lane over and charges an attempt" $db \
    "SELECT NOT EXISTS (SELECT 1 FROM relaybus.lanes WHERE handler = 'ext' AND lease_owner IS NOT NULL)
        AND (SELECT attempts = 1 AND status = 'pending' FROM relaybus.list_deliveries(NULL, 'ext')
              WHERE event_id = 'x1')" 3
done

# db_c has relaybus but no worker: subscribe says so, and nothing runs its deliveries.
out=$(PGDATABASE=db_c psql -qXAt -v ON_ERROR_STOP=1 \
  -c "SELECT relaybus.subscribe('rec', ARRAY['t'], sql_function => 'record(jsonb)')" \
  -c "SELECT count(*) FROM relaybus.subscriptions WHERE sql_function IS NOT NULL" 2>&1)
[[ "$out" == *'NOTICE:  no background worker runs in-database handlers in database "db_c"'* \
   && "$out" == *"DETAIL:  The workers serve relaybus.database = 'db_a, db_b, \"db c,noext\", db_late, db_a'."* \
   && "$out" == *'HINT:  Add this database to relaybus.database and restart the server.'* \
   && "$out" == *$'\n1' ]] \
  && ok "db_c: subscribing an in-database handler raises the NOTICE, with the list and what to set, and subscribes" \
  || not_ok "db_c: subscribing an in-database handler raises the NOTICE, with the list and what to set, and subscribes (got: $out)"
out=$(PGDATABASE=db_c psql -qXAt -v ON_ERROR_STOP=1 \
  -c "SELECT relaybus.subscribe('ext', ARRAY['ext.t'])" 2>&1)
[ -z "$out" ] && ok "db_c: subscribing an external handler raises no NOTICE" \
  || not_ok "db_c: subscribing an external handler raises no NOTICE (got: $out)"
qd db_c "SELECT relaybus.publish('t', '{}', event_id => 'c-1')" >/dev/null
sleep 1.5
checkd "db_c: its delivery is not run (the other databases' workers ran theirs in 100 ms polls)" db_c \
  "SELECT NOT EXISTS (SELECT 1 FROM handled)
      AND EXISTS (SELECT 1 FROM relaybus.list_deliveries('pending', 'rec') WHERE event_id = 'c-1')"

# Wake-ups with a 60 s poll: a publish in db_b wakes db_b's workers at once; a publish in
# db_a wakes db_a's and leaves db_b's asleep (no new round: their state_change stays).
q "ALTER SYSTEM SET relaybus.sql_handler_poll_interval = '60s'" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null
sleep 1
qd db_b "SELECT relaybus.publish('t', '{}', event_id => 'db_b-wake')" >/dev/null
wait_ford "a publish in db_b wakes db_b's worker (well before the 60 s poll)" db_b \
  "SELECT EXISTS (SELECT 1 FROM handled WHERE event_id = 'db_b-wake')" 2
echo "# db_b publish to handled: $(qd db_b "SELECT round(extract(epoch FROM h.at - e.published_at) * 1000)
      FROM handled h JOIN relaybus.events e ON e.id = h.event_id WHERE h.event_id = 'db_b-wake'") ms"
sleep 0.3
db_b_rounds() {
  q "SELECT string_agg(state_change::text, ',' ORDER BY pid) FROM pg_stat_activity
      WHERE datname = 'db_b' AND backend_type = 'relaybus sql handler'"
}
# Settled first: after its wake-up, a db_b worker may end one more round of its own (seen
# 1 s after the wake-up); what must not come is a round caused by db_a's publish.
before=$(db_b_rounds)
for _ in $(seq 1 10); do
  sleep 1.2
  now=$(db_b_rounds)
  [ "$now" = "$before" ] && break
  before=$now
done
qd db_a "SELECT relaybus.publish('t', '{}', event_id => 'db_a-wake')" >/dev/null
wait_ford "a publish in db_a wakes db_a's worker" db_a \
  "SELECT EXISTS (SELECT 1 FROM handled WHERE event_id = 'db_a-wake')" 2
sleep 0.3
[ "$(db_b_rounds)" = "$before" ] && ok "the publish in db_a woke none of db_b's workers" \
  || not_ok "the publish in db_a woke none of db_b's workers ($before, then $(db_b_rounds))"
q "ALTER SYSTEM SET relaybus.sql_handler_poll_interval = '100ms'" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null

# A listed database without the extension: its workers stay connected and idle (the same
# processes all along, no restarts), and the others worked meanwhile (above).
[ "$(pids 'db c,noext')" = "$noext_pids" ] \
  && ok "the workers of the listed database without relaybus stay connected, idle, not restarting" \
  || not_ok "the workers of the listed database without relaybus stay connected, idle, not restarting"

# A listed database that does not exist: PostgreSQL ends a worker whose connection fails,
# and the postmaster would restart it every second (handler workers) or 5 s (maintenance);
# the workers wait longer and longer instead (1 s, 2 s, 4 s, ... a minute). Counted over
# 15 s starting 10 s after the start: without the waits about 33 failed connections (2 per
# second from the 2 handler workers, 1 per 6 s from the maintenance worker), with them 6.
fatals() { grep -c 'FATAL:  database "db_late" does not exist' "$dir/server.log" || true; }
sleep_until() { local s=$(( started + $1 - $(date +%s) )); [ $s -le 0 ] || sleep $s; }
sleep_until 10
from=$(fatals)
sleep_until 25
n=$(( $(fatals) - from ))
echo "# db_late: $n failed connections from 10 s to 25 s after the start, $(fatals) in all"
[ $n -ge 1 ] && [ $n -le 9 ] \
  && ok "the workers of a missing database retry slowly ($n failed connections in 15 s)" \
  || not_ok "the workers of a missing database retry slowly ($n failed connections in 15 s)"
q "CREATE DATABASE db_late" >/dev/null
created=$(date +%s)
wait_for "once it is created, its workers connect (within the 1 minute the wait is capped at)" \
  "SELECT count(*) = 3 FROM pg_stat_activity WHERE datname = 'db_late' AND backend_type LIKE 'relaybus%'" 70
echo "# db_late: its workers connected $(( $(date +%s) - created )) s after CREATE DATABASE"

# The list is checked when set: ALTER SYSTEM refuses a bad one.
expect_refused() {
  local out
  out=$(psql -qXAt -c "ALTER SYSTEM SET relaybus.database = '$1'" 2>&1 || true)
  [[ "$out" == *'invalid value for parameter "relaybus.database"'*"$2"* ]] \
    && ok "ALTER SYSTEM refuses relaybus.database = '$1' ($2)" \
    || not_ok "ALTER SYSTEM refuses relaybus.database = '$1' (got: $out)"
}
expect_refused '"db_a' 'List syntax is invalid.'
expect_refused 'db_a,,db_b' 'List syntax is invalid.'
expect_refused "$(seq -s, -f 'd%g' 17)" 'It lists more than 16 databases.'
expect_refused "$(printf 'x%.0s' $(seq 64))" 'A database name has at most 63 bytes.'

# Starting the server: a bad value in postgresql.conf stops it from starting (PostgreSQL
# alone would only warn and serve 'postgres'); an empty list runs no worker; a pool too
# small is reported.
restart_with() {
  as_postgres "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null 2>&1 || true
  as_postgres sh -c "printf '%s\n' \"\$1\" >>'$dir/data/postgresql.auto.conf'" sh "$1"
  : >"$dir/start.log"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir/start.log"
  as_postgres "$bindir/pg_ctl" -D "$dir/data" -l "$dir/start.log" -w -t 30 start >/dev/null 2>&1
}
if restart_with "relaybus.database = 'db_a, \"db_b'"; then
  not_ok "a bad relaybus.database in the configuration stops the server from starting"
else
  grep -q 'FATAL:  invalid value for parameter "relaybus.database": "db_a, "db_b"' "$dir/start.log" \
    && grep -q 'DETAIL:  List syntax is invalid.' "$dir/start.log" \
    && ok "a bad relaybus.database in the configuration stops the server from starting, saying why" \
    || not_ok "a bad relaybus.database in the configuration stops the server from starting, saying why ($(cat "$dir/start.log"))"
fi
if restart_with "relaybus.database = ''"; then
  sleep 1
  check "an empty relaybus.database runs no worker" \
    "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE backend_type LIKE 'relaybus%')"
  grep -q 'relaybus.database is empty: no relaybus background worker runs' "$dir/start.log" \
    && ok "and the log says so" || not_ok "and the log says so"
else
  not_ok "the server starts with an empty relaybus.database ($(cat "$dir/start.log"))"
fi
if restart_with "relaybus.database = 'db_a, db_b'
max_worker_processes = 4"; then
  grep -Eq 'WARNING:  relaybus needs 6 background workers, but max_worker_processes leaves [0-4]$' "$dir/start.log" \
    && ok "a max_worker_processes too small for every database's workers is reported at startup" \
    || not_ok "a max_worker_processes too small for every database's workers is reported at startup ($(cat "$dir/start.log"))"
else
  not_ok "the server starts with max_worker_processes = 4 ($(cat "$dir/start.log"))"
fi

# The NOTICE's detail quotes the list as a literal (issue 32, finding 4): a listed name with
# a quote and a backslash (it's \ here) comes out as quote_literal writes it.
if restart_with "relaybus.database = 'db_a, \"it''s \\\\ here\"'
max_worker_processes = 20"; then
  out=$(PGDATABASE=db_c psql -qXAt -v ON_ERROR_STOP=1 \
    -c "SELECT relaybus.subscribe('rec2', ARRAY['t2'], sql_function => 'record(jsonb)')" 2>&1)
  want="DETAIL:  The workers serve relaybus.database = E'db_a, \"it''s \\\\ here\"'."
  [[ "$out" == *"$want"* ]] \
    && [ "$(q "SELECT quote_literal(current_setting('relaybus.database'))")" = "E'db_a, \"it''s \\\\ here\"'" ] \
    && ok "the NOTICE's detail quotes relaybus.database as quote_literal does" \
    || not_ok "the NOTICE's detail quotes relaybus.database as quote_literal does (got: $out)"
else
  not_ok "the server starts with a name holding a quote and a backslash ($(cat "$dir/start.log"))"
fi

echo "several databases: $passed passed, $failed failed"
[ $failed = 0 ]
