// relinquish of 0.3.0: hands back the caller's lanes that run nothing, so that another worker
// claims their work at once instead of waiting for the lease to expire. Which lanes are the
// caller's is 0.2's rule (RELAYBUS_RELINQUISH_COVERS_SQL, core::relinquish_covers); whether one
// runs nothing is read from its progress once it is locked (core::running_positions: no window
// pick in flight and nothing in retrying), so an attempt claimed into it meanwhile is seen.
#include "../core/attempt_end.hpp"
#include "../core/positions_fence.hpp"

#include "holder.hpp"
#include "lane_list.hpp"
#include "lane_order.hpp"
#include "lane_progress.hpp"
#include "spi.hpp"
#include "worker_arg.hpp"

namespace relaybus::pg {

namespace {

Datum relinquish_body(FunctionCallInfo fcinfo) {
  const std::string worker = worker_arg(fcinfo, 0);
  static Statement lock(
      "SELECT l.handler, l.lane FROM relaybus.lanes l WHERE l.lease_owner = $1"
      " AND " RELAYBUS_RELINQUISH_COVERS_SQL("$2") " ORDER BY " RELAYBUS_LANE_LOCK_ORDER_SQL
                                                   " FOR NO KEY UPDATE OF l",
      {TEXTOID, TEXTOID});
  // The lease here; a lane whose lists still name finished positions (a lane that runs
  // nothing lists nothing else) gets a progress row with them emptied, below.
  static Statement relinquish(
      "UPDATE relaybus.lanes l SET lease_owner = NULL, lease_expires_at = NULL,"
      " holder_pid = NULL, holder_started = NULL, holder = NULL"
      " FROM unnest($1::text[], $2::int2[]) AS u(handler, lane)"
      " WHERE l.handler = u.handler AND l.lane = u.lane",
      {TEXTARRAYOID, INT2ARRAYOID});
  SpiConnection spi;
  Params params;
  params.text(worker);
  params.text(holder_arg(fcinfo, 1));
  const std::uint64_t n = lock.run(params);
  const LaneList held = LaneList::from_rows(n);
  const std::vector<StoredProgress> stored = read_progress(held);
  LaneList idle;
  ProgressInserts emptied;
  for (std::size_t i = 0; i < held.size(); ++i) {
    core::PositionLane lane;
    lane.progress = stored[i].progress;
    lane.retrying = stored[i].retrying;
    if (!core::relinquishes(core::running_positions(lane))) continue;
    idle.add(held.handlers[i], held.lanes[i]);
    core::LaneProgress after = lane.progress;
    after.in_flight.clear();
    emptied.add(held.handlers[i], held.lanes[i], stored[i], after, core::PositionSet{});
  }
  emptied.run();
  std::uint64_t relinquished = 0;
  if (!idle.empty()) {
    Params lane_params;
    idle.bind(lane_params);
    relinquished = relinquish.run(lane_params);
  }
  spi.finish();
  return Int32GetDatum(static_cast<std::int32_t>(relinquished));
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_relinquish_positions, relaybus::pg::relinquish_body)
