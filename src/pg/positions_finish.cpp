// relaybus_internal.finish_position(handler, lane, position): cancel's step for a window
// position. It locks the lane's lease row (FOR NO KEY UPDATE, so it waits for a claim or completion
// of the lane and keeps later claims from picking the position meanwhile) and finishes the
// position when core::finish_unclaimed_position says so: in the window, not in flight, not
// finished, with a delivery row. Returns whether it did (false: nothing written).
#include "../core/error.hpp"
#include "../core/positions_cancel.hpp"

#include "lane_changes.hpp"
#include "lane_progress.hpp"
#include "spi.hpp"

namespace relaybus::pg {

namespace {

Datum finish_position_body(FunctionCallInfo fcinfo) {
  for (int n = 0; n < 3; ++n)
    if (PG_ARGISNULL(n))
      throw core::Error(core::ErrorCode::kNullValue, "handler, lane and position must not be NULL");
  const std::string handler = text_of(PG_GETARG_DATUM(0));
  const std::int16_t lane = PG_GETARG_INT16(1);
  const std::int64_t position = PG_GETARG_INT64(2);
  static Statement lock(
      "SELECT l.epoch FROM relaybus.lanes l WHERE l.handler = $1 AND l.lane = $2"
      " FOR NO KEY UPDATE",
      {TEXTOID, INT2OID});
  // After the lock, by a statement of its own: a delivery is written at commit, under locks
  // of its own (commit_order.hpp), so whether it exists is read with a snapshot that sees it.
  static Statement delivery(
      "SELECT EXISTS (SELECT 1 FROM relaybus.deliveries d"
      "  WHERE d.handler = $1 AND d.lane = $2 AND d.position = $3)",
      {TEXTOID, INT2OID, INT8OID});
  SpiConnection spi;
  Params lane_params;
  lane_params.text(handler);
  lane_params.int2(lane);
  bool finished = false;
  if (lock.run(lane_params) == 1) {
    core::PositionLane now;
    now.epoch = row::int8(0, 1);
    LaneList list;
    list.add(handler, lane);
    const StoredProgress stored = read_progress(list).at(0);
    now.progress = stored.progress;
    now.retrying = stored.retrying;
    Params params;
    params.text(handler);
    params.int2(lane);
    params.int8(position);
    delivery.run(params);
    const core::ProgressUpdate update =
        core::finish_unclaimed_position(now, position, row::boolean(0, 1));
    if (update.write) {
      ProgressInserts write;
      write.add(handler, lane, stored, update.progress, now.retrying);
      write.run();
      finished = true;
    }
  }
  spi.finish();
  return BoolGetDatum(finished);
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_finish_position, relaybus::pg::finish_position_body)

namespace relaybus::pg {

namespace {

// lane_changed(handler, lane): requeue's note that it made work in the lane
// (lane_changes.hpp). Returns true.
Datum lane_changed_body(FunctionCallInfo fcinfo) {
  if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
    throw core::Error(core::ErrorCode::kNullValue, "handler and lane must not be NULL");
  lane_changes::changed_at_commit(text_of(PG_GETARG_DATUM(0)), PG_GETARG_INT16(1));
  return BoolGetDatum(true);
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_lane_changed, relaybus::pg::lane_changed_body)
