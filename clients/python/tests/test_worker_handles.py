"""A worker handles every event exactly once, and completes them in batches."""

import threading

import psycopg

from conftest import deliveries, publish_many, wait_until


def _function_calls(admin, name):
    """Calls of relaybus.<name> recorded in this database (track_functions = all)."""
    admin.execute("SELECT pg_stat_clear_snapshot()")
    return admin.execute(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
        "WHERE schemaname = 'relaybus' AND funcname = %s", (name,)).fetchone()[0]


def test_handles_each_event_exactly_once_with_complete_many(conninfo, admin, subscribe, workers):
    handler, event_type = subscribe()
    count = 400
    published = publish_many(conninfo, event_type, count, key=lambda i: f"k{i % 40}")
    many_before = _function_calls(admin, "complete_many")
    single_before = _function_calls(admin, "complete")

    seen, lock = [], threading.Lock()
    worker = workers(concurrency=8, batch_size=50)

    @worker.handler(handler)
    def record(event):
        with lock:
            seen.append(event.id)

    worker.start()
    wait_until(lambda: worker.stats.completed == count, what="every completion committed")
    worker.stop()

    assert sorted(seen) == sorted(published)  # each one handled...
    assert len(seen) == len(set(seen))        # ...once
    assert deliveries(admin, handler) == []   # and completed on the server
    stats = worker.stats
    assert stats.succeeded == count and stats.failed == 0 and stats.lost == 0
    # Completions travel in batches: far fewer statements than deliveries.
    assert stats.completion_statements <= count / 10, stats

    # The server agrees: every completion went through complete_many, none one by one.
    # (Backends flush their counters when they exit, which stop() made them do.)
    wait_until(lambda: _function_calls(admin, "complete_many") - many_before
               == stats.completion_statements, timeout=5, interval=0.05,
               what="the server's complete_many call count")
    assert _function_calls(admin, "complete") - single_before == 0


def test_several_handlers_on_one_worker(conninfo, admin, subscribe, workers):
    mailer, mail_type = subscribe()
    billing, bill_type = subscribe()
    publish_many(conninfo, mail_type, 5)
    publish_many(conninfo, bill_type, 7)
    seen = {mailer: [], billing: []}
    worker = workers()
    worker.add_handler(mailer, lambda event: seen[mailer].append(event.payload["n"]))
    worker.add_handler(billing, lambda event: seen[billing].append(event.payload["n"]))
    worker.start()
    wait_until(lambda: worker.stats.completed == 12, what="both handlers' events")
    assert sorted(seen[mailer]) == list(range(5)) and sorted(seen[billing]) == list(range(7))


def test_event_fields_reach_the_handler(conninfo, subscribe, workers):
    handler, event_type = subscribe()
    with psycopg.connect(conninfo) as conn:
        import relaybus
        relaybus.publish(conn, event_type, {"to": "a@example.com"}, key="alice",
                         event_id="evt-1", headers={"trace": "t1"})
    got = []
    worker = workers()
    worker.add_handler(handler, got.append)
    worker.start()
    wait_until(lambda: got, what="the event")
    event = got[0]
    assert (event.id, event.handler, event.type, event.key, event.payload, event.headers,
            event.attempts) == ("evt-1", handler, event_type, "alice", {"to": "a@example.com"},
                                {"trace": "t1"}, 0)
    assert event.published_at.tzinfo is not None and event.lease_token
