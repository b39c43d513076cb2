#!/usr/bin/env bash
# What one relaybus.purge_expired() call costs beside an old backlog it cannot delete, on
# the installed build (0.3.0): a fresh database per scenario, BACKLOG old events (30 days,
# past relaybus.retention_completed) that must stay, DELETABLE old events whose deliveries
# all finished, then calls timed one by one.
#   bench/ab/purge_backlog.sh [SCENARIOS] [BACKLOG] [DELETABLE] [CALLS]
# SCENARIOS, comma-separated (default paused,fanout,parked):
#   paused  BACKLOG events of a paused handler, never claimed (above its cursors)
#   fanout  BACKLOG events of two handlers: one finished them all, the other is paused
#   parked  BACKLOG pending exception rows below the cursors (a stuck key's parked
#           deliveries, or deliveries deferred to a later due time)
# In every scenario the DELETABLE events are published, claimed and completed through the API
# by another handler, then aged by hand. Each timed call is EXPLAIN (ANALYZE, BUFFERS) of
# `SELECT relaybus.purge_expired()` (the buffers of every statement the function runs),
# rolled back (then called again, rolled back, for what it returns), so that every call sees
# the same rows: first with the deletable events there ("deletes"), then, after calls that
# commit until one returns 0, with nothing to delete ("idle"). The CALLS calls of a kind run
# in one session, as the maintenance worker's do: the first plans the function's statements,
# the later ones run them from the session's plan cache. Connects with the libpq
# environment (PGHOST, PGPORT, PGUSER).
set -euo pipefail
scenarios=${1:-paused,fanout,parked} backlog=${2:-1000000} deletable=${3:-10000} calls=${4:-3}
db=relaybus_purge_backlog
psql() { command psql -qX -v ON_ERROR_STOP=1 "$@"; }

setup() {  # setup SCENARIO
  psql -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
  psql -d $db <<SQL
CREATE EXTENSION relaybus;
SELECT relaybus.subscribe('bp_paused', ARRAY['bp.backlog']);
SELECT relaybus.subscribe('bp_done', ARRAY['bp.deletable']);
-- The backlog, written directly (publishing it would take minutes): each lane's positions
-- 1..n in event order, at the age of the events.
INSERT INTO relaybus.events (id, type, payload, handlers, published_at)
SELECT 'B' || g, 'bp.backlog', '{}',
       CASE WHEN '$1' = 'fanout' THEN '{bp_finished,bp_paused}'::text[]
            WHEN '$1' = 'parked' THEN '{bp_parked}' ELSE '{bp_paused}' END,
       now() - interval '30 days'
  FROM generate_series(1, $backlog) g;
SQL
  case $1 in
    paused | fanout)
      psql -d $db <<SQL
SELECT relaybus.pause('bp_paused');
INSERT INTO relaybus.deliveries (handler, lane, position, event_id, available_at, created_at)
SELECT 'bp_paused', lane, row_number() OVER (PARTITION BY lane ORDER BY g), 'B' || g,
       now() - interval '30 days', now() - interval '30 days'
  FROM (SELECT g, relaybus.lane_of('B' || g) AS lane FROM generate_series(1, $backlog) g) x;
SQL
      ;;&
    fanout)  # the second handler finished every one: its cursors are past them
      psql -d $db <<SQL
SELECT relaybus.subscribe('bp_finished', ARRAY['bp.backlog']);
INSERT INTO relaybus.deliveries (handler, lane, position, event_id, available_at, created_at)
SELECT 'bp_finished', lane, row_number() OVER (PARTITION BY lane ORDER BY g), 'B' || g,
       now() - interval '30 days', now() - interval '30 days'
  FROM (SELECT g, relaybus.lane_of('B' || g) AS lane FROM generate_series(1, $backlog) g) x;
INSERT INTO relaybus.lane_progress (handler, lane, seq, acked_upto, done, in_flight, retrying)
SELECT handler, lane, 1, max(position), '{}', '{}', '{}' FROM relaybus.deliveries
 WHERE handler = 'bp_finished' GROUP BY handler, lane;
SQL
      ;;
    parked)  # every position has a pending exception row (due in a year), the cursor past it
      psql -d $db <<SQL
SELECT relaybus.subscribe('bp_parked', ARRAY['bp.backlog']);
INSERT INTO relaybus.deliveries (handler, lane, position, event_id, available_at, created_at)
SELECT 'bp_parked', lane, row_number() OVER (PARTITION BY lane ORDER BY g), 'B' || g,
       now() - interval '30 days', now() - interval '30 days'
  FROM (SELECT g, relaybus.lane_of('B' || g) AS lane FROM generate_series(1, $backlog) g) x;
INSERT INTO relaybus.exceptions (handler, lane, position, event_id, status, available_at, created_at)
SELECT handler, lane, position, event_id, 'pending', now() + interval '1 year', created_at
  FROM relaybus.deliveries WHERE handler = 'bp_parked';
INSERT INTO relaybus.lane_progress (handler, lane, seq, acked_upto, done, in_flight, retrying)
SELECT handler, lane, 1, max(position), '{}', '{}', '{}' FROM relaybus.deliveries
 WHERE handler = 'bp_parked' GROUP BY handler, lane;
SQL
      ;;
  esac
  psql -d $db <<SQL
SELECT count(*) FROM relaybus.publish_batch((SELECT jsonb_agg(jsonb_build_object(
         'type', 'bp.deletable', 'id', 'D' || g)) FROM generate_series(1, $deletable) g));
SQL
  psql -d $db <<SQL
DO \$\$
DECLARE n int;
BEGIN
  LOOP
    SELECT relaybus.complete_many(ARRAY(SELECT c.lease_token
             FROM relaybus.claim('bp-worker', 500, '5 minutes', ARRAY['bp_done']) c)) INTO n;
    EXIT WHEN n = 0;
  END LOOP;
END
\$\$;
SELECT relaybus.relinquish('bp-worker');
UPDATE relaybus.events SET published_at = now() - interval '30 days' WHERE type = 'bp.deletable';
UPDATE relaybus.deliveries SET created_at = now() - interval '30 days' WHERE handler = 'bp_done';
SQL
  psql -d $db -c "VACUUM ANALYZE"
}

timed() {  # timed LABEL: CALLS rolled-back calls in one session: ms, buffers, what it returned
  local i
  for ((i = 1; i <= calls; i++)); do
    echo "BEGIN; EXPLAIN (ANALYZE, BUFFERS) SELECT relaybus.purge_expired(); ROLLBACK;"
    echo "BEGIN; SELECT relaybus.purge_expired(); ROLLBACK;"
  done | psql -d $db -At | awk -v label="$1" '
    /Execution Time/ { ms = $3 }
    /Buffers:/ && !buffers { sub(/^ *Buffers: /, ""); buffers = $0 }
    /^[0-9]+$/ { printf "%-8s %10.1f ms  returned %s  buffers %s\n", label, ms, $0, buffers; buffers = "" }'
}

for scenario in ${scenarios//,/ }; do
  echo "== $scenario: $backlog old events that stay, $deletable to delete"
  setup $scenario >/dev/null
  timed deletes
  while [ "$(psql -d $db -Atc 'SELECT relaybus.purge_expired()')" != 0 ]; do :; done
  psql -d $db -c "VACUUM ANALYZE"
  timed idle
  psql -d $db -Atc "SELECT 'left: ' || (SELECT count(*) FROM relaybus.events) || ' events, '
                      || (SELECT count(*) FROM relaybus.deliveries) || ' delivery rows'"
done
psql -d postgres -c "DROP DATABASE IF EXISTS $db"
