// purge_expired: retention. Each kind is deleted in bounded slices so one call never holds
// many row locks or writes a huge transaction; the background worker calls it every round.
// Planned per call: the best plan depends on the cutoff (usually nothing is old enough,
// and an index or BRIN range says so at once) and on the statistics of the moment.
#include "lane_list.hpp"
#include "settings.hpp"
#include "spi.hpp"

#include <string>
#include <vector>

namespace relaybus::pg {

namespace {

constexpr int kPurgeSlice = 10000;

Datum purge_expired_body(FunctionCallInfo) {
  static Statement dead(
      "DELETE FROM relaybus.deliveries d WHERE (d.event_id, d.handler) IN ("
      " SELECT x.event_id, x.handler FROM relaybus.deliveries x WHERE x.status = 'dead'"
      " AND x.updated_at < now() - $1 ORDER BY x.updated_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
      {INTERVALOID, INT4OID}, Planning::kPerCall);
  static Statement history(
      "DELETE FROM relaybus.completions c WHERE c.ctid IN (SELECT x.ctid FROM"
      " relaybus.completions x WHERE x.completed_at < now() - $1 LIMIT $2"
      " FOR UPDATE SKIP LOCKED)",
      {INTERVALOID, INT4OID}, Planning::kPerCall);
  // Pending deliveries of a handler that was unsubscribed (its lanes remain, so they name
  // it cheaply) go after the dead-letter retention; a re-subscribe before then resumes them.
  //
  // Their lanes are locked first, in a statement of their own: a claim that read one of
  // these deliveries as a candidate holds its lane (FOR NO KEY UPDATE or FOR UPDATE) until
  // it has written the lane, and only the deliveries of lanes locked here are deleted, by
  // the next statement, which sees what such a claim wrote. SKIP LOCKED: a lane in use is
  // left for a later round, so the purge never waits for a lane while it holds others (a
  // wait here deadlocked with a transaction cancelling in two lanes) and never hangs on an
  // open transaction. The delete takes the deliveries' ids off their lanes' in-flight lists
  // too (core::counts_in_flight, lane_lease.hpp): once they are gone and their events
  // purged, a publish of an id must not find an entry left for it. Deleting without the
  // lock let a claim that had read a delivery before the delete list it after, with no
  // delivery and soon no event behind it.
  static Statement lock_unsubscribed(
      "SELECT l.handler, l.lane FROM relaybus.lanes l WHERE (l.handler, l.lane) IN ("
      " SELECT x.handler, x.lane FROM (SELECT DISTINCT u.handler FROM relaybus.lanes u"
      "  WHERE NOT EXISTS (SELECT 1 FROM relaybus.subscriptions s WHERE s.handler = u.handler)) u"
      " JOIN relaybus.deliveries x ON x.handler = u.handler AND x.status = 'pending'"
      " WHERE x.created_at < now() - $1 LIMIT $2)"
      " FOR NO KEY UPDATE OF l SKIP LOCKED",
      {INTERVALOID, INT4OID}, Planning::kPerCall);
  static Statement unsubscribed(
      "WITH gone AS (DELETE FROM relaybus.deliveries d WHERE (d.event_id, d.handler) IN ("
      "  SELECT x.event_id, x.handler FROM unnest($3::text[], $4::int2[]) AS k(handler, lane)"
      "  JOIN relaybus.deliveries x ON x.handler = k.handler AND x.lane = k.lane"
      "   AND x.status = 'pending'"
      "  WHERE x.created_at < now() - $1"
      "   AND NOT EXISTS (SELECT 1 FROM relaybus.subscriptions s WHERE s.handler = k.handler)"
      "  LIMIT $2 FOR UPDATE OF x SKIP LOCKED) RETURNING d.handler, d.lane, d.event_id),"
      // Every locked lane is written, the ones whose list names no deleted delivery too:
      // under REPEATABLE READ, a claim whose snapshot predates this then fails (40001)
      // when it locks the lane, instead of picking a delivery deleted here, as cancel's
      // write of the lane makes it.
      " pruned AS (UPDATE relaybus.lanes l SET in_flight = CASE WHEN g.ids IS NULL"
      "  THEN l.in_flight"
      "  ELSE ARRAY(SELECT f FROM unnest(l.in_flight) f WHERE f <> ALL (g.ids)) END"
      "  FROM unnest($3::text[], $4::int2[]) AS k(handler, lane)"
      "  LEFT JOIN (SELECT g.handler, g.lane, array_agg(g.event_id) AS ids FROM gone g"
      "   GROUP BY g.handler, g.lane) g ON g.handler = k.handler AND g.lane = k.lane"
      "  WHERE l.handler = k.handler AND l.lane = k.lane RETURNING 1)"
      " SELECT count(*) FROM gone",
      {INTERVALOID, INT4OID, TEXTARRAYOID, INT2ARRAYOID}, Planning::kPerCall);
  // An event goes once no delivery of it is left: the events are locked first (SKIP
  // LOCKED: one a republish is adding a handler to is left for the next round), then
  // deleted in a later statement, whose snapshot is taken after the locks, if they still
  // have no delivery. In one statement, the check ran on the statement's snapshot even for
  // a row it had to wait for or re-read, so a republish that committed a new delivery
  // between that snapshot and the lock lost its event.
  //
  // The deleted ids leave every lane's in-flight list with them (core::counts_in_flight,
  // lane_lease.hpp): a completion leaves its entry to the lane's next claim, and once the
  // event is gone a publish of the id makes a new delivery that the entry would pass off
  // as the old attempt, still running. So the lanes that list a locked id are locked too,
  // SKIP LOCKED, and an event listed by a lane that could not be locked (a claim is
  // rewriting it) waits for a later round: the purge never waits for a lane, so it never
  // holds some while waiting for others (an update of them all, in scan order, could
  // deadlock with any transaction that locks two lanes). The lanes it locked stay locked
  // to the end of the call, which a claim of their owner waits for (the rest of the call
  // is bounded slices). No lane can come to list a locked id after this: no delivery of
  // the event is left to claim, and none can be added while it is locked.
  static Statement lock_events(
      "SELECT x.id FROM relaybus.events x WHERE x.published_at < now() - $1"
      " AND NOT EXISTS (SELECT 1 FROM relaybus.deliveries d WHERE d.event_id = x.id)"
      " LIMIT $2 FOR UPDATE SKIP LOCKED",
      {INTERVALOID, INT4OID}, Planning::kPerCall);
  static Statement lock_listing_lanes(
      "SELECT l.handler, l.lane FROM relaybus.lanes l WHERE l.in_flight && $1"
      " FOR NO KEY UPDATE OF l SKIP LOCKED",
      {TEXTARRAYOID}, Planning::kPerCall);
  // $1 the locked events, $2/$3 the locked lanes. `blocked`: the ids listed by a lane not
  // locked. The prune touches only locked lanes, and every one of them lists an id.
  static Statement events(
      "WITH locked AS (SELECT k.handler, k.lane"
      "  FROM unnest($2::text[], $3::int2[]) AS k(handler, lane)),"
      " blocked AS (SELECT f FROM relaybus.lanes l CROSS JOIN LATERAL unnest(l.in_flight) f"
      "  WHERE l.in_flight && $1 AND (l.handler, l.lane) NOT IN (SELECT * FROM locked)),"
      " gone AS (DELETE FROM relaybus.events e WHERE e.id = ANY ($1)"
      "  AND NOT EXISTS (SELECT 1 FROM relaybus.deliveries d WHERE d.event_id = e.id)"
      "  AND e.id NOT IN (SELECT b.f FROM blocked b) RETURNING e.id),"
      " ids AS (SELECT array_agg(g.id) AS ids FROM gone g),"
      " pruned AS (UPDATE relaybus.lanes l"
      "  SET in_flight = ARRAY(SELECT f FROM unnest(l.in_flight) f WHERE f <> ALL (i.ids))"
      "  FROM ids i, locked k WHERE i.ids IS NOT NULL AND l.handler = k.handler"
      "   AND l.lane = k.lane AND l.in_flight && i.ids RETURNING 1)"
      " SELECT count(*) FROM gone",
      {TEXTARRAYOID, TEXTARRAYOID, INT2ARRAYOID}, Planning::kPerCall);

  SpiConnection spi;
  std::uint64_t deleted = 0;
  auto retention = [](Params& params, int retention_s) {
    params.interval_us(static_cast<std::int64_t>(retention_s) * 1'000'000);
    params.int4(kPurgeSlice);
  };
  auto run = [&](Statement& statement, int retention_s) {
    Params params;
    retention(params, retention_s);
    return statement.run(params);
  };
  // Nothing here waits for a lock: every lock is taken SKIP LOCKED. The events go first in
  // a call (an event whose last delivery a call deletes goes in the next call).
  if (const std::uint64_t n = run(lock_events, settings::retention_completed_s()); n > 0) {
    std::vector<std::string> ids;
    ids.reserve(n);
    for (std::uint64_t r = 0; r < n; ++r) ids.push_back(row::text(r, 1));
    Params lanes_params;
    lanes_params.text_array(ids);
    const LaneList listing = LaneList::from_rows(lock_listing_lanes.run(lanes_params));
    Params params;
    params.text_array(ids);
    listing.bind(params);
    events.run(params);
    deleted += static_cast<std::uint64_t>(row::int8(0, 1));
  }
  deleted += run(history, settings::retention_completed_s());
  deleted += run(dead, settings::retention_dead_s());
  if (const std::uint64_t n = run(lock_unsubscribed, settings::retention_dead_s()); n > 0) {
    const LaneList locked = LaneList::from_rows(n);
    Params params;
    retention(params, settings::retention_dead_s());
    locked.bind(params);
    unsubscribed.run(params);
    deleted += static_cast<std::uint64_t>(row::int8(0, 1));
  }
  spi.finish();
  return Int64GetDatum(static_cast<std::int64_t>(deleted));
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_purge_expired, relaybus::pg::purge_expired_body)
