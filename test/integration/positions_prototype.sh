#!/usr/bin/env bash
# The prototype of the next storage phase (bench/peers/positions.py) is measured beside
# relaybus, so what it claims to keep is checked, not only timed: completions in random
# order (each event once, no key twice in flight, keys in publish order, lanes inside their
# bounds), a completion twice, a lane's cap of 32 and fencing after a takeover
# (bench/peers/positions_check.py). It needs a database only, not the extension. Needs
# /usr/bin/python3 with python3-psycopg.
set -euo pipefail
cd "$(dirname "$0")/../.."
db=relaybus_it_positions
psql -qX -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
status=0
/usr/bin/python3 bench/peers/positions_check.py --conn "dbname=$db" || status=1
psql -qX -d postgres -c "DROP DATABASE $db"
exit $status
