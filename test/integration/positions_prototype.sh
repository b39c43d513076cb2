#!/usr/bin/env bash
# The prototype of the next storage phase (bench/peers/positions.py) is measured beside
# relaybus, so what it claims to keep is checked, not only timed: completions in random
# order (each event once, no key twice in flight, keys in publish order, lanes inside their
# bounds), a completion twice, a lane's cap of 32, a live lease, fencing after a
# takeover, oldest work first across lanes, and publishers that do not wait for the
# lane's worker nor fail on its writes
# (bench/peers/positions_check.py). The same checks again against the prototype whose
# positions come from the commit log (bench/peers/positions_log.py), with three of its own:
# absent positions (rolled-back savepoints) folded into the cursor, positions in commit
# order, and publishers of one lane that do not wait for each other. And against the
# prototype whose deliveries are staged until commit (bench/peers/positions_staged.py):
# commit order, publishers of one lane apart, and rolled-back savepoints that leave no
# position behind. It needs a database, not the extension; positions_log and
# positions_staged need the library (the suite's cluster preloads it) and a superuser, to
# declare their functions. Needs /usr/bin/python3 with python3-psycopg.
set -euo pipefail
cd "$(dirname "$0")/../.."
db=relaybus_it_positions
psql() { command psql -qX -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" "$@"; }
psql -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
trap 'psql -d postgres -c "DROP DATABASE IF EXISTS $db"' EXIT
/usr/bin/python3 bench/peers/positions_check.py --conn "dbname=$db"
/usr/bin/python3 bench/peers/positions_check.py --conn "dbname=$db" --system positions_log
/usr/bin/python3 bench/peers/positions_check.py --conn "dbname=$db" --system positions_staged
