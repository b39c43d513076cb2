#include "position_lanes.hpp"

namespace relaybus::pg {

core::PositionSet position_set(std::uint64_t r, int c) {
  bool null = false;
  const Datum value = row::datum(r, c, &null);
  if (null) return {};
  Datum* elements = nullptr;
  bool* nulls = nullptr;
  int count = 0;
  pg_call([&] {
    ArrayType* array = DatumGetArrayTypeP(value);
    deconstruct_array(array, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elements,
                      &nulls, &count);
  });
  std::vector<core::Position> positions;
  positions.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i)
    if (!nulls[i]) positions.push_back(DatumGetInt64(elements[i]));
  return core::PositionSet(positions.begin(), positions.end());
}

core::PositionLane position_lane_of_row(std::uint64_t r, int first_column) {
  core::PositionLane lane;
  lane.epoch = row::int8(r, first_column);
  lane.progress.acked_upto = row::int8(r, first_column + 1);
  lane.progress.done = position_set(r, first_column + 2);
  lane.progress.in_flight = position_set(r, first_column + 3);
  lane.retrying = position_set(r, first_column + 4);
  return lane;
}

void LaneProgressWrites::Slices::add(const core::PositionSet& positions) {
  firsts.push_back(static_cast<std::int32_t>(flat.size()) + 1);  // SQL arrays count from 1
  counts.push_back(static_cast<std::int32_t>(positions.size()));
  flat.insert(flat.end(), positions.begin(), positions.end());
}

void LaneProgressWrites::add(const std::string& handler, std::int16_t lane,
                             const core::PositionLane& after) {
  handlers_.push_back(handler);
  lanes_.push_back(lane);
  acked_.push_back(after.progress.acked_upto);
  done_.add(after.progress.done);
  in_flight_.add(after.progress.in_flight);
  retrying_.add(after.retrying);
}

std::uint64_t LaneProgressWrites::run() {
  // An empty slice ([first:first - 1]) is '{}'. No indexed column changes: a HOT update when
  // the new version fits on the lane's page, which fillfactor 10 keeps room for.
  static Statement write(
      "UPDATE relaybus.lanes l SET acked_upto = u.acked_upto,"
      " done = ($4::int8[])[u.done_first:u.done_first + u.done_count - 1],"
      " in_flight = ($7::int8[])[u.flight_first:u.flight_first + u.flight_count - 1],"
      " retrying = ($10::int8[])[u.retry_first:u.retry_first + u.retry_count - 1]"
      " FROM unnest($1::text[], $2::int2[], $3::int8[], $5::int4[], $6::int4[], $8::int4[],"
      "  $9::int4[], $11::int4[], $12::int4[])"
      "  AS u(handler, lane, acked_upto, done_first, done_count, flight_first, flight_count,"
      "       retry_first, retry_count)"
      " WHERE l.handler = u.handler AND l.lane = u.lane",
      {TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, INT4ARRAYOID, INT4ARRAYOID,
       INT8ARRAYOID, INT4ARRAYOID, INT4ARRAYOID, INT8ARRAYOID, INT4ARRAYOID, INT4ARRAYOID});
  if (lanes_.empty()) return 0;
  Params params;
  params.text_array(handlers_);
  params.int2_array(lanes_);
  params.int8_array(acked_);
  for (const Slices* s : {&done_, &in_flight_, &retrying_}) {
    params.int8_array(s->flat);
    params.int4_array(s->firsts);
    params.int4_array(s->counts);
  }
  return write.run(params);
}

}  // namespace relaybus::pg
