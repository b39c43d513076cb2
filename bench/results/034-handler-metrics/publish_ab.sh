#!/bin/bash
# A/B single publish with pgbench (one client, prepared): relaybus.publish, half keyed.
set -euo pipefail
cd /work/main
. bench/ab/use_build.sh
dir=/tmp/rb-pub-ab; port=54497
scripts/cluster start $dir $port >/dev/null
trap 'scripts/cluster stop $dir >/dev/null 2>&1 || true' EXIT
cat > /tmp/pub.sql <<'SQL'
\set k random(1, 10000)
SELECT relaybus.publish('bench.event', '{"n": 1}', CASE WHEN :k % 2 = 0 THEN 'k' || (:k % 5000) END);
SQL
for r in 1 2 3 4 5 6; do
  order="A B"; [ $((r % 2)) = 0 ] && order="B A"
  for b in $order; do
    if [ $b = A ]; then use_build /tmp/A.so /tmp/sqlA $dir; else use_build /tmp/B.so /tmp/sqlB $dir; fi
    psql -qX -h $dir -p $port -U postgres -c "DROP DATABASE IF EXISTS ab" -c "CREATE DATABASE ab" >/dev/null 2>&1
    psql -qX -h $dir -p $port -U postgres -d ab -c "CREATE EXTENSION relaybus" -c "SELECT relaybus.subscribe('bench', ARRAY['bench.event'])" >/dev/null
    tps=$(pgbench -n -M prepared -c 1 -T 8 -f /tmp/pub.sql -h $dir -p $port -U postgres ab 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    echo "$r $b $tps"
  done
done
