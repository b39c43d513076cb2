#!/usr/bin/env bash
# A/B of the claim path: two builds of relaybus.so (A: before a change, B: after),
# alternated round by round (A B A B ...) on fresh clusters of one PostgreSQL installation,
# so both see the same machine state. Each round measures, with pgbench -M prepared and one
# client:
#   drain: 4,000 transactions of claim 10 + complete_many on a deep queue (60,000 pending
#          at the start, so it never runs dry; one handler, 5,000 keys);
#   idle:  claim 10 on an empty queue for SECONDS seconds (the claim's fixed cost, where a
#          per-claim check weighs most);
#   publish: one publish per transaction for SECONDS seconds, relaybus.notify on (the
#          commit-time wake-up of the in-database handler workers runs every time).
# Used for issue 14's "no change to the happy path's cost" (the pause check).
#   bench/ab/pause-check.sh A.so B.so ROUNDS SECONDS PORT
# PATH must start with the bin directory of an installation whose extension directory
# holds the SQL scripts both builds accept; relaybus.so there is replaced each round.
set -euo pipefail
cd "$(dirname "$0")/../.."
a=$1 b=$2 rounds=${3:-3} seconds=${4:-10} port=${5:-54480}
lib=$(pg_config --pkglibdir)
dir=/tmp/relaybus-ab-$port
work=$(mktemp -d)
printf "SELECT relaybus.complete_many(coalesce(array_agg(lease_token), '{}')) FROM relaybus.claim('w', 10, '30 seconds');\n" >"$work/drain.sql"
printf "SELECT count(*) FROM relaybus.claim('w', 10, '30 seconds');\n" >"$work/idle.sql"
chmod -R a+rX "$work"
printf "SELECT relaybus.publish('t', '{}');\n" >"$work/publish.sql"
chmod -R a+rX "$work"
echo "round build drain_tps idle_tps publish_tps"
for ((r = 1; r <= rounds; r++)); do
  for build in A B; do
    so=$a; [ "$build" = B ] && so=$b
    cp "$so" "$lib/relaybus.so.new" && mv "$lib/relaybus.so.new" "$lib/relaybus.so"
    scripts/cluster start "$dir" "$port" >/dev/null
    export PGHOST=$dir PGPORT=$port PGUSER=postgres PGDATABASE=postgres
    psql -qX -c "CREATE EXTENSION relaybus" -c "SELECT relaybus.subscribe('h', ARRAY['t'])" >/dev/null
    psql -qX -c "SELECT count(*) FROM generate_series(1, 60) b,
      LATERAL relaybus.publish_batch((SELECT jsonb_agg(jsonb_build_object('type', 't', 'key', 'k' || (i % 5000)))
                                      FROM generate_series(1, 1000) i)) x" >/dev/null
    psql -qX -c "VACUUM ANALYZE" >/dev/null
    drain=$(su postgres -c "PATH=$PATH pgbench -h $dir -p $port -n -M prepared -c 1 -t 4000 -f $work/drain.sql postgres" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    psql -qX -c "DELETE FROM relaybus.deliveries" -c "VACUUM ANALYZE" >/dev/null
    idle=$(su postgres -c "PATH=$PATH pgbench -h $dir -p $port -n -M prepared -c 1 -T $seconds -f $work/idle.sql postgres" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    pub=$(su postgres -c "PATH=$PATH pgbench -h $dir -p $port -n -M prepared -c 1 -T $seconds -f $work/publish.sql postgres" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    echo "$r $build $drain $idle $pub"
    scripts/cluster stop "$dir" >/dev/null
  done
done
rm -rf "$work"
