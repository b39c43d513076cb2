#!/usr/bin/env bash
# docs/getting-started.md works when pasted literally: its own code blocks (read from the
# page) start a cluster, set up relaybus in the one database its background workers serve,
# publish, claim and complete from psql, run the Python and the Node.js worker (npm pack,
# npm install) with nothing but the PG* variables, bury an event with the wrong payload at
# once, stop each worker with Ctrl-C and stop the cluster, printing what the page promises
# (getting_started.py says what is replayed and how). The guide's cluster takes port
# RELAYBUS_TEST_PORT + 10 and a directory of this script's own.
set -euo pipefail
cd "$(dirname "$0")/../.."

port=$(( ${RELAYBUS_TEST_PORT:-54329} + 10 ))
dir=/tmp/relaybus-guide-$port
work=$(mktemp -d /tmp/relaybus-guide-work-XXXXXX)
# As root the cluster runs as postgres, which must reach nothing in $work; the workers run
# as the caller.
trap 'scripts/cluster stop "$dir" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
# A leftover of an interrupted run is the script's own (scripts/cluster refuses others).
scripts/cluster stop "$dir" >/dev/null 2>&1 || true

/usr/bin/python3 test/integration/getting_started.py "$dir" "$port" "$work"
