"""Losing the settlement connection loses no completion: it is sent again on a new one."""

from conftest import deliveries, publish_many, wait_until


def _kill(admin, worker_name, statement):
    return admin.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = %s AND query LIKE %s",
        (f"relaybus-py {worker_name}", f"%{statement}%")).fetchone()[0]


def test_a_killed_settlement_connection_is_replaced(conninfo, admin, subscribe, workers, caplog):
    handler, event_type = subscribe()
    worker = workers()
    worker.add_handler(handler, lambda event: None)
    worker.start()
    publish_many(conninfo, event_type, 3)
    wait_until(lambda: worker.stats.completed == 3, what="the first completions")
    assert _kill(admin, worker.name, "relaybus.complete_many") == 1
    publish_many(conninfo, event_type, 3)
    # The next complete_many meets the dead connection, reconnects and is sent again.
    wait_until(lambda: worker.stats.completed == 6, timeout=5, what="completions after the kill")
    assert worker.stats.lost == 0
    assert any("connection error during complete_many" in r.getMessage() for r in caplog.records)
    assert deliveries(admin, handler) == []
