#!/usr/bin/env bash
# purge_expired against what runs beside it (test/integration/purge_races.py): a claim that
# read an unsubscribed handler's delivery before the purge deleted it, a transaction that
# cancels in two lanes, and a publish that adds a handler to an old event while the purge
# scans (1,500,000 old events make 0.2.1's scan long enough; 0.3.0's purge no longer reads
# them, and is held at its lock of the event instead; about 20 s a version). Runs in a
# database of its own on the suite's cluster, at 0.2.1 (lane leases, whose purge the cases
# were written against) and at the default version.
# Needs /usr/bin/python3 with python3-psycopg.
set -euo pipefail
cd "$(dirname "$0")/../.."
db=relaybus_it_purge_races
psql() { command psql -qX -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" "$@"; }
trap 'psql -d postgres -c "DROP DATABASE IF EXISTS $db"' EXIT
status=0
for version in 0.2.1 default; do
  echo "# relaybus $version"
  psql -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
  if [ $version = default ]; then
    psql -d "$db" -c "CREATE EXTENSION relaybus"
  else
    psql -d "$db" -c "CREATE EXTENSION relaybus VERSION '$version'"
  fi
  /usr/bin/python3 test/integration/purge_races.py "dbname=$db" || status=1
done
exit $status
