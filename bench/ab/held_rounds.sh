#!/usr/bin/env bash
# A/B of two relaybus builds under a held snapshot: bench/ab/held_rounds.py (rounds of
# publish + drain, an idle REPEATABLE READ transaction held through all of them) run for
# build A, then B, then B, then A, ..., on one cluster with the harness's settings, the
# library replaced and the server restarted before each run, in a fresh database.
#   bench/ab/held_rounds.sh A.so B.so [REPEATS] [ROUNDS] [VERSION] [PORT]
# VERSION: the extension version to create (default: relaybus.control's default_version).
# relaybus.so in the installation is replaced; reinstall the build you want afterwards.
# A build whose extension scripts differ from the installed ones: set SQL_A or SQL_B to a
# directory holding its relaybus--*.sql files, copied into the installation before its runs.
# HELD_ROUNDS_ARGS: more arguments for held_rounds.py (--no-hold: the same rounds, no snapshot).
set -euo pipefail
cd "$(dirname "$0")/../.."
a=$1 b=$2 repeats=${3:-2} rounds=${4:-8} version=${5:-} port=${6:-54496}
. bench/ab/use_build.sh
dir=/tmp/relaybus-ab-held-$port
trap 'scripts/cluster stop "$dir" >/dev/null 2>&1 || true' EXIT
scripts/cluster start "$dir" "$port" >/dev/null
for ((r = 1; r <= repeats; r++)); do
  order="A B"; [ $((r % 2)) = 0 ] && order="B A"
  for build in $order; do
    if [ "$build" = A ]; then use_build "$a" "${SQL_A:-}" "$dir"; else use_build "$b" "${SQL_B:-}" "$dir"; fi
    psql -qX -h "$dir" -p "$port" -U postgres -c "DROP DATABASE IF EXISTS ab" -c "CREATE DATABASE ab" >/dev/null
    psql -qX -h "$dir" -p "$port" -U postgres -d ab \
      -c "CREATE EXTENSION relaybus ${version:+VERSION '$version'}" >/dev/null
    echo "== repeat $r, build $build"
    /usr/bin/python3 bench/ab/held_rounds.py --conn "host=$dir port=$port dbname=ab user=postgres" \
      --rounds "$rounds" ${HELD_ROUNDS_ARGS:-}
  done
done
