#!/usr/bin/env bash
# The behaviour the manual (docs/faq.md, worker-guide.md, pools-and-pgbouncer.md,
# concepts.md) states as fact, checked on a throwaway cluster of its own: two-phase commit
# with NOTIFY, wake-ups, holders and pools, lease renewal in long transactions, ordering,
# DROP EXTENSION's leftovers. Each check names the page and section it backs; when one
# fails, the page or the code is wrong. Needs /usr/bin/python3 with python3-psycopg.
set -euo pipefail
cd "$(dirname "$0")/../.."

port=$(( ${PGPORT:-54329} + 5 ))
dir=/tmp/relaybus-manual-$port
# Prepared transactions for the 2PC checks; a short poll so in-database handlers are
# found quickly after COMMIT PREPARED, which sets no latch.
export RELAYBUS_CLUSTER_SETTINGS="max_prepared_transactions = 4
relaybus.sql_handler_poll_interval = '100ms'
relaybus.maintenance_interval = '100ms'"
scripts/cluster start "$dir" "$port"
trap 'scripts/cluster stop "$dir"' EXIT

/usr/bin/python3 test/integration/manual_claims.py "host=$dir port=$port user=postgres"
