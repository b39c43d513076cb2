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

# The count runs as the role dropping, a superuser: a role that may create in a schema on
# that superuser's search_path, ahead of pg_catalog, must not get its own count(*) or <>
# run by it. The count names pg_catalog's.
psql -qX -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE EXTENSION relaybus;
SELECT relaybus.subscribe('h', ARRAY['t']);
SELECT relaybus.publish('t', '{}');
CREATE TABLE public.ran_as (who text);
GRANT INSERT ON public.ran_as TO relaybus_it_dropper;
GRANT CREATE ON SCHEMA public TO relaybus_it_dropper;
SET ROLE relaybus_it_dropper;
CREATE FUNCTION public.planted_step(bigint) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.ran_as VALUES (current_user); RETURN $1 + 1; END $$;
CREATE AGGREGATE public.count(*) (sfunc = public.planted_step, stype = bigint, initcond = '0');
CREATE FUNCTION public.planted_ne(text, text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.ran_as VALUES (current_user); RETURN $1 OPERATOR(pg_catalog.<>) $2; END $$;
CREATE OPERATOR public.<> (leftarg = text, rightarg = text, function = public.planted_ne);
RESET ROLE;
SQL
psql -qX -c "SET search_path = public, pg_catalog" -c "DROP EXTENSION relaybus" >"$out" 2>&1
grep -q "1 pending and 0 dead deliveries" "$out" && [ "$(installed)" = 0 ] \
  && ok "with a planted count(*) and <> ahead of pg_catalog: the real counts, and dropped" \
  || not_ok "planted functions: $(cat "$out")"
[ "$(q "SELECT count(*) FROM public.ran_as")" = 0 ] \
  && ok "... and the superuser ran none of the planted code" \
  || not_ok "the superuser ran planted code as: $(q "SELECT string_agg(DISTINCT who, ', ') FROM public.ran_as")"
psql -qX -c "DROP OPERATOR public.<> (text, text)" -c "DROP AGGREGATE public.count(*)" \
  -c "REVOKE CREATE ON SCHEMA public FROM relaybus_it_dropper" >/dev/null
psql -qX -c "DROP OWNED BY relaybus_it_dropper" >/dev/null

echo "drop warning: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
