#!/usr/bin/env bash
# A/B of two relaybus builds' end-to-end latency at a fixed offered rate: for build A, then
# B, then B, then A, ...: a fresh database of VERSION, then a mixed run of the plain claim +
# complete_many loop (bench/peers/relaybus_loop.py: one consumer, claim(500), 10 ms sleep
# when empty), then one of the default C++ runtime (relaybus-bench mixed: one dispatcher,
# the runtime's defaults: concurrency 10, batch 100, poll 1 s, woken by NOTIFY), each RATE events/s for DUR seconds.
# Prints each run's p50/p90/p99 (bench/ab/latency_of.py), and the claims' mean server time.
#   bench/ab/latency.sh A.so B.so [REPEATS] [RATE] [DUR] [VERSION] [PORT]
# HOLD=1: an idle REPEATABLE READ transaction that has taken its snapshot is open in the
# run's database through every run (vacuum may remove nothing written meanwhile).
# RUNNERS="runtime" runs one of the two (default: "loop runtime"); BENCH_A, BENCH_B: each
# build's relaybus-bench (default: bin/relaybus-bench for both), to compare runtimes.
# relaybus.so in the installation is replaced; reinstall the build you want afterwards.
# A build whose extension scripts differ from the installed ones: set SQL_A or SQL_B to a
# directory holding its relaybus--*.sql files, copied into the installation before its runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
a=$1 b=$2 repeats=${3:-2} rate=${4:-1000} dur=${5:-20} version=${6:-0.3.0} port=${7:-54497}
. bench/ab/use_build.sh
dir=/tmp/relaybus-ab-latency-$port
out=$(mktemp -d)
trap 'scripts/cluster stop "$dir" >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
scripts/cluster start "$dir" "$port" >/dev/null
conn="host=$dir port=$port dbname=ab user=postgres"
for ((r = 1; r <= repeats; r++)); do
  order="A B"; [ $((r % 2)) = 0 ] && order="B A"
  for build in $order; do
    if [ "$build" = A ]; then use_build "$a" "${SQL_A:-}" "$dir"; else use_build "$b" "${SQL_B:-}" "$dir"; fi
    for runner in ${RUNNERS:-loop runtime}; do
      psql -qX -h "$dir" -p "$port" -U postgres -c "DROP DATABASE IF EXISTS ab" -c "CREATE DATABASE ab" >/dev/null
      psql -qX -h "$dir" -p "$port" -U postgres -d ab -c "CREATE EXTENSION relaybus VERSION '$version'" \
        -c "CREATE EXTENSION pg_stat_statements" >/dev/null
      /usr/bin/python3 bench/peers/relaybus_loop.py reset --conn "$conn"
      psql -qX -h "$dir" -p "$port" -U postgres -d ab -c "SELECT pg_stat_statements_reset()" >/dev/null
      holder=
      if [ "${HOLD:-0}" = 1 ]; then
        (echo "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM relaybus.subscriptions;"
         sleep $((dur + 30))) | psql -qX -h "$dir" -p "$port" -U postgres -d ab >/dev/null &
        holder=$!
        sleep 1
      fi
      if [ $runner = loop ]; then
        /usr/bin/python3 bench/peers/relaybus_loop.py mixed --conn "$conn" --out "$out/run" \
          --rate "$rate" --duration-s "$dur" --consumers 1 >/dev/null
      else
        bench=bin/relaybus-bench
        if [ "$build" = A ]; then bench=${BENCH_A:-$bench}; else bench=${BENCH_B:-$bench}; fi
        "$bench" mixed --db "$conn" --out "$out/run" --rate "$rate" --duration-s "$dur" \
          --publishers 2 --keys $((rate * dur / 4)) --dispatchers 1 \
          --poll-ms 1000 >/dev/null 2>&1
      fi
      claim=$(psql -qXAt -h "$dir" -p "$port" -U postgres -d ab -c "SELECT round(sum(total_exec_time)::numeric
        / nullif(sum(calls), 0), 2) FROM pg_stat_statements WHERE query LIKE '%relaybus.claim(%' AND toplevel")
      if [ -n "$holder" ]; then
        psql -qX -h "$dir" -p "$port" -U postgres -d ab -c "SELECT pg_terminate_backend(pid)
          FROM pg_stat_activity WHERE datname = 'ab' AND state = 'idle in transaction'" >/dev/null
        wait "$holder" 2>/dev/null || true
      fi
      echo "repeat $r, build $build, $runner$([ "${HOLD:-0}" = 1 ] && echo " (snapshot held)"): $(/usr/bin/python3 bench/ab/latency_of.py "$out/run"); claim ${claim} ms"
      rm -f "$out"/run.*
    done
  done
done
