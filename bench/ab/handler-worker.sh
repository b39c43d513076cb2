#!/usr/bin/env bash
# A/B of publish_batch and of the in-database handler workers: two builds of relaybus.so
# (A: before a change, B: after), alternated round by round (A B A B ...) on fresh
# clusters of one PostgreSQL installation (synchronous_commit on), so both see the same
# machine state. Each round measures:
#   batch:   publish_batch of 100 events per call (half keyed, 100 keys), pgbench -M
#            prepared, one client, for SECONDS seconds;
#   handler: 20,000 events published in one transaction for one in-database handler that
#            inserts a row per event, at the default worker settings (2 workers, batch 10),
#            timed until every row is there.
# Used for the 2026-12-03 handler fixes (docs/performance.md).
#   bench/ab/handler-worker.sh A.so B.so ROUNDS SECONDS PORT
# relaybus.so in the installation is replaced each round; reinstall the build you want
# afterwards.
set -euo pipefail
cd "$(dirname "$0")/../.."
a=$1 b=$2 rounds=${3:-3} seconds=${4:-6} port=${5:-54490}
lib=$(pg_config --pkglibdir)
dir=/tmp/relaybus-ab-handler-$port
work=$(mktemp -d)
trap 'rm -rf "$work"; scripts/cluster stop "$dir" >/dev/null 2>&1 || true' EXIT
printf "%s\n" "SELECT count(*) FROM relaybus.publish_batch((SELECT jsonb_agg(jsonb_build_object('type', 'pb.t', 'payload', jsonb_build_object('i', i), 'key', CASE WHEN i % 2 = 0 THEN 'k' || (i % 100) END)) FROM generate_series(1, 100) i));" >"$work/batch.sql"
chmod -R a+rX "$work"
echo "round build batch_calls_per_s handler_deliveries_per_s"
for ((r = 1; r <= rounds; r++)); do
  for build in A B; do
    so=$a; [ "$build" = B ] && so=$b
    cp "$so" "$lib/relaybus.so.new" && mv "$lib/relaybus.so.new" "$lib/relaybus.so"
    RELAYBUS_CLUSTER_SETTINGS="synchronous_commit = on" scripts/cluster start "$dir" "$port" >/dev/null
    export PGHOST=$dir PGPORT=$port PGUSER=postgres PGDATABASE=postgres
    q() { psql -qXAt -v ON_ERROR_STOP=1 -c "$1"; }
    q "CREATE EXTENSION relaybus" >/dev/null
    q "SELECT relaybus.subscribe('pb', ARRAY['pb.t'])" >/dev/null
    batch=$(pgbench -n -M prepared -T "$seconds" -f "$work/batch.sql" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    q "SELECT relaybus.unsubscribe('pb')" >/dev/null
    q "CREATE TABLE handled (event_id text)" >/dev/null
    q "CREATE FUNCTION sink(e jsonb) RETURNS void LANGUAGE sql AS 'INSERT INTO handled VALUES (e->>''id'')'" >/dev/null
    q "SELECT relaybus.subscribe('sink', ARRAY['bench.t'], sql_function => 'sink(jsonb)')" >/dev/null
    q "SELECT count(*) FROM relaybus.publish_batch((SELECT jsonb_agg(jsonb_build_object('type', 'bench.t',
         'payload', jsonb_build_object('i', i), 'key', CASE WHEN i % 2 = 0 THEN 'k' || (i % 100) END))
         FROM generate_series(1, 20000) i))" >/dev/null
    start=$(date +%s%N)
    while [ "$(q "SELECT count(*) FROM handled")" -lt 20000 ]; do sleep 0.05; done
    handler=$(( 20000 * 1000000000 / ($(date +%s%N) - start) ))
    echo "$r $build $batch $handler"
    scripts/cluster stop "$dir" >/dev/null
  done
done
