#!/usr/bin/env bash
# A/B of two relaybus builds' drain: for build A, then B, then B, then A, ...: a fresh
# database of VERSION, then bench/ab/drain_paired.py's loop (one consumer, claim(500) then
# complete_many) draining EVENTS preloaded events (half keyed), ROUNDS times. Prints each
# build's rounds, the claims' mean server time per delivery and complete_many's per call
# (pg_stat_statements, every round of the build), the medians of the rates and their ratio B / A at the end.
#   bench/ab/drain.sh A.so B.so [REPEATS] [ROUNDS] [EVENTS] [VERSION] [PORT]
# relaybus.so in the installation is replaced; reinstall the build you want afterwards.
# SQL_A, SQL_B: as in bench/ab/latency.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
a=$1 b=$2 repeats=${3:-2} rounds=${4:-3} events=${5:-20000} version=${6:-0.3.0} port=${7:-54498}
. bench/ab/use_build.sh
dir=/tmp/relaybus-ab-drain-$port
trap 'scripts/cluster stop "$dir" >/dev/null 2>&1 || true' EXIT
scripts/cluster start "$dir" "$port" >/dev/null
conn="host=$dir port=$port dbname=ab user=postgres"
declare -A rates=([A]="" [B]="")
for ((r = 1; r <= repeats; r++)); do
  order="A B"; [ $((r % 2)) = 0 ] && order="B A"
  for build in $order; do
    if [ "$build" = A ]; then use_build "$a" "${SQL_A:-}" "$dir"; else use_build "$b" "${SQL_B:-}" "$dir"; fi
    psql -qX -h "$dir" -p "$port" -U postgres -c "DROP DATABASE IF EXISTS ab" -c "CREATE DATABASE ab" >/dev/null
    psql -qX -h "$dir" -p "$port" -U postgres -d ab -c "CREATE EXTENSION relaybus VERSION '$version'" \
      -c "CREATE EXTENSION pg_stat_statements" >/dev/null
    out=$(/usr/bin/python3 bench/ab/drain_paired.py --conn "$conn" --variants loop --rounds "$rounds" \
      --events "$events")
    got=$(grep -o 'loop [0-9,]*/s' <<<"$out" | tr -d ',/s' | awk '{print $2}' | tr '\n' ' ')
    claim=$(psql -qXAt -h "$dir" -p "$port" -U postgres -d ab -c "SELECT round(sum(total_exec_time)::numeric
      / nullif(sum(rows), 0) * 1000, 2) FROM pg_stat_statements WHERE query LIKE '%relaybus.claim(%' AND toplevel")
    complete=$(psql -qXAt -h "$dir" -p "$port" -U postgres -d ab -c "SELECT round(sum(total_exec_time)::numeric
      / nullif(sum(calls), 0), 3) FROM pg_stat_statements WHERE query LIKE '%relaybus.complete_many(%' AND toplevel")
    echo "repeat $r, build $build: ${got}deliveries/s; claim ${claim} us of server time a delivery;" \
      "complete_many ${complete} ms a call"
    rates[$build]+="$got"
  done
done
/usr/bin/python3 - "${rates[A]}" "${rates[B]}" <<'PY'
import statistics, sys
a, b = ([float(x) for x in s.split()] for s in sys.argv[1:3])
ma, mb = statistics.median(a), statistics.median(b)
print(f"A median {ma:,.0f}/s, B median {mb:,.0f}/s: B / A {mb / ma:.3f}x")
PY
