#!/usr/bin/env bash
# In-database handler workers where memory is limited (issue 32, finding 3), on a throwaway
# cluster of its own with one handler worker, run under `ulimit -v`:
# A. crash loop: the worker's claim copied every payload of its batch into its memory,
#    outside any subtransaction. Where a batch did not fit, the claim's out-of-memory error
#    ended the worker; the postmaster restarted it, it claimed the same batch and ended
#    again, for good, never charging an attempt. Now it loads one event at a time: the
#    batch is handled, by the same worker, and the server never restarts.
# B. an event that cannot be loaded at all (here the worker's own limit is lowered below
#    one payload, with prlimit) fails its delivery inside the call's subtransaction, charged
#    an attempt, until it is a dead letter; the worker goes on.
# Both failed on the code before the fix (4fbab6b): A with the worker restarting every few
# seconds and the deliveries pending, never claimed for good; B with the worker ending and
# its successor (without the lowered limit) handling the event.
set -euo pipefail
cd "$(dirname "$0")/../.."

port=$(( ${PGPORT:-54329} + 13 ))
dir=/tmp/relaybus-handler-memory-limit-$port
export RELAYBUS_CLUSTER_SETTINGS="relaybus.maintenance_interval = '100ms'
relaybus.sql_handler_poll_interval = '100ms'
relaybus.sql_handler_workers = 1
relaybus.sql_handler_batch = 10
relaybus.sql_handler_max_payload = '64MB'
jit = off"
scripts/cluster start "$dir" "$port"
trap '[ -n "${KEEP_CLUSTER:-}" ] || scripts/cluster stop "$dir"' EXIT
export PGHOST=$dir PGPORT=$port PGUSER=postgres PGDATABASE=postgres

. test/integration/lib/checks.bash
# What is left of each delivery, read through the SQL API (list_deliveries lists the
# unfinished ones on every storage version: 0.3.0 keeps no status, attempts or last_error
# in relaybus.deliveries). Its 'processing' is what 0.2 stored as status pending with the
# lane in flight.
deliveries="relaybus.list_deliveries(max_rows => 1000000)"
worker_pid() { q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'relaybus sql handler'"; }
status_kb() { awk -v field="$2:" '$1 == field { print $2 }' "/proc/$1/status"; }
address_limit() { awk '/^Max address space/ { print $4 }' "/proc/$1/limits"; }
# How often the handler worker has exited since the server started.
worker_exits() { grep -c 'background worker "relaybus sql handler" (PID [0-9]*) exited' "$dir/server.log" || true; }

# The address space of an idle worker (shared memory, libraries) plus 320 MB: room for a
# publisher building a 40 MB event (about 230 MB) and for a worker holding one (about
# 90 MB), not for a worker holding a batch of ten (over 400 MB). The restart runs in a shell
# with the limit, and the server started from it inherits it (through runuser as root).
wait_worker() { for i in $(seq 1 100); do [ -n "$(worker_pid)" ] && return; sleep 0.1; done; }
wait_worker
base_kb=$(status_kb "$(worker_pid)" VmSize)
limit_kb=$((base_kb + 320 * 1024))
(ulimit -v "$limit_kb" && scripts/cluster restart "$dir")
postmaster=$(head -1 "$dir/data/postmaster.pid")
wait_worker
pid=$(worker_pid)
if [ "$(address_limit "$postmaster")" = $((limit_kb * 1024)) ] && [ "$(address_limit "$pid")" = $((limit_kb * 1024)) ]; then
  ok "the server and its handler worker run under the address space limit ($((limit_kb / 1024)) MB)"
else
  not_ok "the server and its handler worker run under the address space limit (postmaster: $(address_limit "$postmaster"), worker: $(address_limit "$pid"), wanted $((limit_kb * 1024)))"
fi

q "CREATE EXTENSION relaybus" >/dev/null
q "CREATE TABLE public.got (id text PRIMARY KEY);
   CREATE FUNCTION public.note(e jsonb) RETURNS void LANGUAGE sql AS 'INSERT INTO public.got VALUES (e->>''id'')';
   SELECT relaybus.subscribe('big', ARRAY['big.t'], max_attempts => 2, backoff_base => '10 ms',
                             sql_function => 'public.note(jsonb)')" >/dev/null
started=$(q "SELECT pg_postmaster_start_time()")
exits=$(worker_exits)

# A. Ten events of 40 MB in one transaction: one claim of ten.
q "SELECT count(relaybus.publish('big.t', jsonb_build_object('x', repeat(md5('x'), 1310720)),
                                 event_id => 'big-' || i))
     FROM generate_series(1, 10) i" >/dev/null
wait_for "crash loop: a batch of ten 40 MB events ends (nothing of it pending)" \
  "SELECT NOT EXISTS (SELECT 1 FROM $deliveries WHERE event_id LIKE 'big-%' AND status IN ('pending', 'processing'))" 45
check "crash loop: ... every one of them handled" "SELECT count(*) = 10 FROM got WHERE id LIKE 'big-%'"
[ "$(worker_exits)" = "$exits" ] && [ "$(worker_pid)" = "$pid" ] \
  && ok "crash loop: the worker never exited (same process, no exit in the server log)" \
  || not_ok "crash loop: the worker never exited (it exited $(( $(worker_exits) - exits )) times; worker $pid, now $(worker_pid))"

# B. The worker's own limit lowered to 20 MB over what it uses now: the 40 MB payload of
# the next event cannot even be decompressed.
used_kb=$(status_kb "$pid" VmSize)
# As the server's user (scripts/cluster runs it as postgres when run as root): lowering
# another user's limit takes a capability a container may not have.
as_server() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
as_server prlimit --pid "$pid" --as=$(( (used_kb + 20 * 1024) * 1024 ))
q "SELECT relaybus.publish('big.t', jsonb_build_object('x', repeat(md5('y'), 1310720)), event_id => 'oom-1')" >/dev/null
wait_for "load fails: an event the worker cannot load ends a dead letter after its two attempts" \
  "SELECT status = 'dead' AND attempts = 2 FROM $deliveries WHERE event_id = 'oom-1'" 30
check "load fails: ... its last_error says why (53200)" \
  "SELECT last_error LIKE 'out of memory%(SQLSTATE 53200)' FROM $deliveries WHERE event_id = 'oom-1'"
check "load fails: ... and its handler never ran" "SELECT NOT EXISTS (SELECT 1 FROM got WHERE id = 'oom-1')"
[ "$(worker_exits)" = "$exits" ] && [ "$(worker_pid)" = "$pid" ] \
  && ok "load fails: the worker never exited" \
  || not_ok "load fails: the worker never exited (it exited $(( $(worker_exits) - exits )) times)"
check "the server never restarted" \
  "SELECT pg_postmaster_start_time() = '$started'"
if grep -q "terminating any other active server processes\|all server processes terminated" "$dir/server.log"; then
  not_ok "no process of the server crashed (server.log)"
else
  ok "no process of the server crashed (server.log)"
fi

echo "handler memory limit: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
