#!/usr/bin/env bash
# The background workers keep their identity whatever the database's settings say (issue
# 32, finding 5), on a throwaway cluster of its own. The workers connect as the bootstrap
# superuser and PostgreSQL then applies the settings of the database and of that role in
# it: a database owner who is not a superuser can ALTER DATABASE ... SET role (or SET
# session_authorization) to itself, and the workers' own statements would run as the owner,
# their claims and takeovers would fail, and they would restart every second for good. For
# each such setting, with the workers started afresh under it: an in-database handler runs
# events to completion and the maintenance worker takes an expired lane over.
set -euo pipefail
cd "$(dirname "$0")/../.."

port=$(( ${PGPORT:-54329} + 9 ))
dir=/tmp/relaybus-worker-identity-$port
db=rb_owned
export RELAYBUS_CLUSTER_SETTINGS="relaybus.maintenance_interval = '100ms'
relaybus.sql_handler_poll_interval = '100ms'
relaybus.sql_handler_workers = 2"
scripts/cluster start "$dir" "$port"
trap '[ -n "${KEEP_CLUSTER:-}" ] || scripts/cluster stop "$dir"' EXIT
# The test's own sessions keep their role whatever the database says.
export PGHOST=$dir PGPORT=$port PGUSER=postgres PGDATABASE=$db PGOPTIONS="-c role=none -c client_min_messages=warning"

. test/integration/lib/checks.bash
# as_owner SQL: SQL as dana, the database's owner, who is not a superuser.
as_owner() { PGUSER=dana PGOPTIONS= q "$1"; }

PGDATABASE=postgres q "CREATE ROLE dana LOGIN" >/dev/null
PGDATABASE=postgres q "CREATE DATABASE $db OWNER dana" >/dev/null
q "CREATE EXTENSION relaybus;
   CREATE TABLE public.handled (event_id text PRIMARY KEY, at timestamptz DEFAULT clock_timestamp());
   ALTER TABLE public.handled OWNER TO dana;
   CREATE FUNCTION public.record(e jsonb) RETURNS void LANGUAGE sql
     AS \$\$INSERT INTO public.handled (event_id) VALUES (e->>'id')\$\$;
   ALTER FUNCTION public.record(jsonb) OWNER TO dana;
   SELECT relaybus.subscribe('recorder', ARRAY['rec.t'], sql_function => 'public.record(jsonb)')" >/dev/null
q "ALTER SYSTEM SET relaybus.database = '$db'" >/dev/null
check "dana, the database's owner, is not a superuser" \
  "SELECT NOT rolsuper FROM pg_roles WHERE rolname = 'dana'"

pids() {
  q "SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
      WHERE datname = '$db' AND backend_type LIKE 'relaybus%'"
}

# works LABEL: with the workers started afresh, 20 events reach the in-database handler and
# complete, an expired lane (of a handler of its own) is taken over, and no worker had to
# restart meanwhile.
round=0
works() {
  local label=$1 before
  round=$((round + 1))
  q "SELECT relaybus.subscribe('external-$round', ARRAY['ext-$round.t'])" >/dev/null
  scripts/cluster restart "$dir"
  wait_for "$label: 1 maintenance and 2 sql handler workers run" \
    "SELECT count(*) FILTER (WHERE backend_type = 'relaybus maintenance') = 1
        AND count(*) FILTER (WHERE backend_type = 'relaybus sql handler') = 2
       FROM pg_stat_activity WHERE datname = '$db'" 10
  before=$(pids)
  q "SELECT count(relaybus.publish('rec.t', '{}', event_id => '$label-' || i))
       FROM generate_series(1, 20) i" >/dev/null
  wait_for "$label: an in-database handler runs 20 events to completion" \
    "SELECT (SELECT count(*) = 20 FROM handled WHERE event_id LIKE '$label-%')
        AND NOT EXISTS (SELECT 1 FROM relaybus.list_deliveries(NULL, 'recorder', 1000)
                         WHERE event_id LIKE '$label-%')" 10
  q "SELECT relaybus.publish('ext-$round.t', '{}', event_id => '$label-ext')" >/dev/null
  check "$label: a worker claims $label-ext with a 200 ms lease and vanishes" \
    "SELECT count(*) = 1 FROM relaybus.claim('vanished', 1, '200 ms', ARRAY['external-$round'])"
  wait_for "$label: the maintenance worker takes the expired lane over, charging an attempt" \
    "SELECT NOT EXISTS (SELECT 1 FROM relaybus.lanes WHERE handler = 'external-$round'
                                                     AND lease_owner IS NOT NULL)
        AND (SELECT attempts = 1 FROM relaybus.list_deliveries(NULL, 'external-$round')
              WHERE event_id = '$label-ext')" 5
  [ -n "$before" ] && [ "$(pids)" = "$before" ] && ok "$label: the same workers run throughout (none restarted)" \
    || not_ok "$label: the same workers run throughout (none restarted): $before, then $(pids)"
}

works "no settings"

as_owner "ALTER DATABASE $db SET role = dana"
[ "$(PGOPTIONS= q "SELECT current_user")" = dana ] \
  && ok "the setting applies: a session of the bootstrap superuser runs as dana" \
  || not_ok "the setting applies: a session of the bootstrap superuser runs as dana"
works "database role"
as_owner "ALTER DATABASE $db RESET role"

# PostgreSQL lets the owner store it; a login overrides it, a worker's connection did not.
as_owner "ALTER DATABASE $db SET session_authorization = dana"
works "database session_authorization"
as_owner "ALTER DATABASE $db RESET session_authorization"

# Only a superuser may set these for the bootstrap superuser; the workers hold anyway.
q "ALTER ROLE postgres IN DATABASE $db SET role = dana" >/dev/null
works "role in database role"
q "ALTER ROLE postgres IN DATABASE $db RESET role" >/dev/null
q "ALTER ROLE postgres IN DATABASE $db SET session_authorization = dana" >/dev/null
works "role in database session_authorization"
q "ALTER ROLE postgres IN DATABASE $db RESET session_authorization" >/dev/null

echo "worker_identity: $passed passed, $failed failed"
[ "$failed" = 0 ]
