#!/usr/bin/env bash
# Wake-ups from strangers, against the C++ worker runtime: PostgreSQL lets every role NOTIFY
# any channel, so a role with no relaybus right at all can send the `NOTIFY relaybus` a
# listening worker acts on. A flood of them must cost the worker at most one claim per
# wake-up interval (claims counted by the server, in pg_stat_statements), and a real
# publish right after the flood must still be handled at once, not at the 10 s poll.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/integration/lib/checks.bash
export PGDATABASE=relaybus_it_wakeups
stranger=relaybus_it_stranger
interval_us=50000
tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

make -s client-install PREFIX="$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH=$tmp/prefix/lib/pkgconfig LD_LIBRARY_PATH=$tmp/prefix/lib
g++ -std=c++17 -O1 -Wall -o "$tmp/worker" test/integration/wakeup_flood_worker.cpp \
  $(pkg-config --cflags --libs relaybus-client)

psql -qX -d postgres -v ON_ERROR_STOP=1 >/dev/null <<SQL
SET client_min_messages = warning;
DROP DATABASE IF EXISTS $PGDATABASE;
CREATE DATABASE $PGDATABASE;
DROP ROLE IF EXISTS $stranger;
CREATE ROLE $stranger LOGIN;
SQL
psql -qX -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE EXTENSION relaybus;
CREATE EXTENSION pg_stat_statements;
SELECT relaybus.subscribe('flooded', ARRAY['flood.test']);
SQL
check "the stranger has no relaybus right" \
  "SELECT NOT has_schema_privilege('$stranger', 'relaybus', 'USAGE')
      AND NOT has_function_privilege('$stranger',
        'relaybus.claim(text,integer,interval,text[],text)', 'EXECUTE')
      AND NOT has_function_privilege('$stranger',
        'relaybus.publish(text,jsonb,text,text,text[],timestamptz,jsonb)', 'EXECUTE')"

# The claim statements the server ran in this database (only the worker claims here).
claims_sql="SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s
   JOIN pg_database d ON d.oid = s.dbid
  WHERE d.datname = current_database() AND s.query LIKE '%FROM relaybus.claim(%'"
claims() { q "$claims_sql"; }

"$tmp/worker" "dbname=$PGDATABASE" flooded "$interval_us" >"$tmp/out" 2>"$tmp/err" &
pid=$!
wait_for "the worker has claimed once and waits" "SELECT ($claims_sql) >= 1" 10
sleep 0.2
before=$(claims)

# 200 notifications, each in its own transaction, about one a millisecond; half of them
# name the worker's handler, in case a runtime looks at the payload.
started=$(date +%s%N)
psql -qX -U "$stranger" -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
DO $$
BEGIN
  FOR i IN 1..200 LOOP
    PERFORM pg_notify('relaybus', CASE WHEN i % 2 = 0 THEN 'flooded' ELSE 'noise ' || i END);
    COMMIT;
    PERFORM pg_sleep(0.001);
  END LOOP;
END $$;
SQL
elapsed_us=$((($(date +%s%N) - started) / 1000))
# A real publish right after the flood: its notification falls inside the spacing.
event=$(q "SELECT relaybus.publish('flood.test', '{}')")
published=$(date +%s%N)
handled_in=
for _ in $(seq 200); do
  if grep -q "^handled $event\$" "$tmp/out"; then
    handled_in=$((($(date +%s%N) - published) / 1000000))
    break
  fi
  sleep 0.01
done
after=$(claims)
made=$((after - before))
# The flood's claims: one per interval, plus the first and the one remembered at its end;
# then the publish's three: one finds it, one comes back empty while it runs, one follows
# its completion. Without the spacing it is one claim per notification.
bound=$((elapsed_us / interval_us + 2 + 3 + 1))
if [ "$made" -ge 2 ] && [ "$made" -le "$bound" ]; then
  ok "200 notifications in $((elapsed_us / 1000)) ms cost $made claims (at most $bound)"
else
  not_ok "200 notifications in $((elapsed_us / 1000)) ms cost $made claims (want 2 to $bound)"
fi
if [ -n "$handled_in" ]; then
  ok "a publish right after the flood is handled in $handled_in ms (poll interval 10 s)"
else
  not_ok "a publish right after the flood is not handled within 2 s"
fi

kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
[ $rc -eq 0 ] && ok "the worker stops on SIGTERM: $(tail -1 "$tmp/out")" \
  || { not_ok "the worker exited $rc"; cat "$tmp/err"; }

psql -qX -d postgres -c "DROP DATABASE $PGDATABASE" -c "DROP ROLE $stranger" >/dev/null
echo "# wakeup_flood: $passed passed, $failed failed"
[ $failed -eq 0 ]
