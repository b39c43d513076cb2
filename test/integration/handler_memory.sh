#!/usr/bin/env bash
# In-database handler workers and large events (issue 32, finding 3), on a throwaway cluster
# of its own with one handler worker:
# 1. the event: a handler gets the stored event, field for field (the worker now writes it
#    straight into jsonb's binary form, from the payload and headers it loads per call).
# 2. peak memory: the worker's claim copied every payload of its batch, decompressed, into
#    its memory: ten events of 40 MB raised the worker's peak (VmHWM) by about 450 MB. Now
#    each call loads its own event and frees it: the peak grows by about two payloads (the
#    loaded one and the event built from it), whatever the batch.
# 3. a stored event over relaybus.sql_handler_max_payload (published before the limit was
#    lowered) is not run: each attempt fails with 54000, and then it is a dead letter.
# Each part failed on the code before the fix (4fbab6b). The crash loop under a memory
# limit: handler_memory_limit.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."

port=$(( ${PGPORT:-54329} + 12 ))
dir=/tmp/relaybus-handler-memory-$port
export RELAYBUS_CLUSTER_SETTINGS="relaybus.maintenance_interval = '100ms'
relaybus.sql_handler_poll_interval = '100ms'
relaybus.sql_handler_workers = 1
relaybus.sql_handler_batch = 10
relaybus.sql_handler_max_payload = '64MB'"
scripts/cluster start "$dir" "$port"
trap '[ -n "${KEEP_CLUSTER:-}" ] || scripts/cluster stop "$dir"' EXIT
export PGHOST=$dir PGPORT=$port PGUSER=postgres PGDATABASE=postgres

. test/integration/lib/checks.bash
# What is left of each delivery, read through the SQL API (list_deliveries lists the
# unfinished ones on every storage version: 0.3.0 keeps no status, attempts or last_error
# in relaybus.deliveries).
deliveries="relaybus.list_deliveries(max_rows => 1000000)"
worker_pid() { q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'relaybus sql handler'"; }
# The peak resident memory of process $1 so far, in kB.
peak_kb() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }

q "CREATE EXTENSION relaybus" >/dev/null
q "CREATE TABLE public.got (id text PRIMARY KEY, event jsonb, xid xid8 DEFAULT pg_current_xact_id());
   CREATE FUNCTION public.keep(e jsonb) RETURNS void LANGUAGE sql AS
     'INSERT INTO public.got (id, event) VALUES (e->>''id'', e)';
   CREATE FUNCTION public.note(e jsonb) RETURNS void LANGUAGE sql AS
     'INSERT INTO public.got (id) VALUES (e->>''id'')';
   SELECT relaybus.subscribe('keeper', ARRAY['keep.t'], sql_function => 'public.keep(jsonb)');
   SELECT relaybus.subscribe('noter', ARRAY['note.t'], max_attempts => 2, backoff_base => '10 ms',
                             sql_function => 'public.note(jsonb)')" >/dev/null

# 1. Events of every shape: with and without key and headers, nested values of every type,
# an array of more elements than jsonb's offset stride, 3 MB stored compressed out of line,
# and a payload and headers edited by hand into scalars (relaybus stores objects; a row
# edited by hand may hold anything).
q "BEGIN;
   SELECT relaybus.publish('keep.t', '{}', event_id => 'k-empty');
   SELECT relaybus.publish('keep.t', '{\"a\": [1, 2.5, -3e-7, true, false, null, \"x\", {\"b\": []}], \"ü\": {\"\": \"é\"}}',
                           key => 'k', event_id => 'k-nested', headers => '{\"h\": 1, \"t\": [null]}');
   SELECT relaybus.publish('keep.t', jsonb_build_object('many', (SELECT jsonb_agg(i) FROM generate_series(1, 100) i)),
                           event_id => 'k-many', headers => '{}');
   SELECT relaybus.publish('keep.t', jsonb_build_object('big', repeat(md5('k'), 100000)), event_id => 'k-toasted',
                           headers => jsonb_build_object('also', repeat(md5('h'), 100000)));
   SELECT relaybus.publish('keep.t', '{}', event_id => 'k-scalars', headers => '{}');
   UPDATE relaybus.events SET payload = '\"just a string\"', headers = '7' WHERE id = 'k-scalars';
   COMMIT" >/dev/null
check "the test's 3 MB event is stored compressed, out of line" \
  "SELECT pg_column_size(payload) < 1000000 FROM relaybus.events WHERE id = 'k-toasted'"
wait_for "event: five events of every shape handled" "SELECT count(*) = 5 FROM got WHERE id LIKE 'k-%'" 20
check "event: each handler got its stored event, field for field (as jsonb, and as text)" \
  "SELECT bool_and(g.event = x.event AND g.event::text = x.event::text)
     FROM got g JOIN (SELECT e.id, jsonb_build_object('id', e.id, 'handler', 'keeper', 'type', e.type,
                        'key', e.key, 'payload', e.payload, 'headers', e.headers, 'attempts', 0,
                        'published_at', e.published_at) AS event
                      FROM relaybus.events e) x ON x.id = g.id
    WHERE g.id LIKE 'k-%'"
check "event: ... which jsonb's functions read back (a path into the nested payload, containment)" \
  "SELECT (SELECT event #>> '{payload,a,7,b}' = '[]' AND event @> '{\"payload\": {\"ü\": {\"\": \"é\"}}}'
             FROM got WHERE id = 'k-nested')
      AND (SELECT jsonb_array_length(event #> '{payload,many}') = 100 AND event #>> '{payload,many,99}' = '100'
             FROM got WHERE id = 'k-many')"

# 2. Ten events of 40 MB of JSON (a 32-character string repeated: 470 kB each on disk), in
# one transaction, so the worker claims them in one batch of ten.
pid=$(worker_pid)
before=$(peak_kb "$pid")
payload_kb=$(q "SELECT pg_column_size(jsonb_build_object('x', repeat(md5('x'), 1310720))) / 1024")
q "SELECT count(relaybus.publish('note.t', jsonb_build_object('x', repeat(md5('x'), 1310720)),
                                 event_id => 'big-' || i))
     FROM generate_series(1, 10) i" >/dev/null
wait_for "memory: ten events of ${payload_kb} kB handled" "SELECT count(*) = 10 FROM got WHERE id LIKE 'big-%'" 60
after=$(peak_kb "$pid")
growth=$((after - before))
bound=$((2 * payload_kb + 24 * 1024))
echo "# worker peak (VmHWM) grew by $((growth / 1024)) MB for ten events of $((payload_kb / 1024)) MB" \
  "(in $(q "SELECT count(DISTINCT xid) FROM got WHERE id LIKE 'big-%'") batch transaction(s)); bound $((bound / 1024)) MB"
if [ "$(worker_pid)" = "$pid" ] && [ "$growth" -lt "$bound" ]; then
  ok "memory: the worker's peak grew by less than two payloads and 24 MB (one event at a time, not the batch)"
else
  not_ok "memory: the worker's peak grew by less than two payloads and 24 MB (grew $((growth / 1024)) MB; worker $pid, now $(worker_pid))"
fi

# 3. An event published under the limit, due once the limit is lowered below its size.
q "SELECT relaybus.subscribe('lowered', ARRAY['lowered.t'], max_attempts => 2, backoff_base => '10 ms',
                             sql_function => 'public.keep(jsonb)');
   SELECT relaybus.publish('lowered.t', jsonb_build_object('x', repeat('a', 2 * 1024 * 1024)),
                           event_id => 'over-1', available_at => now() + interval '2 s')" >/dev/null
q "ALTER SYSTEM SET relaybus.sql_handler_max_payload = '1MB'" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null
wait_for "limit: a stored event over the lowered limit ends a dead letter after its two attempts" \
  "SELECT status = 'dead' AND attempts = 2 FROM $deliveries WHERE event_id = 'over-1'" 20
check "limit: ... its last_error says why (the size, the limit, the setting, 54000)" \
  "SELECT last_error = 'the event''s payload and headers are 2097169 bytes, over the 1MB of relaybus.sql_handler_max_payload (SQLSTATE 54000)'
     FROM $deliveries WHERE event_id = 'over-1'"
check "limit: ... and its handler never ran" "SELECT NOT EXISTS (SELECT 1 FROM got WHERE id = 'over-1')"
check "limit: the same worker did all of it (it never exited)" "SELECT '$(worker_pid)' = '$pid'"

echo "handler memory: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
