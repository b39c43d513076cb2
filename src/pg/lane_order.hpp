// How statements that wait for lane locks lock, and how a lane's backend is judged alive.
//
// Lock order: every statement that may wait for a lane row lock takes its lanes in one
// order, the handler in byte order, then the lane: a claim's held lanes and takeovers,
// extend_lease, relinquish, and complete_many (whose groups are sorted in C++ by
// std::string, which compares bytes). Two statements that each take some lanes and wait
// for others then never wait for each other crosswise. extend_lease used to lock through a
// plain UPDATE, in the table's physical order, and deadlocked with the same worker's
// claims on another connection whenever handlers were subscribed out of alphabetical
// order. Outside the rule, and why that is safe:
// - statements that lock with SKIP LOCKED or NOWAIT never wait;
// - an in-database handler worker's lock of its own batch's lanes is waited for only by
//   that worker's own backend;
// - fail, bury, release and cancel lock one lane each: several of them in one transaction
//   lock in the caller's order, and sql-api.md says to keep them apart from a claim or a
//   renewal.
#pragma once

#include "guard.hpp"
#include "postgres.hpp"

extern "C" {
#include "utils/backend_status.h"
}

// SQL, for lane row `l`: the ORDER BY of every lane lock that may wait.
#define RELAYBUS_LANE_LOCK_ORDER_SQL "l.handler COLLATE \"C\", l.lane"

namespace relaybus::pg {

// Makes the next read of backend activity (pg_stat_get_activity, used by
// RELAYBUS_HOLDER_ALIVE_SQL) see the backends as they are now. PostgreSQL reads that list
// once per transaction and keeps it, so a claim or a renewal in a transaction that had
// already read it would judge a connection opened since then dead. Only the activity list
// is read again; the cumulative statistics a transaction may be looking at stay as they are.
inline void fresh_backend_activity() {
  pg_call([] { pgstat_clear_backend_activity_snapshot(); });
}

}  // namespace relaybus::pg
