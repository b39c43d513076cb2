// take_over_expired (0.3.0): takes over lanes whose lease expired, so that what their holder
// ran is charged even when nobody claims the lanes again. core::take_over_expired_positions
// (src/core/positions_claim.hpp) decides; this file locks, reads and writes: every window
// position in flight becomes an exception row charged one lost attempt, every retried
// exception row is charged the same way, each lane goes back at a new epoch.
#include "counters.hpp"
#include "lane_lease_sql.hpp"
#include "positions_claim_writes.hpp"
#include "spi.hpp"
#include "subscription_policy.hpp"
#include "subtransaction.hpp"

#include "../core/error.hpp"
#include "../core/positions_claim.hpp"

namespace relaybus::pg {

namespace {

// Lanes taken over per call, so one call never holds many locks for long (as 0.2's).
constexpr int kTakeoverBatch = 1000;

class PgPositionsTakeoverStore final : public core::PositionsTakeoverStore {
 public:
  PgPositionsTakeoverStore() : writes_(std::nullopt) {}

  std::vector<std::vector<core::PendingException>> retrying_rows(
      const std::vector<const core::PositionsLane*>& lanes) override {
    static Statement read(
        "SELECT u.n, x.position, x.event_id, x.key, x.available_at, x.attempts, x.claims"
        " FROM unnest($1::int4[], $2::text[], $3::int2[], $4::int8[])"
        "  AS u(n, handler, lane, position)"
        // One primary-key lookup per row (fenced, OFFSET 0, with the status tested
        // outside): a plain join planned while exceptions was small scans it per row.
        " CROSS JOIN LATERAL (SELECT x.* FROM relaybus.exceptions x WHERE x.handler = u.handler"
        "  AND x.lane = u.lane AND x.position = u.position OFFSET 0) x"
        " WHERE x.status = 'pending'",
        {INT4ARRAYOID, TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID});
    std::vector<std::int32_t> indexes;
    std::vector<std::string> handlers;
    std::vector<std::int16_t> lane_numbers;
    std::vector<std::int64_t> positions;
    for (std::size_t i = 0; i < lanes.size(); ++i)
      for (core::Position p : lanes[i]->retrying) {
        indexes.push_back(static_cast<std::int32_t>(i));
        handlers.push_back(lanes[i]->handler);
        lane_numbers.push_back(lanes[i]->lane);
        positions.push_back(p);
      }
    Params params;
    params.int4_array(indexes);
    params.text_array(handlers);
    params.int2_array(lane_numbers);
    params.int8_array(positions);
    const std::uint64_t n = read.run(params);
    std::vector<std::vector<core::PendingException>> out(lanes.size());
    for (std::uint64_t r = 0; r < n; ++r) {
      const std::size_t i = static_cast<std::size_t>(row::int4(r, 1));
      if (i >= out.size())
        throw core::Error(core::ErrorCode::kInternal, "relaybus: a row of a lane not asked for");
      out[i].push_back({row::int8(r, 2), row::text(r, 3), row::text_or_null(r, 4),
                        timestamp_of_row(r, 5), row::int4(r, 6), row::int4(r, 7)});
    }
    return out;
  }
  void insert_exceptions(const std::vector<core::NewException>& rows) override {
    writes_.insert_exceptions(rows);
  }
  void charge_exceptions(const std::vector<core::ExceptionCharge>& charges) override {
    writes_.charge_exceptions(charges);
  }
  void write_lanes(const std::vector<core::PositionsLaneWrite>& writes) override {
    writes_.write_lanes(writes);
  }
  void load_progress(const std::vector<core::PositionsLane*>& lanes) {
    writes_.load_progress(lanes);
  }

 private:
  PositionsWrites writes_;
};

// Takes over these lanes, locked by the caller: their progress is read here, after the locks.
void take_over(std::vector<core::ExpiredPositionsLane> lanes) {
  PgPositionsTakeoverStore store;
  std::vector<core::PositionsLane*> locked;
  for (auto& l : lanes) locked.push_back(&l.lane);
  store.load_progress(locked);
  core::take_over_expired_positions(store, lanes, GetCurrentTransactionStartTimestamp());
  for (const auto& l : lanes) counters::add(counters::kTakenOver, l.lane.handler);
}

// A lane whose takeover raised: reported, left as it is (still expired, so tried again in
// a later round), and the round goes on with the other lanes.
void report_skipped(const std::string& handler, std::int16_t lane, ErrorData* error) {
  const char* message = error->message != nullptr ? error->message : "(no message)";
  const int code = error->sqlerrcode;
  pg_call([&] {
    ereport(WARNING, (errmsg("relaybus: lane %d of handler \"%s\" was not taken over", lane,
                             handler.c_str()),
                      errdetail("%s (SQLSTATE %s)", message, unpack_sql_state(code)),
                      errhint("The lane stays expired; the next takeover tries it again.")));
    FreeErrorData(error);
  });
}

Datum take_over_expired_positions_body(FunctionCallInfo) {
  // SKIP LOCKED: a lane whose completion is in progress or that a claim is taking right now
  // is left for a later round. The locks are the caller's transaction's, so they outlast
  // the subtransactions below. The policy of a handler no longer subscribed is core's
  // default (policy_of_row).
  static Statement lock_expired(
      "SELECT " RELAYBUS_POSITIONS_LANE_COLUMNS_SQL ", " RELAYBUS_POLICY_COLUMNS_SQL
      " FROM relaybus.lanes l LEFT JOIN relaybus.subscriptions s ON s.handler = l.handler"
      " WHERE " RELAYBUS_DUE_FOR_TAKEOVER_SQL
      " ORDER BY l.lease_expires_at LIMIT $1 FOR UPDATE OF l SKIP LOCKED",
      {INT4OID});
  SpiConnection spi;
  Params params;
  params.int4(kTakeoverBatch);
  const std::uint64_t n = lock_expired.run(params);
  std::vector<core::ExpiredPositionsLane> expired;
  expired.reserve(n);
  for (std::uint64_t r = 0; r < n; ++r)
    expired.push_back({positions_lane_of_row(r), policy_of_row(r, kPositionsLaneColumns + 1)});
  std::int32_t taken = static_cast<std::int32_t>(n);
  // The whole batch in one go, in a subtransaction so that one lane that cannot be taken
  // over does not stop the others: then lane by lane, each in its own subtransaction.
  ErrorData* batch_error =
      expired.empty() ? nullptr : in_subtransaction([&] { take_over(expired); });
  if (batch_error != nullptr) {
    pg_call([&] { FreeErrorData(batch_error); });
    taken = 0;
    for (const auto& lane : expired) {
      ErrorData* error = in_subtransaction([&] { take_over({lane}); });
      if (error == nullptr) {
        ++taken;
      } else {
        report_skipped(lane.lane.handler, lane.lane.lane, error);
      }
    }
  }
  spi.finish();
  return Int32GetDatum(taken);
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_take_over_expired_positions,
                      relaybus::pg::take_over_expired_positions_body)
