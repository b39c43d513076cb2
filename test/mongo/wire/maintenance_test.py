"""Wire tests of maintenance: take_over_expired (the expired lanes handed back with their
lost lists on condition of what was read, then the charge of the lanes whose write took
effect, then the lists cleared) and purge_expired (bounded slices, until 0). Run:
maintenance_test.py DRIVER."""

import datetime

from bson.int64 import Int64

import mockrs
from mockrs import WireTest

LEASE_LOST = "lease lost: lane taken over while the delivery was in flight"  # core::kLeaseLostError


def now():
    return datetime.datetime.now(tz=datetime.timezone.utc)


def utc(value):
    return value.replace(tzinfo=datetime.timezone.utc)  # decoded naive, in UTC


def lane(number, epoch, owner, in_flight=(), lost=(), version=None):
    doc = {"_id": {"h": "mailer", "l": number}, "handler": "mailer", "lane": number,
           "epoch": Int64(epoch), "owner": owner, "holder": "X",
           "leaseExpiresAt": now() - datetime.timedelta(seconds=5),
           "inFlight": list(in_flight), "lost": list(lost)}
    if version is not None:
        doc["version"] = Int64(version)
    return doc


def delivery(event_id, claims=0, attempts=0):
    return {"_id": {"e": event_id, "h": "mailer"}, "eventId": event_id, "handler": "mailer",
            "key": None, "sequence": Int64(0), "status": "pending", "attempts": attempts,
            "claims": claims, "availableAt": now()}


def ids(*pairs):
    return [{"_id": {"e": e, "h": h}} for h, e in pairs]


class MaintenanceTest(WireTest):
    def assert_outside_transaction(self, request):
        for field in ("startTransaction", "autocommit", "txnNumber"):
            self.assertNotIn(field, request.doc, request.doc)

    def test_take_over_hands_back_conditionally_then_charges_only_what_it_took(self):
        rs = self.rs
        rs.start(["take_over"])
        expired = rs.expect("find")
        self.assert_outside_transaction(expired)
        self.assertEqual(expired.doc["find"], "lanes")
        f = expired.doc["filter"]
        self.assertEqual(f["owner"], {"$ne": None})  # the query copy of core::due_for_takeover
        self.assertLessEqual(utc(f["leaseExpiresAt"]["$lte"]), now())
        self.assertEqual(dict(expired.doc["sort"]), {"leaseExpiresAt": 1})
        self.assertEqual(expired.doc["limit"], 1000)  # kTakeoverBatch, as PostgreSQL's
        self.cursor(expired, [
            # e9 completed (its delivery is gone); e5 is a lost list a dead claim left.
            lane(7, 3, "w1", ["e0", "e9"], ["e5"], version=4),
            lane(8, 6, "w2", ["e8"]),
        ], "lanes")
        subs = rs.expect("find")
        self.assertEqual(subs.doc["filter"], {"_id": {"$in": ["mailer"]}})
        self.cursor(subs, [{"_id": "mailer", "eventTypes": ["t"], "maxAttempts": 25,
                            "backoffBaseUs": Int64(1000000), "backoffMaxUs": Int64(3600000000)}],
                    "subscriptions")
        running = rs.expect("find")
        self.assertEqual(running.doc["filter"]["status"], "pending")
        self.cursor(running, [delivery("e0"), delivery("e8")], "deliveries")

        write = rs.expect("update")
        self.assert_outside_transaction(write)
        self.assertEqual(write.doc["update"], "lanes")
        self.assertEqual(write.doc["writeConcern"], {"w": "majority"})
        first, second = write.doc["updates"]
        # Each conditional on the epoch and version read; handed back at a new epoch with
        # the lost list: what was left, and what core::counts_in_flight kept (not e9).
        self.assertEqual(first["q"], {"_id": {"h": "mailer", "l": 7}, "epoch": 3, "version": 4})
        self.assertEqual(first["u"]["$set"], {"epoch": 4, "owner": None, "holder": None,
                                              "leaseExpiresAt": None, "inFlight": [],
                                              "lost": ["e5", "e0"]})
        self.assertEqual(first["u"]["$inc"], {"version": 1})
        self.assertEqual(second["q"], {"_id": {"h": "mailer", "l": 8}, "epoch": 6,
                                       "version": {"$exists": False}})
        self.assertEqual(second["u"]["$set"]["lost"], ["e8"])
        # A claim took lane 8 first: it is refused, and its new holder charges e8.
        write.ok(n=1, nModified=1, writeErrors=[
            {"index": 1, "code": 11000, "errmsg": "E11000 duplicate key error"}])

        lost = rs.expect("find")
        self.assertEqual(lost.doc["filter"],
                         {"_id": {"$in": [{"e": "e5", "h": "mailer"}, {"e": "e0", "h": "mailer"}]},
                          "status": "pending"})
        self.cursor(lost, [delivery("e0", claims=2, attempts=1)], "deliveries")
        charge = rs.expect("update")
        self.assert_outside_transaction(charge)
        (c,) = charge.doc["updates"]  # e8 is not charged here
        self.assertEqual(c["q"], {"_id": {"e": "e0", "h": "mailer"}, "status": "pending",
                                  "claims": 2})
        self.assertEqual(c["u"]["$set"]["attempts"], 2)
        self.assertEqual(c["u"]["$set"]["status"], "pending")
        self.assertEqual(c["u"]["$set"]["lastError"], LEASE_LOST)
        self.assertEqual(c["u"]["$inc"], {"claims": 1})
        charge.ok(n=1, nModified=1)
        clear = rs.expect("update")
        (statement,) = clear.doc["updates"]
        self.assertEqual(statement["q"], {"_id": {"h": "mailer", "l": 7}, "epoch": 4})
        self.assertEqual(statement["u"], {"$set": {"lost": []}})
        clear.ok(n=1, nModified=1)
        self.assertEqual(rs.output(), ["ok 1"])
        rs.nothing_more()

    def test_take_over_with_nothing_expired_writes_nothing(self):
        rs = self.rs
        rs.start(["take_over"])
        self.cursor(rs.expect("find"), [], "lanes")
        self.assertEqual(rs.output(), ["ok 0"])
        rs.nothing_more()

    def test_a_charge_at_the_budgets_end_is_dead(self):
        rs = self.rs
        rs.start(["take_over"])
        self.cursor(rs.expect("find"), [lane(7, 3, "w1", ["e0"], version=1)], "lanes")
        self.cursor(rs.expect("find"), [], "subscriptions")  # unsubscribed: core's defaults
        self.cursor(rs.expect("find"), [delivery("e0")], "deliveries")
        rs.expect("update").ok(n=1, nModified=1)
        self.cursor(rs.expect("find"), [delivery("e0", claims=7, attempts=24)], "deliveries")
        charge = rs.expect("update")
        s = charge.doc["updates"][0]["u"]["$set"]
        self.assertEqual((s["attempts"], s["status"]), (25, "dead"))  # 25: core's default budget
        charge.ok(n=1, nModified=1)
        rs.expect("update").ok(n=1, nModified=1)
        self.assertEqual(rs.output(), ["ok 1"])
        rs.nothing_more()

    def assert_cutoff(self, value, seconds):
        expected = now() - datetime.timedelta(seconds=seconds)
        self.assertLess(abs((utc(value) - expected).total_seconds()), 10, value)

    def test_purge_deletes_in_slices_until_nothing_is_left(self):
        rs = self.rs
        rs.start(["purge"], ["purge"], options="retention_dead=600,retention_completed=60")
        # Dead deliveries, by updatedAt, retention_dead.
        dead = rs.expect("find")
        self.assert_outside_transaction(dead)
        self.assertEqual(dead.doc["filter"]["status"], "dead")
        self.assert_cutoff(dead.doc["filter"]["updatedAt"]["$lt"], 600)
        self.assertEqual(dead.doc["limit"], 10000)
        self.cursor(dead, ids(("mailer", "d1"), ("mailer", "d2")), "deliveries")
        delete = rs.expect("delete")
        self.assertEqual(delete.doc["delete"], "deliveries")
        self.assertEqual(delete.doc["writeConcern"], {"w": "majority"})
        (d,) = delete.doc["deletes"]
        self.assertEqual(d["q"]["_id"], {"$in": [{"e": "d1", "h": "mailer"},
                                                 {"e": "d2", "h": "mailer"}]})
        self.assertEqual(d["q"]["status"], "dead")  # requeued meanwhile: it stays
        self.assertEqual(d["limit"], 0)
        delete.ok(n=2)
        # Pending deliveries of unsubscribed handlers, by createdAt, retention_dead.
        self.cursor(rs.expect("find"), [{"_id": "mailer"}], "subscriptions")
        gone = rs.expect("aggregate")
        self.assertEqual(gone.doc["aggregate"], "lanes")
        self.assertEqual(gone.doc["pipeline"][0], {"$match": {"handler": {"$nin": ["mailer"]}}})
        self.cursor(gone, [{"_id": "gone"}], "lanes")
        unsubscribed = rs.expect("find")
        f = unsubscribed.doc["filter"]
        self.assertEqual((f["handler"], f["status"]), ({"$in": ["gone"]}, "pending"))
        self.assert_cutoff(f["createdAt"]["$lt"], 600)
        self.cursor(unsubscribed, ids(("gone", "p1")), "deliveries")
        rs.expect("delete").ok(n=1)
        # Then their ids off their handler's lanes, every lane's version bumped, listed or
        # not: a claim that read p1 before the delete and writes its lane after is refused.
        pruned = rs.expect("update")
        self.assertEqual(pruned.doc["update"], "lanes")
        (p,) = pruned.doc["updates"]
        self.assertEqual(p["q"], {"handler": "gone"})
        self.assertTrue(p["multi"])
        self.assertEqual(p["u"], {"$pullAll": {"inFlight": ["p1"], "lost": ["p1"]},
                                  "$inc": {"version": 1}})
        pruned.ok(n=256, nModified=256)
        # History, by completedAt, retention_completed.
        history = rs.expect("find")
        self.assertEqual(history.doc["find"], "completions")
        self.assert_cutoff(history.doc["filter"]["completedAt"]["$lt"], 60)
        self.cursor(history, ids(("mailer", "c1")), "completions")
        delete = rs.expect("delete")
        self.assertEqual(delete.doc["delete"], "completions")
        delete.ok(n=1)
        # Events without deliveries, by createdAt, retention_completed: their possible
        # deliveries looked up by _id.
        events = rs.expect("find")
        self.assertEqual(events.doc["find"], "events")
        self.assert_cutoff(events.doc["filter"]["createdAt"]["$lt"], 60)
        self.cursor(events, [{"_id": "e1", "handlers": ["mailer"]},
                             {"_id": "e2", "handlers": ["mailer", "audit"]},
                             {"_id": "e3", "handlers": []}], "events")
        left = rs.expect("find")
        self.assertEqual(left.doc["filter"], {"_id": {"$in": [
            {"e": "e1", "h": "mailer"}, {"e": "e2", "h": "mailer"}, {"e": "e2", "h": "audit"}]}})
        self.cursor(left, ids(("audit", "e2")), "deliveries")  # e2 still has one
        # First their ids leave the in-flight and lost lists of their handlers' lanes: a
        # completion leaves its entry behind, and a publish of the id once the event is gone
        # makes a new delivery that the entry would pass off as the old attempt, running.
        prune = rs.expect("update")
        self.assert_outside_transaction(prune)
        self.assertEqual(prune.doc["update"], "lanes")
        self.assertEqual(prune.doc["writeConcern"], {"w": "majority"})
        (p,) = prune.doc["updates"]  # e3 had no handler; e2 stays
        self.assertEqual(p["q"], {"handler": "mailer", "$or": [{"inFlight": {"$in": ["e1"]}},
                                                                {"lost": {"$in": ["e1"]}}]})
        self.assertEqual(p["u"], {"$pullAll": {"inFlight": ["e1"], "lost": ["e1"]},
                                  "$inc": {"version": 1}})
        self.assertTrue(p["multi"])
        prune.ok(n=1, nModified=1)
        gone_events = rs.expect("delete")
        self.assertEqual(gone_events.doc["delete"], "events")
        self.assertEqual(gone_events.doc["deletes"], [
            {"q": {"_id": "e1", "handlers": ["mailer"]}, "limit": 1},
            {"q": {"_id": "e3", "handlers": []}, "limit": 1}])
        gone_events.ok(n=2)

        # The second call finds nothing left.
        self.cursor(rs.expect("find"), [], "deliveries")
        self.cursor(rs.expect("find"), [{"_id": "mailer"}], "subscriptions")
        self.cursor(rs.expect("aggregate"), [], "lanes")
        self.cursor(rs.expect("find"), [], "completions")
        self.cursor(rs.expect("find"), [], "events")
        self.assertEqual(rs.output(), ["ok 6", "ok 0"])
        rs.nothing_more()


if __name__ == "__main__":
    mockrs.main()
