#!/usr/bin/env bash
# In-database handlers that hold up other handlers (an adversarial review of 2026-12-03),
# on a throwaway cluster of its own with one handler worker:
# 1. lanes: after a batch of one handler the worker kept that handler's lanes, and while it
#    ran a slow batch of another it kept them locked, so nobody could run the first one's
#    new work in those lanes for as long as the slow call lasted (up to its sql_timeout).
#    Now the claim for the other handler hands them back, and a batch locks only its own
#    handler's lanes.
# 2. turns: a worker ended by a handler that ignores its cancellation restarted at a handler
#    picked by its PID, so that handler could get the next turn again and again while the
#    others waited. Now the turn is kept in shared memory and the restarted worker goes on
#    after that handler. (On the old code one event of four waited past the bound in each of
#    two runs; the check now looks at eight.)
# 3. poison: one event whose JSON text is over 1 GB failed every claim of its handler for
#    good; now the event is built as a jsonb value, inside its own call.
set -euo pipefail
cd "$(dirname "$0")/../.."

port=$(( ${PGPORT:-54329} + 4 ))
dir=/tmp/relaybus-handler-turns-$port
# The poison part publishes 180 MB to an in-database handler: over the default
# relaybus.sql_handler_max_payload (16MB), so the limit goes as high as it goes.
export RELAYBUS_CLUSTER_SETTINGS="relaybus.maintenance_interval = '100ms'
relaybus.sql_handler_poll_interval = '100ms'
relaybus.sql_handler_max_payload = '1GB'
relaybus.sql_handler_workers = 1"
scripts/cluster start "$dir" "$port"
trap '[ -n "${KEEP_CLUSTER:-}" ] || scripts/cluster stop "$dir"' EXIT
export PGHOST=$dir PGPORT=$port PGUSER=postgres PGDATABASE=postgres

. test/integration/lib/checks.bash

q "CREATE EXTENSION relaybus" >/dev/null
q "CREATE TABLE public.handled (event_id text PRIMARY KEY, at timestamptz DEFAULT clock_timestamp());
   GRANT INSERT ON public.handled TO PUBLIC;
   -- v1 takes two seconds, long enough to publish s1 while it runs, even where a psql
   -- takes most of a second to start (a loaded machine). Were v1 done before s1 came,
   -- the worker's next turn would be v2, and the check that another worker claims v2
   -- would fail.
   CREATE FUNCTION public.record(e jsonb) RETURNS void LANGUAGE sql AS \$\$
     SELECT pg_sleep(CASE WHEN e->>'id' = 'v1' THEN 2 ELSE 0 END);
     INSERT INTO public.handled (event_id) VALUES (e->>'id') \$\$;
   CREATE FUNCTION public.slow(e jsonb) RETURNS void LANGUAGE sql AS \$\$ SELECT pg_sleep(6) \$\$;
   -- Ignores its cancellation, so its worker is ended after the grace.
   CREATE FUNCTION public.spin(e jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
   BEGIN LOOP BEGIN PERFORM pg_sleep(10); EXCEPTION WHEN query_canceled THEN NULL; END; END LOOP; END \$\$;
   SELECT relaybus.subscribe('victim', ARRAY['victim.t'], sql_function => 'public.record(jsonb)');
   SELECT relaybus.subscribe('slow', ARRAY['slow.t'], sql_function => 'public.slow(jsonb)')" >/dev/null
# What is left of each delivery, read through the SQL API: list_deliveries lists the
# unfinished ones on every storage version (0.3.0 keeps a completed delivery's row in
# relaybus.deliveries, and its attempts elsewhere).
deliveries="relaybus.list_deliveries(max_rows => 1000000)"
handled() { echo "SELECT EXISTS (SELECT 1 FROM public.handled WHERE event_id = '$1')"; }

# 1. lanes: v1 and v2 share a key, so the victim's batch is v1 alone and v2 waits in its
# lane; s1 is published while v1 runs, so the worker's next turn is the slow handler.
sleeping="SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE backend_type = 'relaybus sql handler'
          AND wait_event = 'PgSleep')"
q "SELECT relaybus.publish('victim.t', '{}', 'k', 'v1'), relaybus.publish('victim.t', '{}', 'k', 'v2')" >/dev/null
wait_for "lanes: the worker runs v1" "$sleeping" 10
q "SELECT relaybus.publish('slow.t', '{}', event_id => 's1')" >/dev/null
wait_for "lanes: ... then the slow handler" "SELECT ($(handled v1)) AND ($sleeping)" 10
check "lanes: while it runs, the victim's lane is neither held nor locked" \
  "SELECT (SELECT count(*) FROM relaybus.lanes WHERE handler = 'victim' AND lease_owner IS NOT NULL) = 0
      AND (SELECT count(*) FROM (SELECT 1 FROM relaybus.lanes WHERE handler = 'victim'
                                 FOR UPDATE SKIP LOCKED) l) = 256"
check "lanes: while it runs, another worker claims v2 at once" \
  "SELECT array_agg(event_id) = ARRAY['v2'] FROM relaybus.claim('other', 10, '30 seconds', ARRAY['victim'])"
check "lanes: ... while the slow call still runs (s1 not complete)" \
  "SELECT ($sleeping) AND EXISTS (SELECT 1 FROM $deliveries WHERE event_id = 's1')"

# 2. turns: the spinner's worker ends after each call; every victim event must be handled
# within one overrun (timeout 0.3 s, grace 1 s, restart 1 s) plus a batch and a poll.
wait_for "lanes: the slow call ends (s1 complete)" \
  "SELECT NOT EXISTS (SELECT 1 FROM $deliveries WHERE event_id = 's1')" 15
q "SELECT relaybus.unsubscribe('slow')" >/dev/null
q "SELECT relaybus.subscribe('spinner', ARRAY['spin.t'], max_attempts => 1000, backoff_base => '0',
     backoff_max => '0', sql_function => 'public.spin(jsonb)', sql_timeout => '300 ms');
   SELECT count(relaybus.publish('spin.t', '{}', 'k' || g)) FROM generate_series(1, 100) g" >/dev/null
slowest=0
for i in 1 2 3 4 5 6 7 8; do
  q "SELECT relaybus.publish('victim.t', '{}', event_id => 't$i')" >/dev/null
  start=$(date +%s%N)
  while [ "$(q "$(handled "t$i")")" != t ] && [ $(( $(date +%s%N) - start )) -lt 20000000000 ]; do sleep 0.05; done
  took=$(( ($(date +%s%N) - start) / 1000000 ))
  echo "# victim t$i handled after $took ms"
  [ "$took" -gt "$slowest" ] && slowest=$took
done
if [ "$slowest" -lt 4500 ]; then ok "turns: each victim event ran within 4.5 s beside a handler that gets its worker ended (slowest $slowest ms)"
else not_ok "turns: each victim event ran within 4.5 s beside a handler that gets its worker ended (slowest $slowest ms)"; fi
check "turns: the spinner did end its worker (its deliveries were charged)" \
  "SELECT EXISTS (SELECT 1 FROM $deliveries WHERE handler = 'spinner' AND attempts > 0)"

# 3. poison: an event whose payload's JSON text is over 1 GB (180 MB of control characters,
# each written \u0001) beside an ordinary one of the same handler. The worker's claim made
# the text of its whole batch, so it failed for good (54000) and neither ran. The spinner
# is gone first, so that the victim's turns come quickly.
q "SELECT relaybus.unsubscribe('spinner')" >/dev/null
q "SELECT relaybus.publish('victim.t', jsonb_build_object('a', repeat(chr(1), 180000000)), 'poison', 'p1');
   SELECT relaybus.publish('victim.t', '{}', 'other', 'p2')" >/dev/null
wait_for "poison: an event whose JSON text is over 1 GB runs, and so does the one beside it" \
  "SELECT ($(handled p1)) AND ($(handled p2))" 60
check "poison: ... both complete" \
  "SELECT NOT EXISTS (SELECT 1 FROM $deliveries WHERE event_id IN ('p1', 'p2'))"

echo "handler turns: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
