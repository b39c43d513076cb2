"""Wire tests of the worker half: a claim's commands (no transaction, lane writes
conditional on the epoch read, one unordered update whose DuplicateKey write errors say
which lanes another claim got first), complete_many's transaction and its retry after a
write conflict, and the transactions of fail and of begin(). Run: worker_test.py DRIVER."""

import datetime

import bson
from bson.int64 import Int64

import mockrs
from mockrs import TRANSIENT, WireTest

LEASE_LOST = "lease lost: lane taken over while the delivery was in flight"  # core::kLeaseLostError


def now():
    return datetime.datetime.now(tz=datetime.timezone.utc)


def token(lane, epoch, claims, handler, event_id):
    """core::encode."""
    return "r1.%d.%d.%d.%d.%s%s" % (lane, epoch, claims, len(handler), handler, event_id)


def subscription(handler="mailer", max_attempts=25):
    return {"_id": handler, "eventTypes": ["t"], "maxAttempts": max_attempts,
            "backoffBaseUs": Int64(1000000), "backoffMaxUs": Int64(3600000000)}


def lane(number, epoch, owner=None, holder=None, expires=None, in_flight=(), lost=(),
         version=None):
    doc = {"_id": {"h": "mailer", "l": number}, "handler": "mailer", "lane": number,
           "epoch": Int64(epoch), "owner": owner, "holder": holder, "leaseExpiresAt": expires,
           "inFlight": list(in_flight), "lost": list(lost)}
    if version is not None:  # absent until a claim writes the lane
        doc["version"] = Int64(version)
    return doc


def delivery(event_id, claims=0, attempts=0, status="pending", key=None, sequence=0):
    return {"_id": {"e": event_id, "h": "mailer"}, "eventId": event_id, "handler": "mailer",
            "key": key, "sequence": Int64(sequence), "status": status, "attempts": attempts,
            "claims": claims, "availableAt": now() - datetime.timedelta(seconds=1)}


class WorkerTest(WireTest):
    def assert_outside_transaction(self, request):
        for field in ("startTransaction", "autocommit", "txnNumber"):
            self.assertNotIn(field, request.doc, request.doc)

    def claim_free_lane_7(self):
        """Starts claim(batch 1) and answers it up to the candidates: no lanes held, lane 7
        of handler mailer has due work, and is free at epoch 3."""
        rs = self.rs
        rs.start(["claim", "w", "H", "1"])
        self.cursor(rs.expect("find"), [subscription()], "subscriptions")
        self.cursor(rs.expect("find"), [], "lanes")
        self.cursor(rs.expect("aggregate"), [{"_id": {"h": "mailer", "l": 7}, "at": now()}],
                    "deliveries")
        for _ in range(2):
            self.cursor(rs.expect("find"), [lane(7, 3)], "lanes")

    def test_a_claim_writes_lanes_conditionally_and_gives_up_a_lane_it_lost(self):
        rs = self.rs
        rs.start(["claim", "w", "H", "2"])
        find = rs.expect("find")
        self.assert_outside_transaction(find)
        self.assertEqual(find.doc["find"], "subscriptions")
        self.assertEqual(find.doc["filter"], {})
        self.cursor(find, [subscription()], "subscriptions")

        held = rs.expect("find")
        self.assertEqual(held.doc["find"], "lanes")
        self.assertEqual(held.doc["filter"], {"handler": {"$in": ["mailer"]}, "owner": "w"})
        self.cursor(held, [], "lanes")

        work = rs.expect("aggregate")
        self.assert_outside_transaction(work)
        self.assertEqual(work.doc["aggregate"], "deliveries")
        match = work.doc["pipeline"][0]["$match"]
        self.assertEqual(match["status"], "pending")
        self.assertIn("$lte", match["availableAt"])
        self.cursor(work, [{"_id": {"h": "mailer", "l": 7}, "at": now()},
                           {"_id": {"h": "mailer", "l": 9}, "at": now()}], "deliveries")
        # Which of them are acquirable (core::acquirable), then the window, re-read.
        for _ in range(2):
            lanes = rs.expect("find")
            self.assertEqual(lanes.doc["find"], "lanes")
            self.assertEqual(lanes.doc["filter"]["_id"]["$in"],
                             [{"h": "mailer", "l": 7}, {"h": "mailer", "l": 9}])
            self.cursor(lanes, [lane(7, 3), lane(9, 5, version=8)], "lanes")
        for number, event_id in ((7, "e1"), (9, "e2")):
            candidates = rs.expect("find")
            self.assertEqual(candidates.doc["find"], "deliveries")
            f = candidates.doc["filter"]
            self.assertEqual((f["handler"], f["laneId"], f["status"]), ("mailer", number, "pending"))
            self.assertEqual(candidates.doc["sort"], {"availableAt": 1, "_id": 1})
            self.assertEqual(candidates.doc["limit"], 2)
            self.cursor(candidates, [delivery(event_id)], "deliveries")

        write = rs.expect("update")
        self.assert_outside_transaction(write)
        doc = write.doc
        self.assertEqual(doc["update"], "lanes")
        self.assertIs(doc["ordered"], False)
        self.assertEqual(doc["writeConcern"], {"w": "majority"})
        self.assertEqual(len(doc["updates"]), 2)
        versions = ({"$exists": False}, 8)  # lane 7 was never written by a claim
        for statement, number, read, version, event_id in zip(doc["updates"], (7, 9), (3, 5),
                                                               versions, ("e1", "e2")):
            # Conditional on the epoch (and version) the claim read; an upsert, so that a
            # failed condition shows as a DuplicateKey error at the statement's index.
            self.assertEqual(statement["q"], {"_id": {"h": "mailer", "l": number}, "epoch": read,
                                              "version": version})
            self.assertIs(statement["upsert"], True)
            self.assertEqual(statement["u"]["$inc"], {"version": 1})
            s = statement["u"]["$set"]
            self.assertEqual(s["epoch"], read + 1)  # a lane changing hands moves its epoch
            self.assertEqual((s["owner"], s["holder"]), ("w", "H"))
            self.assertEqual(s["inFlight"], [event_id])
            self.assertEqual(s["lost"], [])
            self.assertEqual(statement["u"]["$setOnInsert"], {"handler": "mailer", "lane": number})
        # Another claim moved lane 9's epoch first.
        write.ok(n=1, nModified=1, writeErrors=[
            {"index": 1, "code": 11000, "errmsg": "E11000 duplicate key error"}])

        events = rs.expect("find")
        self.assertEqual(events.doc["find"], "events")
        self.assertEqual(events.doc["filter"], {"_id": {"$in": ["e1"]}})
        self.cursor(events, [{"_id": "e1", "type": "t", "key": None, "payload": {"n": 1},
                              "createdAt": now()}], "events")
        self.assertEqual(rs.output(), ["ok 1 " + token(7, 4, 0, "mailer", "e1")])
        rs.nothing_more()

    def test_another_write_error_on_the_lanes_fails_the_claim(self):
        rs = self.rs
        self.claim_free_lane_7()
        self.cursor(rs.expect("find"), [delivery("e1")], "deliveries")
        rs.expect("update").ok(n=0, writeErrors=[
            {"index": 0, "code": 121, "errmsg": "Document failed validation"}])
        (line,) = rs.output()
        self.assertTrue(line.startswith("error internal 121 "), line)
        rs.nothing_more()

    def run_complete_reads(self, lane_doc, delivery_doc, txn=None):
        rs = self.rs
        lanes = rs.expect("find")
        lsid, txn = self.assert_starts_transaction(lanes, txn_number=txn)
        self.assertEqual(lanes.doc["filter"], {"_id": {"$in": [{"h": "mailer", "l": 7}]}})
        self.cursor(lanes, [lane_doc], "lanes")
        deliveries = rs.expect("find")
        self.assert_in_transaction(deliveries, lsid, txn)
        self.assertEqual(deliveries.doc["filter"], {"_id": {"$in": [{"e": "e1", "h": "mailer"}]}})
        self.cursor(deliveries, [delivery_doc], "deliveries")
        return lsid, txn

    def test_complete_many_deletes_what_holds_in_one_transaction(self):
        rs = self.rs
        rs.start(["complete", token(7, 4, 0, "mailer", "e1")])
        lsid, txn = self.run_complete_reads(lane(7, 4, "w", "H", now(), ["e1"]), delivery("e1"))
        delete = rs.expect("delete")
        self.assert_in_transaction(delete, lsid, txn)
        self.assertNotIn("writeConcern", delete.doc)
        self.assertEqual(delete.doc["deletes"], [{"q": {"_id": {"e": "e1", "h": "mailer"}},
                                                  "limit": 1}])
        delete.ok(n=1)
        commit = rs.expect("commitTransaction")
        self.assert_commit(commit, lsid, txn)
        commit.ok()
        self.assertEqual(rs.output(), ["ok 1"])
        rs.nothing_more()

    def test_a_conflict_on_complete_runs_again_and_reports_the_token_lost(self):
        rs = self.rs
        rs.start(["complete", token(7, 4, 0, "mailer", "e1")])
        lsid, txn = self.run_complete_reads(lane(7, 4, "w", "H", now(), ["e1"]), delivery("e1"))
        # A takeover's charge wrote the delivery after this transaction's snapshot.
        rs.expect("delete").replies(ok=0, code=112, codeName="WriteConflict",
                                    errmsg="write conflict", errorLabels=[TRANSIENT])
        rs.expect("abortTransaction").ok()
        # Run two sees the takeover: the epoch moved, the claims counter was bumped. Nothing
        # holds, so nothing is deleted.
        lsid2, txn2 = self.run_complete_reads(lane(7, 5, "w2", "H2", now(), []),
                                              delivery("e1", claims=1, attempts=1), txn=txn + 1)
        self.assertEqual(lsid2, lsid)
        commit = rs.expect("commitTransaction")
        self.assert_commit(commit, lsid, txn2)
        commit.ok()
        self.assertEqual(rs.output(), ["ok 0"])
        rs.nothing_more()

    def test_complete_inside_begin_is_the_callers_transaction(self):
        rs = self.rs
        rs.start(["tx_complete", token(7, 4, 0, "mailer", "e1")])
        lsid, txn = self.run_complete_reads(lane(7, 4, "w", "H", now(), ["e1"]), delivery("e1"))
        rs.expect("delete").ok(n=1)
        commit = rs.expect("commitTransaction")
        self.assert_commit(commit, lsid, txn)
        self.assertEqual(commit.doc["writeConcern"], {"w": "majority"})
        commit.ok()
        self.assertEqual(rs.output(), ["ok completed"])
        rs.nothing_more()

    def run_fail_reads(self, lane_doc, delivery_doc, max_attempts=25):
        rs = self.rs
        lsid, txn = self.run_complete_reads(lane_doc, delivery_doc)
        subs = rs.expect("find")
        self.assert_in_transaction(subs, lsid, txn)
        self.assertEqual(subs.doc["filter"], {"_id": {"$in": ["mailer"]}})
        self.cursor(subs, [subscription(max_attempts=max_attempts)], "subscriptions")
        return lsid, txn

    def test_fail_charges_and_leaves_the_lane_in_one_transaction(self):
        rs = self.rs
        rs.start(["fail", token(7, 4, 2, "mailer", "e1"), "boom"])
        before = now()
        lsid, txn = self.run_fail_reads(lane(7, 4, "w", "H", now(), ["e1"]),
                                        delivery("e1", claims=2, attempts=3))
        update = rs.expect("update")
        self.assert_in_transaction(update, lsid, txn)
        self.assertEqual(update.doc["update"], "deliveries")
        (statement,) = update.doc["updates"]
        self.assertEqual(statement["q"], {"_id": {"e": "e1", "h": "mailer"}, "status": "pending",
                                          "claims": 2})
        s = statement["u"]["$set"]
        self.assertEqual((s["status"], s["attempts"], s["lastError"]), ("pending", 4, "boom"))
        # A backoff (core::after_failed_attempt): due later, within the policy's maximum.
        due = s["availableAt"].replace(tzinfo=datetime.timezone.utc)  # decoded naive, in UTC
        self.assertGreater(due, before)
        self.assertLess(due, before + datetime.timedelta(hours=1, minutes=1))
        self.assertEqual(statement["u"]["$inc"], {"claims": 1})
        update.ok(n=1, nModified=1)
        pull = rs.expect("update")
        self.assert_in_transaction(pull, lsid, txn)
        self.assertEqual(pull.doc["update"], "lanes")
        self.assertEqual(pull.doc["updates"][0]["q"], {"_id": {"h": "mailer", "l": 7}})
        # The version moves, so a claim that read the list before this cannot write it back.
        self.assertEqual(pull.doc["updates"][0]["u"], {"$pull": {"inFlight": "e1"},
                                                       "$inc": {"version": 1}})
        pull.ok(n=1, nModified=1)
        commit = rs.expect("commitTransaction")
        self.assert_commit(commit, lsid, txn)
        commit.ok()
        self.assertEqual(rs.output(), ["ok retry"])
        rs.nothing_more()

    def test_fail_at_the_budgets_end_is_dead(self):
        rs = self.rs
        rs.start(["fail", token(7, 4, 0, "mailer", "e1"), "boom"])
        self.run_fail_reads(lane(7, 4, "w", "H", now(), ["e1"]), delivery("e1"), max_attempts=1)
        update = rs.expect("update")
        s = update.doc["updates"][0]["u"]["$set"]
        self.assertEqual((s["status"], s["attempts"]), ("dead", 1))
        self.assertNotIn("availableAt", s)
        update.ok(n=1, nModified=1)
        rs.expect("update").ok(n=1, nModified=1)
        rs.expect("commitTransaction").ok()
        self.assertEqual(rs.output(), ["ok dead"])

    def test_fail_of_a_token_whose_lane_moved_on_writes_nothing(self):
        rs = self.rs
        rs.start(["fail", token(7, 4, 0, "mailer", "e1"), "boom"])
        self.run_fail_reads(lane(7, 5, "w2", "H2", now(), ["e1"]), delivery("e1"))
        rs.expect("commitTransaction").ok()
        self.assertEqual(rs.output(), ["ok lost"])
        rs.nothing_more()

    def test_a_takeover_records_the_lost_list_then_charges_it(self):
        rs = self.rs
        rs.start(["claim", "w", "H", "1"])
        self.cursor(rs.expect("find"), [subscription()], "subscriptions")
        self.cursor(rs.expect("find"), [], "lanes")
        self.cursor(rs.expect("aggregate"), [{"_id": {"h": "mailer", "l": 7}, "at": now()}],
                    "deliveries")
        expired = lane(7, 3, "other", "X", now() - datetime.timedelta(seconds=5), ["e0"])
        for _ in range(2):
            self.cursor(rs.expect("find"), [expired], "lanes")
        self.cursor(rs.expect("find"), [delivery("e1")], "deliveries")  # e0 is excluded
        write = rs.expect("update")
        (statement,) = write.doc["updates"]
        self.assertEqual(statement["q"]["epoch"], 3)
        self.assertEqual(statement["u"]["$set"]["epoch"], 4)
        self.assertEqual(statement["u"]["$set"]["lost"], ["e0"])
        self.assertEqual(statement["u"]["$set"]["inFlight"], ["e1"])
        write.ok(n=1, nModified=1)
        lost = rs.expect("find")
        self.assertEqual(lost.doc["filter"], {"_id": {"$in": [{"e": "e0", "h": "mailer"}]},
                                              "status": "pending"})
        self.cursor(lost, [delivery("e0", claims=5, attempts=2)], "deliveries")
        charge = rs.expect("update")
        self.assert_outside_transaction(charge)
        (c,) = charge.doc["updates"]
        self.assertEqual(c["q"], {"_id": {"e": "e0", "h": "mailer"}, "status": "pending",
                                  "claims": 5})
        self.assertEqual(c["u"]["$set"]["attempts"], 3)
        self.assertEqual(c["u"]["$set"]["lastError"], LEASE_LOST)
        charge.ok(n=1, nModified=1)
        clear = rs.expect("update")
        self.assertEqual(clear.doc["updates"][0]["q"], {"_id": {"h": "mailer", "l": 7},
                                                        "epoch": 4})
        self.assertEqual(clear.doc["updates"][0]["u"], {"$set": {"lost": []}})
        clear.ok(n=1, nModified=1)
        # The batch is full (e1): the charged e0 is offered, but no room is left.
        self.cursor(rs.expect("find"), [{"_id": "e1", "type": "t", "key": None, "payload": {},
                                         "createdAt": now()}], "events")
        self.assertEqual(rs.output(), ["ok 1 " + token(7, 4, 0, "mailer", "e1")])
        rs.nothing_more()

    def test_a_delivery_with_a_pending_predecessor_does_not_use_up_the_room(self):
        rs = self.rs
        self.claim_free_lane_7()
        first = rs.expect("find")
        self.assertEqual(first.doc["limit"], 1)
        self.assertNotIn("skip", first.doc)
        self.cursor(first, [delivery("e1", key="k", sequence=2)], "deliveries")
        order = rs.expect("aggregate")
        self.assertEqual(order.doc["pipeline"][0]["$match"],
                         {"handler": "mailer", "laneId": 7, "key": {"$in": ["k"]},
                          "status": "pending"})
        # Sequence 1 of key k is still pending: e1 waits (core::has_pending_predecessor).
        self.cursor(order, [{"_id": "k", "first": Int64(1)}], "deliveries")
        more = rs.expect("find")
        self.assertEqual((more.doc["skip"], more.doc["limit"]), (1, 2))
        self.cursor(more, [delivery("e2")], "deliveries")
        write = rs.expect("update")
        self.assertEqual(write.doc["updates"][0]["u"]["$set"]["inFlight"], ["e2"])
        write.ok(n=1, nModified=1)
        self.cursor(rs.expect("find"), [{"_id": "e2", "type": "t", "key": None, "payload": {},
                                         "createdAt": now()}], "events")
        self.assertEqual(rs.output(), ["ok 1 " + token(7, 4, 0, "mailer", "e2")])
        rs.nothing_more()

    def test_relinquish_hands_back_the_callers_idle_lanes_as_read(self):
        rs = self.rs
        rs.start(["relinquish", "w", "H"])
        lanes = rs.expect("find")
        self.assertEqual(lanes.doc["filter"], {"owner": "w"})
        self.cursor(lanes, [lane(7, 4, "w", "H", now(), ["e1"]),
                            lane(8, 2, "w", "H", now(), ["e2"]),
                            lane(9, 6, "w", "other", now(), [])], "lanes")
        pending = rs.expect("find")
        self.assertEqual(pending.doc["filter"]["status"], "pending")
        self.assertEqual(pending.doc["filter"]["_id"]["$in"],
                         [{"e": "e1", "h": "mailer"}, {"e": "e2", "h": "mailer"}])
        self.cursor(pending, [delivery("e2")], "deliveries")  # e1 completed; e2 still runs
        back = rs.expect("update")
        self.assert_outside_transaction(back)
        (statement,) = back.doc["updates"]  # lane 8 runs e2, lane 9 is another holder's
        self.assertEqual(statement["q"], {"_id": {"h": "mailer", "l": 7}, "epoch": 4,
                                          "owner": "w", "holder": "H", "inFlight": ["e1"]})
        self.assertEqual(statement["u"]["$set"], {"owner": None, "holder": None,
                                                  "leaseExpiresAt": None, "inFlight": []})
        back.ok(n=1, nModified=1)
        self.assertEqual(rs.output(), ["ok 1"])
        rs.nothing_more()

    def test_extend_lease_renews_only_the_callers_lanes(self):
        rs = self.rs
        rs.start(["extend", "w", "H"])
        self.cursor(rs.expect("find"), [lane(7, 4, "w", "H", now(), ["e1"]),
                                        lane(9, 6, "w", "other", now(), [])], "lanes")
        renew = rs.expect("update")
        (statement,) = renew.doc["updates"]
        self.assertEqual(statement["q"], {"_id": {"$in": [{"h": "mailer", "l": 7}]},
                                          "owner": "w", "holder": "H"})
        self.assertIs(statement["multi"], True)
        renew.ok(n=1, nModified=1)
        self.assertEqual(rs.output(), ["ok 1"])
        rs.nothing_more()

    def test_a_kept_lanes_write_is_conditional_on_the_version_it_was_read_at(self):
        rs = self.rs
        rs.start(["claim", "w", "H", "2"])
        self.cursor(rs.expect("find"), [subscription()], "subscriptions")
        held = rs.expect("find")
        self.cursor(held, [lane(7, 4, "w", "H", now() + datetime.timedelta(seconds=20), ["e1"],
                                version=11)], "lanes")
        running = rs.expect("find")
        self.assertEqual(running.doc["filter"], {"_id": {"$in": [{"e": "e1", "h": "mailer"}]},
                                                 "status": "pending"})
        self.cursor(running, [delivery("e1", key="k", sequence=1)], "deliveries")
        candidates = rs.expect("find")
        self.assertEqual(candidates.doc["filter"]["eventId"], {"$nin": ["e1"]})  # in flight
        self.cursor(candidates, [delivery("e2", key="k", sequence=2), delivery("e3")],
                    "deliveries")
        self.cursor(rs.expect("aggregate"), [{"_id": "k", "first": Int64(1)}], "deliveries")
        # e2 was left out and the page was full: the next one is read (empty).
        more = rs.expect("find")
        self.assertEqual((more.doc["skip"], more.doc["limit"]), (2, 4))
        self.cursor(more, [], "deliveries")
        # The batch has room for one more: lanes with work are looked at (none).
        self.cursor(rs.expect("aggregate"), [], "deliveries")
        write = rs.expect("update")
        (statement,) = write.doc["updates"]
        # Kept: the epoch stays, the in-flight list is what was read plus the pick (e2
        # waits for e1, its key's predecessor), on condition that neither moved.
        self.assertEqual(statement["q"], {"_id": {"h": "mailer", "l": 7}, "epoch": 4,
                                          "version": 11})
        self.assertEqual(statement["u"]["$set"]["epoch"], 4)
        self.assertEqual(statement["u"]["$set"]["inFlight"], ["e1", "e3"])
        self.assertNotIn("holder", statement["u"]["$set"])  # the binding stays
        # A fail of e1 bumped the version meanwhile: the lane gives up its pick.
        write.ok(n=0, nModified=0, writeErrors=[
            {"index": 0, "code": 11000, "errmsg": "E11000 duplicate key error"}])
        self.assertEqual(rs.output(), ["ok 0 "])
        rs.nothing_more()

    def test_a_takeover_picks_what_it_charged_in_a_second_conditional_write(self):
        rs = self.rs
        rs.start(["claim", "w", "H", "2"])
        self.cursor(rs.expect("find"), [subscription()], "subscriptions")
        self.cursor(rs.expect("find"), [], "lanes")
        self.cursor(rs.expect("aggregate"), [{"_id": {"h": "mailer", "l": 7}, "at": now()}],
                    "deliveries")
        expired = lane(7, 3, "other", "X", now() - datetime.timedelta(seconds=5), ["e0"])
        for _ in range(2):
            self.cursor(rs.expect("find"), [expired], "lanes")
        self.cursor(rs.expect("find"), [delivery("e1")], "deliveries")
        first = rs.expect("update")
        self.assertEqual(first.doc["updates"][0]["q"]["version"], {"$exists": False})
        first.ok(n=1, nModified=1)
        self.cursor(rs.expect("find"), [delivery("e0", claims=5, attempts=2)], "deliveries")
        rs.expect("update").ok(n=1, nModified=1)  # the charge
        rs.expect("update").ok(n=1, nModified=1)  # lost cleared
        # The charged delivery is due again: offered to the lane once more.
        again = rs.expect("find")
        self.assertEqual(again.doc["filter"]["eventId"], {"$nin": ["e1"]})
        self.assertEqual(again.doc["limit"], 1)
        self.cursor(again, [delivery("e0", claims=6, attempts=3)], "deliveries")
        second = rs.expect("update")
        (statement,) = second.doc["updates"]
        # Conditional on what the first write stored: epoch 4, version 1.
        self.assertEqual(statement["q"], {"_id": {"h": "mailer", "l": 7}, "epoch": 4,
                                          "version": 1})
        self.assertEqual(statement["u"]["$set"]["inFlight"], ["e1", "e0"])
        self.assertEqual(statement["u"]["$set"]["lost"], [])
        second.ok(n=1, nModified=1)
        events = rs.expect("find")
        self.assertEqual(events.doc["filter"], {"_id": {"$in": ["e1", "e0"]}})
        self.cursor(events, [{"_id": e, "type": "t", "key": None, "payload": {},
                              "createdAt": now()} for e in ("e0", "e1")], "events")
        self.assertEqual(rs.output(), ["ok 2 %s,%s" % (token(7, 4, 0, "mailer", "e1"),
                                                      token(7, 4, 6, "mailer", "e0"))])
        rs.nothing_more()


if __name__ == "__main__":
    mockrs.main()
