#!/usr/bin/env bash
# The C++ worker runtime as a user gets it: installed by `make client-install` into a
# prefix of its own, found through pkg-config, every public header compiling on its own,
# and the example program (examples/cpp) built from a copy outside the repository, then
# run against the suite's cluster:
#   - it handles its six deliveries (a plain and a transactional handler) and exits 0;
#   - a failed transactional attempt is retried, and its row is written exactly once;
#   - SIGTERM stops it gracefully: exit 0, and the worker's lanes relinquished.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
source test/integration/lib/checks.bash
export PGDATABASE=relaybus_it_cpp
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT; [ -n "${KEEP_TMP:-}" ] && trap "echo kept $tmp" EXIT

make -s client-install PREFIX="$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH=$tmp/prefix/lib/pkgconfig LD_LIBRARY_PATH=$tmp/prefix/lib
version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" relaybus.control)
if [ "$(pkg-config --modversion relaybus-client)" = "$version" ]; then
  ok "pkg-config finds relaybus-client $version"
else
  not_ok "pkg-config relaybus-client: '$(pkg-config --modversion relaybus-client 2>&1)'"
fi

# Every installed header on its own, with nothing but the package's flags: no include may
# lean on the repository's -Isrc.
bad=()
cd "$tmp/prefix/include"
for h in relaybus/*/*.hpp; do
  echo "#include <$h>" | g++ -std=c++17 -fsyntax-only -x c++ - $(pkg-config --cflags relaybus-client) \
    2>"$tmp/header.err" || bad+=("$h")
done
cd "$repo"
if [ ${#bad[@]} -eq 0 ]; then ok "each installed header compiles alone"; else not_ok "headers: ${bad[*]}"; fi

cp -r examples/cpp "$tmp/example"
if make -s -C "$tmp/example" >"$tmp/build.log" 2>&1; then ok "the example builds against the installed library"
else not_ok "the example does not build"; cat "$tmp/build.log"; exit 1; fi

psql -qX -d postgres -c "DROP DATABASE IF EXISTS $PGDATABASE" -c "CREATE DATABASE $PGDATABASE" 2>/dev/null
psql -qX -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE EXTENSION relaybus;
CREATE TABLE ledger_entries (event_id text PRIMARY KEY, payload jsonb NOT NULL);
-- The first insert for order 2 fails (a sequence does not roll back with the attempt).
CREATE SEQUENCE reject_once;
CREATE FUNCTION reject_first_order_2() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (NEW.payload ->> 'order_id') = '2' AND nextval('reject_once') = 1 THEN
    RAISE EXCEPTION 'ledger is closed for order 2';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER reject_first_order_2 BEFORE INSERT ON ledger_entries
  FOR EACH ROW EXECUTE FUNCTION reject_first_order_2();
SELECT relaybus.subscribe('mailer', ARRAY['order.placed']);
SELECT relaybus.subscribe('ledger', ARRAY['order.placed'], backoff_base => '100 milliseconds');
SQL

if timeout 60 "$tmp/example/order_mailer" >"$tmp/run1.out" 2>"$tmp/run1.err"; then
  ok "the example exits 0 after handling its deliveries"
else
  not_ok "the example failed (exit $?)"; cat "$tmp/run1.out" "$tmp/run1.err"
fi
if grep -q "^done: 6 handled, 1 failed, 0 released$" "$tmp/run1.out"; then
  ok "six handled, one failed attempt"
else not_ok "counters: $(tail -1 "$tmp/run1.out")"; fi
grep -q "ledger is closed for order 2" "$tmp/run1.err" && ok "the failure's text is logged" \
  || not_ok "the failed attempt is not logged"
check "each order has one ledger row" \
  "SELECT count(*) = 3 AND count(DISTINCT payload) = 3 FROM ledger_entries"
check "no delivery is left" "SELECT count(*) = 0 FROM relaybus.list_deliveries()"
check "the worker's lanes are relinquished" \
  "SELECT count(*) = 0 FROM relaybus.lanes WHERE lease_owner LIKE 'order-mailer%'"

# Graceful stop: the ledger now takes three seconds to refuse each entry and retries only
# after an hour. SIGTERM comes while its handlers run: stop() lets them end within the
# grace, sends their failures, and relinquishes. The mailer handles its three deliveries;
# the ledger fails two (order 3 shares order 1's key and waits behind it).
psql -qX -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE OR REPLACE FUNCTION reject_first_order_2() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(3); RAISE EXCEPTION 'ledger is closed'; END $$;
SELECT relaybus.subscribe('ledger', ARRAY['order.placed'], backoff_base => '1 hour');
SQL
"$tmp/example/order_mailer" >"$tmp/run2.out" 2>"$tmp/run2.err" & pid=$!
# The signal comes once the mailer is done (its deliveries may take more than one claim)
# and while both ledger handlers run.
wait_for "the mailer is done and the worker holds the ledger's lanes while its handlers run" \
  "SELECT (SELECT count(*) = 2 FROM relaybus.lanes WHERE handler = 'ledger'
             AND lease_owner LIKE 'order-mailer%')
     AND (SELECT count(*) = 2 FROM relaybus.list_deliveries('processing', 'ledger')
           WHERE lease_owner LIKE 'order-mailer%')
     AND NOT EXISTS (SELECT 1 FROM relaybus.list_deliveries(NULL, 'mailer'))" 10
kill -TERM $pid
rc=0
timeout 30 tail --pid=$pid -f /dev/null || rc=$?
wait $pid || rc=$?
[ $rc -eq 0 ] && ok "SIGTERM: the example stops and exits 0" || not_ok "SIGTERM: exit $rc"
grep -q "^done: 3 handled, 2 failed, 0 released$" "$tmp/run2.out" && ok "SIGTERM: three handled, two failed" \
  || not_ok "SIGTERM counters: $(tail -1 "$tmp/run2.out")"
check "SIGTERM: the running handlers ended before the exit" \
  "SELECT count(*) = 3 AND sum(attempts) = 2 FROM relaybus.list_deliveries(NULL, 'ledger')
     WHERE NOT EXISTS (SELECT 1 FROM relaybus.list_deliveries(NULL, 'mailer'))"
check "SIGTERM: the worker's lanes are relinquished" \
  "SELECT count(*) = 0 FROM relaybus.lanes WHERE lease_owner LIKE 'order-mailer%'"
check "the ledger's failures keep their error text" \
  "SELECT bool_and(last_error LIKE '%ledger is closed%') FROM relaybus.list_deliveries(NULL, 'ledger')"

# Uninstalling removes this version only: programs linked to another version's soname
# keep loading theirs.
touch "$tmp/prefix/lib/librelaybus_client.so.0.1.0"
ln -s librelaybus_client.so.0.1.0 "$tmp/prefix/lib/librelaybus_client.so.0.1"
make -s client-uninstall PREFIX="$tmp/prefix" >/dev/null
left=$(cd "$tmp/prefix/lib" && ls librelaybus_client* 2>/dev/null | tr '\n' ' ')
[ "$left" = "librelaybus_client.so.0.1 librelaybus_client.so.0.1.0 " ] \
  && ok "client-uninstall removes this version and leaves another" || not_ok "after client-uninstall: $left"
[ ! -e "$tmp/prefix/include/relaybus/client" ] && ok "... and the runtime's headers" \
  || not_ok "client-uninstall left the headers"

psql -qX -d postgres -c "DROP DATABASE $PGDATABASE" >/dev/null
echo "# cpp_runtime: $passed passed, $failed failed"
[ $failed -eq 0 ]
