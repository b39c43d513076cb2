"""publish and publish_batch run in the caller's transaction and never commit it."""

from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import relaybus
from conftest import deliveries


def _events(admin, ids):
    return admin.execute("SELECT id, type, key, payload, headers FROM relaybus.events "
                         "WHERE id = ANY(%s) ORDER BY id", (list(ids),)).fetchall()


def test_rolled_back_publish_leaves_nothing(conninfo, admin, subscribe):
    handler, event_type = subscribe()
    with psycopg.connect(conninfo) as conn:
        one = relaybus.publish(conn, event_type, {"n": 1}, key="k")
        batch = relaybus.publish_batch(conn, [{"type": event_type, "payload": {"n": 2}},
                                              {"type": event_type, "key": "k"}])
        # Visible inside the caller's transaction: publish wrote there (its events; the
        # deliveries wait in the transaction until its commit, invisible to it on 0.3.0)...
        assert [row[0] for row in _events(conn, [one, *batch])] == sorted([one, *batch])
        conn.rollback()
        # ...and the rollback took all of it away, deliveries waiting for the commit
        # included: the connection's next commit brings only its own.
        after = relaybus.publish(conn, event_type, {"n": 3})
        conn.commit()
    assert _events(admin, [one, *batch]) == []  # no event
    assert [d[0] for d in deliveries(admin, handler)] == [after]  # no delivery


def test_publish_is_invisible_until_the_caller_commits(conninfo, admin, subscribe):
    handler, event_type = subscribe()
    conn = psycopg.connect(conninfo)
    try:
        event_id = relaybus.publish(conn, event_type, {"n": 1})
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert deliveries(admin, handler) == []  # not committed by publish
        conn.commit()
        assert [d[0] for d in deliveries(admin, handler)] == [event_id]
    finally:
        conn.close()


def test_payload_and_fields_round_trip(conninfo, admin, subscribe):
    handler, event_type = subscribe()
    payload = {"text": "Grüße, 東京", "n": 3, "x": 1.5, "ok": True, "none": None,
               "list": [1, "two", {"three": [3]}]}
    with psycopg.connect(conninfo) as conn:
        event_id = relaybus.publish(conn, event_type, payload, key="alice",
                                    event_id="order-7", headers={"trace": "abc"})
    assert event_id == "order-7"
    assert _events(admin, [event_id]) == [("order-7", event_type, "alice", payload, {"trace": "abc"})]


def test_publish_batch_returns_ids_in_order_and_honours_fields(conninfo, admin, subscribe):
    handler, event_type = subscribe()
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    events = [{"type": event_type, "id": "b-2", "payload": {"n": 2}},
              {"type": event_type, "id": "b-1", "key": "k", "headers": {"h": 1}},
              {"type": event_type, "id": "b-3", "available_at": later}]
    with psycopg.connect(conninfo) as conn:
        assert relaybus.publish_batch(conn, events) == ["b-2", "b-1", "b-3"]
        assert relaybus.publish_batch(conn, []) == []
    stored = {row[0]: row for row in _events(admin, ["b-1", "b-2", "b-3"])}
    assert stored["b-2"][3] == {"n": 2}
    assert stored["b-1"][2:] == ("k", {}, {"h": 1})
    due = admin.execute("SELECT event_id, available_at > now() + interval '59 minutes' "
                        "FROM relaybus.deliveries WHERE handler = %s ORDER BY event_id",
                        (handler,)).fetchall()
    assert due == [("b-1", False), ("b-2", False), ("b-3", True)]


def test_publish_is_idempotent_by_event_id(conninfo, admin, subscribe):
    handler, event_type = subscribe()
    with psycopg.connect(conninfo) as conn:
        first = relaybus.publish(conn, event_type, {"n": 1}, event_id="same")
        again = relaybus.publish(conn, event_type, {"n": 2}, event_id="same")
    assert first == again == "same"
    assert len(deliveries(admin, handler)) == 1


@pytest.mark.parametrize("call, error, text", [
    (lambda c, t: relaybus.publish(c, t, [1, 2]), TypeError, "must be a JSON object"),
    (lambda c, t: relaybus.publish(c, t, None), TypeError, "must be a JSON object"),
    (lambda c, t: relaybus.publish(c, t, {"x": float("nan")}), ValueError, "not JSON-serializable"),
    (lambda c, t: relaybus.publish(c, t, {"x": object()}), TypeError, "not JSON-serializable"),
    (lambda c, t: relaybus.publish(c, t, {}, key=7), TypeError, "key must be a str"),
    (lambda c, t: relaybus.publish(c, 7, {}), TypeError, "type must be a str"),
    (lambda c, t: relaybus.publish(c, t, {}, handlers="mailer"), TypeError, "list of handler names"),
    (lambda c, t: relaybus.publish(c, t, {}, available_at=datetime.now()), ValueError,
     "timezone-aware"),
    (lambda c, t: relaybus.publish(c, t, {}, headers=["h"]), TypeError, "headers must be"),
    (lambda c, t: relaybus.publish_batch(c, [{"type": t, "paylod": {}}]), ValueError,
     "events[0] has unknown field(s) ['paylod']"),
    (lambda c, t: relaybus.publish_batch(c, [{"type": t}, {"payload": {}}]), ValueError,
     "events[1] has no 'type'"),
    (lambda c, t: relaybus.publish_batch(c, [{"type": t}, "x"]), TypeError, "events[1] must be a dict"),
    (lambda c, t: relaybus.publish_batch(c, [{"type": t, "payload": {"s": {1}}}]), TypeError,
     "events[0] is not JSON-serializable"),
])
def test_bad_arguments_are_refused_before_anything_is_sent(conninfo, subscribe, call, error, text):
    handler, event_type = subscribe()
    with psycopg.connect(conninfo) as conn:
        with pytest.raises(error) as raised:
            call(conn, event_type)
        assert text in str(raised.value)
        # Nothing reached the server, so the caller's transaction is still usable.
        assert conn.info.transaction_status != psycopg.pq.TransactionStatus.INERROR


def test_server_side_errors_keep_their_sqlstate(conninfo, subscribe):
    handler, event_type = subscribe()
    with psycopg.connect(conninfo) as conn:
        with pytest.raises(psycopg.errors.UndefinedObject):  # 42704: unknown handler
            relaybus.publish(conn, event_type, {}, handlers=["nobody-subscribed-this"])
