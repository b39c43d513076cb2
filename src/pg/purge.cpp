// purge_expired: retention. Each kind is deleted in bounded slices so one call never holds
// many row locks or writes a huge transaction; the background worker calls it every round.
// Planned per call: the best plan depends on the cutoff (usually nothing is old enough,
// and an index or BRIN range says so at once) and on the statistics of the moment.
#include "settings.hpp"
#include "spi.hpp"

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
      " relaybus.completions x WHERE x.completed_at < now() - $1 LIMIT $2)",
      {INTERVALOID, INT4OID}, Planning::kPerCall);
  // Pending deliveries of a handler that was unsubscribed (its lanes remain, so they name
  // it cheaply) go after the dead-letter retention; a re-subscribe before then resumes them.
  static Statement unsubscribed(
      "DELETE FROM relaybus.deliveries d WHERE (d.event_id, d.handler) IN ("
      " SELECT x.event_id, x.handler FROM (SELECT DISTINCT l.handler FROM relaybus.lanes l"
      "  WHERE NOT EXISTS (SELECT 1 FROM relaybus.subscriptions s WHERE s.handler = l.handler)) u"
      " JOIN relaybus.deliveries x ON x.handler = u.handler AND x.status = 'pending'"
      " WHERE x.created_at < now() - $1 LIMIT $2 FOR UPDATE OF x SKIP LOCKED)",
      {INTERVALOID, INT4OID}, Planning::kPerCall);
  // An event goes once no delivery of it is left. A delivery inserted for it concurrently
  // (a republish adding a handler) locks the event first, so it is skipped here.
  //
  // Its id leaves every lane's in-flight list in the same statement (core::counts_in_flight,
  // lane_lease.hpp): a completion leaves its entry to the lane's next claim, and once the
  // event is gone a publish of the id makes a new delivery that the entry would pass off as
  // the old attempt, still running. The lanes are updated, not locked first: a claim holding
  // one (FOR NO KEY UPDATE) is waited for and its list re-read; a completion in progress
  // (FOR KEY SHARE) does not conflict. No entry of a purged id can appear after the scan:
  // nothing of the event is left to claim. The one-time filter skips the scan when no event
  // went, the usual round.
  static Statement events(
      "WITH gone AS (DELETE FROM relaybus.events e WHERE e.id IN (SELECT x.id"
      "  FROM relaybus.events x WHERE x.published_at < now() - $1 AND NOT EXISTS"
      "  (SELECT 1 FROM relaybus.deliveries d WHERE d.event_id = x.id)"
      "  LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING e.id),"
      " ids AS (SELECT array_agg(g.id) AS ids FROM gone g),"
      " pruned AS (UPDATE relaybus.lanes l"
      "  SET in_flight = ARRAY(SELECT f FROM unnest(l.in_flight) f WHERE f <> ALL (i.ids))"
      "  FROM ids i WHERE i.ids IS NOT NULL AND l.in_flight && i.ids RETURNING 1)"
      " SELECT count(*) FROM gone",
      {INTERVALOID, INT4OID}, Planning::kPerCall);

  SpiConnection spi;
  std::uint64_t deleted = 0;
  auto run = [&](Statement& statement, int retention_s) {
    Params params;
    params.interval_us(static_cast<std::int64_t>(retention_s) * 1'000'000);
    params.int4(kPurgeSlice);
    return statement.run(params);
  };
  deleted += run(dead, settings::retention_dead_s());
  deleted += run(unsubscribed, settings::retention_dead_s());
  deleted += run(history, settings::retention_completed_s());
  run(events, settings::retention_completed_s());
  deleted += static_cast<std::uint64_t>(row::int8(0, 1));  // the events statement's count
  spi.finish();
  return Int64GetDatum(static_cast<std::int64_t>(deleted));
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_purge_expired, relaybus::pg::purge_expired_body)
