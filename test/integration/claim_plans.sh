#!/usr/bin/env bash
# The shape of the claim's plans where it matters for cost, read from auto_explain (sent to
# this client as NOTICEs): a claim by a worker that already has deliveries in flight in
# its lanes leaves them out through a hashed subplan, one probe per delivery read, and not
# through a nested loop over every in-flight delivery for every delivery read (quadratic:
# 51 ms instead of 3.6 ms for a claim of 500 with 500 in flight). The results themselves
# are pgTAP's (05, 22); this only looks at how they are computed. Needs the suite's cluster.
# The plan is 0.2's claim query (lanes listing in-flight event ids), so the database is at
# 0.2.1 (still installable), not the default version: 0.3.0's claim reads the positions
# above each lane's cursor and leaves its in-flight positions out in C++.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/integration/lib/checks.bash
db=relaybus_it_plans
export PGDATABASE=$db
out=$(mktemp)
cleanup() {
  rm -f "$out"
  command psql -qX -d postgres -c "DROP DATABASE IF EXISTS $db" 2>/dev/null
}
cleanup
trap cleanup EXIT
psql -qX -d postgres -c "CREATE DATABASE $db"
psql -qX -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE EXTENSION relaybus VERSION '0.2.1';
SELECT relaybus.subscribe('h', ARRAY['t']);
-- 2,000 deliveries over 256 lanes, half keyed with two events per key.
SELECT count(*) FROM relaybus.publish_batch((
  SELECT jsonb_agg(jsonb_build_object('type', 't', 'id', 'e-' || i,
                   'key', CASE WHEN i % 2 = 0 THEN 'k' || (i % 500) END) ORDER BY i)
    FROM generate_series(1, 2000) i));
VACUUM ANALYZE relaybus.deliveries;
SQL

# One session: claim 300 (left in flight), then claim again with the plans shown.
psql -qX -v ON_ERROR_STOP=1 >/dev/null 2>"$out" <<'SQL'
SELECT count(*) FROM relaybus.claim('w', 300);
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_level = notice;
SELECT count(*) FROM relaybus.claim('w', 300);
SQL
# The candidates statement is the one that reads the events with the deliveries.
plan=$(awk '/Query Text: SELECT c.lane_index/ {on = 1} on && /^(psql:|NOTICE:)/ && !/Query Text: SELECT c.lane_index/ {on = 0} on' "$out")
if [ -n "$plan" ]; then ok "auto_explain showed the claim's candidate query"; else not_ok "auto_explain showed the claim's candidate query"; fi
case "$plan" in
  *"NOT (hashed SubPlan"*) ok "the in-flight deliveries are left out through a hashed subplan" ;;
  *) not_ok "the in-flight deliveries are left out through a hashed subplan" ;;
esac
case "$plan" in
  *"Anti Join"*) not_ok "no anti join over the in-flight list per delivery read" ;;
  *) ok "no anti join over the in-flight list per delivery read" ;;
esac

echo "claim plans: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
