"""Wire tests of setup, subscribe, requeue and lookup.
Run: admin_test.py DRIVER."""

import datetime

from bson.int64 import Int64

import mockrs
from mockrs import DATABASE, WireTest

COLLECTIONS = ["subscriptions", "events", "deliveries", "lanes", "key_counters", "completions",
               "relaybus_meta"]


class AdminTest(WireTest):
    def test_setup_creates_collections_and_indexes_repeatably(self):
        rs = self.rs
        rs.start(["setup"])
        self.answer_layout_mark()  # first, before any write: none yet
        for name in COLLECTIONS:
            create = rs.expect("create")
            self.assertEqual(create.doc["create"], name)
            self.assertEqual(create.doc["writeConcern"], {"w": "majority"})
            self.assertNotIn("startTransaction", create.doc)  # DDL: no transaction
            if name == "events":  # a repeated setup: the collection exists already
                create.replies(ok=0, code=48, codeName="NamespaceExists", errmsg="exists")
            else:
                create.ok()
        # A database in the 0.2.0 layout but not marked (the first setup, or one before the
        # mark): the marker finds, then the mark written.
        self.answer_layout_checks()
        deliveries = rs.expect("createIndexes")
        self.assertEqual(deliveries.doc["createIndexes"], "deliveries")
        self.assertEqual([i["name"] for i in deliveries.doc["indexes"]],
                         ["deliveries_claim", "deliveries_key_order", "deliveries_dead"])
        self.assertEqual(list(deliveries.doc["indexes"][0]["key"]),
                         ["handler", "laneId", "status", "availableAt", "_id"])
        self.assertEqual(deliveries.doc["indexes"][1]["partialFilterExpression"],
                         {"status": "pending", "key": {"$type": "string"}})
        self.assertEqual(deliveries.doc["indexes"][2]["partialFilterExpression"],
                         {"status": "dead"})
        deliveries.ok(numIndexesBefore=4, numIndexesAfter=4, note="all indexes already exist")
        lanes = rs.expect("createIndexes")
        self.assertEqual(lanes.doc["indexes"],
                         [{"key": {"handler": 1, "lane": 1}, "name": "lanes_handler_lane",
                           "unique": True}])
        lanes.ok()
        events = rs.expect("createIndexes")
        self.assertEqual(events.doc["indexes"],
                         [{"key": {"createdAt": 1}, "name": "events_created_at"}])
        events.ok()
        history = rs.expect("createIndexes")
        self.assertEqual(history.doc["createIndexes"], "completions")
        self.assertEqual([i["name"] for i in history.doc["indexes"]],
                         ["completions_completed_at", "completions_handler"])
        history.ok()
        self.assertEqual(rs.output(), ["ok setup"])
        rs.nothing_more()

    def test_setup_reports_other_errors(self):
        rs = self.rs
        rs.start(["setup"])
        self.answer_layout_mark()
        rs.expect("create").replies(ok=0, code=13, codeName="Unauthorized", errmsg="no")
        (line,) = rs.output()
        self.assertTrue(line.startswith("error internal 13 relaybus MongoDB store: create"), line)

    def test_subscribe_upserts_the_subscription_and_256_lanes_in_one_transaction(self):
        rs = self.rs
        rs.start(["subscribe", "mailer", "user.created,user.deleted"])
        sub = rs.expect("update")
        lsid, txn = self.assert_starts_transaction(sub)
        self.assertEqual(sub.doc["update"], "subscriptions")
        self.assertEqual(sub.doc["updates"], [{
            "q": {"_id": "mailer"},
            "u": {"$set": {"eventTypes": ["user.created", "user.deleted"], "maxAttempts": 25,
                           "backoffBaseUs": Int64(1000000), "backoffMaxUs": Int64(3600000000)}},
            "upsert": True}])
        sub.ok(n=1, nModified=0, upserted=[{"index": 0, "_id": "mailer"}])
        lanes = rs.expect("update")
        self.assert_in_transaction(lanes, lsid, txn)
        self.assertEqual(lanes.doc["update"], "lanes")
        self.assertIs(lanes.doc["ordered"], False)
        updates = lanes.doc["updates"]
        self.assertEqual(len(updates), 256)
        self.assertEqual([u["q"]["_id"] for u in updates],
                         [{"h": "mailer", "l": n} for n in range(256)])
        for u in updates:
            self.assertEqual(list(u["u"]), ["$setOnInsert"])  # never touches a lane in use
            self.assertIs(u["upsert"], True)
        self.assertEqual(updates[17]["u"]["$setOnInsert"], {
            "handler": "mailer", "lane": 17, "epoch": Int64(0), "owner": None, "holder": None,
            "leaseExpiresAt": None, "inFlight": [], "lost": []})
        lanes.ok(n=256, nModified=0)
        commit = rs.expect("commitTransaction")
        self.assert_commit(commit, lsid, txn)
        commit.ok()
        self.assertEqual(rs.output(), ["ok subscribed"])

    def test_subscribe_rejects_bad_input_before_sending(self):
        rs = self.rs
        rs.start(["subscribe", "mailer", ""], ["subscribe", "x" * 1001, "t"])
        lines = rs.output()
        self.assertEqual(len(lines), 2, lines)
        for line in lines:
            self.assertTrue(line.startswith("error invalid_parameter - "), line)
        self.assertEqual(rs.handshakes, 0)

    def test_requeue_moves_a_dead_delivery_conditionally(self):
        rs = self.rs
        rs.start(["requeue", "e1", "mailer"])
        find = rs.expect("find")
        lsid, txn = self.assert_starts_transaction(find)
        self.assertEqual(find.doc["filter"], {"_id": {"e": "e1", "h": "mailer"}})
        self.cursor(find, [{"_id": {"e": "e1", "h": "mailer"}, "status": "dead", "attempts": 25,
                            "claims": 4}], "deliveries")
        update = rs.expect("update")
        self.assert_in_transaction(update, lsid, txn)
        (statement,) = update.doc["updates"]
        self.assertEqual(statement["q"],
                         {"_id": {"e": "e1", "h": "mailer"}, "status": "dead", "claims": 4})
        u = statement["u"]
        self.assertEqual(u["$set"]["status"], "pending")
        self.assertEqual(u["$set"]["attempts"], 0)  # core::kRequeuedAttempts
        self.assertIsInstance(u["$set"]["availableAt"], datetime.datetime)
        self.assertEqual(u["$inc"], {"claims": 1})
        update.ok(n=1, nModified=1)
        rs.expect("commitTransaction").ok()
        self.assertEqual(rs.output(), ["ok requeued"])

    def test_requeue_leaves_a_pending_delivery_alone(self):
        rs = self.rs
        rs.start(["requeue", "e1", "mailer"], ["requeue", "gone", "mailer"])
        for found in ([{"_id": {"e": "e1", "h": "mailer"}, "status": "pending", "attempts": 2,
                        "claims": 1}], []):
            find = rs.expect("find")
            self.cursor(find, found, "deliveries")
            rs.expect("commitTransaction").ok()  # read-only: commits, writes nothing
        self.assertEqual(rs.output(), ["ok not-requeued", "ok not-requeued"])
        rs.nothing_more()

    def test_lookup_reads_outside_a_transaction(self):
        rs = self.rs
        rs.start(["lookup", "e1", "mailer"], ["lookup", "e2", "mailer"])
        find = rs.expect("find")
        self.assertNotIn("startTransaction", find.doc)
        self.assertNotIn("txnNumber", find.doc)
        self.assertEqual(find.doc["projection"], {"status": 1, "attempts": 1, "claims": 1})
        self.assertIs(find.doc["singleBatch"], True)
        self.cursor(find, [{"_id": {"e": "e1", "h": "mailer"}, "status": "dead", "attempts": 25,
                            "claims": 3}], "deliveries")
        self.cursor(rs.expect("find"), [], "deliveries")
        self.assertEqual(rs.output(), ["ok dead 25", "ok none"])

    def test_subscribers_beyond_the_first_batch_are_read_with_getmore(self):
        rs = self.rs
        rs.start(["publish", "t", "-", "{}"])
        find = rs.expect("find")
        lsid, txn = self.assert_starts_transaction(find)
        find.ok(cursor={"id": Int64(99), "ns": DATABASE + ".subscriptions",
                        "firstBatch": [{"_id": "a"}]})
        more = rs.expect("getMore")
        self.assert_in_transaction(more, lsid, txn)
        self.assertEqual((more.doc["getMore"], more.doc["collection"]), (99, "subscriptions"))
        more.ok(cursor={"id": Int64(0), "ns": DATABASE + ".subscriptions",
                        "nextBatch": [{"_id": "b"}]})
        event = rs.expect("insert")
        self.assertEqual(event.doc["documents"][0]["handlers"], ["a", "b"])
        event.ok(n=1)
        deliveries = rs.expect("insert")
        self.assertEqual([d["handler"] for d in deliveries.doc["documents"]], ["a", "b"])
        deliveries.ok(n=2)
        rs.expect("commitTransaction").ok()
        (line,) = rs.output()
        self.assertTrue(line.startswith("ok "), line)

    def test_a_write_error_is_reported(self):
        rs = self.rs
        rs.start(["publish", "t", "-", "{}", "dup"])
        self.cursor(rs.expect("find"), [], "events")
        self.cursor(rs.expect("find"), [{"_id": "a"}], "subscriptions")
        rs.expect("insert").ok(n=0, writeErrors=[{"index": 0, "code": 11000,
                                                  "errmsg": "E11000 duplicate key"}])
        rs.expect("abortTransaction").ok()
        (line,) = rs.output()
        self.assertTrue(line.startswith("error conflict 11000 "), line)
        self.assertIn("duplicate key", line)


if __name__ == "__main__":
    mockrs.main()
