#!/usr/bin/env bash
# The prototype of the next storage phase (bench/peers/positions.py) is measured beside
# relaybus, so what it claims to keep is checked, not only timed: completions in random
# order (each event once, no key twice in flight, keys in publish order, lanes inside their
# bounds), a completion twice, a lane's cap of 32, a live lease, fencing after a
# takeover, oldest work first across lanes, and publishers that do not wait for the
# lane's worker nor fail on its writes
# (bench/peers/positions_check.py). It needs a database only, not the extension.
# Needs /usr/bin/python3 with python3-psycopg.
set -euo pipefail
cd "$(dirname "$0")/../.."
db=relaybus_it_positions
psql() { command psql -qX -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" "$@"; }
psql -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
trap 'psql -d postgres -c "DROP DATABASE IF EXISTS $db"' EXIT
/usr/bin/python3 bench/peers/positions_check.py --conn "dbname=$db"
