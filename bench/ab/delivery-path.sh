#!/usr/bin/env bash
# A/B of the delivery path: two builds of relaybus.so (A: before a change, B: after),
# alternated A B, B A, ... on one cluster with the harness's settings, the library replaced
# and the server restarted before each run. Each run drains 20,000 events with one
# consumer at batch 500, as the loop and as the floor (bench/ab/drain_paired.py), and times
# single publish against the floor's statement in pgbench (bench/ab/publish_pgbench.py).
# Compare loop/floor and floor/publish between the builds: the rates move with the machine.
#   bench/ab/delivery-path.sh A.so B.so [ROUNDS] [PORT]
#   RELAYBUS_AB_HOLD_SNAPSHOT=1: an idle REPEATABLE READ transaction holds a snapshot open
#   through each run (vacuum can then remove nothing the run leaves behind). It reads no
#   relaybus table: a lock on one would hold back the runs' TRUNCATE.
# relaybus.so in the installation is replaced; reinstall the build you want afterwards.
set -euo pipefail
cd "$(dirname "$0")/../.."
a=$1 b=$2 rounds=${3:-4} port=${4:-54495}
lib=$(pg_config --pkglibdir)
dir=/tmp/relaybus-ab-path-$port
conn="host=$dir port=$port dbname=ab user=postgres"
trap 'scripts/cluster stop "$dir" >/dev/null 2>&1 || true' EXIT
scripts/cluster start "$dir" "$port" >/dev/null
psql -qX -h "$dir" -p "$port" -U postgres -c "CREATE DATABASE ab" >/dev/null
psql -qX -h "$dir" -p "$port" -U postgres -d ab -c "CREATE EXTENSION relaybus" >/dev/null
echo "round build | drain | single publish"
for ((r = 1; r <= rounds; r++)); do
  order="A B"; [ $((r % 2)) = 0 ] && order="B A"
  for build in $order; do
    so=$a; [ "$build" = B ] && so=$b
    # A new file, then a rename: the running server keeps the library it has mapped.
    cp "$so" "$lib/relaybus.so.new" && mv "$lib/relaybus.so.new" "$lib/relaybus.so"
    scripts/cluster restart "$dir" >/dev/null
    holder=
    if [ -n "${RELAYBUS_AB_HOLD_SNAPSHOT:-}" ]; then
      psql -qX -h "$dir" -p "$port" -U postgres -d ab \
        -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT 1" \
        -c "SELECT pg_sleep(3600)" >/dev/null 2>&1 &
      holder=$!
      sleep 0.5
    fi
    drain=$(/usr/bin/python3 bench/ab/drain_paired.py --conn "$conn" --rounds 1 --variants loop,floor | sed -n 's/^round 1: //p')
    publish=$(/usr/bin/python3 bench/ab/publish_pgbench.py --conn "$conn" --rounds 1 --seconds 6 | sed -n 's/^round 1: //p')
    [ -n "$holder" ] && { kill "$holder" 2>/dev/null || true; wait "$holder" 2>/dev/null || true; }
    echo "$r $build | $drain | $publish"
  done
done
