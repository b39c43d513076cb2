#!/usr/bin/env bash
# DROP EXTENSION relaybus with deliveries left warns with their counts and still drops; an
# empty relaybus drops silently; a drop that is rolled back keeps everything; a role that
# may not drop the extension learns nothing of the counts. Needs relaybus preloaded (the
# suite's cluster), which is when the warning is guaranteed.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/integration/lib/checks.bash
db=relaybus_it_drop
export PGDATABASE=$db
out=$(mktemp)
cleanup() {
  rm -f "$out"
  command psql -qX -d postgres -c "DROP DATABASE IF EXISTS $db" 2>/dev/null
  command psql -qX -d postgres -c "DROP ROLE IF EXISTS relaybus_it_dropper" 2>/dev/null
}
cleanup
trap cleanup EXIT
psql -qX -d postgres -c "CREATE DATABASE $db" -c "CREATE ROLE relaybus_it_dropper LOGIN"
setup() {
  psql -qX -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE EXTENSION relaybus;
SELECT relaybus.subscribe('h', ARRAY['t'], max_attempts => 1);
SELECT relaybus.publish('t', '{}', key => 'a');
SELECT relaybus.publish('t', '{}', key => 'b');
SELECT relaybus.publish('t', '{}', key => 'c');
SELECT relaybus.fail(lease_token, 'boom') FROM relaybus.claim('w', 1, handlers => ARRAY['h']);
SQL
}
installed() { q "SELECT count(*) FROM pg_extension WHERE extname = 'relaybus'"; }

setup
psql -qX -c "BEGIN" -c "DROP EXTENSION relaybus" -c "ROLLBACK" >"$out" 2>&1
grep -q "WARNING:  relaybus: dropping the extension deletes 2 pending and 1 dead deliveries" "$out" \
  && ok "a drop in a transaction warns with the counts" || { not_ok "no warning with the counts"; cat "$out"; }
[ "$(installed)" = 1 ] && [ "$(q "SELECT count(*) FROM relaybus.deliveries")" = 3 ] \
  && ok "... and its rollback keeps the extension and the deliveries" || not_ok "the rollback lost something"

psql -qX -c "SET ROLE relaybus_it_dropper" -c "DROP EXTENSION relaybus" >"$out" 2>&1 || true
if grep -q "must be owner" "$out" && ! grep -q "WARNING" "$out"; then
  ok "a role that may not drop it gets the owner error and no counts"
else not_ok "a non-owner's drop: $(cat "$out")"; fi

psql -qX -c "DROP EXTENSION relaybus" >"$out" 2>&1
grep -q "2 pending and 1 dead deliveries" "$out" && [ "$(installed)" = 0 ] \
  && ok "the drop warns and still drops" || { not_ok "drop: $(cat "$out")"; }

psql -qX -v ON_ERROR_STOP=1 -c "CREATE EXTENSION relaybus" >/dev/null
psql -qX -c "DROP EXTENSION relaybus" >"$out" 2>&1
[ ! -s "$out" ] && [ "$(installed)" = 0 ] && ok "an empty relaybus drops without a warning" \
  || not_ok "empty drop printed: $(cat "$out")"
psql -qX -c "DROP EXTENSION IF EXISTS relaybus" >"$out" 2>&1
grep -q "WARNING" "$out" && not_ok "IF EXISTS on a dropped extension warned" \
  || ok "DROP EXTENSION IF EXISTS without relaybus only has PostgreSQL's notice"

echo "drop warning: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
