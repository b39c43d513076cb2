"""A transactional handler's writes and its completion commit together, or neither does."""

import psycopg
import pytest

import relaybus
from conftest import deliveries, unique, wait_until


@pytest.fixture
def effects(admin):
    """A table the handlers write to, one row per event."""
    table = unique("effects")
    admin.execute(f"CREATE TABLE {table} (event_id text PRIMARY KEY, note text)")
    yield table
    admin.execute(f"DROP TABLE {table}")


def _rows(admin, table):
    return admin.execute(f"SELECT event_id, note FROM {table} ORDER BY event_id").fetchall()


def test_writes_and_completion_commit_together(conninfo, admin, subscribe, workers, effects):
    handler, event_type = subscribe()
    with psycopg.connect(conninfo) as conn:
        ids = [relaybus.publish(conn, event_type, {"note": f"n{i}"}, event_id=f"e{i}")
               for i in range(5)]
    worker = workers(concurrency=3)

    @worker.handler(handler, transactional=True)
    def record(event, conn):
        # The handler runs inside the transaction that will complete its delivery.
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.execute(f"INSERT INTO {effects} VALUES (%s, %s)", (event.id, event.payload["note"]))

    worker.start()
    wait_until(lambda: worker.stats.succeeded == 5, what="five transactional handlers")
    worker.stop()
    assert _rows(admin, effects) == [(i, f"n{i[1:]}") for i in ids]
    assert deliveries(admin, handler) == []
    # They completed in their own transactions, not through the settler's batches.
    assert worker.stats.completion_statements == 0


def test_a_handler_that_raises_leaves_neither_its_writes_nor_the_completion(
        conninfo, admin, subscribe, workers, effects):
    handler, event_type = subscribe(max_attempts=2, backoff_base="0")
    with psycopg.connect(conninfo) as conn:
        relaybus.publish(conn, event_type, {}, event_id="bad")
    runs = []
    worker = workers()

    @worker.handler(handler, transactional=True)
    def write_then_fail(event, conn):
        conn.execute(f"INSERT INTO {effects} VALUES (%s, 'written')", (event.id,))
        runs.append(event.attempts)
        raise RuntimeError("after the write")

    worker.start()
    wait_until(lambda: worker.stats.dead == 1, what="the dead letter")
    worker.stop()
    assert runs == [0, 1]  # it ran twice: the first failure did not complete it
    assert _rows(admin, effects) == []  # and neither run's write survived
    assert deliveries(admin, handler) == [("bad", "dead", 2, "RuntimeError: after the write")]


def test_a_lost_lease_rolls_the_handler_back_and_the_delivery_runs_again(
        conninfo, admin, subscribe, workers, effects):
    handler, event_type = subscribe()
    with psycopg.connect(conninfo) as conn:
        relaybus.publish(conn, event_type, {}, event_id="once")
    runs = []
    worker = workers()

    @worker.handler(handler, transactional=True)
    def write(event, conn):
        runs.append(event.attempts)
        conn.execute(f"INSERT INTO {effects} VALUES (%s, %s)", (event.id, f"run {len(runs)}"))
        if len(runs) == 1:
            # Someone else ends this attempt before the handler commits (as a takeover
            # would): the completion in this transaction must find the lease gone.
            with psycopg.connect(conninfo, autocommit=True) as other:
                assert other.execute("SELECT relaybus.release(%s)",
                                     (event.lease_token,)).fetchone()[0]

    worker.start()
    wait_until(lambda: worker.stats.succeeded == 1, what="the second run")
    worker.stop()
    assert runs == [0, 0]  # run again, and release charged nothing
    assert worker.stats.lost == 1
    assert _rows(admin, effects) == [("once", "run 2")]  # only the run that completed
    assert deliveries(admin, handler) == []


def test_the_handler_cannot_commit_on_its_own(conninfo, admin, subscribe, workers, effects):
    handler, event_type = subscribe(max_attempts=1)
    with psycopg.connect(conninfo) as conn:
        relaybus.publish(conn, event_type, {}, event_id="sneaky")
    worker = workers()

    @worker.handler(handler, transactional=True)
    def commit_early(event, conn):
        conn.execute(f"INSERT INTO {effects} VALUES (%s, 'x')", (event.id,))
        conn.commit()  # psycopg refuses this inside the worker's transaction block

    worker.start()
    wait_until(lambda: worker.stats.dead == 1, what="the dead letter")
    assert _rows(admin, effects) == []
    assert "ProgrammingError" in deliveries(admin, handler)[0][3]
