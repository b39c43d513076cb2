"""Wire tests of the optional completion history: with MongoOptions::completion_history on,
complete_many and begin()'s completion write the completions documents in the completing
transaction; off, they write none. Run: history_test.py DRIVER."""

import datetime

from bson.int64 import Int64

import mockrs
from mockrs import WireTest


def now():
    return datetime.datetime.now(tz=datetime.timezone.utc)


def token(lane, epoch, claims, handler, event_id):
    """core::encode."""
    return "r1.%d.%d.%d.%d.%s%s" % (lane, epoch, claims, len(handler), handler, event_id)


def lane(in_flight):
    return {"_id": {"h": "mailer", "l": 7}, "handler": "mailer", "lane": 7, "epoch": Int64(4),
            "owner": "w", "holder": "H", "leaseExpiresAt": now(), "inFlight": list(in_flight),
            "lost": [], "version": Int64(1)}


def delivery(event_id, attempts=0):
    return {"_id": {"e": event_id, "h": "mailer"}, "eventId": event_id, "handler": "mailer",
            "key": None, "sequence": Int64(0), "status": "pending", "attempts": attempts,
            "claims": 0, "availableAt": now()}


class HistoryTest(WireTest):
    def complete_reads(self, deliveries):
        rs = self.rs
        lanes = rs.expect("find")
        lsid, txn = self.assert_starts_transaction(lanes)
        self.cursor(lanes, [lane([d["eventId"] for d in deliveries])], "lanes")
        found = rs.expect("find")
        self.assert_in_transaction(found, lsid, txn)
        self.cursor(found, deliveries, "deliveries")
        delete = rs.expect("delete")
        self.assert_in_transaction(delete, lsid, txn)
        delete.ok(n=len(deliveries))
        return lsid, txn

    def test_on_the_history_is_written_in_the_completing_transaction(self):
        rs = self.rs
        before = now()
        rs.start(["complete", ",".join([token(7, 4, 0, "mailer", "e1"),
                                        token(7, 4, 0, "mailer", "e2")])], options="history")
        lsid, txn = self.complete_reads([delivery("e1", attempts=2), delivery("e2")])
        history = rs.expect("update")
        self.assert_in_transaction(history, lsid, txn)
        self.assertNotIn("writeConcern", history.doc)  # the transaction's applies
        self.assertEqual(history.doc["update"], "completions")
        first, second = history.doc["updates"]
        self.assertEqual(first["q"], {"_id": {"e": "e1", "h": "mailer"}})
        self.assertIs(first["upsert"], True)
        u = first["u"]
        # The attempts it took, the completing one included (PostgreSQL: attempts + 1).
        self.assertEqual((u["eventId"], u["handler"], u["attempts"]), ("e1", "mailer", 3))
        self.assertGreaterEqual(u["completedAt"].replace(tzinfo=datetime.timezone.utc),
                                before - datetime.timedelta(milliseconds=1))
        self.assertEqual(second["u"]["attempts"], 1)
        history.ok(n=2, nModified=0, upserted=[{"index": 0, "_id": {"e": "e1", "h": "mailer"}},
                                               {"index": 1, "_id": {"e": "e2", "h": "mailer"}}])
        commit = rs.expect("commitTransaction")
        self.assert_commit(commit, lsid, txn)
        commit.ok()
        self.assertEqual(rs.output(), ["ok 2"])
        rs.nothing_more()

    def test_on_begins_completion_writes_it_in_the_callers_transaction(self):
        rs = self.rs
        rs.start(["tx_complete", token(7, 4, 0, "mailer", "e1")], options="history")
        lsid, txn = self.complete_reads([delivery("e1")])
        history = rs.expect("update")
        self.assert_in_transaction(history, lsid, txn)
        self.assertEqual(history.doc["update"], "completions")
        history.ok(n=1, nModified=0)
        commit = rs.expect("commitTransaction")
        self.assert_commit(commit, lsid, txn)
        commit.ok()
        self.assertEqual(rs.output(), ["ok completed"])
        rs.nothing_more()

    def test_on_a_lost_token_records_nothing(self):
        rs = self.rs
        rs.start(["complete", token(7, 3, 0, "mailer", "e1")], options="history")
        self.cursor(rs.expect("find"), [lane(["e1"])], "lanes")  # the epoch moved to 4
        self.cursor(rs.expect("find"), [delivery("e1")], "deliveries")
        rs.expect("commitTransaction").ok()
        self.assertEqual(rs.output(), ["ok 0"])
        rs.nothing_more()

    def test_off_no_history_is_written(self):
        rs = self.rs
        rs.start(["complete", token(7, 4, 0, "mailer", "e1")],
                 ["tx_complete", token(7, 4, 0, "mailer", "e2")])
        self.complete_reads([delivery("e1")])
        rs.expect("commitTransaction").ok()  # straight after the delete
        self.complete_reads([delivery("e2")])
        rs.expect("commitTransaction").ok()
        self.assertEqual(rs.output(), ["ok 1", "ok completed"])
        rs.nothing_more()


if __name__ == "__main__":
    mockrs.main()
