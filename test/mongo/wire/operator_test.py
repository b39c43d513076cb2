"""Wire tests of the operator half: unsubscribe, requeue_dead, statistics and
list_deliveries, each outside any transaction, and bad input refused before anything is
sent. Run: operator_test.py DRIVER."""

import datetime

from bson.int64 import Int64

import mockrs
from mockrs import WireTest

OLDEST = datetime.datetime(2025, 12, 1, tzinfo=datetime.timezone.utc)  # 1764547200000 ms
OLDEST_US = "1764547200000000"


def lane(number, owner, in_flight, handler="mailer"):
    return {"_id": {"h": handler, "l": number}, "handler": handler, "lane": number,
            "epoch": Int64(4), "owner": owner, "holder": "H", "leaseExpiresAt": OLDEST,
            "inFlight": list(in_flight), "lost": [], "version": Int64(2)}


def delivery(event_id, status="pending", attempts=0, key=None, created=OLDEST, handler="mailer"):
    return {"_id": {"e": event_id, "h": handler}, "eventId": event_id, "handler": handler,
            "key": key, "sequence": Int64(0), "status": status, "attempts": attempts,
            "claims": 0, "availableAt": created, "lastError": None, "createdAt": created,
            "updatedAt": created}


class OperatorTest(WireTest):
    def assert_outside_transaction(self, request):
        for field in ("startTransaction", "autocommit", "txnNumber"):
            self.assertNotIn(field, request.doc, request.doc)

    def test_unsubscribe_deletes_the_subscription_and_nothing_else(self):
        rs = self.rs
        rs.start(["unsubscribe", "mailer"], ["unsubscribe", "ghost"])
        delete = rs.expect("delete")
        self.assert_outside_transaction(delete)
        self.assertEqual(delete.doc["delete"], "subscriptions")
        self.assertEqual(delete.doc["deletes"], [{"q": {"_id": "mailer"}, "limit": 1}])
        self.assertEqual(delete.doc["writeConcern"], {"w": "majority"})
        delete.ok(n=1)
        rs.expect("delete").ok(n=0)  # ghost: there was none
        lines = rs.output()
        self.assertEqual(lines[0], "ok unsubscribed")
        self.assertTrue(lines[1].startswith(
            'error undefined_object - handler "ghost" is not subscribed'), lines[1])
        rs.nothing_more()  # the deliveries and lanes stay

    def test_unsubscribe_refuses_a_bad_name_before_sending(self):
        rs = self.rs
        rs.start(["unsubscribe", ""], ["unsubscribe", "x" * 1001])
        lines = rs.output()
        self.assertEqual(len(lines), 2, lines)
        for line in lines:
            self.assertTrue(line.startswith("error invalid_parameter - "), line)
        self.assertEqual(rs.handshakes, 0)

    def test_requeue_dead_is_one_multi_update_of_the_dead(self):
        rs = self.rs
        rs.start(["requeue_dead", "mailer"], ["requeue_dead", "-"])
        subs = rs.expect("find")
        self.assert_outside_transaction(subs)
        self.assertEqual(subs.doc["filter"], {"_id": {"$in": ["mailer"]}})
        self.cursor(subs, [{"_id": "mailer"}], "subscriptions")
        update = rs.expect("update")
        self.assert_outside_transaction(update)
        self.assertEqual(update.doc["writeConcern"], {"w": "majority"})
        (statement,) = update.doc["updates"]
        self.assertEqual(statement["q"], {"status": "dead", "handler": "mailer"})
        self.assertIs(statement["multi"], True)
        s = statement["u"]["$set"]
        self.assertEqual((s["status"], s["attempts"]), ("pending", 0))  # core::kRequeuedAttempts
        self.assertIsInstance(s["availableAt"], datetime.datetime)
        self.assertEqual(statement["u"]["$inc"], {"claims": 1})  # their old tokens die
        update.ok(n=3, nModified=3)
        every = rs.expect("update")  # every handler: no check, no handler in the filter
        self.assertEqual(every.doc["updates"][0]["q"], {"status": "dead"})
        every.ok(n=0, nModified=0)
        self.assertEqual(rs.output(), ["ok 3", "ok 0"])
        rs.nothing_more()

    def test_requeue_dead_of_an_unknown_handler(self):
        rs = self.rs
        rs.start(["requeue_dead", "gone"], ["requeue_dead", "ghost"])
        # gone is unsubscribed but has deliveries left: it is known.
        self.cursor(rs.expect("find"), [], "subscriptions")
        any_delivery = rs.expect("find")
        self.assertEqual(any_delivery.doc["find"], "deliveries")
        self.assertEqual(any_delivery.doc["filter"], {"handler": "gone"})
        self.assertEqual(any_delivery.doc["limit"], 1)
        self.cursor(any_delivery, [{"_id": {"e": "e1", "h": "gone"}}], "deliveries")
        rs.expect("update").ok(n=1, nModified=1)
        # ghost is neither: nothing is written.
        self.cursor(rs.expect("find"), [], "subscriptions")
        self.cursor(rs.expect("find"), [], "deliveries")
        lines = rs.output()
        self.assertEqual(lines[0], "ok 1")
        self.assertTrue(lines[1].startswith(
            'error undefined_object - handler "ghost" is not subscribed and has no deliveries'),
            lines[1])
        rs.nothing_more()

    def test_statistics_from_subscriptions_deliveries_lanes_and_history(self):
        rs = self.rs
        rs.start(["statistics"])
        names = rs.expect("find")
        self.assert_outside_transaction(names)
        self.assertEqual(names.doc["find"], "subscriptions")
        self.cursor(names, [{"_id": "audit"}, {"_id": "mailer"}], "subscriptions")
        lanes = rs.expect("find")
        self.assertEqual(lanes.doc["filter"], {"owner": {"$ne": None},
                                               "inFlight.0": {"$exists": True}})
        self.cursor(lanes, [lane(7, "w", ["e1", "e2"])], "lanes")
        running = rs.expect("find")
        self.assertEqual(running.doc["filter"],
                         {"_id": {"$in": [{"e": "e1", "h": "mailer"}, {"e": "e2", "h": "mailer"}]},
                          "status": "pending"})
        self.cursor(running, [delivery("e1")], "deliveries")  # e2 completed: not in flight
        counts = rs.expect("aggregate")
        self.assertEqual(counts.doc["aggregate"], "deliveries")
        # Only what core::counts_in_flight kept is left out of the pending count.
        self.assertEqual(counts.doc["pipeline"][0],
                         {"$match": {"_id": {"$nin": [{"e": "e1", "h": "mailer"}]}}})
        self.cursor(counts, [
            {"_id": "mailer", "pending": 3, "dead": 1, "oldest": OLDEST},
            {"_id": "gone", "pending": 2, "dead": 0, "oldest": OLDEST},  # unsubscribed
        ], "deliveries")
        history = rs.expect("aggregate")
        self.assertEqual(history.doc["aggregate"], "completions")
        self.cursor(history, [{"_id": "mailer", "completed": Int64(5)},
                              {"_id": "old", "completed": 1}], "completions")
        self.assertEqual(rs.output(), [
            "ok audit:0/0/0/0/- gone:2/0/0/0/%s mailer:3/1/1/5/%s old:0/0/0/1/-"
            % (OLDEST_US, OLDEST_US)])
        rs.nothing_more()

    def test_a_malformed_group_is_internal(self):
        rs = self.rs
        rs.start(["statistics"])
        self.cursor(rs.expect("find"), [], "subscriptions")
        self.cursor(rs.expect("find"), [], "lanes")
        self.cursor(rs.expect("aggregate"), [{"_id": "mailer", "pending": "3", "dead": 0}],
                    "deliveries")
        (line,) = rs.output()
        self.assertTrue(line.startswith("error internal - "), line)

    def test_list_deliveries_refuses_bad_filters_before_sending(self):
        rs = self.rs
        rs.start(["list", "running", "-", "10"], ["list", "-", "-", "-1"],
                 ["list", "pending", "", "10"])
        lines = rs.output()
        self.assertEqual(len(lines), 3, lines)
        for line in lines:
            self.assertTrue(line.startswith("error invalid_parameter - "), line)
        self.assertIn('unknown status "running": use pending, processing, dead, completed or none',
                      lines[0])
        self.assertIn("max_rows must be zero or more", lines[1])
        self.assertEqual(rs.handshakes, 0)

    def test_zero_rows_sends_nothing(self):
        rs = self.rs
        rs.start(["list", "-", "-", "0"], ["list", "completed", "-", "0"])
        self.assertEqual(rs.output(), ["ok ", "ok "])  # a find's limit 0 would be no limit
        self.assertEqual(rs.handshakes, 0)

    def test_list_deliveries_newest_first_with_the_processing_ones_owner(self):
        rs = self.rs
        rs.start(["list", "-", "mailer", "10"])
        lanes = rs.expect("find")
        self.assertEqual(lanes.doc["find"], "lanes")
        self.assertEqual(lanes.doc["filter"]["handler"], "mailer")
        self.cursor(lanes, [lane(7, "w", ["e1"])], "lanes")
        self.cursor(rs.expect("find"), [delivery("e1", key="k", attempts=1)], "deliveries")
        listed = rs.expect("find")
        self.assert_outside_transaction(listed)
        self.assertEqual(listed.doc["find"], "deliveries")
        self.assertEqual(listed.doc["filter"], {"handler": "mailer"})
        self.assertEqual(list(listed.doc["sort"].items()),
                         [("createdAt", -1), ("eventId", 1), ("handler", 1)])
        self.assertEqual(listed.doc["limit"], 10)
        newer = OLDEST + datetime.timedelta(seconds=5)
        self.cursor(listed, [delivery("e2", created=newer), delivery("e1", key="k", attempts=1),
                             delivery("e3", status="dead", attempts=25)], "deliveries")
        events = rs.expect("find")
        self.assertEqual(events.doc["find"], "events")
        self.assertEqual(events.doc["filter"], {"_id": {"$in": ["e1", "e2", "e3"]}})
        self.cursor(events, [{"_id": "e1", "type": "t1", "key": "k"},
                             {"_id": "e2", "type": "t2", "key": None}], "events")  # e3 purged
        self.assertEqual(rs.output(), [
            "ok e2/mailer/t2/-/pending/0/- e1/mailer/t1/k/processing/1/w e3/mailer//-/dead/25/-"])
        rs.nothing_more()

    def test_list_pending_leaves_the_ones_in_flight_out(self):
        rs = self.rs
        rs.start(["list", "pending", "-", "5"])
        self.cursor(rs.expect("find"), [lane(7, "w", ["e1"])], "lanes")
        self.cursor(rs.expect("find"), [delivery("e1")], "deliveries")
        listed = rs.expect("find")
        self.assertEqual(listed.doc["filter"], {"status": "pending",
                                                "_id": {"$nin": [{"e": "e1", "h": "mailer"}]}})
        self.cursor(listed, [delivery("e2")], "deliveries")
        self.cursor(rs.expect("find"), [{"_id": "e2", "type": "t", "key": None}], "events")
        self.assertEqual(rs.output(), ["ok e2/mailer/t/-/pending/0/-"])

    def test_list_completed_is_the_history(self):
        rs = self.rs
        rs.start(["list", "completed", "mailer", "10"])
        history = rs.expect("find")
        self.assert_outside_transaction(history)
        self.assertEqual(history.doc["find"], "completions")
        self.assertEqual(history.doc["filter"], {"handler": "mailer"})
        self.assertEqual(list(history.doc["sort"].items()), [("completedAt", -1), ("eventId", 1)])
        self.cursor(history, [{"_id": {"e": "e1", "h": "mailer"}, "eventId": "e1",
                               "handler": "mailer", "attempts": 2, "completedAt": OLDEST}],
                    "completions")
        self.cursor(rs.expect("find"), [{"_id": "e1", "type": "t", "key": "k"}], "events")
        self.assertEqual(rs.output(), ["ok e1/mailer/t/k/completed/2/-"])
        rs.nothing_more()


if __name__ == "__main__":
    mockrs.main()
