#!/usr/bin/env bash
# publish_batch against a concurrent publish of one of its ids (test/integration/
# publish_races.py). Runs in a database of its own on the suite's cluster, in about 2 s.
# Needs /usr/bin/python3 with python3-psycopg.
set -euo pipefail
cd "$(dirname "$0")/../.."
db=relaybus_it_publish_races
psql() { command psql -qX -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" "$@"; }
psql -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
trap 'psql -d postgres -c "DROP DATABASE IF EXISTS $db"' EXIT
psql -d "$db" -c "CREATE EXTENSION relaybus"
/usr/bin/python3 test/integration/publish_races.py "dbname=$db"
