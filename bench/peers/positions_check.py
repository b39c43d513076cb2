#!/usr/bin/env python3
"""What the positions prototype (positions.py) must keep when completions come out of order,
which a benchmark drain never shows (it completes every batch whole):

- completions in random order: a third of the outstanding deliveries, chosen at random,
  complete after each claim. Every event is delivered and completed exactly once, no key
  has two deliveries in flight, a key's deliveries are claimed in publish order, a lane
  never holds more than 32 in flight (one lane is given 150 unkeyed events, so that the cap
  binds), and its out-of-order set stays inside the claim window (at most 64 positions
  above the cursor);
- a completion twice is a no-op (complete_many returns 0);
- a lane hands out at most 32 deliveries at a time, however large the claim;
- a live lease is not taken: a second worker claims nothing from lanes another holds;
- fencing: a worker whose lease expired and was taken over completes nothing, and the new
  holder gets its deliveries again;
- free lanes are taken oldest work first: with five lanes of work, the oldest in the highest
  lane, a claim of one gets the oldest;
- publishers and the lane's worker do not wait for each other: with a publish to a lane
  open (its counter row locked until commit), the lane's worker completes and claims under
  a lock_timeout; and a REPEATABLE READ publisher whose snapshot predates those writes to
  the lane publishes to it without a serialization failure.

With --system positions_log, the same checks run against positions_log.py (positions from
the commit log), where a publisher holds no lane until its commit; and three more that only
it needs:

- absent positions: deliveries published in a subtransaction that rolls back leave
  positions in the log with no delivery; claims fold them into the cursor (every other
  event is delivered, in per-key order, the lane is released and nothing counts as
  unfinished);
- commit order: of two open transactions publishing to one lane, the one that commits
  first takes the lower positions, and a key published by both is claimed in commit order;
- publishers of one lane do not wait for each other: with one open transaction holding a
  publish to a lane, another publishes to the lane and commits under a lock_timeout.

With --system positions_staged, the same checks run against positions_staged.py (deliveries
staged in backend memory and inserted at commit with their positions), and three of its
own:

- commit order: of two open transactions publishing to one lane, the one that commits first
  takes the lower positions, and a key published by both is claimed in commit order;
- publishers of one lane do not wait for each other: with one open transaction holding a
  publish to a lane, another publishes to the lane and commits under a lock_timeout;
- savepoints: deliveries staged in a subtransaction that rolls back leave no position
  behind (the lane's positions are 1..n, the survivors in publish order; a transaction
  whose only publish was rolled back writes none), a transaction sees its own events but
  none of its deliveries before it commits, and the drain delivers every survivor once,
  the key in order, and releases the lane.

Every check also asserts the cursor's invariant that the claim of positions_log.py relies
on: acked_upto + 1 is never in the done set.

Usage: positions_check.py --conn CONNINFO [--system positions|positions_log|positions_staged]
[--events N] [--seed S]. It recreates the relaybus_next schema in that database
(positions_log and positions_staged need a superuser, for the library's function). Prints
TAP lines; exits 1 on the first broken rule.
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import positions  # noqa: E402
import positions_log  # noqa: E402
import positions_staged  # noqa: E402
import runner  # noqa: E402
import psycopg  # noqa: E402

CLAIM = ("SELECT token, event_id, key FROM relaybus_next.claim(%s, %s, %s, %s::interval)")
COMPLETE = "SELECT relaybus_next.complete_many(%s, %s)"
SYSTEMS = {"positions": positions.Positions, "positions_log": positions_log.PositionsLog,
           "positions_staged": positions_staged.PositionsStaged}
System = positions.Positions  # the system checked: main() sets it from --system


def fail(msg):
    print(f"not ok - {msg}")
    sys.exit(1)


def events(count, keys):
    """c-1 .. c-N, the even ones keyed k<i mod keys> (keys/2 distinct keys for an even
    `keys`), so that keys repeat often."""
    return [runner.Event(f"c-{i}", f"k{i % keys}" if i % 2 == 0 else None, i, json.dumps({"n": i}))
            for i in range(1, count + 1)]


def one_lane(conn, prefix, count):
    """`count` unkeyed events whose ids hash to lane 0, as publish places them."""
    ids = [r[0] for r in conn.execute(
        "SELECT id FROM (SELECT %s || g AS id FROM generate_series(1, 100000) g) x "
        "WHERE (hashtext(id) & 255) = 0 LIMIT %s", (prefix, count))]
    return [runner.Event(i, None, n, "{}") for n, i in enumerate(ids, 1)]


def publish(system, conn, evs):
    # Both publish paths: the first half one statement per event, the rest 100 per statement.
    half = len(evs) // 2
    for e in evs[:half]:
        system.publish(conn, [e])
    for i in range(half, len(evs), 100):
        system.publish(conn, evs[i:i + 100])


def out_of_order(conn, count, rng):
    system = System()
    system.reset(conn)
    evs = events(count, 20) + one_lane(conn, "hot-", 150)
    publish(system, conn, evs)
    count = len(evs)
    order = {e.id: (e.key, e.n) for e in evs}
    completed, outstanding = set(), {}  # outstanding: token -> event id
    claimed_per_key = {}
    steps = 0
    while len(completed) < count:
        steps += 1
        if steps > 20 * count:
            fail(f"no progress: {len(completed)} of {count} completed after {steps} steps")
        rows = conn.execute(CLAIM, (runner.HANDLER, "check", 200, "1 hour")).fetchall()
        in_flight_keys = {order[e][0] for e in outstanding.values() if order[e][0] is not None}
        for token, event_id, key in rows:
            if event_id in completed or event_id in outstanding.values():
                fail(f"{event_id} claimed again while completed or in flight")
            if key is not None:
                if key in in_flight_keys:
                    fail(f"key {key}: two deliveries in flight ({event_id})")
                n = order[event_id][1]
                if claimed_per_key.get(key, 0) > n:
                    fail(f"key {key}: {event_id} claimed after a later event of the key")
                claimed_per_key[key] = n
                in_flight_keys.add(key)
            outstanding[token] = event_id
        if not rows and not outstanding:
            fail(f"claim returned nothing with {count - len(completed)} events not completed")
        bounds = conn.execute(
            "SELECT coalesce(max(cardinality(in_flight)), 0), "
            "coalesce(max((SELECT max(p) FROM unnest(done) p) - acked_upto), 0), "
            "count(*) FILTER (WHERE acked_upto + 1 = ANY (done)) FROM relaybus_next.lanes").fetchone()
        if bounds[0] > 32 or bounds[1] > 64:
            fail(f"a lane holds {bounds[0]} in flight or a done position {bounds[1]} above its cursor")
        if bounds[2]:
            fail(f"{bounds[2]} lanes have the position after their cursor in their done set")
        tokens = list(outstanding)
        pick = rng.sample(tokens, max(1, len(tokens) // 3)) if tokens else []
        got = conn.execute(COMPLETE, (runner.HANDLER, pick)).fetchone()[0]
        if got != len(pick):
            fail(f"complete_many completed {got} of {len(pick)} held tokens")
        for t in pick:
            completed.add(outstanding.pop(t))
    if completed != set(order):
        fail("the completed events are not the published ones")
    left = system.unfinished(conn)
    if left != 0:
        fail(f"every event completed but the cursors count {left} unfinished")
    print(f"ok - {count} events completed out of order in {steps} steps: each once, "
          "no key twice in flight, keys in publish order, lanes inside their bounds")
    # `pick` of the last step: completed already.
    if conn.execute(COMPLETE, (runner.HANDLER, pick)).fetchone()[0] != 0:
        fail("a second completion of the same tokens completed something")
    print("ok - completing the same tokens again is a no-op")


def live_lease(conn):
    system = System()
    system.reset(conn)
    system.publish(conn, events(10, 1))
    held = conn.execute(CLAIM, (runner.HANDLER, "holder", 100, "1 hour")).fetchall()
    other = conn.execute(CLAIM, (runner.HANDLER, "other", 100, "1 hour")).fetchall()
    if not held or other:
        fail(f"the holder claimed {len(held)}, a second worker {len(other)} from the held lanes")
    print("ok - a second worker claims nothing from lanes another worker holds")


def fencing(conn):
    system = System()
    system.reset(conn)
    system.publish(conn, events(10, 1))  # one key: c-2 .. c-10 even, plus unkeyed ones
    old = conn.execute(CLAIM, (runner.HANDLER, "old", 100, "0 seconds")).fetchall()
    if not old:
        fail("the first worker claimed nothing")
    new = conn.execute(CLAIM, (runner.HANDLER, "new", 100, "30 seconds")).fetchall()
    if {r[1] for r in new} != {r[1] for r in old}:
        fail("the new holder did not get the expired worker's deliveries again")
    if conn.execute(COMPLETE, (runner.HANDLER, [r[0] for r in old])).fetchone()[0] != 0:
        fail("a worker whose lanes were taken over completed its stale tokens")
    if conn.execute(COMPLETE, (runner.HANDLER, [r[0] for r in new])).fetchone()[0] != len(new):
        fail("the new holder could not complete its deliveries")
    print("ok - a taken-over worker's tokens complete nothing; the new holder runs them")


def lane_cap(conn):
    system = System()
    system.reset(conn)
    system.publish(conn, one_lane(conn, "cap-", 100))
    got = conn.execute(CLAIM, (runner.HANDLER, "cap", 500, "30 seconds")).fetchall()
    if len(got) != 32:
        fail(f"a claim of 500 from one lane of 100 events took {len(got)}, not its cap of 32")
    print("ok - a lane of 100 unkeyed events gives a claim of 500 its cap of 32")


def publishers_apart(conn, conninfo):
    system = System()
    system.reset(conn)
    evs = one_lane(conn, "apart-", 12)
    system.publish(conn, evs[:10])
    first = conn.execute(CLAIM, (runner.HANDLER, "apart", 5, "30 seconds")).fetchall()
    with psycopg.connect(conninfo) as publisher:
        # Not committed: positions.py's counter row stays locked; positions_log.py and
        # positions_staged.py lock nothing before the commit.
        system.publish(publisher, [evs[10]])
        conn.execute("SET lock_timeout = '2s'")
        try:
            done = conn.execute(COMPLETE, (runner.HANDLER, [r[0] for r in first])).fetchone()[0]
            more = conn.execute(CLAIM, (runner.HANDLER, "apart", 5, "30 seconds")).fetchall()
        except psycopg.errors.LockNotAvailable:
            fail("the lane's worker waited for an open publisher of its lane")
        finally:
            conn.execute("RESET lock_timeout")
        if done != len(first) or len(more) != 5:
            fail(f"with a publisher open, {done} of {len(first)} completed and a claim took {len(more)} of 5")
        publisher.commit()
        # A snapshot older than the lane's next write: publishing to the lane must not
        # conflict with that write (only with another publisher of the lane, as a keyed
        # publish with the key's counter today).
        publisher.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        publisher.execute("SELECT count(*) FROM relaybus_next.events")  # takes the snapshot
        if conn.execute(COMPLETE, (runner.HANDLER, [r[0] for r in more])).fetchone()[0] != 5:
            fail("the second batch did not complete")
        try:
            system.publish(publisher, [evs[11]])
            publisher.commit()
        except psycopg.errors.SerializationFailure:
            fail("a REPEATABLE READ publisher failed because the lane's worker wrote the lane")
    left = conn.execute(CLAIM, (runner.HANDLER, "apart", 100, "30 seconds")).fetchall()
    if {r[1] for r in left} != {e.id for e in evs[10:]}:
        fail(f"the two late events were not claimable after their commits: {sorted(r[1] for r in left)}")
    print("ok - an open publisher and the lane's worker do not wait for each other; "
          "a REPEATABLE READ publisher is not failed by the lane's writes")


def oldest_first(conn):
    system = System()
    system.reset(conn)
    by_lane = {}  # lane -> an unkeyed event id in it
    for i in range(1, 2000):
        lane = conn.execute("SELECT hashtext(%s) & 255", (f"old-{i}",)).fetchone()[0]
        by_lane.setdefault(lane, f"old-{i}")
        if len(by_lane) == 256:
            break
    high = max(by_lane)
    system.publish(conn, [runner.Event(by_lane[high], None, 0, "{}")])
    conn.execute("SELECT pg_sleep(0.01)")  # later due times for the rest
    system.publish(conn, [runner.Event(by_lane[lane], None, n, "{}") for n, lane in enumerate(sorted(by_lane)[:5], 1)])
    got = conn.execute(CLAIM, (runner.HANDLER, "oldest", 1, "30 seconds")).fetchall()
    if [r[1] for r in got] != [by_lane[high]]:
        fail(f"a claim of one took {[r[1] for r in got]}, not the oldest event {by_lane[high]} (lane {high})")
    print(f"ok - a claim of one takes the oldest work (lane {high}) before five newer lanes below it")


def keys_in_lane0(conn, prefix, count):
    return [r[0] for r in conn.execute(
        "SELECT k FROM (SELECT %s || g AS k FROM generate_series(1, 100000) g) x "
        "WHERE (hashtext(k) & 255) = 0 LIMIT %s", (prefix, count))]


def lane0(conn):
    return conn.execute(
        "SELECT acked_upto, done, in_flight, lease_owner, "
        "(SELECT max(first_position + span - 1) FROM relaybus_next.lane_commits c WHERE c.lane = 0) "
        "FROM relaybus_next.lanes WHERE lane = 0").fetchone()


def drain_lane(conn, worker, limit=20):
    """Claims (100 at a time) and completes until a claim returns nothing; the claimed
    event ids in claim order, and the tokens."""
    order, tokens = [], []
    for _ in range(limit):
        rows = conn.execute(CLAIM, (runner.HANDLER, worker, 100, "1 hour")).fetchall()
        if not rows:
            return order, tokens
        order += [r[1] for r in rows]
        tokens += [r[0] for r in rows]
        if conn.execute(COMPLETE, (runner.HANDLER, [r[0] for r in rows])).fetchone()[0] != len(rows):
            fail("complete_many did not complete a claimed batch")
    fail(f"claims still returned deliveries after {limit} rounds")


def absent_positions(conn, conninfo):
    """positions_log: positions logged without a delivery (rolled back with a savepoint) at
    the cursor, in the middle of a window, at the end of a lane, and a whole transaction's
    share; claims fold them, every other event is delivered once, keys in order."""
    system = System()
    system.reset(conn)
    u = one_lane(conn, "gap-", 11)
    key = keys_in_lane0(conn, "gk-", 1)[0]
    k = [runner.Event(f"gap-k{i}", key, i, "{}") for i in (1, 2, 3)]

    def rolled_back(c, evs):
        c.execute("SAVEPOINT s")
        publish(system, c, evs)
        c.execute("ROLLBACK TO SAVEPOINT s")

    with psycopg.connect(conninfo) as c:
        rolled_back(c, u[0:3])                   # positions 1-3: absent, at the cursor
        publish(system, c, [k[0], u[3]])         # 4, 5
        rolled_back(c, [u[4], k[1], u[5]])       # 6-8: absent, the middle one keyed
        publish(system, c, [k[2], u[6]])         # 9, 10
        c.commit()
        publish(system, c, [u[7]])               # 11
        rolled_back(c, u[8:10])                  # 12, 13: absent, at the end
        c.commit()
        rolled_back(c, [u[10]])                  # 14: a transaction with nothing but an absent one
        c.commit()
    want = [k[0].id, u[3].id, k[2].id, u[6].id, u[7].id]
    order, _ = drain_lane(conn, "gap")
    if sorted(order) != sorted(want) or len(order) != len(want):
        fail(f"with absent positions, claimed {order}, not {want}")
    if order.index(k[0].id) > order.index(k[2].id):
        fail(f"key {key}: {k[2].id} claimed before {k[0].id} across an absent position of the key")
    acked, done, in_flight, owner, last = lane0(conn)
    if (acked, done, in_flight, owner, last) != (14, [], [], None, 14):
        fail(f"after the drain, lane 0 is acked_upto {acked}, done {done}, in flight {in_flight}, "
             f"held by {owner}, last logged position {last}: not 14, empty, empty, free, 14")
    if system.unfinished(conn) != 0:
        fail(f"{system.unfinished(conn)} unfinished after every delivery completed and the absent ones folded")
    print("ok - absent positions (rolled-back savepoints: at the cursor, inside the window, at the end, a whole "
          "transaction's) are folded into the cursor; the rest delivered once, the key in order; the lane released")


# Each delivery's position: through the commit log (positions_log), or its own column.
POSITIONS_OF = {
    "positions_log": "SELECT d.event_id, c.first_position + d.ordinal FROM relaybus_next.deliveries d "
                     "JOIN relaybus_next.lane_commits c ON c.handler = d.handler AND c.lane = d.lane "
                     "AND c.txn = d.txn AND d.ordinal < c.span",
    "positions_staged": "SELECT event_id, position FROM relaybus_next.deliveries",
}


def commit_order(conn, conninfo, system_name):
    """positions_log, positions_staged: two open transactions publish to lane 0; the one that
    commits first takes the lower positions, whoever published first; and it does not wait
    for the other."""
    system = System()
    system.reset(conn)
    key = keys_in_lane0(conn, "ck-", 1)[0]
    other = one_lane(conn, "co-", 1)[0]
    first = runner.Event("co-first", key, 1, "{}")  # published first, committed last
    second = runner.Event("co-second", key, 2, "{}")
    with psycopg.connect(conninfo) as p1, psycopg.connect(conninfo) as p2:
        system.publish(p1, [first])
        p2.execute("SET lock_timeout = '2s'")
        try:
            system.publish(p2, [second, other])
            p2.commit()
        except psycopg.errors.LockNotAvailable:
            fail("a publisher of lane 0 waited for another open publisher of the lane")
        print("ok - a publisher of a lane commits while another publisher of the lane is open")
        p1.commit()
    positions_of = {r[0]: r[1] for r in conn.execute(POSITIONS_OF[system_name])}
    if [positions_of.get(e.id) for e in (second, other, first)] != [1, 2, 3]:
        fail(f"positions {positions_of}: not in commit order")
    order, _ = drain_lane(conn, "order")
    if order.index(second.id) > order.index(first.id):
        fail(f"key {key}: claimed {order}, not in commit order")
    print("ok - positions follow commit order, not publish order; the key's events are claimed in commit order")


def staged_savepoints(conn, conninfo):
    """positions_staged: deliveries staged in rolled-back savepoints (first, in the middle, at
    the end, a whole transaction's) take no position; the survivors get 1..n in publish
    order; before its commit a transaction sees its events but not its deliveries."""
    system = System()
    system.reset(conn)
    u = one_lane(conn, "sp-", 11)
    key = keys_in_lane0(conn, "sk-", 1)[0]
    k = [runner.Event(f"sp-k{i}", key, i, "{}") for i in (1, 2, 3)]

    def rolled_back(c, evs):
        c.execute("SAVEPOINT s")
        publish(system, c, evs)
        c.execute("ROLLBACK TO SAVEPOINT s")

    def released(c, evs):  # a savepoint that is released: its deliveries stay
        c.execute("SAVEPOINT r")
        publish(system, c, evs)
        c.execute("RELEASE SAVEPOINT r")

    with psycopg.connect(conninfo) as c:
        rolled_back(c, u[0:3])
        publish(system, c, [k[0], u[3]])
        rolled_back(c, [u[4], k[1], u[5]])     # the middle one keyed
        released(c, [k[2], u[6]])
        seen = c.execute("SELECT (SELECT count(*) FROM relaybus_next.events), "
                         "(SELECT count(*) FROM relaybus_next.deliveries)").fetchone()
        if seen != (4, 0):
            fail(f"before its commit the publisher saw {seen[0]} events and {seen[1]} deliveries, not 4 and 0")
        c.commit()
        publish(system, c, [u[7]])
        rolled_back(c, u[8:10])                # at the end
        c.commit()
        rolled_back(c, [u[10]])                # a transaction with nothing but a rolled-back publish
        c.commit()
    want = [k[0].id, u[3].id, k[2].id, u[6].id, u[7].id]
    got = conn.execute("SELECT event_id FROM relaybus_next.deliveries WHERE lane = 0 ORDER BY position").fetchall()
    lane_positions = [r[0] for r in conn.execute(
        "SELECT position FROM relaybus_next.deliveries WHERE lane = 0 ORDER BY position")]
    if [r[0] for r in got] != want or lane_positions != list(range(1, len(want) + 1)):
        fail(f"lane 0 holds {[r[0] for r in got]} at {lane_positions}, not {want} at 1..{len(want)}")
    order, _ = drain_lane(conn, "savepoints")
    if sorted(order) != sorted(want) or len(order) != len(want):
        fail(f"with rolled-back savepoints, claimed {order}, not {want}")
    if order.index(k[0].id) > order.index(k[2].id):
        fail(f"key {key}: {k[2].id} claimed before {k[0].id}")
    lane = conn.execute("SELECT acked_upto, done, in_flight, lease_owner FROM relaybus_next.lanes "
                        "WHERE lane = 0").fetchone()
    if lane != (len(want), [], [], None):
        fail(f"after the drain, lane 0 is {lane}, not ({len(want)}, [], [], None)")
    if system.unfinished(conn) != 0:
        fail(f"{system.unfinished(conn)} unfinished after every delivery completed")
    print("ok - rolled-back savepoints (first, in the middle, at the end, a whole transaction's) leave no "
          "position: the survivors are 1..5 in publish order, delivered once, the key in order, the lane "
          "released; before its commit a publisher sees its events, not its deliveries")


def main():
    global System
    ap = argparse.ArgumentParser()
    ap.add_argument("--conn", required=True)
    ap.add_argument("--system", choices=sorted(SYSTEMS), default="positions")
    ap.add_argument("--events", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=12)
    o = ap.parse_args()
    System = SYSTEMS[o.system]
    print(f"# {o.system}")
    with psycopg.connect(o.conn, autocommit=True) as conn:
        out_of_order(conn, o.events, random.Random(o.seed))
        live_lease(conn)
        fencing(conn)
        lane_cap(conn)
        oldest_first(conn)
        publishers_apart(conn, o.conn)
        if o.system == "positions_log":
            absent_positions(conn, o.conn)
        if o.system in ("positions_log", "positions_staged"):
            commit_order(conn, o.conn, o.system)
        if o.system == "positions_staged":
            staged_savepoints(conn, o.conn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
