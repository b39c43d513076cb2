#!/usr/bin/env bash
# purge_expired against what runs beside it (test/integration/purge_races.py): a claim that
# read an unsubscribed handler's delivery before the purge deleted it, a transaction that
# cancels in two lanes, and a publish that adds a handler to an old event while the purge
# scans (1,500,000 old events make the scan long enough; about 20 s in all). Runs in a database of its own on the suite's cluster.
# Needs /usr/bin/python3 with python3-psycopg.
set -euo pipefail
cd "$(dirname "$0")/../.."
db=relaybus_it_purge_races
psql() { command psql -qX -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" "$@"; }
psql -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
trap 'psql -d postgres -c "DROP DATABASE IF EXISTS $db"' EXIT
psql -d "$db" -c "CREATE EXTENSION relaybus"
/usr/bin/python3 test/integration/purge_races.py "dbname=$db"
