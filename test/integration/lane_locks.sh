#!/usr/bin/env bash
# Two connections of one worker: the order they lock lanes in, and whether one judges the
# other alive (test/integration/lane_locks.py). Runs in a database of its own on the
# suite's cluster, in about 3 s. Needs /usr/bin/python3 with python3-psycopg.
set -euo pipefail
cd "$(dirname "$0")/../.."
db=relaybus_it_lane_locks
psql() { command psql -qX -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" "$@"; }
psql -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
trap 'psql -d postgres -c "DROP DATABASE IF EXISTS $db"' EXIT
psql -d "$db" -c "CREATE EXTENSION relaybus"
/usr/bin/python3 test/integration/lane_locks.py "dbname=$db"
