#include "lane_progress.hpp"

#include "lane_changes.hpp"

#include "position_lanes.hpp"
#include "progress_hints.hpp"

#include "../core/error.hpp"

extern "C" {
#include <access/xact.h>
#include <utils/snapmgr.h>
}

namespace relaybus::pg {

namespace {

// Runs `statement` with a snapshot taken now (after the caller's locks) instead of the
// statement's or the transaction's. The command counter still moves, so the rows this
// transaction wrote earlier are seen too.
std::uint64_t run_with_latest_snapshot(Statement& statement, Params& params) {
  SPIPlanPtr plan = statement.plan();
  int rc = 0;
  std::uint64_t processed = 0;
  pg_call([&] {
    rc = SPI_execute_snapshot(plan, params.values(), params.nulls(), GetLatestSnapshot(),
                              InvalidSnapshot, false, false, 0);
    processed = SPI_processed;
  });
  if (rc != SPI_OK_SELECT)
    throw core::Error(core::ErrorCode::kInternal, "relaybus: could not read lane progress");
  return processed;
}

// Each lane's newest row, one descent of lane_progress_pkey per lane bounded by the lane's
// hint ($3, progress_hints.hpp), and a second, unbounded, only where nothing is at or above
// the hint; a lane without a row returns none.
Statement& newest_rows() {
  static Statement read(
      "SELECT u.n, p.seq, p.acked_upto, p.done, p.in_flight, p.retrying"
      " FROM unnest($1::text[], $2::int2[], $3::int8[]) WITH ORDINALITY AS u(handler, lane, hint, "
      "n)"
      " CROSS JOIN LATERAL ("
      "  (SELECT p.seq, p.acked_upto, p.done, p.in_flight, p.retrying"
      "   FROM relaybus.lane_progress p WHERE p.handler = u.handler AND p.lane = u.lane"
      "   AND p.seq >= u.hint ORDER BY p.seq DESC LIMIT 1)"
      "  UNION ALL"
      "  (SELECT p.seq, p.acked_upto, p.done, p.in_flight, p.retrying"
      "   FROM relaybus.lane_progress p WHERE p.handler = u.handler AND p.lane = u.lane"
      "   ORDER BY p.seq DESC LIMIT 1)"
      "  LIMIT 1) p",
      {TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID});
  return read;
}

std::vector<StoredProgress> rows_of_result(std::uint64_t n, std::size_t lanes) {
  std::vector<StoredProgress> out(lanes);
  for (std::uint64_t r = 0; r < n; ++r) {
    const std::int64_t i = row::int8(r, 1);
    if (i < 1 || static_cast<std::size_t>(i) > lanes)
      throw core::Error(core::ErrorCode::kInternal, "relaybus: progress of a lane not asked for");
    StoredProgress& s = out[static_cast<std::size_t>(i) - 1];
    s.seq = row::int8(r, 2);
    s.progress.acked_upto = row::int8(r, 3);
    s.progress.done = position_set(r, 4);
    s.progress.in_flight = position_set(r, 5);
    s.retrying = position_set(r, 6);
  }
  return out;
}

}  // namespace

std::vector<StoredProgress> read_progress(const LaneList& lanes) {
  if (lanes.empty()) return {};
  Params params;
  lanes.bind(params);
  params.int8_array(progress_hints::get_all(lanes.handlers, lanes.lanes));
  std::vector<StoredProgress> latest =
      rows_of_result(run_with_latest_snapshot(newest_rows(), params), lanes.size());
  for (std::size_t i = 0; i < lanes.size(); ++i)
    progress_hints::note(lanes.handlers[i], lanes.lanes[i], latest[i].seq);
  if (IsolationUsesXactSnapshot()) {
    // Bounded by the newest row itself: the snapshot sees it, or reads an older one (or
    // none), which is the conflict.
    std::vector<std::int64_t> newest;
    for (const StoredProgress& s : latest) newest.push_back(s.seq);
    Params seen_params;
    lanes.bind(seen_params);
    seen_params.int8_array(newest);
    const std::vector<StoredProgress> seen =
        rows_of_result(newest_rows().run(seen_params), lanes.size());
    for (std::size_t i = 0; i < lanes.size(); ++i)
      if (seen[i].seq != latest[i].seq)
        throw core::Error(core::ErrorCode::kConflict,
                          "could not serialize access due to concurrent update of lane " +
                              std::to_string(lanes.lanes[i]) + " of handler \"" +
                              lanes.handlers[i] + "\"");
  }
  return latest;
}

void ProgressInserts::Slices::add(const core::PositionSet& positions) {
  firsts.push_back(static_cast<std::int32_t>(flat.size()) + 1);  // SQL arrays count from 1
  counts.push_back(static_cast<std::int32_t>(positions.size()));
  flat.insert(flat.end(), positions.begin(), positions.end());
}

void ProgressInserts::add(const std::string& handler, std::int16_t lane, const StoredProgress& read,
                          const core::LaneProgress& progress, const core::PositionSet& retrying) {
  if (progress == read.progress && retrying == read.retrying) return;
  // A claim that remembers what it probed of the lane must look again (lane_changes.hpp).
  lane_changes::changed_at_commit(handler, lane);
  handlers_.push_back(handler);
  lanes_.push_back(lane);
  seqs_.push_back(read.seq + 1);
  acked_.push_back(progress.acked_upto);
  done_.add(progress.done);
  in_flight_.add(progress.in_flight);
  retrying_.add(retrying);
}

void ProgressInserts::run() {
  // An empty slice ([first:first - 1]) is '{}'. ON CONFLICT DO NOTHING so that a row already
  // there is counted, not raised as a unique violation: under REPEATABLE READ PostgreSQL
  // raises 40001 for a conflicting row the snapshot does not see, and otherwise the count
  // below says the lane was written without its lock.
  static Statement insert(
      "INSERT INTO relaybus.lane_progress (handler, lane, seq, acked_upto, done, in_flight,"
      " retrying)"
      " SELECT u.handler, u.lane, u.seq, u.acked_upto,"
      " coalesce(($5::int8[])[u.done_first:u.done_first + u.done_count - 1], '{}'),"
      " coalesce(($8::int8[])[u.flight_first:u.flight_first + u.flight_count - 1], '{}'),"
      " coalesce(($11::int8[])[u.retry_first:u.retry_first + u.retry_count - 1], '{}')"
      " FROM unnest($1::text[], $2::int2[], $3::int8[], $4::int8[], $6::int4[], $7::int4[],"
      "  $9::int4[], $10::int4[], $12::int4[], $13::int4[])"
      "  AS u(handler, lane, seq, acked_upto, done_first, done_count, flight_first, flight_count,"
      "       retry_first, retry_count)"
      " ON CONFLICT DO NOTHING",
      {TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, INT4ARRAYOID,
       INT4ARRAYOID, INT8ARRAYOID, INT4ARRAYOID, INT4ARRAYOID, INT8ARRAYOID, INT4ARRAYOID,
       INT4ARRAYOID});
  if (lanes_.empty()) return;
  Params params;
  params.text_array(handlers_);
  params.int2_array(lanes_);
  params.int8_array(seqs_);
  params.int8_array(acked_);
  for (const Slices* s : {&done_, &in_flight_, &retrying_}) {
    params.int8_array(s->flat);
    params.int4_array(s->firsts);
    params.int4_array(s->counts);
  }
  if (insert.run(params) != lanes_.size())
    throw core::Error(core::ErrorCode::kInternal,
                      "relaybus: a lane's progress was written by a transaction that did not "
                      "hold the lane");
  for (std::size_t i = 0; i < lanes_.size(); ++i)
    progress_hints::note(handlers_[i], lanes_[i], seqs_[i]);
}

}  // namespace relaybus::pg
