"""A scripted MongoDB replica-set primary for the wire tests (python3-mockupdb).

MockRs starts a MockupDB server on a free port that answers hello/isMaster as the only
member and primary of replica set "rs0" (wire version 13, MongoDB 5.0, with sessions), so
libmongoc selects it as a primary and runs transactions against it. Every other command
goes to the test: expect() returns the next one, asserting its name, and the test answers
it (request.ok(...), request.replies(...)). The driver program (driver.cpp) runs as a
subprocess with the operations given to start().
"""

import datetime
import os
import subprocess
import sys
import unittest

import bson
from mockupdb import MockupDB

SET_NAME = "rs0"
DATABASE = "relaybus_wire"
TRANSIENT = "TransientTransactionError"
UNKNOWN_COMMIT = "UnknownTransactionCommitResult"

DRIVER = None  # set by main() from argv


class MockRs:
    def __init__(self):
        self.server = MockupDB(port=0, request_timeout=15)
        self.port = self.server.run()
        me = "localhost:%d" % self.port
        self.hello = {
            "ismaster": True, "isWritablePrimary": True, "helloOk": True,
            "setName": SET_NAME, "setVersion": 1, "electionId": bson.ObjectId(),
            "hosts": [me], "primary": me, "me": me,
            "minWireVersion": 0, "maxWireVersion": 13,
            "logicalSessionTimeoutMinutes": 30,
        }
        self.handshakes = 0
        self.server.autoresponds(self._handshake)
        self.process = None

    def _handshake(self, request):
        name = (request.command_name or "").lower()
        if name in ("ismaster", "hello"):
            self.handshakes += 1
            request.ok(**self.hello)
            return True
        if name == "endsessions":  # the client's goodbye
            request.ok()
            return True
        return False

    @property
    def uri(self):
        return "mongodb://localhost:%d/?replicaSet=%s&serverSelectionTimeoutMS=5000" % (
            self.port, SET_NAME)

    def start(self, *operations, options=None):
        """Runs the driver with one operation per argument (a list of fields), and the
        store's options ("history,retention_dead=60": see driver.cpp) if given."""
        text = "".join("\t".join(op) + "\n" for op in operations)
        self.process = subprocess.Popen(
            [DRIVER, self.uri, DATABASE] + ([options] if options else []),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.process.stdin.write(text)
        self.process.stdin.close()

    def expect(self, name, timeout=10):
        """The next command the driver sends (hello aside); asserts its name."""
        request = self.server.receives(timeout=timeout)
        actual = request.command_name
        assert actual == name, "expected %s, got %s: %r" % (name, actual, request.doc)
        return request

    def output(self, timeout=20):
        """The driver's result lines, once it has ended."""
        self.process.wait(timeout=timeout)  # its output is a few lines: no pipe fills up
        out = self.process.stdout.read()
        err = self.process.stderr.read()
        self.process.stdout.close()
        self.process.stderr.close()
        assert self.process.returncode == 0, "driver failed (%d): %s" % (
            self.process.returncode, err)
        return out.splitlines()

    def nothing_more(self):
        """No command was sent beyond what the test received."""
        try:
            request = self.server.receives(timeout=0.5)
        except AssertionError:
            return
        raise AssertionError("unexpected command: %r" % (request.doc,))

    def stop(self):
        if self.process:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            for pipe in (self.process.stdout, self.process.stderr):
                if not pipe.closed:
                    pipe.close()
        self.server.stop()


class WireTest(unittest.TestCase):
    def setUp(self):
        self.rs = MockRs()

    def tearDown(self):
        self.rs.stop()

    # --- helpers for the transaction fields libmongoc adds

    def assert_starts_transaction(self, request, txn_number=None):
        doc = request.doc
        self.assertIs(doc.get("startTransaction"), True, doc)
        self.assertIs(doc.get("autocommit"), False, doc)
        self.assertEqual(doc.get("readConcern"), {"level": "snapshot"}, doc)
        self.assertIn("lsid", doc)
        if txn_number is not None:
            self.assertEqual(doc["txnNumber"], txn_number, doc)
        return doc["lsid"], doc["txnNumber"]

    def assert_in_transaction(self, request, lsid, txn_number):
        doc = request.doc
        self.assertNotIn("startTransaction", doc, doc)
        self.assertNotIn("readConcern", doc, doc)
        self.assertIs(doc.get("autocommit"), False, doc)
        self.assertEqual(doc["lsid"], lsid, doc)
        self.assertEqual(doc["txnNumber"], txn_number, doc)

    def assert_commit(self, request, lsid, txn_number):
        self.assert_in_transaction(request, lsid, txn_number)
        self.assertEqual(request.doc["$db"], "admin")

    def cursor(self, request, docs, collection):
        request.ok(cursor={"id": bson.int64.Int64(0), "ns": "%s.%s" % (DATABASE, collection),
                           "firstBatch": docs})

    # --- setup's commands on a database already in the 0.2.0 layout (src/mongo/upgrade.hpp)

    def answer_layout_mark(self, version=None):
        """Answers setup()'s first command, the read of the layout mark: none (version None)
        or one of that version. Returns the request."""
        mark = self.rs.expect("find")
        self.assertEqual(mark.doc["find"], "relaybus_meta")
        self.assertEqual(mark.doc["filter"], {"_id": "layout"})
        self.assertEqual(mark.doc["limit"], 1)
        self.assertNotIn("txnNumber", mark.doc)
        found = [] if version is None else [{"_id": "layout", "version": version}]
        self.cursor(mark, found, "relaybus_meta")
        return mark

    def expect_layout_mark_written(self):
        """setup()'s upsert of the layout mark, answered as an insert. Returns the request."""
        write = self.rs.expect("update")
        self.assertEqual(write.doc["update"], "relaybus_meta")
        self.assertEqual(write.doc["writeConcern"], {"w": "majority"})
        self.assertNotIn("txnNumber", write.doc)
        (statement,) = write.doc["updates"]
        self.assertEqual(statement["q"], {"_id": "layout"})
        self.assertEqual(list(statement["u"]), ["$max", "$setOnInsert"])
        self.assertEqual(statement["u"]["$max"], {"version": 2})  # kLayoutVersion
        self.assertEqual(list(statement["u"]["$setOnInsert"]), ["convertedAt"])
        self.assertIsInstance(statement["u"]["$setOnInsert"]["convertedAt"],
                              datetime.datetime)
        self.assertIs(statement["upsert"], True)
        write.ok(n=1, nModified=0, upserted=[{"index": 0, "_id": "layout"}])
        return write

    def answer_layout_checks(self, subscriptions=(), lane_counts=(), marked=False):
        """Answers setup()'s commands between its creates and its createIndexes on a
        database with no 0.1.0 document and no 0.1.0 index. Unmarked: the two marker finds,
        listIndexes of deliveries, the subscriptions, (if any) the lane count per handler,
        then the mark written. Marked: the same without the marker finds and the mark.
        Returns the requests, for the caller's own checks."""
        rs = self.rs
        requests = []
        for collection in () if marked else ("deliveries", "events"):
            marker = rs.expect("find")
            self.assertEqual(marker.doc["find"], collection)
            self.assertEqual(marker.doc["limit"], 1)
            self.cursor(marker, [], collection)
            requests.append(marker)
        indexes = rs.expect("listIndexes")
        self.assertEqual(indexes.doc["listIndexes"], "deliveries")
        self.cursor(indexes, [{"v": 2, "key": {"_id": 1}, "name": name}
                              for name in ("_id_", "deliveries_claim", "deliveries_key_order",
                                           "deliveries_dead")], "deliveries")
        requests.append(indexes)
        subs = rs.expect("find")
        self.assertEqual(subs.doc["find"], "subscriptions")
        self.cursor(subs, [{"_id": h} for h in subscriptions], "subscriptions")
        requests.append(subs)
        if subscriptions:
            counts = rs.expect("aggregate")
            self.assertEqual(counts.doc["aggregate"], "lanes")
            self.cursor(counts, [{"_id": h, "n": n} for h, n in lane_counts], "lanes")
            requests.append(counts)
        if not marked:
            requests.append(self.expect_layout_mark_written())
        return requests


def lanes_of(*keys):
    """core::lane_of of each key (or event id), computed by the driver: no server needed."""
    result = subprocess.run(
        [DRIVER, "mongodb://localhost:1/?replicaSet=%s" % SET_NAME, DATABASE],
        input="".join("lane\t%s\n" % k for k in keys), capture_output=True, text=True,
        check=True, timeout=20)
    lines = result.stdout.splitlines()
    assert len(lines) == len(keys) and all(l.startswith("ok ") for l in lines), lines
    return [int(l[3:]) for l in lines]


def main():
    global DRIVER
    if len(sys.argv) < 2:
        print("usage: %s DRIVER [unittest args]" % sys.argv[0], file=sys.stderr)
        sys.exit(2)
    DRIVER = os.path.abspath(sys.argv[1])
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], module="__main__", verbosity=2)
