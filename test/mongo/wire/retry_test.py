"""Wire tests of the transaction retry loop (mongoc_client_session_with_transaction, bounded
by MongoStore to kMaxTransactionAttempts = 5 runs of the body). Run: retry_test.py DRIVER."""

import mockrs
from mockrs import TRANSIENT, UNKNOWN_COMMIT, WireTest

MAX_ATTEMPTS = 5  # relaybus::mongo::kMaxTransactionAttempts


def write_conflict(request):
    request.replies(ok=0, code=112, codeName="WriteConflict", errmsg="write conflict",
                    errorLabels=[TRANSIENT])


class RetryTest(WireTest):
    def run_publish_body(self, txn_first=True):
        """Answers one run of an unkeyed publish's body up to its commit; returns (lsid, txn)."""
        rs = self.rs
        find = rs.expect("find")
        lsid, txn = self.assert_starts_transaction(find)
        self.cursor(find, [{"_id": "mailer"}], "subscriptions")
        for _ in range(2):
            insert = rs.expect("insert")
            self.assert_in_transaction(insert, lsid, txn)
            insert.ok(n=1)
        return lsid, txn

    def test_unknown_commit_result_retries_the_commit_only(self):
        rs = self.rs
        rs.start(["publish", "user.created", "-", "{}"])
        lsid, txn = self.run_publish_body()
        first = rs.expect("commitTransaction")
        self.assert_commit(first, lsid, txn)
        self.assertEqual(first.doc["writeConcern"], {"w": "majority"})
        first.replies(ok=0, code=64, codeName="WriteConcernFailed", errmsg="waiting for replication",
                      errorLabels=[UNKNOWN_COMMIT])
        again = rs.expect("commitTransaction")
        # The same transaction, committed again (the body does not run again), with the
        # majority write concern and a wtimeout the transactions spec prescribes for a retry.
        self.assert_commit(again, lsid, txn)
        self.assertEqual(again.doc["writeConcern"]["w"], "majority")
        self.assertIn("wtimeout", again.doc["writeConcern"])
        again.ok()
        (line,) = rs.output()
        self.assertTrue(line.startswith("ok "), line)
        rs.nothing_more()

    def test_transient_error_on_a_write_runs_the_whole_transaction_again(self):
        rs = self.rs
        rs.start(["publish", "user.created", "-", "{}"])
        find = rs.expect("find")
        lsid, txn = self.assert_starts_transaction(find)
        self.cursor(find, [{"_id": "mailer"}], "subscriptions")
        event = rs.expect("insert")
        event_id = event.doc["documents"][0]["_id"]
        write_conflict(event)
        abort = rs.expect("abortTransaction")
        self.assert_commit(abort, lsid, txn)  # same session and transaction, on admin
        abort.ok()
        # Run two: a new transaction number on the same session, the same event id.
        find = rs.expect("find")
        lsid2, txn2 = self.assert_starts_transaction(find, txn_number=txn + 1)
        self.assertEqual(lsid2, lsid)
        self.cursor(find, [{"_id": "mailer"}], "subscriptions")
        event = rs.expect("insert")
        self.assertEqual(event.doc["documents"][0]["_id"], event_id)
        event.ok(n=1)
        rs.expect("insert").ok(n=1)
        commit = rs.expect("commitTransaction")
        self.assert_commit(commit, lsid, txn2)
        commit.ok()
        self.assertEqual(rs.output(), ["ok " + event_id])
        rs.nothing_more()

    def test_transient_error_on_commit_runs_the_whole_transaction_again(self):
        rs = self.rs
        rs.start(["publish", "user.created", "-", "{}"])
        lsid, txn = self.run_publish_body()
        rs.expect("commitTransaction").replies(ok=0, code=251, codeName="NoSuchTransaction",
                                               errmsg="no such transaction",
                                               errorLabels=[TRANSIENT])
        lsid2, txn2 = self.run_publish_body()
        self.assertEqual((lsid2, txn2), (lsid, txn + 1))
        rs.expect("commitTransaction").ok()
        (line,) = rs.output()
        self.assertTrue(line.startswith("ok "), line)

    def test_conflicts_are_retried_a_bounded_number_of_times(self):
        rs = self.rs
        rs.start(["publish", "user.created", "-", "{}"])
        for attempt in range(MAX_ATTEMPTS):
            find = rs.expect("find")
            _, txn = self.assert_starts_transaction(find)
            write_conflict(find)
            rs.expect("abortTransaction").ok()
        (line,) = rs.output()
        self.assertTrue(line.startswith("error conflict - "), line)
        self.assertIn("ran %d times" % MAX_ATTEMPTS, line)
        rs.nothing_more()

    def test_a_dropped_connection_is_a_transient_error(self):
        rs = self.rs
        rs.start(["publish", "user.created", "-", "{}"])
        find = rs.expect("find")
        _, txn = self.assert_starts_transaction(find)
        find.hangup()  # libmongoc labels a network error in a transaction transient itself
        # The driver may try to abort on a new connection; the abort's result is ignored.
        request = rs.server.receives(timeout=10)
        if request.command_name == "abortTransaction":  # seen with libmongoc 1.23
            request.ok()
            request = rs.server.receives(timeout=10)
        self.assertEqual(request.command_name, "find")
        self.assert_starts_transaction(request, txn_number=txn + 1)
        self.cursor(request, [{"_id": "mailer"}], "subscriptions")
        rs.expect("insert").ok(n=1)
        rs.expect("insert").ok(n=1)
        rs.expect("commitTransaction").ok()
        (line,) = rs.output()
        self.assertTrue(line.startswith("ok "), line)

    def test_a_non_transient_error_is_not_retried(self):
        rs = self.rs
        rs.start(["publish", "user.created", "-", "{}"])
        find = rs.expect("find")
        self.assert_starts_transaction(find)
        find.replies(ok=0, code=13, codeName="Unauthorized", errmsg="not authorized")
        rs.expect("abortTransaction").ok()
        (line,) = rs.output()
        self.assertTrue(line.startswith("error internal 13 "), line)
        rs.nothing_more()

    def test_not_primary_is_unavailable(self):
        rs = self.rs
        rs.start(["lookup", "e1", "mailer"])
        find = rs.expect("find")
        find.replies(ok=0, code=10107, codeName="NotWritablePrimary", errmsg="not primary")
        (line,) = rs.output()
        self.assertTrue(line.startswith("error unavailable 10107 "), line)


if __name__ == "__main__":
    mockrs.main()
