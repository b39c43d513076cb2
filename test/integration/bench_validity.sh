#!/usr/bin/env bash
# The benchmark harness cannot rot: a tiny validity-only run of bench/run (a few hundred
# events drained by two dispatcher processes, and a short mixed run, each against 0.1.0 and
# 0.2.0, a small drain by every peer runner built, and both held-snapshot scenarios in
# miniature: 2 rounds of 300 under a held snapshot and xid, 6 s at 200/s with a snapshot
# held in the middle) on a throwaway cluster of its own. Fails if any run is INVALID (lost, unexpected
# or duplicate deliveries, per-key order violations, anything pending or dead at the end).
set -euo pipefail
cd "$(dirname "$0")/../.."

# The suite's port + 40 unless moved (the other clusters of `make test` take + 1 and + 2).
port=${RELAYBUS_BENCH_VALIDITY_PORT:-$(( ${PGPORT:-54329} + 40 ))}
make -s client
out=$(mktemp -d /tmp/relaybus-bench-validity-XXXXXX)
trap 'rm -rf "$out"' EXIT
# The extension installed is this tree's, as for every integration script (make test installs
# it first). bench/run, as root, would install it again: with LLVM bitcode this time (a
# minute of clang on a fresh machine), replacing relaybus.so and the extension's scripts
# under the suite's running cluster and whatever other scripts start or CREATE meanwhile.
if RELAYBUS_BENCH_INSTALLED=1 RELAYBUS_BENCH_PORT=$port bench/run --validity --out "$out" >"$out/stdout" 2>"$out/stderr"; then
  grep -E '^    .* round [0-9]+: ' "$out/stderr" | sed 's/^ */ok - /'
  echo "ok - bench/run --validity: every run valid"
else
  cat "$out/stderr"
  echo "not ok - bench/run --validity reported INVALID runs or failed"
  exit 1
fi
