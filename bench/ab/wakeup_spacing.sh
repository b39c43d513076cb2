#!/usr/bin/env bash
# The cost of the runtime's wake-up spacing (issue 32, finding 6) to end-to-end latency:
# relaybus-bench mixed at an offered rate, --wakeup-us 0 (no spacing, as before) and the
# default 2000, alternated A B A B on one cluster; prints p50/p95/p99 commit-to-handler per
# run, computed as bench/harness.py computes them.
#   bench/ab/wakeup_spacing.sh [ROUNDS=3] [RATE=1000] [SECONDS=15]
#   RELAYBUS_AB_WAKEUPS="0 1000 2000": the values compared (default "0 2000")
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3} rate=${2:-1000} secs=${3:-15}
port=${RELAYBUS_AB_PORT:-54371}
dir=/tmp/relaybus-ab-wakeup-$port
scripts/cluster start "$dir" "$port" >/dev/null
trap 'scripts/cluster stop "$dir" >/dev/null' EXIT
export PGHOST=$dir PGPORT=$port PGUSER=postgres PGDATABASE=postgres
psql -qX -c "CREATE EXTENSION relaybus" >/dev/null
out=$(mktemp -d /tmp/relaybus-ab-wakeup-XXXXXX)
for r in $(seq "$rounds"); do
  for us in ${RELAYBUS_AB_WAKEUPS:-0 2000}; do
    psql -qX -c "TRUNCATE relaybus.events, relaybus.deliveries, relaybus.lanes, relaybus.key_counters,
                 relaybus.completions, relaybus.subscriptions" \
         -c "SELECT relaybus.subscribe('bench', ARRAY['bench.event'])" >/dev/null
    bin/relaybus-bench mixed --out "$out/r$r-$us" --rate "$rate" --duration-s "$secs" \
      --wakeup-us "$us" >/dev/null 2>"$out/r$r-$us.log"
    python3 - "$out/r$r-$us" "$us" "$r" <<'PY'
import sys
sys.path.insert(0, "bench")
from harness import read_tsv, percentile
prefix, us, r = sys.argv[1:]
commit = {row[1]: int(row[4]) for row in read_tsv(prefix + ".publisher-*.tsv") if row[0] == "E"}
lat = [max(0, int(row[4]) - commit[row[0]]) / 1000.0 for row in read_tsv(prefix + ".dispatcher-*.tsv") if row[0] in commit]
print(f"round {r} wakeup_us={us:>4}: {len(lat)} handled of {len(commit)}, p50 {percentile(lat, 50):.2f} ms,"
      f" p95 {percentile(lat, 95):.2f} ms, p99 {percentile(lat, 99):.2f} ms")
PY
  done
done
rm -rf "$out"
