"""A publish routes by the subscriptions committed with what it reacts to (see
subscription_commit.sh).

Usage: subscription_commit.py CONNINFO FIXTURE PHASE
  CONNINFO  a libpq conninfo of the test cluster (dbname postgres)
  FIXTURE   the path of the built commit_stall.so (test/integration/lib/commit_stall.c)
  PHASE     "preloaded" (relaybus in shared_preload_libraries, one in-database handler
            worker) or "unpreloaded" (the same cluster restarted without it)

A transaction subscribes a handler and, in the same transaction, publishes an event
whose handling publishes the event type the new subscription wants. Its commit is held
(the fixture) after the commit is visible and before PostgreSQL sends the cache
invalidations. Whoever handles the event in that window must route its own publish by the
new subscription, as a read of the table would: every backend's copy of the subscriptions
(src/pg/subscription_cache.cpp) was made before the subscription existed.

Prints one TAP-like line per check and exits 1 if any failed.
"""
import sys
import threading
import time

try:
    import psycopg
except ImportError:
    print("not ok - python3-psycopg is not installed (apt-get install python3-psycopg)")
    sys.exit(1)

BASE, FIXTURE, PHASE = sys.argv[1], sys.argv[2], sys.argv[3]
STALL_MS = 3000
failed = 0
passed = 0


def check(what, condition, detail=""):
    global failed, passed
    if condition:
        passed += 1
        print(f"ok - [{PHASE}] {what}")
    else:
        failed += 1
        print(f"not ok - [{PHASE}] {what}" + (f": {detail}" if detail else ""))


def connect():
    return psycopg.connect(BASE, autocommit=True)


def one(conn, sql, *args):
    return conn.execute(sql, args).fetchone()[0]


def wait_for(conn, sql, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if one(conn, sql):
            return True
        time.sleep(0.05)
    return False


def held_commit(statements):
    """Runs statements in one transaction of a new session whose COMMIT is held STALL_MS
    after it became visible. Returns the thread and a dict that gets 'returned', the
    server's clock_timestamp() once COMMIT returned, or 'error'."""
    result = {}

    def run():
        try:
            with connect() as w:
                w.execute(f"LOAD '{FIXTURE}'")
                w.execute("BEGIN")
                # LOCAL: only this transaction's commit is held.
                w.execute(f"SET LOCAL commit_stall.ms = {STALL_MS}")
                for statement in statements:
                    w.execute(statement)
                w.execute("COMMIT")
                result["returned"] = one(w, "SELECT clock_timestamp()")
        except Exception as e:  # reported by the checks below
            result["error"] = repr(e)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


def deliveries(conn, event_id, handler):
    return one(conn, "SELECT count(*) FROM relaybus.deliveries WHERE event_id = %s AND handler = %s",
               event_id, handler)


adm = connect()
preloaded = "relaybus" in one(adm, "SHOW shared_preload_libraries")
check("relaybus is preloaded" if PHASE == "preloaded" else "relaybus is not preloaded",
      preloaded == (PHASE == "preloaded"))

if PHASE == "preloaded":
    adm.execute("CREATE EXTENSION relaybus")
    # The in-database worker's case: woken by the held transaction's latch at commit.
    adm.execute("CREATE TABLE hops (event_id text PRIMARY KEY, at timestamptz DEFAULT clock_timestamp())")
    adm.execute("""CREATE FUNCTION hop(e jsonb) RETURNS void LANGUAGE plpgsql AS $$
                   BEGIN
                     INSERT INTO hops (event_id) VALUES (e->>'id');
                     PERFORM relaybus.publish('hop.out', '{}', event_id => 'out-' || (e->>'id'));
                   END $$""")
    adm.execute("SELECT relaybus.subscribe('hop', ARRAY['hop.in'], sql_function => 'hop(jsonb)')")
    adm.execute("SELECT relaybus.publish('hop.in', '{}', event_id => 'warm')")
    check("the in-database handler runs (and so has read the subscriptions)",
          wait_for(adm, "SELECT EXISTS (SELECT 1 FROM hops WHERE event_id = 'warm')", 10))
    thread, result = held_commit([
        "SELECT relaybus.subscribe('late', ARRAY['hop.out'])",
        "SELECT relaybus.publish('hop.in', '{}', event_id => 'a1')"])
    thread.join()
    check("the held transaction commits", "returned" in result, result.get("error", ""))
    ran_at = one(adm, "SELECT at FROM hops WHERE event_id = 'a1'")
    check("the in-database handler ran a1 while the commit that published it was held",
          ran_at is not None and "returned" in result and ran_at < result["returned"],
          f"ran at {ran_at}, commit returned at {result.get('returned')}")
    check("its publish routed out-a1 to the subscription committed with a1",
          deliveries(adm, "out-a1", "late") == 1)

# An external worker's case: a session that published before (so its copy exists) claims
# the event as soon as it is visible, and publishes in reaction.
source, target = f"ext_{PHASE}", f"late_{PHASE}"
adm.execute("SELECT relaybus.subscribe(%s, ARRAY[%s])", (source, f"{source}.in"))
worker = connect()
worker.execute("SELECT relaybus.publish(%s, '{}')", (f"{source}.out",))
thread, result = held_commit([
    f"SELECT relaybus.subscribe('{target}', ARRAY['{source}.out'])",
    f"SELECT relaybus.publish('{source}.in', '{{}}', event_id => 'b-{PHASE}')"])
claimed = None
while claimed is None and thread.is_alive():
    claimed = worker.execute("SELECT event_id FROM relaybus.claim('reactor', 1, '30 s', ARRAY[%s])",
                             (source,)).fetchone()
    if claimed is None:
        time.sleep(0.01)
published_at = None
if claimed is not None:
    published_at = one(worker, "SELECT clock_timestamp() FROM relaybus.publish(%s, '{}', event_id => %s)",
                       f"{source}.out", f"out-b-{PHASE}")
thread.join()
check("the held transaction commits", "returned" in result, result.get("error", ""))
check("a worker claimed the event and published while the commit was held",
      published_at is not None and "returned" in result and published_at < result["returned"],
      f"claimed {claimed}, published at {published_at}, commit returned at {result.get('returned')}")
check("its publish routed to the subscription committed with the event",
      deliveries(adm, f"out-b-{PHASE}", target) == 1)

print(f"# subscription_commit {PHASE}: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
