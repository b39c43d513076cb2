#!/usr/bin/env bash
# The commit log that hands out positions in commit order (src/pg/commit_order.hpp): order
# under 16 concurrent publishers, no wait on an open transaction, old snapshots,
# subtransactions, PREPARE refused, the writing role, a hostile search_path
# (test/integration/commit_order_check.py). A database of its own on the suite's cluster,
# which preloads the library. Needs /usr/bin/python3 with python3-psycopg.
set -euo pipefail
cd "$(dirname "$0")/../.."
db=relaybus_it_commit_order
psql() { command psql -qX -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" "$@"; }
psql -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
trap 'psql -d postgres -c "DROP DATABASE IF EXISTS $db"' EXIT
/usr/bin/python3 test/integration/commit_order_check.py --conn "dbname=$db"
