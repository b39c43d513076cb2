#!/usr/bin/env bash
# docs/cpp-runtime.md's worker example, taken from the page itself (the ```cpp block after
# the "cpp-runtime-example" marker), built against the runtime installed into a prefix of
# its own, and run on the suite's cluster, so the page cannot drift from the runtime:
#   - as a role with just the worker right, it handles a delivery, buries one whose payload
#     has no order_id (rb::Bury), shows in
#     pg_stat_activity as "relaybus-cpp mailer-...", and stops on SIGTERM with exit 0,
#     its lanes relinquished;
#   - it fails fast, exit 1, with what to run, and claims nothing: without the extension,
#     for a role without the worker right, for a handler that is not subscribed;
#   - application_name from PGAPPNAME wins over the runtime's.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/integration/lib/checks.bash
export PGDATABASE=relaybus_it_cppdoc
noext=relaybus_it_cppdoc_noext
role=relaybus_it_cppdoc_nobody
tmp=$(mktemp -d)
admin() { PGOPTIONS="-c client_min_messages=warning" psql -qXAt -v ON_ERROR_STOP=1 -d postgres -c "$1" >/dev/null; }
cleanup() {
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true
  admin "DROP DATABASE IF EXISTS $PGDATABASE" || true
  admin "DROP DATABASE IF EXISTS $noext" || true
  admin "DROP ROLE IF EXISTS $role" || true
  rm -rf "$tmp"
}
trap cleanup EXIT

make -s client-install PREFIX="$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH=$tmp/prefix/lib/pkgconfig LD_LIBRARY_PATH=$tmp/prefix/lib

awk '/<!-- cpp-runtime-example -->/ { marked = 1; next }
     marked && /^```cpp$/ { inside = 1; next }
     inside && /^```$/ { exit }
     inside { print }' docs/cpp-runtime.md >"$tmp/mailer.cpp"
if [ "$(grep -c 'int main' "$tmp/mailer.cpp")" = 1 ]; then ok "the example is taken from docs/cpp-runtime.md"
else not_ok "no example after the cpp-runtime-example marker in docs/cpp-runtime.md"; exit 1; fi
# shellcheck disable=SC2046 # pkg-config's flags are separate words
if g++ -std=c++17 -Wall -Wextra -Werror -o "$tmp/mailer" "$tmp/mailer.cpp" \
     $(pkg-config --cflags --libs relaybus-client) 2>"$tmp/build.log"; then
  ok "it compiles against the installed runtime, without a warning"
else not_ok "it does not compile"; cat "$tmp/build.log"; exit 1; fi

admin "DROP DATABASE IF EXISTS $PGDATABASE"
admin "DROP DATABASE IF EXISTS $noext"
admin "DROP ROLE IF EXISTS $role"
admin "CREATE DATABASE $PGDATABASE"
admin "CREATE DATABASE $noext"
admin "CREATE ROLE $role LOGIN"
q "CREATE EXTENSION relaybus" >/dev/null
q "SELECT relaybus.grant_rights('$role', 'publisher')" >/dev/null

# expect_refusal DESCRIPTION TEXT... (env before the program in "$@" after --): exit 1, every
# TEXT on stderr, and within the 10 s timeout (it does not wait for a signal).
expect_refusal() {
  local what=$1 texts=() rc=0
  shift
  while [ "$1" != -- ]; do texts+=("$1"); shift; done
  shift
  timeout 10 env "$@" "$tmp/mailer" >"$tmp/refused.out" 2>"$tmp/refused.err" || rc=$?
  if [ $rc != 1 ]; then not_ok "$what: exit $rc, expected 1 ($(cat "$tmp/refused.err"))"; return; fi
  for t in "${texts[@]}"; do
    grep -qF -- "$t" "$tmp/refused.err" || { not_ok "$what: no \"$t\" in: $(cat "$tmp/refused.err")"; return; }
  done
  if grep -q "^ERROR:\|CONTEXT:" "$tmp/refused.err"; then
    not_ok "$what: a raw server error: $(cat "$tmp/refused.err")"; return; fi
  ok "$what"
}

expect_refusal "no extension in the database: exit 1 and the CREATE EXTENSION to run" \
  "mailer: relaybus is not installed in database \"$noext\"" "CREATE EXTENSION relaybus" \
  -- PGDATABASE=$noext
expect_refusal "a handler that is not subscribed: exit 1 and the subscribe to run" \
  "handler \"mailer\" is not subscribed in database \"$PGDATABASE\"" \
  "SELECT relaybus.subscribe('mailer', ARRAY['<event type>'])" --
q "SELECT relaybus.subscribe('mailer', ARRAY['order.placed'])" >/dev/null
expect_refusal "a role without the worker right: exit 1 and the grant_rights to run" \
  "role \"$role\" may not use relaybus.claim" \
  "SELECT relaybus.grant_rights('$role', 'worker')" -- PGUSER=$role
# (Nothing was published yet, so this says only that no lane is left held. That start()'s
# own claim is rolled back shows below: the run finds both deliveries unclaimed, "bad" with
# one attempt charged, its own.)
check "the refused starts hold no lane" \
  "SELECT NOT EXISTS (SELECT 1 FROM relaybus.lanes WHERE lease_owner IS NOT NULL)"

# From here it runs as that role with the worker right and nothing more (the publisher right
# it has gives nothing a worker uses): what start() checks must not ask for more than that.
q "SELECT relaybus.grant_rights('$role', 'worker')" >/dev/null
q "SELECT relaybus.publish('order.placed', '{\"order_id\": 7}', event_id => 'good')" >/dev/null
q "SELECT relaybus.publish('order.placed', '{\"note\": \"no id\"}', event_id => 'bad')" >/dev/null
PGUSER=$role "$tmp/mailer" >"$tmp/run.out" 2>"$tmp/run.err" & pid=$!
wait_for "as a role with the worker right: it handles the good delivery and buries the bad one" \
  "SELECT NOT EXISTS (SELECT 1 FROM relaybus.list_deliveries(NULL, 'mailer') WHERE event_id = 'good')
     AND EXISTS (SELECT 1 FROM relaybus.list_deliveries(NULL, 'mailer') WHERE event_id = 'bad' AND status = 'dead'
                   AND attempts = 1 AND last_error = 'no order_id in {\"note\": \"no id\"}')" 10
check "its connections show as relaybus-cpp mailer-... in pg_stat_activity" \
  "SELECT count(*) >= 2 AND bool_and(application_name ~ '^relaybus-cpp mailer-[0-9a-f]{12}$')
     FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
      AND backend_type = 'client backend'"
kill -TERM $pid
rc=0
wait $pid || rc=$?
pid=
[ $rc = 0 ] && ok "SIGTERM: it stops and exits 0" || not_ok "SIGTERM: exit $rc ($(cat "$tmp/run.err"))"
grep -q '^mail for order 7$' "$tmp/run.out" && ok "the handler read order_id through rb::payload" \
  || not_ok "stdout: $(cat "$tmp/run.out")"
grep -q "handler mailer failed on event bad, attempts=0, and buried it: no order_id" "$tmp/run.err" \
  && ok "the burial is logged" || not_ok "stderr: $(cat "$tmp/run.err")"
check "SIGTERM: its lanes are relinquished" \
  "SELECT NOT EXISTS (SELECT 1 FROM relaybus.lanes WHERE lease_owner LIKE 'mailer-%')"

PGAPPNAME=billing-mailer "$tmp/mailer" >/dev/null 2>&1 & pid=$!
wait_for "PGAPPNAME names its connections instead" \
  "SELECT count(*) >= 1 FROM pg_stat_activity WHERE application_name = 'billing-mailer'" 10
kill -TERM $pid
wait $pid || true
pid=

echo "# cpp_runtime_doc: $passed passed, $failed failed"
[ $failed -eq 0 ]
