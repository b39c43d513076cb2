#!/usr/bin/env python3
"""relaybus 0.2.0 without the dispatcher: each consumer is one session looping claim(batch)
then complete_many in separate transactions, the loop a user writes with any client. The
harness measures the C++ dispatcher against it (issue 12: at least 0.9x this loop at the
same batch size). The runner protocol: README.md."""
import json
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402  (the one emptying procedure)
import runner  # noqa: E402
import psycopg  # noqa: E402

TYPE = "bench.event"


class RelaybusLoop:
    default_batch = 500

    def connect(self, conninfo):
        return psycopg.connect(conninfo, autocommit=True)

    def info(self):
        return dict(name="relaybus 0.2.0 loop", version="0.2.0", ordered_keys=True, acknowledges="deliveries",
                    notes="one session per consumer: claim(worker, batch, '30 seconds', ARRAY['bench'], holder), "
                          "then complete_many(tokens); polls every 10 ms when a claim comes back empty")

    def reset(self, conn):
        conn.execute("CREATE EXTENSION IF NOT EXISTS relaybus")
        names = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'relaybus'")]
        for attempt in range(5):
            try:
                conn.execute(harness.empty_script(harness.ordered_tables(names)))
                break
            except (psycopg.errors.DeadlockDetected, psycopg.errors.LockNotAvailable):
                conn.execute("ROLLBACK")
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))
        conn.execute("SELECT relaybus.subscribe(%s, ARRAY[%s])", (runner.HANDLER, TYPE))

    def publish(self, conn, events):
        if len(events) == 1:
            e = events[0]
            conn.execute("SELECT relaybus.publish(%s, %s::jsonb, %s, %s)", (TYPE, e.payload, e.key, e.id))
            return
        batch = [dict(type=TYPE, id=e.id, payload=json.loads(e.payload), **({"key": e.key} if e.key else {}))
                 for e in events]
        conn.execute("SELECT count(*) FROM relaybus.publish_batch(%s::jsonb)", (json.dumps(batch),))

    @staticmethod
    def _positions(conn):
        """relaybus 0.3.0 or later: deliveries are finished by cursors, not deleted."""
        return conn.execute("SELECT to_regclass('relaybus.exceptions') IS NOT NULL").fetchone()[0]

    def unfinished(self, conn):
        return self.left(conn)[0]

    def consume(self, conninfo, options, handled, should_stop, index):
        worker, holder = f"loop-{index}", uuid.uuid4().hex
        with self.connect(conninfo) as conn:
            while not should_stop():
                rows = conn.execute(
                    "SELECT lease_token, event_id, key, payload->>'n', attempts FROM "
                    "relaybus.claim(%s, %s, '30 seconds', ARRAY[%s], %s)",
                    (worker, options.batch, runner.HANDLER, holder)).fetchall()
                if not rows:
                    time.sleep(0.01)
                    continue
                for _, event_id, key, n, attempts in rows:
                    handled(event_id, key, n, attempts)
                conn.execute("SELECT relaybus.complete_many(%s)", ([r[0] for r in rows],))
            conn.execute("SELECT relaybus.relinquish(%s, %s)", (worker, holder))

    def stored(self, conn):
        return [r[0] for r in conn.execute(f"SELECT {runner.HARNESS} id FROM relaybus.events")]

    def left(self, conn):
        if self._positions(conn):
            return conn.execute(f"SELECT {runner.HARNESS} coalesce(sum(pending + processing), 0)::int8, "
                                "coalesce(sum(dead), 0)::int8 FROM relaybus.statistics()").fetchone()
        return conn.execute(f"SELECT {runner.HARNESS} count(*) FILTER (WHERE status <> 'dead'), "
                            "count(*) FILTER (WHERE status = 'dead') FROM relaybus.deliveries").fetchone()


if __name__ == "__main__":
    sys.exit(runner.main(RelaybusLoop()))
