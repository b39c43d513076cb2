# Sourced by the integration scripts that poll a cluster with psql (not a test itself:
# scripts/run-tests runs test/integration/*.sh only). Needs PGHOST/PGPORT/PGUSER/PGDATABASE.
#   q SQL                        one statement, tuples only, stops on error
#   ok / not_ok DESCRIPTION      count and print a TAP-like line
#   check DESCRIPTION SQL        ok when SQL returns t
#   wait_for DESCRIPTION SQL S   polls until SQL returns t, for at most S seconds
q() { psql -qXAt -v ON_ERROR_STOP=1 -c "$1"; }
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok - $1"; }
not_ok() { failed=$((failed + 1)); echo "not ok - $1"; }
check() { if [ "$(q "$2")" = t ]; then ok "$1"; else not_ok "$1"; fi; }
wait_for() {
  local deadline=$(($(date +%s%N) + ${3%.*} * 1000000000))
  while [ "$(date +%s%N)" -lt $deadline ]; do
    if [ "$(q "$2")" = t ]; then ok "$1"; return; fi
    sleep 0.05
  done
  not_ok "$1 (not within $3 s)"
}
