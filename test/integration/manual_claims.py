"""Checks the manual's statements of fact against a running cluster (see manual_claims.sh).

Usage: manual_claims.py CONNINFO   (a libpq conninfo without dbname; relaybus preloaded,
max_prepared_transactions > 0, relaybus.database = postgres)

Prints one TAP-like line per check and exits 1 if any failed. Every check names the page
and section of docs/ whose statement it tests.
"""
import sys
import time

try:
    import psycopg
    from psycopg import errors
except ImportError:
    print("not ok - python3-psycopg is not installed (apt-get install python3-psycopg)")
    sys.exit(1)

BASE = sys.argv[1]
failed = 0
passed = 0


def check(where, what, condition, detail=""):
    global failed, passed
    if condition:
        passed += 1
        print(f"ok - [{where}] {what}")
    else:
        failed += 1
        print(f"not ok - [{where}] {what}" + (f": {detail}" if detail else ""))


def connect(db, **kw):
    return psycopg.connect(f"{BASE} dbname={db}", autocommit=True, **kw)


def one(conn, sql, *args):
    return conn.execute(sql, args).fetchone()[0]


def rows(conn, sql, *args):
    return conn.execute(sql, args).fetchall()


def sqlstate_of(fn):
    return error_of(fn)[0]


def error_of(fn):
    """(sqlstate, detail) of the error fn raises, or (None, None)."""
    try:
        fn()
    except psycopg.Error as e:
        return e.sqlstate, e.diag.message_detail or ""
    return None, None


def end_transaction(conn):
    # A failed PREPARE TRANSACTION has already rolled back; anything else is rolled back here.
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        conn.execute("ROLLBACK")


adm = connect("postgres")
adm.execute("DROP DATABASE IF EXISTS manual_other")
adm.execute("CREATE DATABASE manual_other")
adm.execute("CREATE EXTENSION relaybus")
adm.execute("SELECT relaybus.subscribe('mailer', ARRAY['order.placed'])")
adm.execute("CREATE TABLE sink (id text PRIMARY KEY)")
adm.execute("CREATE FUNCTION sink_it(e jsonb) RETURNS void LANGUAGE sql "
            "AS $$ INSERT INTO public.sink VALUES (e->>'id') $$")
adm.execute("SELECT relaybus.subscribe('indb', ARRAY['order.indb'], sql_function => 'sink_it(jsonb)')")


def delivery_count(conn, event_id):
    """The event's deliveries not finished yet (pending, processing or dead), through the SQL
    API: on 0.3.0 relaybus.deliveries keeps a finished delivery."""
    return one(conn, "SELECT count(*) FROM relaybus.list_deliveries(NULL, NULL, 1000000) WHERE event_id = %s",
               event_id)


# --- faq.md, Two-phase commit -----------------------------------------------------------------
W = "faq.md#two-phase-commit"
tx = connect("postgres")
tx.execute("BEGIN")
tx.execute("SELECT relaybus.publish('order.placed', '{}', event_id => '2pc-1')")
state = sqlstate_of(lambda: tx.execute("PREPARE TRANSACTION 'm1'"))
end_transaction(tx)
check(W, "PREPARE TRANSACTION after publish to an external handler fails with 0A000",
      state == "0A000", f"got {state}")
check(W, "the failed PREPARE rolled the publish back", delivery_count(adm, "2pc-1") == 0)

tx.execute("BEGIN")
tx.execute("SELECT relaybus.publish('order.placed', '{}', event_id => '2pc-late')")
tx.execute("SET LOCAL relaybus.notify = off")
state = sqlstate_of(lambda: tx.execute("PREPARE TRANSACTION 'm2'"))
end_transaction(tx)
check(W, "PREPARE after publishing fails whatever relaybus.notify says, set late or not (0A000)", state == "0A000",
      f"got {state}")

tx.execute("BEGIN")
tx.execute("SET LOCAL relaybus.notify = off")
tx.execute("SELECT relaybus.publish('order.placed', '{}', event_id => '2pc-2')")
state = sqlstate_of(lambda: tx.execute("PREPARE TRANSACTION 'm3'"))
end_transaction(tx)
check(W, "relaybus.notify = off before publishing does not let the transaction prepare (0A000)",
      state == "0A000", f"got {state}")
check(W, "... and nothing of it is left", delivery_count(adm, "2pc-2") == 0)

adm.execute("CREATE ROLE manual_app LOGIN")
adm.execute("SELECT relaybus.grant_rights('manual_app', 'publisher')")
adm.execute("CREATE ROLE manual_other_app LOGIN")
app = connect("postgres", user="manual_other_app")
state = sqlstate_of(lambda: app.execute("SET relaybus.notify = off"))
check(W, "a role without GRANT SET ON PARAMETER cannot set relaybus.notify (42501)",
      state == "42501", f"got {state}")
adm.execute("GRANT SET ON PARAMETER relaybus.notify TO manual_app")
app2 = connect("postgres", user="manual_app")
state = sqlstate_of(lambda: app2.execute("SET relaybus.notify = off"))
check(W, "GRANT SET ON PARAMETER relaybus.notify lets the role set it", state is None,
      f"got {state}")

tx.execute("BEGIN")
tx.execute("SELECT relaybus.publish('order.indb', '{}', event_id => '2pc-indb')")
state = sqlstate_of(lambda: tx.execute("PREPARE TRANSACTION 'm4'"))
end_transaction(tx)
check(W, "a transaction publishing only to an in-database handler cannot be prepared either (0A000)",
      state == "0A000", f"got {state}")
time.sleep(0.5)  # several polls of the handler workers (100 ms)
check(W, "... and its in-database handler never runs it",
      one(adm, "SELECT count(*) FROM sink WHERE id = '2pc-indb'") == 0
      and delivery_count(adm, "2pc-indb") == 0)

tx.execute("BEGIN")
tx.execute("SET LOCAL relaybus.notify = off")
tx.execute("SELECT relaybus.subscribe('prepared_sub', ARRAY['order.placed'])")
state = sqlstate_of(lambda: tx.execute("PREPARE TRANSACTION 'm5'"))
end_transaction(tx)
check(W, "PREPARE TRANSACTION after a change to the subscriptions fails with 0A000",
      state == "0A000", f"got {state}")
check(W, "the failed PREPARE rolled the subscribe back",
      one(adm, "SELECT count(*) FROM relaybus.subscriptions WHERE handler = 'prepared_sub'") == 0)

# --- worker-guide.md, Wake-ups and polling ------------------------------------------------
W = "worker-guide.md#wake-ups-and-polling"
listener = connect("postgres")
heard = []
listener.add_notify_handler(lambda n: heard.append((n.channel, n.payload)))
listener.execute("LISTEN relaybus")
pub = psycopg.connect(f"{BASE} dbname=postgres")
with pub.transaction():
    for i in range(3):
        pub.execute("SELECT relaybus.publish('order.placed', '{}', event_id => %s)", (f"n-{i}",))
pub.execute("SELECT relaybus.publish('order.placed', '{}', event_id => 'n-rolled-back')")
pub.rollback()
pub.execute("SELECT relaybus.publish('order.placed', '{}', event_id => 'n-0')")  # a repeat
pub.commit()
pub.execute("SELECT relaybus.publish('order.indb', '{}', event_id => 'n-indb')")
pub.commit()
pub.execute("SELECT relaybus.publish('nobody.listens', '{}', event_id => 'n-none')")
pub.commit()
time.sleep(0.3)
listener.execute("SELECT 1")  # notifications arrive with the next exchange
check(W, "one NOTIFY relaybus per transaction and handler, with the handler as payload; none "
      "for a rollback, a repeat that adds nothing, an in-database handler or no handler",
      heard == [("relaybus", "mailer")], f"heard {heard}")

# --- faq.md, A handler subscribed late did not get older events ----------------------------
W = "faq.md#a-handler-subscribed-late-did-not-get-older-events"
adm.execute("SELECT relaybus.publish('late.type', '{}', event_id => 'late-1')")
adm.execute("SELECT relaybus.subscribe('late', ARRAY['late.type'])")
before = one(adm, "SELECT count(*) FROM relaybus.deliveries WHERE handler = 'late'")
adm.execute("SELECT relaybus.publish('late.type', '{\"ignored\": true}', event_id => 'late-1')")
after = one(adm, "SELECT count(*) FROM relaybus.deliveries WHERE handler = 'late'")
check(W, "a new subscription gets no delivery for an event published before it", before == 0)
check(W, "publishing the same event id again adds the new handler's delivery", after == 1)

# --- pools-and-pgbouncer.md, Why a pool needs a holder -------------------------------------
W = "pools-and-pgbouncer.md#why-a-pool-needs-a-holder"
adm.execute("SELECT relaybus.subscribe('pooled', ARRAY['p'])")
adm.execute("SELECT relaybus.publish('p', '{}', event_id => 'p-1')")
c1 = connect("postgres")
tok1 = one(c1, "SELECT lease_token FROM relaybus.claim('pw', 10, '5 minutes', ARRAY['pooled'])")
c1.close()  # what a pool does to an idle connection
time.sleep(0.3)
c2 = connect("postgres")
again = rows(c2, "SELECT event_id, attempts FROM relaybus.claim('pw', 10, '5 minutes', ARRAY['pooled'])")
check(W, "without a holder, a closed connection's lane is taken over by the name's next claim, "
      "charging an attempt", again == [("p-1", 1)], f"got {again}")
check(W, "and the first token's complete returns false",
      one(c2, "SELECT relaybus.complete(%s)", tok1) is False)
c2.execute("SELECT relaybus.complete_many(ARRAY(SELECT lease_token FROM relaybus.claim('pw', 10, "
           "'5 minutes', ARRAY['pooled'])))")
c2.execute("SELECT relaybus.relinquish('pw')")

adm.execute("SELECT relaybus.publish('p', '{}', event_id => 'p-2')")
c3 = connect("postgres")
tok2 = one(c3, "SELECT lease_token FROM relaybus.claim('ph', 10, '5 minutes', ARRAY['pooled'], 'proc-a')")
c3.close()
time.sleep(0.3)
c4 = connect("postgres")
again = rows(c4, "SELECT event_id FROM relaybus.claim('ph', 10, '5 minutes', ARRAY['pooled'], 'proc-a')")
check(W, "with a holder, a closed connection changes nothing (no takeover)", again == [],
      f"got {again}")
check(W, "another connection passing the pair completes the token",
      one(c4, "SELECT relaybus.complete(%s)", tok2) is True)
c4.execute("SELECT relaybus.relinquish('ph', 'proc-a')")

W = "pools-and-pgbouncer.md#choosing-a-holder"
adm.execute("SELECT relaybus.publish('p', '{}', event_id => 'p-3')")
c5 = connect("postgres")
c5.execute("SELECT relaybus.claim('pf', 10, '1 second', ARRAY['pooled'], 'host-a')")
c5.close()
c6 = connect("postgres")  # the restarted process, with the same holder
got = []
for _ in range(6):  # 1.8 s: past the 1 s lease, renewed as a live worker does
    got += rows(c6, "SELECT event_id FROM relaybus.claim('pf', 10, '1 second', ARRAY['pooled'], 'host-a')")
    c6.execute("SELECT relaybus.extend_lease('pf', '1 second', 'host-a')")
    time.sleep(0.3)
other_got = rows(adm, "SELECT event_id FROM relaybus.claim('px', 10, '1 second', ARRAY['pooled'], 'x')")
check(W, "a restarted process reusing its holder adopts the lane: while it renews, its "
      "predecessor's in-flight delivery is handed out to nobody",
      got == [] and other_got == [], f"same holder got {got}, another worker got {other_got}")
time.sleep(1.3)  # renewals stop: the lease runs out and the maintenance worker takes it over
fresh = rows(c6, "SELECT event_id, attempts FROM relaybus.claim('pf', 10, '1 second', ARRAY['pooled'], 'host-a-2')")
check(W, "once renewals stop and the lease expires, the delivery is taken over with one "
      "attempt charged", fresh == [("p-3", 1)], f"got {fresh}")
c6.execute("SELECT relaybus.complete_many(ARRAY(SELECT lease_token FROM relaybus.claim('pf', 10, "
           "'1 second', ARRAY['pooled'], 'host-a-2')))")

# --- worker-guide.md, Leases and renewal ----------------------------------------------------
W = "worker-guide.md#leases-and-renewal"
adm.execute("SELECT relaybus.subscribe('renew', ARRAY['r'])")
adm.execute("SELECT relaybus.publish('r', '{}', event_id => 'r-1')")
w = connect("postgres")
rtok = one(w, "SELECT lease_token FROM relaybus.claim('rw', 1, '30 seconds', ARRAY['renew'], 'rh')")
w.execute("BEGIN")
w.execute("SELECT pg_sleep(1.3)")
renewed = one(w, "SELECT relaybus.extend_lease('rw', '1 second', 'rh')")
expired = one(w, "SELECT bool_and(lease_expires_at < clock_timestamp()) FROM relaybus.lanes "
                 "WHERE lease_owner = 'rw'")
w.execute("ROLLBACK")  # keep the 30 s lease, so that no takeover interferes below
check(W, "extend_lease inside a transaction older than the lease sets an expiry that has passed",
      renewed == 1 and expired is True, f"renewed {renewed}, expired {expired}")
renewed = one(w, "SELECT relaybus.extend_lease('rw', '1 second', 'rh')")
live = one(w, "SELECT bool_and(lease_expires_at > clock_timestamp()) FROM relaybus.lanes "
              "WHERE lease_owner = 'rw'")
check(W, "extend_lease in a short transaction of its own renews", renewed == 1 and live is True,
      f"renewed {renewed}, live {live}")
one(w, "SELECT relaybus.complete(%s)", rtok)

# --- worker-guide.md, Transactional handlers ------------------------------------------------
W = "worker-guide.md#transactional-handlers-effectively-once-for-database-writes"
adm.execute("SELECT relaybus.subscribe('early', ARRAY['early.t'])")
adm.execute("CREATE TABLE effects (id text PRIMARY KEY)")
adm.execute("SELECT relaybus.publish('early.t', '{}', event_id => 'early-1')")
h = psycopg.connect(f"{BASE} dbname=postgres")
etok = one(h, "SELECT lease_token FROM relaybus.claim('ea', 1, '1 second', ARRAY['early'], 'ha')")
h.commit()
first = one(h, "SELECT relaybus.complete(%s)", etok)
time.sleep(1.3)  # the lease expires while the handler's transaction is open
other = connect("postgres")
stolen = rows(other, "SELECT event_id FROM relaybus.claim('eb', 10, '30 seconds', ARRAY['early'], 'hb')")
h.execute("INSERT INTO effects VALUES ('early-1')")
h.commit()
check(W, "complete first: another worker's claim does not take the lane over while the "
      "handler's transaction is open, even after the lease expired",
      first is True and stolen == [], f"complete {first}, other claim {stolen}")
check(W, "after the commit the delivery is gone and the effect happened once",
      delivery_count(adm, "early-1") == 0
      and one(adm, "SELECT count(*) FROM effects WHERE id = 'early-1'") == 1)

adm.execute("SELECT relaybus.publish('early.t', '{}', event_id => 'early-2')")
etok = one(other, "SELECT lease_token FROM relaybus.claim('eb', 1, '30 seconds', ARRAY['early'], 'hb')")
h.execute("SELECT relaybus.complete(%s)", (etok,))
h.rollback()  # the work failed after the completion
check(W, "after a rollback the token still works for fail",
      one(other, "SELECT relaybus.fail(%s, 'work failed')", etok) == "retry")

# --- worker-guide.md, Ordering -----------------------------------------------------------
W = "worker-guide.md#ordering-what-is-guaranteed-and-what-is-not"
adm.execute("SELECT relaybus.subscribe('ord', ARRAY['o'])")
o = psycopg.connect(f"{BASE} dbname=postgres")
o.execute("SELECT relaybus.publish('o', '{}', key => 'K', event_id => 'zz-first')")
o.execute("SELECT relaybus.publish('o', '{}', key => 'K', event_id => 'aa-second')")
o.commit()
ran = []
for _ in range(3):
    for t, e in rows(adm, "SELECT lease_token, event_id FROM relaybus.claim('ow', 10, '30 seconds', "
                          "ARRAY['ord'], 'oh')"):
        ran.append(e)
        adm.execute("SELECT relaybus.complete(%s)", (t,))
check(W, "two publishes of one key in one transaction run in call order",
      ran == ["zz-first", "aa-second"], f"ran {ran}")
adm.execute("SELECT relaybus.publish('o', '{}', key => 'F', event_id => 'f-1', "
            "available_at => now() + interval '1 hour')")
adm.execute("SELECT relaybus.publish('o', '{}', key => 'F', event_id => 'f-2')")
blocked = rows(adm, "SELECT event_id FROM relaybus.claim('ow', 10, '30 seconds', ARRAY['ord'], 'oh')")
check(W, "a key whose head is not due yet holds back the key's later deliveries",
      blocked == [], f"got {blocked}")

# --- faq.md, Table bloat and vacuum ----------------------------------------------------------
W = "faq.md#table-bloat-and-vacuum"
adm.execute("SELECT relaybus.subscribe('bloat', ARRAY['b'])")
adm.execute("SELECT count(*) FROM relaybus.publish_batch((SELECT jsonb_agg(jsonb_build_object("
            "'type', 'b', 'payload', jsonb_build_object('n', i))) FROM generate_series(1, 200) i))")
adm.execute("ALTER TABLE relaybus.deliveries SET (autovacuum_enabled = off)")
adm.execute("SELECT pg_stat_force_next_flush()")
time.sleep(0.2)
adm.execute("SELECT pg_stat_clear_snapshot()")
dead_before = one(adm, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'relaybus.deliveries'::regclass")
done = 0
while True:
    toks = [r[0] for r in rows(adm, "SELECT lease_token FROM relaybus.claim('bw', 100, '30 seconds', "
                                    "ARRAY['bloat'], 'bh')")]
    if not toks:
        break
    done += one(adm, "SELECT relaybus.complete_many(%s)", toks)
adm.execute("SELECT pg_stat_force_next_flush()")
time.sleep(0.2)
adm.execute("SELECT pg_stat_clear_snapshot()")
dead_after = one(adm, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'relaybus.deliveries'::regclass")
adm.execute("ALTER TABLE relaybus.deliveries RESET (autovacuum_enabled)")
# Nothing per delivery: deliveries are written once and never updated or deleted on the
# happy path (a claim and a completion write a progress row per lane).
check(W, "completing deliveries leaves no dead tuple in relaybus.deliveries",
      done == 200 and dead_after - dead_before == 0, f"completed {done}, dead {dead_before} -> {dead_after}")

# --- faq.md, Errors you may see ---------------------------------------------------------------
W = "faq.md#errors-you-may-see"
check(W, "relaybus-sql- worker names are refused with 42501",
      sqlstate_of(lambda: adm.execute("SELECT relaybus.claim('relaybus-sql-9')")) == "42501")
check(W, "claiming an unsubscribed handler raises 42704",
      sqlstate_of(lambda: adm.execute("SELECT relaybus.claim('x', handlers => ARRAY['nope'])")) == "42704")
check(W, "a string that is not a token raises 22023",
      sqlstate_of(lambda: adm.execute("SELECT relaybus.complete('nonsense')")) == "22023")

# --- faq.md, One database per cluster ---------------------------------------------------------
W = "faq.md#one-database-per-cluster-relaybusdatabase"
oth = connect("manual_other")
oth.execute("CREATE EXTENSION relaybus")
oth.execute("CREATE FUNCTION f(e jsonb) RETURNS void LANGUAGE sql AS $$ SELECT $$")
notices = []
oth.add_notice_handler(lambda d: notices.append(d.message_primary))
oth.execute("SELECT relaybus.subscribe('h', ARRAY['t'], sql_function => 'f(jsonb)')")
check(W, "subscribing an in-database handler in another database gives a NOTICE",
      any("no background worker runs in-database handlers" in (m or "") for m in notices),
      f"notices {notices}")

# --- faq.md, What DROP EXTENSION relaybus removes, and what it leaves ---------------------------
W = "faq.md#what-drop-extension-relaybus-removes-and-what-it-leaves"
oth.execute("CREATE ROLE manual_holder")
oth.execute("SELECT relaybus.grant_rights('manual_holder', 'publisher')")
oth.execute("DROP EXTENSION relaybus")
check(W, "DROP EXTENSION removes relaybus's tables and functions",
      one(oth, "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
               "WHERE n.nspname = 'relaybus'") == 0
      and one(oth, "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                   "WHERE n.nspname = 'relaybus'") == 0)
check(W, "and the schema relaybus_internal with the internal helpers",
      one(oth, "SELECT count(*) FROM pg_namespace WHERE nspname = 'relaybus_internal'") == 0)
check(W, "it leaves the schema relaybus", one(oth, "SELECT count(*) FROM pg_namespace WHERE nspname = 'relaybus'") == 1)
# This cluster never had relaybus 0.2.0: CREATE EXTENSION made no role of the cluster's.
check(W, "no relaybus roles: relaybus_admin, relaybus_worker, relaybus_publisher do not exist",
      one(oth, "SELECT count(*) FROM pg_roles WHERE rolname IN ('relaybus_admin', 'relaybus_worker', "
               "'relaybus_publisher')") == 0)
oth.execute("BEGIN")
state, detail = error_of(lambda: oth.execute("DROP ROLE manual_holder"))
oth.execute("ROLLBACK")
check(W, "DROP ROLE of a role given a right fails on the leftover schema's grants (2BP01)",
      state == "2BP01" and "privileges for schema relaybus" in detail, f"got {state}: {detail}")
oth.execute("DROP SCHEMA relaybus")
check(W, "after DROP SCHEMA relaybus that role can be dropped",
      sqlstate_of(lambda: oth.execute("DROP ROLE manual_holder")) is None)
check(W, "CREATE EXTENSION works again after DROP SCHEMA",
      sqlstate_of(lambda: oth.execute("CREATE EXTENSION relaybus")) is None)

for c in (tx, app, app2, listener, pub, w, h, other, o, oth):
    c.close()
print(f"# {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
