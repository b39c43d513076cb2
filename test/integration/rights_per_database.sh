#!/usr/bin/env bash
# Rights per database (issue 32, finding 1), against the running test cluster
# ($PGHOST/$PGPORT): two databases with relaybus, and in the first a role for each right.
# From the second database every one of them tries every function of schema relaybus and
# every privilege on every table: each is refused with 42501, and the second database's
# events, deliveries and subscriptions are as they were. The same roles can do their jobs
# in the first database, so the refusals are not a role that can do nothing anywhere.
#
# RELAYBUS_RIGHTS_VERSION=0.2.0 runs the same attack against 0.2.0 (rights through its
# cluster-wide roles), where it succeeds: the checks fail there, as they did before 0.2.1.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PGDATABASE=postgres
. test/integration/lib/checks.bash
version=${RELAYBUS_RIGHTS_VERSION:-}
qd() { local db=$1; shift; psql -qXAt -v ON_ERROR_STOP=1 -d "$db" -c "$*"; }
roles=(rbtest_tenant_a_publisher rbtest_tenant_a_worker rbtest_tenant_a_admin)

cleanup() {
  for db in rbtest_tenant_a rbtest_tenant_b; do q "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1; done
  for r in "${roles[@]}"; do q "DROP ROLE IF EXISTS $r" >/dev/null 2>&1; done
}
cleanup
trap cleanup EXIT
for db in rbtest_tenant_a rbtest_tenant_b; do
  q "CREATE DATABASE $db" >/dev/null
  qd $db "CREATE EXTENSION relaybus ${version:+VERSION '$version'}" >/dev/null
done
for r in "${roles[@]}"; do
  q "CREATE ROLE $r LOGIN" >/dev/null
  right=${r##*_}
  if [ -n "$version" ]; then
    q "GRANT relaybus_$right TO $r" >/dev/null
  else
    qd rbtest_tenant_a "SELECT relaybus.grant_rights('$r', '$right')" >/dev/null
  fi
done

# Tenant B's bus: a subscription, a keyed event with a payload worth stealing, one pending
# and one dead delivery. Deliveries are read through list_deliveries (unfinished ones, with
# status and attempts): on 0.3.0 relaybus.deliveries has neither column, a delivery's fate
# is in its lane's progress and its exception row.
# One statement per transaction (a script, not one -c string, which runs as one transaction):
# on 0.3.0 a delivery exists from its publish's commit, so a claim in the publishing
# transaction would find nothing.
psql -qXAt -v ON_ERROR_STOP=1 -d rbtest_tenant_b >/dev/null <<'SQL'
SELECT relaybus.subscribe('payroll', ARRAY['salary'], max_attempts => 1);
SELECT relaybus.publish('salary', '{"amount": 98000, "employee": "B-17"}', key => 'B-17', event_id => 'b-1');
SELECT relaybus.publish('salary', '{"amount": 51000, "employee": "B-18"}', key => 'B-18', event_id => 'b-2');
CREATE TEMP TABLE c AS SELECT * FROM relaybus.claim('b-worker', 10, handlers => ARRAY['payroll']);
SELECT relaybus.bury(lease_token, 'dead') FROM c WHERE event_id = 'b-2';
SELECT relaybus.release(lease_token) FROM c WHERE event_id = 'b-1';
SQL
state_of_b() {
  qd rbtest_tenant_b "SELECT (SELECT string_agg(id || ':' || payload::text, ',' ORDER BY id) FROM relaybus.events)
    || ' | ' || (SELECT string_agg(event_id || '/' || handler || '/' || status || '/' || attempts, ',' ORDER BY event_id)
                   FROM relaybus.list_deliveries(NULL, NULL, 1000))
    || ' | ' || (SELECT string_agg(handler || '/' || array_to_string(event_types, '+'), ',') FROM relaybus.subscriptions)
    || ' | ' || (SELECT count(*) FROM relaybus.lanes WHERE lease_owner IS NOT NULL)"
}
before=$(state_of_b)
case "$before" in
  *" | b-1/payroll/pending/0,b-2/payroll/dead/1 | payroll/salary | "*) ok "setup: database B has a pending and a dead delivery" ;;
  *) not_ok "setup: database B has a pending and a dead delivery: [$before]" ;;
esac

# Run as ROLE in tenant B: every function of schema relaybus (called with NULLs of its
# argument types) and SELECT, INSERT, UPDATE, DELETE, TRUNCATE on every table. Prints what
# was not refused with 42501, one per line, and a last line: the count of attempts.
attack() {
  PGUSER=$1 psql -qXAt -v ON_ERROR_STOP=1 -d rbtest_tenant_b <<'SQL'
DO $attack$
DECLARE
  f record;
  t record;
  stmt text;
  tries int := 0;
BEGIN
  FOR f IN SELECT p.oid::regprocedure AS sig, p.proname, p.proretset,
                  (SELECT string_agg('NULL::' || format_type(a, NULL), ', ')
                     FROM unnest(p.proargtypes::oid[]) a) AS args
             FROM pg_proc p WHERE p.pronamespace = 'relaybus'::regnamespace LOOP
    stmt := format('SELECT relaybus.%I(%s)', f.proname, coalesce(f.args, ''));
    tries := tries + 1;
    BEGIN
      EXECUTE stmt;
      RAISE NOTICE 'allowed: %', f.sig;
    EXCEPTION WHEN insufficient_privilege THEN NULL;
      WHEN OTHERS THEN RAISE NOTICE 'not refused with 42501: % (%: %)', f.sig, SQLSTATE, SQLERRM;
    END;
  END LOOP;
  FOR t IN SELECT c.relname, (SELECT a.attname FROM pg_attribute a
                                WHERE a.attrelid = c.oid AND a.attnum = 1) AS first_column
             FROM pg_class c
            WHERE c.relnamespace = 'relaybus'::regnamespace AND c.relkind IN ('r', 'v', 'p') LOOP
    FOREACH stmt IN ARRAY ARRAY[format('SELECT * FROM relaybus.%I', t.relname),
                                format('INSERT INTO relaybus.%I DEFAULT VALUES', t.relname),
                                format('UPDATE relaybus.%I SET %I = %I WHERE false', t.relname, t.first_column,
                                       t.first_column),
                                format('DELETE FROM relaybus.%I', t.relname),
                                format('TRUNCATE relaybus.%I', t.relname)] LOOP
      tries := tries + 1;
      BEGIN
        EXECUTE stmt;
        RAISE NOTICE 'allowed: %', stmt;
      EXCEPTION WHEN insufficient_privilege THEN NULL;
        WHEN OTHERS THEN RAISE NOTICE 'not refused with 42501: % (%: %)', stmt, SQLSTATE, SQLERRM;
      END;
    END LOOP;
  END LOOP;
  RAISE NOTICE 'tries: %', tries;
END
$attack$;
SQL
}

functions=$(qd rbtest_tenant_b "SELECT count(*) FROM pg_proc WHERE pronamespace = 'relaybus'::regnamespace")
tables=$(qd rbtest_tenant_b "SELECT count(*) FROM pg_class WHERE relnamespace = 'relaybus'::regnamespace AND relkind IN ('r', 'v', 'p')")
for r in "${roles[@]}"; do
  out=$(attack "$r" 2>&1)
  leaks=$(grep -c -e 'allowed:' -e 'not refused' <<<"$out" || true)
  tries=$(sed -n 's/.*tries: \([0-9]*\).*/\1/p' <<<"$out")
  if [ "$leaks" = 0 ] && [ "$tries" = $((functions + 5 * tables)) ]; then
    ok "$r (a right in database A) from database B: all $functions functions and 5 privileges on each of $tables tables refused with 42501"
  else
    not_ok "$r from database B: $leaks of $tries calls not refused with 42501"
    grep -e 'allowed:' -e 'not refused' <<<"$out" | head -5 | sed 's/^/#   /'
  fi
done
after=$(state_of_b)
if [ "$before" = "$after" ]; then ok "database B's events, deliveries, subscriptions and lanes are unchanged"
else not_ok "database B changed: before [$before] after [$after]"; fi

# The same roles in database A, where they hold their rights.
if [ "$(PGUSER=rbtest_tenant_a_admin psql -qXAt -d rbtest_tenant_a -c "SELECT relaybus.subscribe('h', ARRAY['t']); SELECT count(*) FROM relaybus.statistics()" 2>&1 | tail -1)" = 1 ] \
   && [ -n "$(PGUSER=rbtest_tenant_a_publisher psql -qXAt -d rbtest_tenant_a -c "SELECT relaybus.publish('t', '{}')" 2>&1)" ] \
   && [ "$(PGUSER=rbtest_tenant_a_worker psql -qXAt -d rbtest_tenant_a -c "SELECT count(*) FROM relaybus.claim('w', 10)" 2>&1)" = 1 ]; then
  ok "in database A the admin subscribes, the publisher publishes and the worker claims"
else
  not_ok "the roles cannot do their jobs in database A"
fi
# A role may hold rights in several databases, each given there.
if [ -z "$version" ]; then
  qd rbtest_tenant_b "SELECT relaybus.grant_rights('rbtest_tenant_a_worker', 'worker')" >/dev/null
  if [ "$(PGUSER=rbtest_tenant_a_worker psql -qXAt -d rbtest_tenant_b -c "SELECT count(*) >= 0 FROM relaybus.claim('w', 1)" 2>&1)" = t ] \
     && [ "$(qd rbtest_tenant_a "SELECT rights FROM relaybus.rights() WHERE role = 'rbtest_tenant_a_worker'")" = "{worker}" ]; then
    ok "given in B as well, the worker claims in B, and A's rights() still lists it once"
  else
    not_ok "a right given in B as well"
  fi
  qd rbtest_tenant_b "SELECT relaybus.revoke_rights('rbtest_tenant_a_worker', 'worker')" >/dev/null
fi
for db in rbtest_tenant_a rbtest_tenant_b; do
  for r in "${roles[@]}"; do qd $db "DROP OWNED BY $r" >/dev/null; done
done

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
