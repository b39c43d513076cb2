// Positions per (handler, lane) that follow commit order, without publishers waiting for
// each other's work.
//
// A publish does not know its delivery's position: it records, in backend memory, that its
// transaction put one more delivery into (handler, lane), and the delivery row carries the
// transaction's id and its ordinal among the transaction's deliveries of that lane. At
// XACT_EVENT_PRE_COMMIT the transaction takes a lock per lane it touched, in one global
// order (the log table's OID, then the lane), reads each (handler, lane)'s last position
// with a snapshot taken after the locks, and inserts one log row per (handler, lane):
// its first position, how many it took, and the transaction id. The locks are
// transaction locks: PostgreSQL releases them after ProcArrayEndTransaction, so the next
// transaction of a lane reads the log only once the previous one is visible (or gone), and
// within a lane the positions are handed out in the order the transactions become
// visible. A reader that sees position p of a lane therefore already sees every position
// below p that will ever exist; a position inside a logged range without a delivery row was
// rolled back with a subtransaction and is absent for good.
//
// What it costs a publisher: between its PRE_COMMIT and the end of its commit it holds its
// lanes, so another transaction that touched one of them waits for that commit, never for
// application work (the locks are taken after the transaction's last statement), and no
// two transactions wait for each other in a cycle (they lock in one order, and a
// transaction that holds a lane lock waits for nothing else but lane locks). A prepared
// transaction would hold them until COMMIT PREPARED, so PREPARE is refused.
//
// The locks are advisory locks in lock space kLockSpace (pg_locks: locktype 'advisory',
// objsubid = kLockSpace, classid = the log table's OID, objid = the lane), which no
// pg_advisory_* function uses (they use 1 and 2). The lane alone is the key, not (handler,
// lane): an event fans out to every handler in the same lane, so one lock covers it, and a
// transaction never needs more than 256 of them per log table.
#pragma once

#include "postgres.hpp"

namespace relaybus::pg::commit_order {

constexpr std::uint16_t kLockSpace = 21;

// From _PG_init.
void install();

// Records one delivery of this transaction in (log, handler, lane) and returns its ordinal
// among the transaction's deliveries of that (log, handler, lane), from 0. The log table
// needs columns handler text, lane int2, first_position int8, count int4, txn xid8 and an
// index led by (handler, lane, first_position); the row is inserted at commit as the role
// that made the transaction's first note for that log.
std::int32_t note(Oid log, const std::string& handler, std::int16_t lane);

// The alternative measured against note(), which 0.3.0 publishes with (docs/design.md): the
// delivery stays in backend memory until commit and is inserted then, under the same lane
// locks, into `table` (handler text, lane int2, position int8, event_id text, key text, and
// a btree index led by (handler, lane, position), along which the lane's last position is
// read without a plan) at its lane's last position plus its place among the transaction's
// deliveries of that (handler, lane). A table that also has available_at (timestamptz) gets
// `available_at`, and one that has created_at gets now(): the transaction's start, which is
// the publish's now() too. A rolled-back subtransaction takes its staged rows with it. The
// transaction does not see its own staged deliveries. The rows are written as the role that
// staged the first of them (publish's owner), under search_path pg_catalog, pg_temp; a
// publish while they are being written (from a trigger on the table) is refused (0A000).
void stage(Oid table, const std::string& handler, std::int16_t lane, const std::string& event_id,
           const std::optional<std::string>& key, TimestampTz available_at);

}  // namespace relaybus::pg::commit_order
