#!/usr/bin/env bash
# The README's first command, scripts/demo, on the extension this suite installed (no apt,
# build or install: RELAYBUS_DEMO_SKIP_INSTALL), smaller, on a cluster of its own
# ($PGPORT + 14). Its own checks (nothing lost, no duplicate, per-key order, one retry, one
# dead letter) end it with an error when one fails; so does a wait that never ends.
set -euo pipefail
cd "$(dirname "$0")/../.."
port=$(( ${PGPORT:-54329} + 14 ))
out=$(mktemp)
trap 'rm -f "$out"' EXIT
if RELAYBUS_DEMO_SKIP_INSTALL=1 RELAYBUS_DEMO_PORT=$port RELAYBUS_DEMO_DIR=/tmp/relaybus-demo-$port \
   RELAYBUS_DEMO_EVENTS=1000 RELAYBUS_DEMO_TRICKLE=50 RELAYBUS_DEMO_TIMEOUT=60 \
   timeout 600 scripts/demo >"$out" 2>&1 && grep -q "^all checks passed" "$out"; then
  echo "ok - scripts/demo runs to the end: $(grep '^all checks passed' "$out")"
  echo "demo: 1 passed, 0 failed"
else
  tail -20 "$out"
  echo "not ok - scripts/demo failed"
  echo "demo: 0 passed, 1 failed"
  exit 1
fi
