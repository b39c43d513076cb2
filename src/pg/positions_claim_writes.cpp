#include "positions_claim_writes.hpp"

#include "counters.hpp"
#include "holder.hpp"

#include "../core/error.hpp"

namespace relaybus::pg {

namespace {

// Binds TimestampTz values (core's microseconds) as the next parameter, a timestamptz[].
void timestamptz_array(const std::vector<std::int64_t>& values, Params& params) {
  std::vector<Datum> datums;
  datums.reserve(values.size());
  for (std::int64_t v : values) datums.push_back(TimestampTzGetDatum(v));
  params.datum_array(datums, std::vector<bool>(values.size(), false), TIMESTAMPTZOID);
}

// Appends `set` to `all` and records where it starts (1-based, as SQL arrays count) and
// how many it has: each lane's list is a slice of one flattened array.
void flatten(const core::PositionSet& set, std::vector<std::int64_t>& all,
             std::vector<std::int32_t>& firsts, std::vector<std::int32_t>& counts) {
  firsts.push_back(static_cast<std::int32_t>(all.size()) + 1);
  counts.push_back(static_cast<std::int32_t>(set.size()));
  all.insert(all.end(), set.begin(), set.end());
}

}  // namespace

core::PositionSet position_set_of_row(std::uint64_t r, int c) {
  bool null = false;
  const Datum d = row::datum(r, c, &null);
  if (null) return {};
  Datum* elements = nullptr;
  bool* nulls = nullptr;
  int count = 0;
  pg_call([&] {
    ArrayType* array = DatumGetArrayTypeP(d);
    int16 length;
    bool by_value;
    char align;
    get_typlenbyvalalign(INT8OID, &length, &by_value, &align);
    deconstruct_array(array, INT8OID, length, by_value, align, &elements, &nulls, &count);
  });
  std::vector<core::Position> positions;
  positions.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i)
    if (!nulls[i]) positions.push_back(DatumGetInt64(elements[i]));
  return core::PositionSet(positions.begin(), positions.end());
}

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
  lane.progress.acked_upto = row::int8(r, 4);
  lane.progress.done = position_set_of_row(r, 5);
  lane.progress.in_flight = position_set_of_row(r, 6);
  lane.retrying = position_set_of_row(r, 7);
  return lane;
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
  std::uint64_t charged = 0, dead_lettered = 0;
  for (const auto& x : rows) {
    handlers.push_back(x.handler);
    lanes.push_back(x.lane);
    positions.push_back(x.position);
    dead.push_back(x.dead);
    attempts.push_back(x.attempts);
    claims.push_back(x.claims);
    available.push_back(x.available_at_us);
    lost.push_back(x.lease_lost);
    charged += x.lease_lost ? 1 : 0;
    dead_lettered += x.dead ? 1 : 0;
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
  counters::add(counters::kAttemptsCharged, charged);
  counters::add(counters::kDeadLettered, dead_lettered);
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
  std::uint64_t dead_lettered = 0;
  for (const auto& c : charges) {
    handlers.push_back(c.handler);
    lanes.push_back(c.lane);
    positions.push_back(c.position);
    attempts.push_back(c.attempts);
    dead.push_back(c.dead);
    available.push_back(c.available_at_us);
    dead_lettered += c.dead ? 1 : 0;
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
  counters::add(counters::kAttemptsCharged, charges.size());
  counters::add(counters::kDeadLettered, dead_lettered);
}

void PositionsWrites::write_lanes(const std::vector<core::PositionsLaneWrite>& writes) {
  // One statement for every lane. The lists travel flattened, one array each, every lane's
  // list a slice of it (as 0.2's claim writes its in-flight lists: cutting slices costs the
  // lists' length, where matching every element to its lane cost lanes x elements).
  static Statement write(
      "UPDATE relaybus.lanes l SET epoch = u.epoch,"
      " lease_owner = CASE WHEN u.hold THEN $1 END,"
      " lease_expires_at = CASE WHEN u.hold THEN now() + $2 END,"
      " holder_pid = CASE WHEN u.new_holder THEN $3 WHEN u.hold THEN l.holder_pid END,"
      " holder_started = CASE WHEN u.new_holder THEN $4 WHEN u.hold THEN l.holder_started END,"
      " holder = CASE WHEN u.new_holder THEN $5 WHEN u.hold THEN l.holder END,"
      " acked_upto = u.acked,"
      " done = CASE WHEN u.done_n = 0 THEN '{}'::int8[]"
      "  ELSE ($6::int8[])[u.done_at:u.done_at + u.done_n - 1] END,"
      " in_flight = CASE WHEN u.flight_n = 0 THEN '{}'::int8[]"
      "  ELSE ($7::int8[])[u.flight_at:u.flight_at + u.flight_n - 1] END,"
      " retrying = CASE WHEN u.retry_n = 0 THEN '{}'::int8[]"
      "  ELSE ($8::int8[])[u.retry_at:u.retry_at + u.retry_n - 1] END"
      " FROM unnest($9::text[], $10::int2[], $11::int8[], $12::bool[], $13::bool[], $14::int8[],"
      "  $15::int4[], $16::int4[], $17::int4[], $18::int4[], $19::int4[], $20::int4[])"
      "  AS u(handler, lane, epoch, hold, new_holder, acked, done_at, done_n, flight_at,"
      "  flight_n, retry_at, retry_n)"
      " WHERE l.handler = u.handler AND l.lane = u.lane",
      {TEXTOID,      INTERVALOID,  INT4OID,      TIMESTAMPTZOID, TEXTOID,
       INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, TEXTARRAYOID,   INT2ARRAYOID,
       INT8ARRAYOID, BOOLARRAYOID, BOOLARRAYOID, INT8ARRAYOID,   INT4ARRAYOID,
       INT4ARRAYOID, INT4ARRAYOID, INT4ARRAYOID, INT4ARRAYOID,   INT4ARRAYOID});
  std::vector<std::string> handlers;
  std::vector<std::int16_t> lanes;
  std::vector<std::int64_t> epochs, acked, done, flight, retry;
  std::vector<bool> holds, new_holders;
  std::vector<std::int32_t> done_at, done_n, flight_at, flight_n, retry_at, retry_n;
  for (const auto& w : writes) {
    if (w.write.hold && !holder_)
      throw core::Error(core::ErrorCode::kInternal, "relaybus: a lane held without a holder");
    handlers.push_back(w.handler);
    lanes.push_back(w.lane);
    epochs.push_back(w.write.epoch);
    holds.push_back(w.write.hold);
    new_holders.push_back(w.write.new_holder);
    acked.push_back(w.progress.acked_upto);
    flatten(w.progress.done, done, done_at, done_n);
    flatten(w.progress.in_flight, flight, flight_at, flight_n);
    flatten(w.retrying, retry, retry_at, retry_n);
  }
  Params params;
  if (holder_) {
    params.text(holder_->worker);
    params.interval_us(holder_->lease_us);
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
  params.int8_array(done);
  params.int8_array(flight);
  params.int8_array(retry);
  params.text_array(handlers);
  params.int2_array(lanes);
  params.int8_array(epochs);
  params.bool_array(holds);
  params.bool_array(new_holders);
  params.int8_array(acked);
  params.int4_array(done_at);
  params.int4_array(done_n);
  params.int4_array(flight_at);
  params.int4_array(flight_n);
  params.int4_array(retry_at);
  params.int4_array(retry_n);
  write.run(params);
}

}  // namespace relaybus::pg
