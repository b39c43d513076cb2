#include "positions_claim_writes.hpp"

#include "counters.hpp"
#include "holder.hpp"
#include "lane_list.hpp"

#include "../core/error.hpp"
#include "../core/lane_lease.hpp"

namespace relaybus::pg {

namespace {

// Binds TimestampTz values (core's microseconds) as the next parameter, a timestamptz[].
void timestamptz_array(const std::vector<std::int64_t>& values, Params& params) {
  std::vector<Datum> datums;
  datums.reserve(values.size());
  for (std::int64_t v : values) datums.push_back(TimestampTzGetDatum(v));
  params.datum_array(datums, std::vector<bool>(values.size(), false), TIMESTAMPTZOID);
}

}  // namespace

std::int64_t timestamp_of_row(std::uint64_t r, int c) {
  bool null = false;
  const Datum d = row::datum(r, c, &null);
  if (null) throw core::Error(core::ErrorCode::kInternal, "relaybus: unexpected NULL timestamp");
  return DatumGetTimestampTz(d);
}

core::PositionsLane positions_lane_of_row(std::uint64_t r) {
  core::PositionsLane lane;
  lane.handler = row::text(r, 1);
  lane.lane = row::int2(r, 2);
  lane.epoch = row::int8(r, 3);
  return lane;
}

void PositionsWrites::load_progress(const std::vector<core::PositionsLane*>& lanes) {
  LaneList list;
  for (const core::PositionsLane* l : lanes) list.add(l->handler, l->lane);
  const std::vector<StoredProgress> stored = read_progress(list);
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    lanes[i]->progress = stored[i].progress;
    lanes[i]->retrying = stored[i].retrying;
    read_[{lanes[i]->handler, lanes[i]->lane}] = stored[i];
  }
}

void PositionsWrites::insert_exceptions(const std::vector<core::NewException>& rows) {
  // From each delivery row (event id, key, created_at): a position without one (absent)
  // gets no row. Lanes are locked before, as every writer of exception rows locks them.
  static Statement insert(
      "INSERT INTO relaybus.exceptions (handler, lane, position, event_id, key, status,"
      " attempts, claims, available_at, last_error, created_at, updated_at)"
      " SELECT d.handler, d.lane, d.position, d.event_id, d.key,"
      " CASE WHEN u.dead THEN 'dead' ELSE 'pending' END, u.attempts, u.claims, u.available_at,"
      " CASE WHEN u.lost THEN $9 END, d.created_at, now()"
      " FROM unnest($1::text[], $2::int2[], $3::int8[], $4::bool[], $5::int4[], $6::int4[],"
      "  $7::timestamptz[], $8::bool[])"
      "  AS u(handler, lane, position, dead, attempts, claims, available_at, lost)"
      // A lateral lookup per row, fenced (OFFSET 0) so that it stays one: a plain join
      // planned while deliveries looked empty reads the whole table once per statement.
      " CROSS JOIN LATERAL (SELECT d.* FROM relaybus.deliveries d WHERE d.handler = u.handler"
      "  AND d.lane = u.lane AND d.position = u.position OFFSET 0) d",
      {TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID, BOOLARRAYOID, INT4ARRAYOID, INT4ARRAYOID,
       TIMESTAMPTZARRAYOID, BOOLARRAYOID, TEXTOID});
  std::vector<std::string> handlers;
  std::vector<std::int16_t> lanes;
  std::vector<std::int64_t> positions, available;
  std::vector<bool> dead, lost;
  std::vector<std::int32_t> attempts, claims;
  for (const auto& x : rows) {
    handlers.push_back(x.handler);
    lanes.push_back(x.lane);
    positions.push_back(x.position);
    dead.push_back(x.dead);
    attempts.push_back(x.attempts);
    claims.push_back(x.claims);
    available.push_back(x.available_at_us);
    lost.push_back(x.lease_lost);
  }
  Params params;
  params.text_array(handlers);
  params.int2_array(lanes);
  params.int8_array(positions);
  params.bool_array(dead);
  params.int4_array(attempts);
  params.int4_array(claims);
  timestamptz_array(available, params);
  params.bool_array(lost);
  params.text(std::string(core::kLeaseLostError));
  insert.run(params);
  // Counted as decided: a charged position always has its delivery row (it was claimed).
  for (const auto& x : rows) {
    counters::add(counters::kAttemptsCharged, x.handler, x.lease_lost ? 1 : 0);
    counters::add(counters::kDeadLettered, x.handler, x.dead ? 1 : 0);
  }
}

void PositionsWrites::charge_exceptions(const std::vector<core::ExceptionCharge>& charges) {
  static Statement charge(
      "UPDATE relaybus.exceptions x SET attempts = u.attempts,"
      " status = CASE WHEN u.dead THEN 'dead' ELSE 'pending' END, claims = x.claims + 1,"
      " available_at = u.available_at, last_error = $7, updated_at = now()"
      " FROM unnest($1::text[], $2::int2[], $3::int8[], $4::int4[], $5::bool[],"
      "  $6::timestamptz[]) AS u(handler, lane, position, attempts, dead, available_at)"
      " WHERE x.handler = u.handler AND x.lane = u.lane AND x.position = u.position"
      " AND x.status = 'pending'",
      {TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID, INT4ARRAYOID, BOOLARRAYOID, TIMESTAMPTZARRAYOID,
       TEXTOID},
      // Planned per call, with the rows it gets: a generic plan made while exceptions was
      // small scans it whole (or every pending row of the handlers) against each row. It
      // runs only when a takeover finds retried rows, so the planning is rare.
      Planning::kPerCall);
  std::vector<std::string> handlers;
  std::vector<std::int16_t> lanes;
  std::vector<std::int64_t> positions, available;
  std::vector<std::int32_t> attempts;
  std::vector<bool> dead;
  for (const auto& c : charges) {
    handlers.push_back(c.handler);
    lanes.push_back(c.lane);
    positions.push_back(c.position);
    attempts.push_back(c.attempts);
    dead.push_back(c.dead);
    available.push_back(c.available_at_us);
  }
  Params params;
  params.text_array(handlers);
  params.int2_array(lanes);
  params.int8_array(positions);
  params.int4_array(attempts);
  params.bool_array(dead);
  timestamptz_array(available, params);
  params.text(std::string(core::kLeaseLostError));
  charge.run(params);
  for (const auto& c : charges) {
    counters::add(counters::kAttemptsCharged, c.handler);
    counters::add(counters::kDeadLettered, c.handler, c.dead ? 1 : 0);
  }
}

void PositionsWrites::write_lanes(const std::vector<core::PositionsLaneWrite>& writes) {
  // The leases, in one statement, of the lanes whose lease changes or is due for renewal
  // (core::lease_renewal); the rest are left alone: a row lock made no version of them, and
  // neither does this. The progress goes to lane_progress, never here.
  static Statement write(
      "UPDATE relaybus.lanes l SET epoch = u.epoch,"
      " lease_owner = CASE WHEN u.hold THEN $1 END,"
      " lease_expires_at = CASE WHEN u.hold THEN $2 END,"
      " holder_pid = CASE WHEN u.new_holder THEN $3 WHEN u.hold THEN l.holder_pid END,"
      " holder_started = CASE WHEN u.new_holder THEN $4 WHEN u.hold THEN l.holder_started END,"
      " holder = CASE WHEN u.new_holder THEN $5 WHEN u.hold THEN l.holder END"
      " FROM unnest($7::text[], $8::int2[], $9::int8[], $10::bool[], $11::bool[])"
      "  AS u(handler, lane, epoch, hold, new_holder)"
      " WHERE l.handler = u.handler AND l.lane = u.lane"
      " AND (l.epoch <> u.epoch OR u.new_holder"
      "  OR (NOT u.hold AND l.lease_owner IS NOT NULL)"
      "  OR (u.hold AND (l.lease_owner IS DISTINCT FROM $1 OR l.lease_expires_at IS NULL"
      // core::LeaseRenewal::due, set-based.
      "   OR l.lease_expires_at < $6 OR l.lease_expires_at > $2)))",
      {TEXTOID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TEXTOID, TIMESTAMPTZOID, TEXTARRAYOID,
       INT2ARRAYOID, INT8ARRAYOID, BOOLARRAYOID, BOOLARRAYOID});
  std::vector<std::string> handlers;
  std::vector<std::int16_t> lanes;
  std::vector<std::int64_t> epochs;
  std::vector<bool> holds, new_holders;
  ProgressInserts progress;
  for (const auto& w : writes) {
    if (w.write.hold && !holder_)
      throw core::Error(core::ErrorCode::kInternal, "relaybus: a lane held without a holder");
    auto read = read_.find({w.handler, w.lane});
    if (read == read_.end())
      throw core::Error(core::ErrorCode::kInternal, "relaybus: a lane written without being read");
    handlers.push_back(w.handler);
    lanes.push_back(w.lane);
    epochs.push_back(w.write.epoch);
    holds.push_back(w.write.hold);
    new_holders.push_back(w.write.new_holder);
    progress.add(w.handler, w.lane, read->second, w.progress, w.retrying);
    // What this lane now is, should the same call write it again.
    if (w.progress != read->second.progress || w.retrying != read->second.retrying) {
      read->second.progress = w.progress;
      read->second.retrying = w.retrying;
      ++read->second.seq;
    }
  }
  progress.run();
  if (handlers.empty()) return;
  const core::LeaseRenewal renewal =
      core::lease_renewal(GetCurrentTransactionStartTimestamp(), holder_ ? holder_->lease_us : 0);
  Params params;
  if (holder_) {
    params.text(holder_->worker);
    params.timestamptz(renewal.expires_at_us);
  } else {
    params.datum(0, true);
    params.datum(0, true);
  }
  // Bound to the holder, or else to this backend.
  if (holder_ && !holder_->holder) {
    params.int4(current_holder_pid());
    params.timestamptz(current_holder_started());
  } else {
    params.datum(0, true);
    params.timestamptz(std::nullopt);
  }
  params.text(holder_ ? holder_->holder : std::nullopt);
  params.timestamptz(renewal.renew_before_us);
  params.text_array(handlers);
  params.int2_array(lanes);
  params.int8_array(epochs);
  params.bool_array(holds);
  params.bool_array(new_holders);
  write.run(params);
}

}  // namespace relaybus::pg
