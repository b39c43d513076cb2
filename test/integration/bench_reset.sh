#!/usr/bin/env bash
# The harness empties relaybus between runs while the background workers may be working.
# A plain TRUNCATE of the tables locks them in the order it lists them, and was seen to
# deadlock with the maintenance worker (issue 12). Here a session plays the worker's
# takeover (lanes locked, then the table that charges attempts written: deliveries on 0.2,
# exceptions on 0.3.0, where deliveries are never updated) while the tables are emptied:
#   - the old TRUNCATE (that table listed before lanes) deadlocks with it: the hazard is real;
#   - the harness's empty_relaybus (every lock first, in relaybus's own order) waits for it,
#     and both finish.
set -euo pipefail
cd "$(dirname "$0")/../.."
db=relaybus_it_reset
psql() { command psql -qX -v ON_ERROR_STOP=1 "$@"; }
psql -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
psql -d $db -c "CREATE EXTENSION relaybus" -c "SELECT relaybus.subscribe('h', ARRAY['t'])" >/dev/null

# The table a takeover charges attempts in: 0.2's delivery rows; 0.3.0's exception rows
# (a failed attempt's row, seeded here, so that the write has a row to update).
if [ "$(psql -d $db -At -c "SELECT extversion FROM pg_extension WHERE extname = 'relaybus'")" \
     \< 0.3 ]; then
  charged=relaybus.deliveries
  seed() { psql -d $db -c "SELECT relaybus.publish('t', '{}')" >/dev/null; }
else
  charged=relaybus.exceptions
  seed() {
    psql -d $db -c "SELECT relaybus.publish('t', '{}')" \
      -c "SELECT relaybus.fail(lease_token, 'seed') FROM relaybus.claim('seeder', 1)" >/dev/null
  }
fi
# The worker's order: a lane row locked, a moment later a delivery charged, then commit.
worker() {
  psql -d $db >"$1" 2>&1 <<SQL || true
BEGIN;
SELECT 1 FROM relaybus.lanes WHERE handler = 'h' ORDER BY lane LIMIT 1 FOR UPDATE;
SELECT pg_sleep(1.5);
UPDATE $charged SET updated_at = now();
COMMIT;
SQL
}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failed=0

seed
worker "$out/worker-old" & pid=$!
sleep 0.5
if psql -d $db -c "TRUNCATE $charged, relaybus.lanes" 2>"$out/old"; then :; fi
wait $pid
if grep -q "deadlock detected" "$out/old" "$out/worker-old"; then
  echo "ok - a TRUNCATE listing $charged before lanes deadlocks with a takeover"
else
  echo "not ok - the old TRUNCATE did not deadlock: this test no longer shows the hazard"
  cat "$out/old" "$out/worker-old"
  failed=1
fi

psql -d $db -c "SELECT relaybus.subscribe('h', ARRAY['t'])" >/dev/null  # lanes again
seed
worker "$out/worker-new" & pid=$!
sleep 0.5
PGDB=$db /usr/bin/python3 - <<'PY' >"$out/new" 2>&1 || true
import os, subprocess, sys
sys.path.insert(0, "bench")
import harness
class Local:
    """The harness's Cluster, on the running test cluster (PGHOST, PGPORT)."""
    def sql(self, db, text):
        r = subprocess.run(["psql", "-qXAt", "-v", "ON_ERROR_STOP=1", "-F", "\t", "-d", db, "-c", text],
                           check=True, capture_output=True, text=True)
        return [line.split("\t") for line in r.stdout.splitlines() if line != ""]
harness.empty_relaybus(Local(), os.environ["PGDB"])
print("emptied")
PY
wait $pid
left=$(psql -d $db -At -c "SELECT (SELECT count(*) FROM relaybus.deliveries) + (SELECT count(*) FROM $charged)")
if grep -q "^emptied" "$out/new" && ! grep -q "ERROR" "$out/worker-new" && [ "$left" = 0 ]; then
  echo "ok - empty_relaybus waits for the takeover, and both finish"
else
  echo "not ok - empty_relaybus: $(cat "$out/new") / worker: $(cat "$out/worker-new") / left $left"
  failed=1
fi
psql -d postgres -c "DROP DATABASE $db" >/dev/null
exit $failed
