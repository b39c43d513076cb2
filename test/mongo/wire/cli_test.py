"""The relaybus tool on a mongodb:// --db: the same commands as on PostgreSQL reach the
MongoDB store, the URI's path naming the database (bin/relaybus, built by `make client`)."""

import datetime
import json
import os
import subprocess

import mockrs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CLI = os.path.join(ROOT, "bin", "relaybus")


class CliTest(mockrs.WireTest):
    def run_cli(self, *args, database="shop"):
        uri = "mongodb://localhost:%d/%s?replicaSet=%s&serverSelectionTimeoutMS=5000" % (
            self.rs.port, database, mockrs.SET_NAME)
        return subprocess.Popen([CLI] + list(args) + ["--db", uri], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def finish(self, process):
        out, err = process.communicate(timeout=20)
        return process.returncode, out, err

    def answer(self, request, docs, collection, database="shop"):
        request.ok(cursor={"id": mockrs.bson.int64.Int64(0), "ns": "%s.%s" % (database, collection),
                           "firstBatch": docs})

    def test_stats_reads_the_database_the_uri_names(self):
        rs = self.rs
        p = self.run_cli("stats")
        names = rs.expect("find")
        self.assertEqual(names.doc["$db"], "shop")
        self.assertEqual(names.doc["find"], "subscriptions")
        self.assertEqual(names.doc["projection"], {"_id": 1, "paused": 1})
        self.answer(names, [{"_id": "mailer", "paused": True}], "subscriptions")
        self.answer(rs.expect("find"), [], "lanes")
        oldest = datetime.datetime(2026, 12, 1, 12, 0, 0)
        self.answer(rs.expect("aggregate"),
                    [{"_id": "mailer", "pending": 3, "dead": 1, "oldest": oldest}], "deliveries")
        self.answer(rs.expect("aggregate"), [], "completions")
        code, out, err = self.finish(p)
        self.assertEqual(code, 0, err)
        lines = [l.split("|") for l in out.splitlines()]
        self.assertEqual([c.strip() for c in lines[0]],
                         ["handler", "pending", "processing", "dead", "completed",
                          "oldest_pending_age", "paused"])
        row = [c.strip() for c in lines[2]]
        self.assertEqual(row[:5] + row[6:], ["mailer", "3", "0", "1", "0", "yes"])
        # The oldest pending delivery's age, in days and hours (more than a day here).
        age = datetime.datetime.now(datetime.timezone.utc) - oldest.replace(tzinfo=datetime.timezone.utc)
        self.assertRegex(row[5], r"^[0-9]+d[0-9]{2}h$")
        self.assertLessEqual(abs(int(row[5].split("d")[0]) - age.days), 1, row[5])

    def test_dead_requeue_is_requeue_dead(self):
        rs = self.rs
        p = self.run_cli("dead", "requeue", "--handler", "mailer")
        subscribed = rs.expect("find")
        self.assertEqual(subscribed.doc["find"], "subscriptions")
        self.answer(subscribed, [{"_id": "mailer"}], "subscriptions")
        update = rs.expect("update")
        self.assertEqual(update.doc["$db"], "shop")
        self.assertEqual(update.doc["updates"][0]["q"], {"handler": "mailer", "status": "dead"})
        self.assertIs(update.doc["updates"][0]["multi"], True)
        update.ok(n=2, nModified=2)
        code, out, err = self.finish(p)
        self.assertEqual((code, out), (0, "requeued 2\n"), err)

    def test_dead_requeue_event_handler_requeues_that_delivery_only(self):
        rs = self.rs
        p = self.run_cli("dead", "requeue", "e1", "mailer", "--json")
        find = rs.expect("find")
        self.assertEqual(find.doc["$db"], "shop")
        self.assertEqual(find.doc["filter"], {"_id": {"e": "e1", "h": "mailer"}})
        self.answer(find, [{"_id": {"e": "e1", "h": "mailer"}, "status": "dead", "attempts": 3,
                            "claims": 2}], "deliveries")
        update = rs.expect("update")
        (statement,) = update.doc["updates"]
        # One document, by its id, and only while it is still the dead letter that was read.
        self.assertEqual(statement["q"],
                         {"_id": {"e": "e1", "h": "mailer"}, "status": "dead", "claims": 2})
        self.assertFalse(statement.get("multi", False))
        update.ok(n=1, nModified=1)
        rs.expect("commitTransaction").ok()
        code, out, err = self.finish(p)
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out), {"requeued": 1})
        rs.nothing_more()

    def test_dead_requeue_of_a_delivery_that_is_not_dead_fails(self):
        rs = self.rs
        p = self.run_cli("dead", "requeue", "e1", "mailer")
        self.answer(rs.expect("find"), [{"_id": {"e": "e1", "h": "mailer"}, "status": "pending",
                                         "attempts": 1, "claims": 1}], "deliveries")
        rs.expect("commitTransaction").ok()
        code, out, err = self.finish(p)
        self.assertEqual((code, out), (1, ""), err)
        self.assertIn('event "e1" has no dead delivery to handler "mailer"', err)
        rs.nothing_more()

    def test_stats_json_is_one_document(self):
        rs = self.rs
        p = self.run_cli("stats", "--json")
        self.answer(rs.expect("find"), [{"_id": "mailer"}], "subscriptions")
        self.answer(rs.expect("find"), [], "lanes")
        oldest = datetime.datetime(2026, 12, 1, 12, 0, 0, 123000)
        self.answer(rs.expect("aggregate"),
                    [{"_id": "mailer", "pending": 3, "dead": 1, "oldest": oldest}], "deliveries")
        self.answer(rs.expect("aggregate"), [], "completions")
        code, out, err = self.finish(p)
        self.assertEqual(code, 0, err)
        document = json.loads(out)
        age = (datetime.datetime.now(datetime.timezone.utc)
               - oldest.replace(tzinfo=datetime.timezone.utc)).total_seconds()
        self.assertLessEqual(abs(document["handlers"][0].pop("oldest_pending_age_s") - age), 60)
        self.assertEqual(document, {"handlers": [
            {"handler": "mailer", "pending": 3, "processing": 0, "dead": 1, "completed": 0,
             "completed_recorded": True, "oldest_pending": "2026-12-01T12:00:00.123000Z",
             "paused": False}]})

    def test_a_bad_listing_filter_is_refused_before_anything_is_sent(self):
        p = self.run_cli("dead", "list", "--limit", "-1")
        code, out, err = self.finish(p)
        self.assertEqual(code, 2)  # a usage error
        self.assertIn("--limit must be at least 0, not -1", err)
        self.rs.nothing_more()

    def test_a_uri_without_a_database_uses_relaybus(self):
        rs = self.rs
        uri = "mongodb://localhost:%d/?replicaSet=%s&serverSelectionTimeoutMS=5000" % (
            rs.port, mockrs.SET_NAME)
        p = subprocess.Popen([CLI, "unsubscribe", "--handler", "mailer", "--db", uri],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        delete = rs.expect("delete")
        self.assertEqual(delete.doc["$db"], "relaybus")
        self.assertEqual(delete.doc["deletes"][0]["q"], {"_id": "mailer"})
        delete.ok(n=0)
        code, out, err = self.finish(p)
        self.assertEqual(code, 1)
        self.assertIn('handler "mailer" is not subscribed', err)


if __name__ == "__main__":
    mockrs.main()
