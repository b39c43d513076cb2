"""Wire tests of publish: the commands libmongoc sends for MongoStore's publish paths, in
one transaction, against a scripted replica-set primary. Run: publish_test.py DRIVER."""

import re

from bson.int64 import Int64

import mockrs
from mockrs import DATABASE, WireTest

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


class PublishTest(WireTest):
    def test_keyed_publish_is_one_transaction(self):
        rs = self.rs
        rs.start(["publish", "user.created", "user-42", '{"id": 42}'])

        find = rs.expect("find")
        lsid, txn = self.assert_starts_transaction(find)
        self.assertEqual(find.doc["find"], "subscriptions")
        self.assertEqual(find.doc["filter"], {"eventTypes": {"$in": ["user.created", "*"]}})
        self.cursor(find, [{"_id": "audit"}, {"_id": "mailer"}], "subscriptions")

        counter = rs.expect("findAndModify")
        self.assert_in_transaction(counter, lsid, txn)
        self.assertEqual(counter.doc["findAndModify"], "key_counters")
        self.assertEqual(counter.doc["query"], {"_id": "user-42"})
        self.assertEqual(counter.doc["update"], {"$inc": {"last": Int64(1)}})
        self.assertIs(counter.doc["upsert"], True)
        self.assertIs(counter.doc["new"], True)
        counter.ok(value={"_id": "user-42", "last": Int64(7)})

        event = rs.expect("insert")
        self.assert_in_transaction(event, lsid, txn)
        self.assertEqual(event.doc["insert"], "events")
        (doc,) = event.doc["documents"]
        event_id = doc["_id"]
        self.assertRegex(event_id, UUID)
        self.assertEqual(doc["type"], "user.created")
        self.assertEqual(doc["key"], "user-42")
        self.assertEqual(doc["payload"], {"id": 42})
        self.assertEqual(doc["handlers"], ["audit", "mailer"])
        event.ok(n=1)

        deliveries = rs.expect("insert")
        self.assert_in_transaction(deliveries, lsid, txn)
        self.assertEqual(deliveries.doc["insert"], "deliveries")
        docs = deliveries.doc["documents"]
        self.assertEqual([d["_id"] for d in docs],
                         [{"e": event_id, "h": "audit"}, {"e": event_id, "h": "mailer"}])
        for d in docs:
            self.assertEqual(d["laneId"], 171)  # core::lane_of("user-42")
            self.assertEqual(d["sequence"], 7)
            self.assertEqual(d["status"], "pending")
            self.assertEqual((d["attempts"], d["claims"]), (0, 0))
        deliveries.ok(n=2)

        commit = rs.expect("commitTransaction")
        self.assert_commit(commit, lsid, txn)
        self.assertEqual(commit.doc["writeConcern"], {"w": "majority"})
        commit.ok()

        self.assertEqual(rs.output(), ["ok " + event_id])
        rs.nothing_more()

    def test_unkeyed_publish_takes_no_sequence(self):
        rs = self.rs
        rs.start(["publish", "user.created", "-", "{}"])
        find = rs.expect("find")
        lsid, txn = self.assert_starts_transaction(find)
        self.cursor(find, [{"_id": "mailer"}], "subscriptions")
        event = rs.expect("insert")
        self.assertEqual(event.doc["insert"], "events")
        self.assertIsNone(event.doc["documents"][0]["key"])
        event.ok(n=1)
        deliveries = rs.expect("insert")
        (d,) = deliveries.doc["documents"]
        self.assertEqual(d["sequence"], 0)
        self.assertIsNone(d["key"])
        deliveries.ok(n=1)
        commit = rs.expect("commitTransaction")
        self.assert_commit(commit, lsid, txn)
        commit.ok()
        (line,) = rs.output()
        self.assertRegex(line[3:], UUID)

    def test_batch_is_one_transaction(self):
        rs = self.rs
        rs.start(["batch", "2", "order.placed", "-"])
        lsid = txn = None
        ids = []
        for i in range(2):
            find = rs.expect("find")
            if i == 0:
                lsid, txn = self.assert_starts_transaction(find)
            else:
                self.assert_in_transaction(find, lsid, txn)
            self.cursor(find, [{"_id": "billing"}], "subscriptions")
            event = rs.expect("insert")
            self.assert_in_transaction(event, lsid, txn)
            ids.append(event.doc["documents"][0]["_id"])
            self.assertEqual(event.doc["documents"][0]["payload"], {"n": i})
            event.ok(n=1)
            deliveries = rs.expect("insert")
            self.assert_in_transaction(deliveries, lsid, txn)
            deliveries.ok(n=1)
        commit = rs.expect("commitTransaction")
        self.assert_commit(commit, lsid, txn)
        commit.ok()
        self.assertEqual(rs.output(), ["ok " + ",".join(ids)])

    def test_repeated_event_id_adds_only_new_handlers(self):
        rs = self.rs
        rs.start(["publish", "ignored.type", "ignored-key", "{}", "evt-1"])
        find_event = rs.expect("find")
        lsid, txn = self.assert_starts_transaction(find_event)
        self.assertEqual(find_event.doc["find"], "events")
        self.assertEqual(find_event.doc["filter"], {"_id": "evt-1"})
        # The stored event's type and key win (core/republish.hpp).
        self.cursor(find_event, [{"_id": "evt-1", "type": "user.created", "key": "user-7",
                                  "handlers": ["mailer"]}], "events")
        subscribers = rs.expect("find")
        self.assertEqual(subscribers.doc["filter"],
                         {"eventTypes": {"$in": ["user.created", "*"]}})
        self.cursor(subscribers, [{"_id": "audit"}, {"_id": "mailer"}], "subscriptions")
        counter = rs.expect("findAndModify")
        self.assertEqual(counter.doc["query"], {"_id": "user-7"})
        counter.ok(value={"_id": "user-7", "last": Int64(3)})
        update = rs.expect("update")
        self.assert_in_transaction(update, lsid, txn)
        self.assertEqual(update.doc["update"], "events")
        self.assertEqual(update.doc["updates"],
                         [{"q": {"_id": "evt-1"},
                           "u": {"$addToSet": {"handlers": {"$each": ["audit"]}}},
                           "upsert": False}])
        update.ok(n=1, nModified=1)
        deliveries = rs.expect("insert")
        (d,) = deliveries.doc["documents"]
        self.assertEqual(d["_id"], {"e": "evt-1", "h": "audit"})
        self.assertEqual((d["key"], d["sequence"]), ("user-7", 3))
        deliveries.ok(n=1)
        rs.expect("commitTransaction").ok()
        self.assertEqual(rs.output(), ["ok evt-1"])

    def test_repeat_that_adds_nothing_writes_nothing(self):
        rs = self.rs
        rs.start(["publish", "user.created", "-", "{}", "evt-2"])
        find_event = rs.expect("find")
        self.cursor(find_event, [{"_id": "evt-2", "type": "user.created", "key": None,
                                  "handlers": ["mailer"]}], "events")
        self.cursor(rs.expect("find"), [{"_id": "mailer"}], "subscriptions")
        rs.expect("commitTransaction").ok()
        self.assertEqual(rs.output(), ["ok evt-2"])

    def test_unsubscribed_handler_aborts_before_any_write(self):
        rs = self.rs
        rs.start(["publish", "user.created", "-", "{}", "-", "mailer,ghost"])
        find = rs.expect("find")
        self.assert_starts_transaction(find)
        self.assertEqual(find.doc["filter"], {"_id": {"$in": ["mailer", "ghost"]}})
        self.cursor(find, [{"_id": "mailer"}], "subscriptions")
        rs.expect("abortTransaction").ok()
        (line,) = rs.output()
        self.assertTrue(line.startswith('error undefined_object - handler "ghost" is not subscribed'),
                        line)
        rs.nothing_more()

    def test_bad_input_sends_nothing(self):
        rs = self.rs
        long_name = "x" * 1001
        rs.start(["publish", "", "-", "{}"],
                 ["publish", "t", "-", "[1, 2]"],
                 ["publish", "t", "-", '{"a": 1} {"b": 2}'],
                 ["publish", "t", "-", "not json"],
                 ["publish", "t", long_name, "{}"],
                 ["publish", "t", "-", "{}", "-", ",mailer"],
                 ["publish", "t", "-", "{}", "-", "-", "-5"],
                 ["subscribe", "", "t"],
                 ["batch", "1", "", "-"])
        lines = rs.output()
        self.assertEqual(len(lines), 9, lines)
        for line in lines:
            self.assertTrue(line.startswith("error invalid_parameter - "), line)
        self.assertIn("events[0]: type must not be empty", lines[8])
        rs.nothing_more()
        self.assertEqual(rs.handshakes, 0)  # not even a connection was opened

    def test_publish_in_the_callers_transaction(self):
        rs = self.rs
        rs.start(["session_publish", "user.created", "-", "{}"])
        find = rs.expect("find")
        # The caller's transaction, with its options (no read concern given: none sent).
        self.assertIs(find.doc.get("startTransaction"), True)
        lsid, txn = find.doc["lsid"], find.doc["txnNumber"]
        self.cursor(find, [{"_id": "mailer"}], "subscriptions")
        for _ in range(2):
            insert = rs.expect("insert")
            self.assert_in_transaction(insert, lsid, txn)
            insert.ok(n=1)
        commit = rs.expect("commitTransaction")  # sent by the caller, not the store
        self.assert_commit(commit, lsid, txn)
        commit.ok()
        (line,) = rs.output()
        self.assertRegex(line[3:], UUID)

    def test_a_session_without_a_transaction_is_refused(self):
        rs = self.rs
        rs.start(["session_without_transaction", "user.created", "-", "{}"])
        (line,) = rs.output()
        self.assertEqual(line, "error invalid_parameter - relaybus MongoDB store: the session is "
                               "not in a transaction")
        rs.nothing_more()

    def test_a_malformed_stored_event_is_internal_and_aborts(self):
        rs = self.rs
        rs.start(["publish", "t", "-", "{}", "evt-3"])
        find = rs.expect("find")
        self.cursor(find, [{"_id": "evt-3", "handlers": []}], "events")  # no type
        rs.expect("abortTransaction").ok()
        (line,) = rs.output()
        self.assertEqual(line, "error internal - relaybus MongoDB store: unreadable document: type")
        rs.nothing_more()


if __name__ == "__main__":
    mockrs.main()
