"""A publish routes by the subscriptions committed with what it reacts to (see
subscription_commit.sh).

Usage: subscription_commit.py CONNINFO FIXTURE PHASE
  CONNINFO  a libpq conninfo of the test cluster, without dbname
  FIXTURE   the path of the built commit_stall.so (test/integration/lib/commit_stall.c)
  PHASE     "preloaded" (relaybus in shared_preload_libraries, one in-database handler
            worker, wal_level = logical, synchronous_standby_names naming no standby) or
            "unpreloaded" (the same cluster restarted without relaybus preloaded)

A transaction subscribes a handler and, in the same transaction, publishes an event
whose handling publishes the event type the new subscription wants. Its commit is held
(the fixture) after it became visible and before PostgreSQL sends its cache
invalidations. Whoever handles the event in that window must route its own publish by the
new subscription, as a read of the table would, though every backend's copy of the
subscriptions (src/pg/subscription_cache.cpp) was made before the subscription existed.
A commit is also held before it becomes visible (waiting for a synchronous standby that
never answers, until the test cancels the wait), so that a copy is read then. And a
subscription replicated by a logical replication apply worker, or copied in by a new
subscription's initial table synchronization, reaches the copies too.

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


def connect(db="postgres"):
    return psycopg.connect(f"{BASE} dbname={db}", autocommit=True)


def one(conn, sql, *args):
    return conn.execute(sql, args).fetchone()[0]


def wait_for(conn, sql, seconds, *args):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if one(conn, sql, *args):
            return True
        time.sleep(0.05)
    return False


def held_commit(statements, settings):
    """Runs statements in one transaction of a new session, with the fixture loaded and
    `settings` (SET LOCAL) applied, on a thread. Returns the thread and a dict that gets
    'pid' (the session's backend), then 'returned' (the server's clock_timestamp() once
    COMMIT returned) or 'error'."""
    result = {}

    def run():
        try:
            with connect() as w:
                result["pid"] = w.info.backend_pid
                w.execute(f"LOAD '{FIXTURE}'")
                w.execute("BEGIN")
                for setting in settings:  # LOCAL: only this transaction's commit is held
                    w.execute(f"SET LOCAL {setting}")
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


def claim_while(worker, source, thread):
    """The first delivery of `source` this session claims while `thread` runs (None if the
    thread ended first)."""
    while thread.is_alive():
        row = worker.execute("SELECT event_id FROM relaybus.claim('reactor', 1, '30 s', ARRAY[%s])",
                             (source,)).fetchone()
        if row is not None:
            return row[0]
        time.sleep(0.01)
    return None


def react(worker, source, event_id):
    """Publishes `source`.out in reaction, from the same session; the server's time."""
    return one(worker, "SELECT clock_timestamp() FROM relaybus.publish(%s, '{}', event_id => %s)",
               f"{source}.out", event_id)


adm = connect()
preloaded = "relaybus" in one(adm, "SHOW shared_preload_libraries")
check("relaybus is preloaded" if PHASE == "preloaded" else "relaybus is not preloaded",
      preloaded == (PHASE == "preloaded"))

if PHASE == "preloaded":
    adm.execute("CREATE EXTENSION relaybus")
    # An in-database handler, woken by the held transaction's latch at commit.
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
        "SELECT relaybus.publish('hop.in', '{}', event_id => 'a1')"], [f"commit_stall.ms = {STALL_MS}"])
    thread.join()
    check("the held transaction commits (in-database handler)", "returned" in result, result.get("error", ""))
    ran_at = one(adm, "SELECT at FROM hops WHERE event_id = 'a1'")
    check("the in-database handler ran a1 while the commit that published it was held",
          ran_at is not None and "returned" in result and ran_at < result["returned"],
          f"ran at {ran_at}, commit returned at {result.get('returned')}")
    check("its publish routed out-a1 to the subscription committed with a1",
          deliveries(adm, "out-a1", "late") == 1)

# An external worker: a session that published before (so its copy exists) claims the
# event as soon as it is visible, and publishes in reaction.
source, target = f"ext_{PHASE}", f"late_{PHASE}"
adm.execute("SELECT relaybus.subscribe(%s, ARRAY[%s])", (source, f"{source}.in"))
worker = connect()
worker.execute("SELECT relaybus.publish(%s, '{}')", (f"{source}.out",))
thread, result = held_commit([
    f"SELECT relaybus.subscribe('{target}', ARRAY['{source}.out'])",
    f"SELECT relaybus.publish('{source}.in', '{{}}', event_id => 'b-{PHASE}')"], [f"commit_stall.ms = {STALL_MS}"])
claimed = claim_while(worker, source, thread)
published_at = react(worker, source, f"out-b-{PHASE}") if claimed else None
thread.join()
check("the held transaction commits (external worker)", "returned" in result, result.get("error", ""))
check("a worker claimed the event and published while the commit was held",
      published_at is not None and "returned" in result and published_at < result["returned"],
      f"claimed {claimed}, published at {published_at}, commit returned at {result.get('returned')}")
check("its publish routed to the subscription committed with the event (external worker)",
      deliveries(adm, f"out-b-{PHASE}", target) == 1)

if PHASE == "preloaded":
    # A copy read while the change's commit is announced but not visible yet (the commit
    # waits for a synchronous standby), then a reaction once it is visible, before
    # relaybus's own commit callbacks ran (the fixture's callback holds it there).
    source, target = "ext_sync", "late_sync"
    adm.execute("SELECT relaybus.subscribe(%s, ARRAY[%s])", (source, f"{source}.in"))
    worker = connect()
    worker.execute("SELECT relaybus.publish(%s, '{}')", (f"{source}.out",))
    thread, result = held_commit([
        f"SELECT relaybus.subscribe('{target}', ARRAY['{source}.out'])",
        f"SELECT relaybus.publish('{source}.in', '{{}}', event_id => 'c1')"],
        ["synchronous_commit = on", f"commit_stall.before_callbacks_ms = {STALL_MS}"])
    while "pid" not in result and thread.is_alive():
        time.sleep(0.01)
    waiting = "pid" in result and wait_for(
        adm, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event = 'SyncRep')",
        10, result["pid"])
    check("the commit waits for the synchronous standby (not visible yet)", waiting)
    worker.execute("SELECT relaybus.publish(%s, '{}', event_id => 'c-during')", (f"{source}.out",))
    check("a publish meanwhile does not see the subscription", deliveries(adm, "c-during", target) == 0)
    adm.execute("SELECT pg_cancel_backend(%s)", (result.get("pid", 0),))  # the commit goes on
    claimed = claim_while(worker, source, thread)
    published_at = react(worker, source, "out-c1") if claimed else None
    thread.join()
    check("the held transaction commits (synchronous standby)", "returned" in result, result.get("error", ""))
    check("a worker claimed the event and published before relaybus's commit callbacks ran",
          published_at is not None and "returned" in result and published_at < result["returned"],
          f"claimed {claimed}, published at {published_at}, commit returned at {result.get('returned')}")
    check("its publish routed to the subscription committed with the event (copy read before it was visible)",
          deliveries(adm, "out-c1", target) == 1)

    # A logical replication apply worker writes the subscriptions of a second database; a
    # session there that published before must see what it applies. The subscription runs
    # only while the worker applies: the copies share one cluster, and the publisher's own
    # commit, announced to all of them, must not be what makes the reader look again.
    adm.execute("CREATE DATABASE replica")
    rep = connect("replica")
    rep.execute("CREATE EXTENSION relaybus")
    adm.execute("CREATE PUBLICATION rb_subscriptions FOR TABLE relaybus.subscriptions")
    adm.execute("SELECT pg_create_logical_replication_slot('rb_subscriptions', 'pgoutput')")
    rep.execute(f"CREATE SUBSCRIPTION rb_subscriptions CONNECTION '{BASE} dbname=postgres' "
                "PUBLICATION rb_subscriptions WITH (create_slot = false, slot_name = 'rb_subscriptions', "
                "copy_data = false, enabled = false)")
    reader = connect("replica")

    def applied(what, change, condition, event_type, event_id, routed):
        adm.execute(change)
        reader.execute("SELECT relaybus.publish(%s, '{}')", (event_type,))  # its copy: after that commit
        rep.execute("ALTER SUBSCRIPTION rb_subscriptions ENABLE")
        check(f"the apply worker applies {what}",
              wait_for(rep, f"SELECT {condition}", 20))
        reader.execute("SELECT relaybus.publish(%s, '{}', event_id => %s)", (event_type, event_id))
        check(f"a session that published before routes by the applied {what} ({event_id})",
              deliveries(rep, event_id, "rep_h") == routed)
        rep.execute("ALTER SUBSCRIPTION rb_subscriptions DISABLE")
        # Until the slot is free again: its walsender outlives the apply worker a little.
        check(f"the apply worker stops ({event_id})",
              wait_for(adm, "SELECT NOT active FROM pg_replication_slots WHERE slot_name = 'rb_subscriptions'", 20))

    applied("subscribe", "SELECT relaybus.subscribe('rep_h', ARRAY['rep.t'])",
            "EXISTS (SELECT 1 FROM relaybus.subscriptions WHERE handler = 'rep_h')", "rep.t", "rep-1", 1)
    applied("UPDATE", "UPDATE relaybus.subscriptions SET event_types = ARRAY['rep.u'] WHERE handler = 'rep_h'",
            "EXISTS (SELECT 1 FROM relaybus.subscriptions WHERE handler = 'rep_h' AND event_types = ARRAY['rep.u'])",
            "rep.t", "rep-2", 0)
    applied("unsubscribe", "SELECT relaybus.unsubscribe('rep_h')",
            "NOT EXISTS (SELECT 1 FROM relaybus.subscriptions WHERE handler = 'rep_h')", "rep.u", "rep-3", 0)
    rep.execute("ALTER SUBSCRIPTION rb_subscriptions SET (slot_name = NONE)")
    rep.execute("DROP SUBSCRIPTION rb_subscriptions")
    adm.execute("SELECT pg_drop_replication_slot('rb_subscriptions')")

    # A new subscription's initial copy: the table synchronization worker inserts the
    # publisher's rows with COPY, which fires the row trigger (ENABLE ALWAYS), so a
    # session that published before the copy routes by the copied rows. Only that row is
    # published: the publisher's in-database handlers name functions this database lacks.
    adm.execute("SELECT relaybus.subscribe('copy_h', ARRAY['rep.c'])")
    adm.execute("CREATE PUBLICATION rb_copy FOR TABLE relaybus.subscriptions WHERE (handler = 'copy_h')")
    adm.execute("CREATE DATABASE replica_copy")
    copy = connect("replica_copy")
    copy.execute("CREATE EXTENSION relaybus")
    copy_reader = connect("replica_copy")
    copy_reader.execute("SELECT relaybus.publish('rep.c', '{}')")  # its copy: no subscription
    adm.execute("SELECT pg_create_logical_replication_slot('rb_copy', 'pgoutput')")
    copy.execute(f"CREATE SUBSCRIPTION rb_copy CONNECTION '{BASE} dbname=postgres' "
                 "PUBLICATION rb_copy WITH (create_slot = false, slot_name = 'rb_copy', "
                 "copy_data = true)")
    check("the initial copy brings the publisher's subscription",
          wait_for(copy, "SELECT EXISTS (SELECT 1 FROM relaybus.subscriptions WHERE handler = 'copy_h')", 20))
    copy_reader.execute("SELECT relaybus.publish('rep.c', '{}', event_id => 'copy-1')")
    check("a session that published before routes by the copied subscription (copy-1)",
          deliveries(copy, "copy-1", "copy_h") == 1)
    copy.execute("ALTER SUBSCRIPTION rb_copy DISABLE")
    copy.execute("ALTER SUBSCRIPTION rb_copy SET (slot_name = NONE)")
    copy.execute("DROP SUBSCRIPTION rb_copy")
    wait_for(adm, "SELECT NOT active FROM pg_replication_slots WHERE slot_name = 'rb_copy'", 20)
    adm.execute("SELECT pg_drop_replication_slot('rb_copy')")

if PHASE == "preloaded":
    # The copies rely on the two triggers firing ALWAYS. While they do not, a session that
    # published before must still route by the table: changes made with them disabled, and
    # a replica-mode writer's after ENABLE TRIGGER ALL (which a data-only restore with
    # --disable-triggers runs) left them firing in origin mode only. Before, both kept the
    # old copy: the event went to a deleted handler, or missed the new one.
    def routed(event_id):
        return [r[0] for r in adm.execute("SELECT handler FROM relaybus.deliveries WHERE event_id = %s "
                                          "ORDER BY handler", (event_id,)).fetchall()]

    warnings = []
    app = connect()
    app.add_notice_handler(lambda d: warnings.append(d.message_primary) if d.severity_nonlocalized == "WARNING"
                           else None)
    adm.execute("SELECT relaybus.subscribe('trg_a', ARRAY['trg.t'])")
    adm.execute("ALTER TABLE relaybus.subscriptions DISABLE TRIGGER ALL")  # as a restore does, committed
    app.execute("SELECT relaybus.publish('trg.warm', '{}')")  # reads the subscriptions now
    adm.execute("DELETE FROM relaybus.subscriptions WHERE handler = 'trg_a'")
    adm.execute("INSERT INTO relaybus.subscriptions (handler, event_types) VALUES ('trg_b', ARRAY['trg.t'])")
    app.execute("SELECT relaybus.publish('trg.t', '{}', event_id => 'trg-1')")
    check("with the triggers disabled, a session that published before routes by the table (trg-1)",
          routed("trg-1") == ["trg_b"], f"routed to {routed('trg-1')}")
    check("it warns once that publish reads the table, with the fix in the hint",
          len([w for w in warnings if "do not fire always" in w]) == 1, f"warnings: {warnings}")
    adm.execute("ALTER TABLE relaybus.subscriptions ENABLE TRIGGER ALL")  # origin mode only
    app.execute("SELECT relaybus.publish('trg.warm', '{}')")
    adm.execute("SET session_replication_role = replica")  # as an apply worker writes
    adm.execute("INSERT INTO relaybus.subscriptions (handler, event_types) VALUES ('trg_c', ARRAY['trg.t'])")
    adm.execute("RESET session_replication_role")
    app.execute("SELECT relaybus.publish('trg.t', '{}', event_id => 'trg-2')")
    check("with the triggers enabled in origin mode only, a replica-mode insert is routed to (trg-2)",
          routed("trg-2") == ["trg_b", "trg_c"], f"routed to {routed('trg-2')}")
    # How often the app's publishes read the table: pg_stat_statements counts relaybus's
    # own statement (tracked as a nested one).
    adm.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    app.execute("SET pg_stat_statements.track = 'all'")

    def table_reads():
        return one(adm, "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE "
                        "'SELECT s.handler, s.event_types, s.sql_function IS NOT NULL FROM relaybus.subscriptions%%'")

    before = table_reads()
    for _ in range(3):
        app.execute("SELECT relaybus.publish('trg.warm', '{}')")
    check("while they do not fire always, every publish reads the table",
          table_reads() - before == 3, f"{table_reads() - before} reads for 3 publishes")
    adm.execute("ALTER TABLE relaybus.subscriptions ENABLE ALWAYS TRIGGER subscriptions_changed, "
                "ENABLE ALWAYS TRIGGER subscriptions_truncated")
    before = table_reads()
    for _ in range(3):
        app.execute("SELECT relaybus.publish('trg.warm', '{}')")
    check("once they fire always again, a copy is kept (one read for three publishes)",
          table_reads() - before == 1, f"{table_reads() - before} reads for 3 publishes")
    adm.execute("SELECT relaybus.unsubscribe('trg_b')")
    app.execute("SELECT relaybus.publish('trg.t', '{}', event_id => 'trg-3')")
    check("with the triggers firing always again, the copy follows changes (trg-3)",
          routed("trg-3") == ["trg_c"], f"routed to {routed('trg-3')}")
    check("no more warnings once they fire always",
          len([w for w in warnings if "do not fire always" in w]) == 1, f"warnings: {warnings}")

print(f"# subscription_commit {PHASE}: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
