// relaybus_internal.retire_unsubscribed(cutoff): purge_expired's step for handlers that are
// no longer subscribed (core/positions_retention.hpp). Their lanes that nobody leases and
// that have a delivery above the cursor or a pending exception row published before
// `cutoff` are locked (FOR NO KEY UPDATE SKIP LOCKED, in the one lane order, at most 1,000
// a call: a lane a claim or completion holds waits for a later call); per lane, up to
// 10,000 deliveries above its cursor are read and core finishes the expired ones from the
// cursor up; the lane's pending exception rows published before `cutoff` are deleted.
// Returns the positions finished plus the rows deleted. Deliveries finished here, and their
// events, go with purge_expired's other steps, as completed ones do.
#include "../core/error.hpp"
#include "../core/positions_retention.hpp"

#include "lane_list.hpp"
#include "lane_order.hpp"
#include "lane_progress.hpp"
#include "spi.hpp"

namespace relaybus::pg {

namespace {

constexpr int kMaxLanes = 1000;
constexpr int kMaxScan = 10000;

Datum retire_unsubscribed_body(FunctionCallInfo fcinfo) {
  if (PG_ARGISNULL(0)) throw core::Error(core::ErrorCode::kNullValue, "cutoff must not be NULL");
  const TimestampTz cutoff = PG_GETARG_TIMESTAMPTZ(0);
  static Statement lock(
      "SELECT l.handler, l.lane FROM relaybus.lanes l"
      " LEFT JOIN LATERAL (SELECT p.acked_upto FROM relaybus.lane_progress p"
      "  WHERE p.handler = l.handler AND p.lane = l.lane ORDER BY p.seq DESC LIMIT 1) p ON true"
      " WHERE l.lease_owner IS NULL"
      " AND NOT EXISTS (SELECT 1 FROM relaybus.subscriptions s WHERE s.handler = l.handler)"
      " AND (coalesce((SELECT d.created_at < $1 FROM relaybus.deliveries d"
      "   WHERE d.handler = l.handler AND d.lane = l.lane AND d.position > coalesce(p.acked_upto, "
      "0)"
      "   ORDER BY d.position LIMIT 1), false)"
      "  OR EXISTS (SELECT 1 FROM relaybus.exceptions x WHERE x.handler = l.handler"
      "   AND x.lane = l.lane AND x.status = 'pending' AND x.created_at < $1))"
      " ORDER BY " RELAYBUS_LANE_LOCK_ORDER_SQL " LIMIT $2 FOR NO KEY UPDATE OF l SKIP LOCKED",
      {TIMESTAMPTZOID, INT4OID});
  static Statement scan(
      "SELECT d.position, d.created_at < $4 FROM relaybus.deliveries d"
      " WHERE d.handler = $1 AND d.lane = $2 AND d.position > $3 ORDER BY d.position LIMIT $5",
      {TEXTOID, INT2OID, INT8OID, TIMESTAMPTZOID, INT4OID});
  static Statement drop_exceptions(
      "DELETE FROM relaybus.exceptions x USING unnest($1::text[], $2::int2[]) AS u(handler, lane)"
      " WHERE x.handler = u.handler AND x.lane = u.lane AND x.status = 'pending'"
      " AND x.created_at < $3",
      {TEXTARRAYOID, INT2ARRAYOID, TIMESTAMPTZOID});
  SpiConnection spi;
  Params lock_params;
  lock_params.timestamptz(cutoff);
  lock_params.int4(kMaxLanes);
  const LaneList lanes = LaneList::from_rows(lock.run(lock_params));
  std::int64_t retired = 0;
  if (!lanes.empty()) {
    // After the lock: the newest progress as its last writer committed it.
    const std::vector<StoredProgress> stored = read_progress(lanes);
    ProgressInserts writes;
    LaneList idle;  // lanes that run nothing: their old exception rows may go
    for (std::size_t i = 0; i < lanes.size(); ++i) {
      core::PositionLane lane;
      lane.progress = stored[i].progress;
      lane.retrying = stored[i].retrying;
      if (!lane.progress.in_flight.empty() || !lane.retrying.empty()) continue;
      idle.add(lanes.handlers[i], lanes.lanes[i]);
      Params params;
      params.text(lanes.handlers[i]);
      params.int2(lanes.lanes[i]);
      params.int8(lane.progress.acked_upto);
      params.timestamptz(cutoff);
      params.int4(kMaxScan);
      const std::uint64_t n = scan.run(params);
      std::vector<core::RetentionEntry> entries;
      entries.reserve(n);
      for (std::uint64_t r = 0; r < n; ++r)
        entries.push_back({row::int8(r, 1), row::boolean(r, 2)});
      const core::ProgressUpdate update = core::retire_expired_positions(lane, entries);
      if (!update.write) continue;
      retired += update.progress.acked_upto - lane.progress.acked_upto;
      writes.add(lanes.handlers[i], lanes.lanes[i], stored[i], update.progress, lane.retrying);
    }
    if (!writes.empty()) writes.run();
    if (!idle.empty()) {
      Params params;
      idle.bind(params);
      params.timestamptz(cutoff);
      retired += static_cast<std::int64_t>(drop_exceptions.run(params));
    }
  }
  spi.finish();
  return Int64GetDatum(retired);
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_retire_unsubscribed, relaybus::pg::retire_unsubscribed_body)
