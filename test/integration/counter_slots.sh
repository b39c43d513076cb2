#!/usr/bin/env bash
# relaybus.counters() keeps a slot of shared memory per database, 64 in all. A dropped
# database's slot is taken back by the next database that needs one, its counters starting
# at 0: a cluster where databases come and go (a test suite's) never runs out, and while 64
# databases that still exist hold every slot, a 65th gets 53400 until one of them is
# dropped. On a throwaway cluster of its own (its slots are the test's alone).
set -euo pipefail
cd "$(dirname "$0")/../.."

port=$(( ${PGPORT:-54329} + 16 ))
dir=/tmp/relaybus-counter-slots-$port
scripts/cluster start "$dir" "$port" >/dev/null
trap '[ -n "${KEEP_CLUSTER:-}" ] || scripts/cluster stop "$dir" >/dev/null' EXIT
export PGHOST=$dir PGPORT=$port PGUSER=postgres PGDATABASE=postgres

. test/integration/lib/checks.bash

# A template with relaybus and one subscription: each database is a copy of it.
q "CREATE DATABASE slots_template" >/dev/null
PGDATABASE=slots_template q "CREATE EXTENSION relaybus;
  SELECT relaybus.subscribe('h', ARRAY['t'])" >/dev/null
# run_in DB...: in one psql session, for each DB: connect, publish one event (which takes the
# database's slot), and print "DB VALUE": its published counter, or the SQLSTATE of
# counters()'s error.
run_in() {
  for db in "$@"; do
    printf '\\c %s\n' "$db"
    cat <<'SQL'
SELECT relaybus.publish('t', '{}') IS NOT NULL AS published \gset
DO $$
BEGIN
  RAISE NOTICE '% %', current_database(),
    (SELECT value FROM relaybus.counters() WHERE name = 'published');
EXCEPTION WHEN others THEN
  RAISE NOTICE '% %', current_database(), SQLSTATE;
END $$;
SQL
  done | psql -qXAt -v ON_ERROR_STOP=1 2>&1 | sed -n 's/^NOTICE: *//p'
}
create() { for db in "$@"; do echo "CREATE DATABASE $db TEMPLATE slots_template;"; done | psql -qX -v ON_ERROR_STOP=1 >/dev/null; }
drop() { for db in "$@"; do echo "DROP DATABASE $db;"; done | psql -qX -v ON_ERROR_STOP=1 >/dev/null; }
names() { for i in $(seq "$1" "$2"); do echo "slots_$i"; done; }

# 64 databases that stay take every slot.
create $(names 1 64)
got=$(run_in $(names 1 64) | awk '$2 != 1' | wc -l)
if [ "$got" = 0 ]; then ok "64 databases each count their own publish"
else not_ok "64 databases each count their own publish ($got did not)"; fi

create slots_65
got=$(run_in slots_65)
if [ "$got" = "slots_65 53400" ]; then ok "a 65th database's counters() raises 53400 while the 64 exist"
else not_ok "a 65th database's counters() raises 53400 while the 64 exist (got '$got')"; fi

# Dropping ten frees their slots: the 65th takes one, its counters from 0.
drop $(names 1 10)
got=$(run_in slots_65)
if [ "$got" = "slots_65 1" ]; then ok "once ten are dropped the 65th counts, from 0 (its publish: 1)"
else not_ok "once ten are dropped the 65th counts, from 0 (its publish: 1) (got '$got')"; fi

# Databases that come and go: each takes back a dropped one's slot, never its counts.
bad=0
for i in $(seq 66 75); do
  create slots_$i
  [ "$(run_in slots_$i)" = "slots_$i 1" ] || bad=$((bad + 1))
  drop slots_$i
done
if [ $bad = 0 ]; then ok "10 more databases created and dropped one after another: each counts from 0"
else not_ok "10 more databases created and dropped one after another: $bad did not count from 0"; fi
got=$(run_in slots_64)
if [ "$got" = "slots_64 2" ]; then ok "a database that stayed keeps its count (its second publish: 2)"
else not_ok "a database that stayed keeps its count (its second publish: 2) (got '$got')"; fi

# The counters per handler and per unrouted event type (0.3.0) share 1,024 slots for the
# server, each a (database, name); a database takes at most 32 for unrouted types (its
# publishers choose them) and 256 for handlers. Once every slot is taken, a new name gets
# none; once a database is dropped, the next name of another database takes one of its
# slots back.
create names_full names_next
PGDATABASE=names_full q "SET relaybus.unrouted_publish = ignore;
  SELECT count(relaybus.publish('type-' || i, '{}')) FROM generate_series(1, 100) i" >/dev/null
got=$(PGDATABASE=names_full q "SELECT (SELECT count(*) FROM relaybus.unrouted_counters()) || ' '
  || (SELECT value FROM relaybus.counters() WHERE name = 'unrouted')")
if [ "$got" = "32 100" ]; then ok "100 unrouted types in one database: 32 listed (its share), all 100 counted for the database"
else not_ok "100 unrouted types in one database: 32 listed, 100 counted (got '$got')"; fi
# 30 more databases with 32 types each: with the handlers' slots, more than 1,024.
fillers=$(names 11 40)
for db in $fillers; do
  PGDATABASE=$db q "SET relaybus.unrouted_publish = ignore;
    SELECT count(relaybus.publish('type-' || i, '{}')) FROM generate_series(1, 32) i" >/dev/null
done
# late: publishes a 'late' event in names_next, then (after its commit) prints its type's count.
late() {
  PGDATABASE=names_next q "SET relaybus.unrouted_publish = ignore; SELECT relaybus.publish('late', '{}')" >/dev/null
  PGDATABASE=names_next q "SELECT coalesce((SELECT events FROM relaybus.unrouted_counters() WHERE type = 'late'), 0)"
}
got=$(late)
if [ "$got" = 0 ]; then ok "with every slot taken, another database's new type gets none"
else not_ok "with every slot taken, another database's new type gets none (got '$got')"; fi
drop slots_11
got=$(late)
if [ "$got" = 1 ]; then ok "once a database that held slots is dropped, the new type takes one of them back"
else not_ok "once a database that held slots is dropped, the new type takes one of them back (got '$got')"; fi
got=$(PGDATABASE=slots_12 q "SELECT count(*) || ' ' || sum(events) FROM relaybus.unrouted_counters()")
if [ "$got" = "32 32" ]; then ok "a database that stayed keeps its slots and counts (32 types, one event each)"
else not_ok "a database that stayed keeps its slots and counts (got '$got')"; fi

echo "# counter_slots: $passed passed, $failed failed"
[ "$failed" = 0 ]
