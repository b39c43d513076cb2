"""Wire tests of setup() converting the 0.1.0 layout in place (src/mongo/upgrade.hpp,
docs/mongodb.md "Upgrading from the 0.1.0 layout"). The scripted server answers setup's
finds with 0.1.0 documents and the test checks every write it sends, the layout mark last,
and that a marked database is not looked through again.
Run: upgrade_test.py DRIVER."""

import datetime

from bson.int64 import Int64
from bson.max_key import MaxKey

import mockrs
from mockrs import DATABASE, WireTest, lanes_of

COLLECTIONS = ["subscriptions", "events", "deliveries", "lanes", "key_counters", "completions",
               "relaybus_meta"]
OBSOLETE = ["deliveries_status_available", "deliveries_status_lease", "deliveries_key_sequence",
            "deliveries_handler_updated"]  # upgrade::kObsoleteIndexes
IN_FLIGHT_ERROR = "lease lost: upgraded from 0.1.0 while in flight"  # upgrade::kInFlightError
UNSET_LEASE = {"leaseOwner": "", "leaseToken": "", "leaseExpiresAt": ""}
MAJORITY = {"w": "majority"}

PAST = datetime.datetime(2025, 11, 30, 12, 0, 0)
COMPLETED_AT = datetime.datetime(2025, 11, 30, 12, 0, 5)


def delivery(event, handler, status, key=None, attempts=0, sequence=0, last_error=None,
             updated=PAST):
    """A 0.1.0 delivery: today's fields without laneId and claims, with the lease fields
    (set while processing, null otherwise)."""
    leased = status == "processing"
    return {"_id": {"e": event, "h": handler}, "eventId": event, "handler": handler, "key": key,
            "sequence": Int64(sequence), "status": status, "attempts": attempts,
            "availableAt": PAST, "lastError": last_error, "updatedAt": updated,
            "leaseOwner": "worker-1" if leased else None,
            "leaseToken": "v0.4b0f" if leased else None,
            "leaseExpiresAt": PAST if leased else None}  # expired: its worker is stopped


def event(event_id, key=None):
    """A 0.1.0 event: no handlers."""
    return {"_id": event_id, "type": "user.created", "key": key, "payload": {"n": 1},
            "createdAt": PAST}


# A 0.1.0 database, each list in _id order.
EVENTS = [event("e1", "user-42"), event("e2"), event("e3", "order-7"), event("e4")]
PENDING_KEYED = delivery("e1", "audit", "pending", key="user-42", sequence=1)
PROCESSING_KEYED = delivery("e1", "mailer", "processing", key="user-42", attempts=3, sequence=1)
PROCESSING_UNKEYED = delivery("e2", "mailer", "processing", attempts=1, last_error="timeout")
DEAD = delivery("e3", "audit", "dead", key="order-7", attempts=25, sequence=1, last_error="boom")
COMPLETED = delivery("e3", "mailer", "completed", key="order-7", attempts=1, sequence=1,
                     updated=COMPLETED_AT)
DELIVERIES = [PENDING_KEYED, PROCESSING_KEYED, PROCESSING_UNKEYED, DEAD, COMPLETED]
SUBSCRIBED = ["audit", "mailer"]


def project(docs, request):
    """What the server returns of docs for the request's projection."""
    fields = request.doc.get("projection") or {}
    return [{k: v for k, v in d.items() if k == "_id" or k in fields} for d in docs]


class UpgradeTest(WireTest):
    # --- each phase of setup, answered; the assertions are the exact commands

    def answer_start(self, exist=False, mark=None):
        """The layout mark read (none, or of version `mark`), then a create per collection."""
        self.answer_layout_mark(mark)
        for name in COLLECTIONS:
            create = self.rs.expect("create")
            self.assertEqual(create.doc["create"], name)
            if exist:
                create.replies(ok=0, code=48, codeName="NamespaceExists", errmsg="exists")
            else:
                create.ok()

    def answer_marker_and_lease_check(self, first_unconverted):
        rs = self.rs
        marker = rs.expect("find")
        self.assertEqual(marker.doc["filter"], {"$or": [{"leaseToken": {"$exists": True}},
                                                        {"laneId": {"$exists": False}}]})
        self.cursor(marker, [{"_id": first_unconverted["_id"]}], "deliveries")
        # Found one: no need to look at events. Then: is any 0.1.0 lease still live?
        live = rs.expect("find")
        self.assertEqual(live.doc["find"], "deliveries")
        self.assertEqual(list(live.doc["filter"]), ["status", "leaseExpiresAt"])
        self.assertEqual(live.doc["filter"]["status"], "processing")
        self.assertIsInstance(live.doc["filter"]["leaseExpiresAt"]["$gt"], datetime.datetime)
        self.assertEqual(live.doc["limit"], 1)
        self.cursor(live, [], "deliveries")

    def answer_indexes(self, present):
        rs = self.rs
        listed = rs.expect("listIndexes")
        self.assertEqual(listed.doc["listIndexes"], "deliveries")
        self.cursor(listed, [{"v": 2, "key": {"_id": 1}, "name": "_id_"}] +
                    [{"v": 2, "key": {"status": 1}, "name": name} for name in present],
                    "deliveries")
        for name in present:
            drop = rs.expect("dropIndexes")
            self.assertEqual(drop.doc["dropIndexes"], "deliveries")
            self.assertEqual(drop.doc["index"], name)
            self.assertEqual(drop.doc["writeConcern"], MAJORITY)
            if name == "deliveries_status_lease":  # gone meanwhile: done all the same
                drop.replies(ok=0, code=27, codeName="IndexNotFound", errmsg="index not found")
            else:
                drop.ok(nIndexesWas=len(present) + 1)

    def answer_lanes(self, counts, expected_writes):
        rs = self.rs
        subs = rs.expect("find")
        self.assertEqual(subs.doc["find"], "subscriptions")
        self.cursor(subs, [{"_id": h} for h in SUBSCRIBED], "subscriptions")
        self.cursor(rs.expect("aggregate"), [{"_id": h, "n": n} for h, n in counts], "lanes")
        for handler in expected_writes:
            lanes = rs.expect("update")
            self.assertNotIn("startTransaction", lanes.doc)
            self.assertEqual(lanes.doc["update"], "lanes")
            self.assertEqual(lanes.doc["writeConcern"], MAJORITY)
            self.assertIs(lanes.doc["ordered"], False)
            updates = lanes.doc["updates"]
            self.assertEqual([u["q"]["_id"] for u in updates],
                             [{"h": handler, "l": n} for n in range(256)])
            for u in updates:  # subscribe's upserts: never touch a lane that exists
                self.assertEqual(list(u["u"]), ["$setOnInsert"])
                self.assertIs(u["upsert"], True)
            lanes.ok(n=256, nModified=0)

    def answer_event_handlers(self, events, deliveries):
        rs = self.rs
        find = rs.expect("find")
        self.assertEqual(find.doc["find"], "events")
        self.assertEqual(find.doc["filter"], {"handlers": {"$exists": False}})
        self.assertEqual(find.doc["limit"], 1000)
        self.assertEqual(find.doc["sort"], {"_id": 1})
        self.cursor(find, project(events, find), "events")
        if events:
            # Their deliveries, completed ones included, by _id range (no eventId index).
            of = rs.expect("find")
            self.assertEqual(of.doc["find"], "deliveries")
            self.assertEqual(of.doc["filter"], {"_id": {
                "$gte": {"e": events[0]["_id"]},
                "$lte": {"e": events[-1]["_id"], "h": MaxKey()}}})
            self.cursor(of, project(deliveries, of), "deliveries")
            update = rs.expect("update")
            self.assertEqual(update.doc["update"], "events")
            self.assertEqual(update.doc["writeConcern"], MAJORITY)
            self.assertIs(update.doc["ordered"], False)
            self.assertEqual(update.doc["updates"], [
                {"q": {"_id": e, "handlers": {"$exists": False}},
                 "u": {"$set": {"handlers": handlers}}, "upsert": False}
                for e, handlers in [("e1", ["audit", "mailer"]), ("e2", ["mailer"]),
                                    ("e3", ["audit", "mailer"]), ("e4", [])]])
            update.ok(n=4, nModified=4)
            more = rs.expect("find")  # the next batch: nothing after e4
            self.assertEqual(more.doc["filter"], {"handlers": {"$exists": False},
                                                  "_id": {"$gt": "e4"}})
            self.cursor(more, [], "events")

    def answer_completed_record(self):
        """The completed delivery found and its history document upserted."""
        rs = self.rs
        find = rs.expect("find")
        self.assertEqual(find.doc["filter"], {"status": "completed"})
        self.cursor(find, project([COMPLETED], find), "deliveries")
        record = rs.expect("update")
        self.assertEqual(record.doc["update"], "completions")
        self.assertEqual(record.doc["writeConcern"], MAJORITY)
        self.assertEqual(record.doc["updates"], [{
            "q": {"_id": {"e": "e3", "h": "mailer"}},
            "u": {"$setOnInsert": {"eventId": "e3", "handler": "mailer", "attempts": 1,
                                   "completedAt": COMPLETED_AT}},
            "upsert": True}])
        return record

    def answer_completed_delete(self):
        delete = self.rs.expect("delete")
        self.assertEqual(delete.doc["delete"], "deliveries")
        self.assertEqual(delete.doc["writeConcern"], MAJORITY)
        self.assertEqual(delete.doc["deletes"], [
            {"q": {"_id": {"e": "e3", "h": "mailer"}, "status": "completed"}, "limit": 1}])
        return delete

    def answer_completed_done(self):
        more = self.rs.expect("find")
        self.assertEqual(more.doc["filter"], {"status": "completed",
                                              "_id": {"$gt": {"e": "e3", "h": "mailer"}}})
        self.cursor(more, [], "deliveries")

    def answer_conversion(self):
        """The other deliveries, in two batches and a third find that returns nothing."""
        rs = self.rs
        user42, e2, order7 = lanes_of("user-42", "e2", "order-7")  # core::lane_of
        expected = {
            ("e1", "audit"): ("pending", {"laneId": user42, "claims": 0}),
            ("e1", "mailer"): ("processing", {"laneId": user42, "claims": 0, "status": "pending",
                                              "lastError": IN_FLIGHT_ERROR}),
            ("e2", "mailer"): ("processing", {"laneId": e2, "claims": 0, "status": "pending"}),
            ("e3", "audit"): ("dead", {"laneId": order7, "claims": 0}),
        }
        after = None
        for batch in ([PENDING_KEYED, PROCESSING_KEYED], [PROCESSING_UNKEYED, DEAD], []):
            find = rs.expect("find")
            f = dict(find.doc["filter"])
            self.assertEqual(f.pop("status"), {"$ne": "completed"})
            self.assertEqual(f.pop("$or"), [{"leaseToken": {"$exists": True}},
                                            {"laneId": {"$exists": False}}])
            self.assertEqual(f, {} if after is None else {"_id": {"$gt": after}})
            self.cursor(find, project(batch, find), "deliveries")
            if not batch:
                break
            update = rs.expect("update")
            self.assertEqual(update.doc["update"], "deliveries")
            self.assertEqual(update.doc["writeConcern"], MAJORITY)
            self.assertIs(update.doc["ordered"], False)
            self.assertEqual(len(update.doc["updates"]), len(batch))
            for statement, d in zip(update.doc["updates"], batch):
                status, fields = expected[(d["eventId"], d["handler"])]
                self.assertEqual(statement["q"], {"_id": d["_id"], "status": status})
                u = statement["u"]
                self.assertEqual(list(u), ["$set", "$unset"])
                got = dict(u["$set"])
                if status == "processing":  # the attempt charged at claim stays charged
                    self.assertIsInstance(got.pop("updatedAt"), datetime.datetime)
                # 0.1.0 deliveries have no createdAt: they get the updatedAt they had
                self.assertEqual(got.pop("createdAt"), d["updatedAt"])
                self.assertNotIn("attempts", got)
                self.assertNotIn("availableAt", got)  # due as it was: at once
                self.assertEqual(got, fields)
                self.assertEqual(u["$unset"], UNSET_LEASE)
                self.assertIs(statement["upsert"], False)
            update.ok(n=len(batch), nModified=len(batch))
            after = batch[-1]["_id"]

    def answer_create_indexes(self):
        for collection in ("deliveries", "lanes", "events", "completions"):
            create = self.rs.expect("createIndexes")
            self.assertEqual(create.doc["createIndexes"], collection)
            create.ok()

    # --- the cases

    def test_setup_converts_a_0_1_0_database_in_place(self):
        rs = self.rs
        rs.start(["setup"])
        self.answer_start()
        self.answer_marker_and_lease_check(PENDING_KEYED)
        self.answer_indexes(OBSOLETE)
        self.answer_lanes([], expected_writes=SUBSCRIBED)
        self.answer_event_handlers(EVENTS, DELIVERIES)
        self.answer_completed_record().ok(n=1, nModified=0, upserted=[
            {"index": 0, "_id": {"e": "e3", "h": "mailer"}}])
        self.answer_completed_delete().ok(n=1)
        self.answer_completed_done()
        self.answer_conversion()
        self.expect_layout_mark_written()  # last, once every step has finished
        self.answer_create_indexes()
        self.assertEqual(rs.output(), ["ok setup"])
        rs.nothing_more()

    def test_an_unmarked_converted_database_is_checked_then_marked(self):
        rs = self.rs
        rs.start(["setup"])
        self.answer_start(exist=True)  # no mark: a 0.2.0 database from before the mark
        marker_deliveries, marker_events, _, _, _, _ = self.answer_layout_checks(
            subscriptions=SUBSCRIBED, lane_counts=[("audit", 256), ("mailer", 256)])
        for marker, collection, filter_ in (
                (marker_deliveries, "deliveries",
                 {"$or": [{"leaseToken": {"$exists": True}}, {"laneId": {"$exists": False}}]}),
                (marker_events, "events", {"handlers": {"$exists": False}})):
            self.assertEqual(marker.doc["find"], collection)
            self.assertEqual(marker.doc["filter"], filter_)
            self.assertEqual(marker.doc["projection"], {"_id": 1})
            self.assertEqual(marker.doc["limit"], 1)
            self.assertIs(marker.doc["singleBatch"], True)
            self.assertNotIn("txnNumber", marker.doc)
        for collection in ("deliveries", "lanes", "events", "completions"):  # a no-op: they exist
            create = rs.expect("createIndexes")
            self.assertEqual(create.doc["createIndexes"], collection)
            create.ok(note="all indexes already exist")
        self.assertEqual(rs.output(), ["ok setup"])
        rs.nothing_more()  # no update but the mark, no delete, no dropIndexes

    def test_a_marked_database_gets_no_marker_find_and_no_data_step(self):
        rs = self.rs
        rs.start(["setup"])
        self.answer_start(exist=True, mark=2)
        self.answer_layout_checks(subscriptions=SUBSCRIBED, marked=True,
                                  lane_counts=[("audit", 256), ("mailer", 256)])
        self.answer_create_indexes()
        self.assertEqual(rs.output(), ["ok setup"])
        rs.nothing_more()  # no marker find, no lease check, no batch, no mark written again

    def test_a_marked_database_still_loses_0_1_0_indexes_and_gets_its_lanes(self):
        rs = self.rs
        rs.start(["setup"])
        self.answer_start(exist=True, mark=2)
        self.answer_indexes(["deliveries_handler_updated"])  # cheap to check: every run
        self.answer_lanes([("mailer", 256), ("audit", 17)], expected_writes=["audit"])
        self.answer_create_indexes()
        self.assertEqual(rs.output(), ["ok setup"])
        rs.nothing_more()

    def test_events_without_handlers_alone_are_a_0_1_0_database(self):
        rs = self.rs
        rs.start(["setup"])
        self.answer_start(exist=True)
        self.cursor(rs.expect("find"), [], "deliveries")
        marker = rs.expect("find")
        self.assertEqual(marker.doc["find"], "events")
        self.cursor(marker, [{"_id": "e9"}], "events")
        self.cursor(rs.expect("find"), [], "deliveries")  # no live lease
        self.cursor(rs.expect("listIndexes"), [], "deliveries")
        self.cursor(rs.expect("find"), [], "subscriptions")  # none: no lane count
        self.cursor(rs.expect("find"), [{"_id": "e9"}], "events")
        self.cursor(rs.expect("find"), [], "deliveries")  # its deliveries: all purged
        update = rs.expect("update")
        self.assertEqual(update.doc["updates"], [
            {"q": {"_id": "e9", "handlers": {"$exists": False}},
             "u": {"$set": {"handlers": []}}, "upsert": False}])
        update.ok(n=1, nModified=1)
        more = rs.expect("find")
        self.assertEqual(more.doc["filter"]["_id"], {"$gt": "e9"})
        self.cursor(more, [], "events")
        for step in ("completed", "to convert"):  # no delivery left of either kind
            find = rs.expect("find")
            self.assertEqual(find.doc["find"], "deliveries", step)
            self.cursor(find, [], "deliveries")
        self.expect_layout_mark_written()
        self.answer_create_indexes()
        self.assertEqual(rs.output(), ["ok setup"])
        rs.nothing_more()

    def test_a_live_0_1_0_lease_is_refused_before_anything_is_converted(self):
        rs = self.rs
        rs.start(["setup"])
        self.answer_start(exist=True)
        self.cursor(rs.expect("find"), [{"_id": PROCESSING_KEYED["_id"]}], "deliveries")
        live = rs.expect("find")
        self.assertEqual(live.doc["filter"]["status"], "processing")
        self.cursor(live, [{"_id": PROCESSING_KEYED["_id"], "leaseOwner": "worker-1",
                            "leaseExpiresAt": datetime.datetime(2999, 1, 1)}], "deliveries")
        (line,) = rs.output()
        self.assertTrue(line.startswith("error conflict - relaybus MongoDB store: setup: a 0.1.0 "
                                        "worker still holds a lease"), line)
        self.assertIn("worker-1", line)
        self.assertIn("stop every 0.1.0 worker", line)
        rs.nothing_more()  # no index dropped, no document written, no mark, no index created

    def test_a_run_cut_off_between_history_and_delete_is_finished_by_the_next(self):
        rs = self.rs
        # Run 1: everything up to the completed delivery's history document, then the
        # connection drops on its delete (which the server never applied).
        rs.start(["setup"])
        self.answer_start()
        self.answer_marker_and_lease_check(PENDING_KEYED)
        self.answer_indexes(OBSOLETE)
        self.answer_lanes([], expected_writes=SUBSCRIBED)
        self.answer_event_handlers(EVENTS, DELIVERIES)
        self.answer_completed_record().ok(n=1, nModified=0, upserted=[
            {"index": 0, "_id": {"e": "e3", "h": "mailer"}}])
        self.answer_completed_delete().hangup()
        (line,) = rs.output()
        self.assertTrue(line.startswith("error unavailable "), line)
        rs.nothing_more()  # no mark

        # Run 2, on what run 1 left (no mark, so it checks again): events with handlers, no
        # 0.1.0 index, every lane, the history document and the completed delivery both, the
        # rest unconverted.
        rs.start(["setup"])
        self.answer_start(exist=True)
        self.answer_marker_and_lease_check(PENDING_KEYED)
        self.answer_indexes([])
        self.answer_lanes([("audit", 256), ("mailer", 256)], expected_writes=[])
        self.answer_event_handlers([], DELIVERIES)  # none left without handlers
        # The same upsert again: it finds the history document and leaves it as it is.
        self.answer_completed_record().ok(n=1, nModified=0)
        self.answer_completed_delete().ok(n=1)
        self.answer_completed_done()
        self.answer_conversion()
        self.expect_layout_mark_written()  # last, once every step has finished
        self.answer_create_indexes()
        self.assertEqual(rs.output(), ["ok setup"])
        rs.nothing_more()

        # Run 3, on the converted and marked database: no marker find, reads only.
        rs.start(["setup"])
        self.answer_start(exist=True, mark=2)
        self.answer_layout_checks(subscriptions=SUBSCRIBED, marked=True,
                                  lane_counts=[("audit", 256), ("mailer", 256)])
        self.answer_create_indexes()
        self.assertEqual(rs.output(), ["ok setup"])
        rs.nothing_more()

    def test_a_run_cut_off_at_its_mark_is_checked_again_by_the_next(self):
        rs = self.rs
        # Run 1: every check done on a converted database, then the connection drops on the
        # mark's upsert (which the server never applied).
        rs.start(["setup"])
        self.answer_start(exist=True)
        for collection in ("deliveries", "events"):
            self.cursor(rs.expect("find"), [], collection)
        self.answer_indexes([])
        self.answer_lanes([("audit", 256), ("mailer", 256)], expected_writes=[])
        mark = rs.expect("update")
        self.assertEqual(mark.doc["update"], "relaybus_meta")
        mark.hangup()
        (line,) = rs.output()
        self.assertTrue(line.startswith("error unavailable "), line)
        self.assertIn("write layout mark", line)
        rs.nothing_more()  # no index created

        # Run 2 finds no mark, so it checks again, and marks.
        rs.start(["setup"])
        self.answer_start(exist=True)
        self.answer_layout_checks(subscriptions=SUBSCRIBED,
                                  lane_counts=[("audit", 256), ("mailer", 256)])
        self.answer_create_indexes()
        self.assertEqual(rs.output(), ["ok setup"])
        rs.nothing_more()

    def test_a_mark_of_a_newer_layout_is_refused_before_anything_is_written(self):
        rs = self.rs
        rs.start(["setup"])
        self.answer_layout_mark(3)  # a newer relaybus set the database up
        (line,) = rs.output()
        self.assertTrue(line.startswith(
            "error invalid_parameter - relaybus MongoDB store: setup: the database is in "
            "layout version 3"), line)
        self.assertIn("newer than this library's 2", line)
        self.assertIn("upgrade this library", line)
        rs.nothing_more()  # no create, no check, no write, no index


if __name__ == "__main__":
    mockrs.main()
