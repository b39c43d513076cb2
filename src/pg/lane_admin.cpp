// extend_lease, relinquish and take_over_expired: what happens to lanes outside a claim.
#include "counters.hpp"
#include "holder.hpp"
#include "in_flight.hpp"
#include "lane_lease_sql.hpp"
#include "lane_list.hpp"
#include "lane_order.hpp"
#include "spi.hpp"
#include "subtransaction.hpp"
#include "takeover.hpp"
#include "worker_arg.hpp"

#include "../core/claim_protocol.hpp"
#include "../core/claim_request.hpp"
#include "../core/error.hpp"

namespace relaybus::pg {

namespace {

// Lanes taken over per call, so one call never holds many locks for long.
constexpr int kTakeoverBatch = 1000;

Datum extend_lease_body(FunctionCallInfo fcinfo) {
  const std::string worker = worker_arg(fcinfo, 0);
  if (PG_ARGISNULL(1)) throw core::Error(core::ErrorCode::kNullValue, "lease must not be NULL");
  const std::int64_t lease_us = interval_us_of(PG_GETARG_DATUM(1), "lease");
  core::validate_lease(lease_us);
  // Only the caller's incarnation's lanes (holder.hpp): a successor reusing the name must not
  // keep its dead predecessor's in-flight deliveries hidden behind renewed leases, nor
  // another holder's. Locked first, in the one order (lane_order.hpp): an UPDATE alone
  // locks in the table's physical order and deadlocked with the same worker's claims and
  // relinquishes on other connections.
  static Statement lock(
      "SELECT l.handler, l.lane FROM relaybus.lanes l"
      " WHERE l.lease_owner = $1 AND " RELAYBUS_LANE_IS_CALLERS_SQL(
          "$4", "$2", "$3") " ORDER BY " RELAYBUS_LANE_LOCK_ORDER_SQL " FOR NO KEY UPDATE OF l",
      {TEXTOID, INT4OID, TIMESTAMPTZOID, TEXTOID});
  static Statement extend(
      "UPDATE relaybus.lanes l SET lease_expires_at = now() + $3"
      " FROM unnest($1::text[], $2::int2[]) AS u(handler, lane)"
      " WHERE l.handler = u.handler AND l.lane = u.lane",
      {TEXTARRAYOID, INT2ARRAYOID, INTERVALOID});
  SpiConnection spi;
  fresh_backend_activity();  // a live backend's lanes are the worker's (lane_order.hpp)
  Params params;
  params.text(worker);
  params.int4(current_holder_pid());
  params.timestamptz(current_holder_started());
  params.text(holder_arg(fcinfo, 2));
  const LaneList locked = LaneList::from_rows(lock.run(params));
  std::uint64_t n = 0;
  if (!locked.empty()) {
    Params lane_params;
    locked.bind(lane_params);
    lane_params.interval_us(lease_us);
    n = extend.run(lane_params);
  }
  spi.finish();
  return Int32GetDatum(static_cast<std::int32_t>(n));
}

Datum relinquish_body(FunctionCallInfo fcinfo) {
  const std::string worker = worker_arg(fcinfo, 0);
  // Lock first, then look at the in-flight deliveries in a second statement, which sees
  // what committed while this waited for a lane (a delivery another connection of the
  // worker claimed into it meanwhile must keep the lane held). With a holder: that
  // holder's lanes; without: the worker's lanes bound to a backend (any backend: a lane of
  // a dead one that runs nothing may as well go back now), never another holder's.
  static Statement lock(
      "SELECT l.handler, l.lane FROM relaybus.lanes l WHERE l.lease_owner = $1"
      " AND " RELAYBUS_RELINQUISH_COVERS_SQL("$2") " ORDER BY " RELAYBUS_LANE_LOCK_ORDER_SQL
                                                   " FOR NO KEY UPDATE OF l",
      {TEXTOID, TEXTOID});
  // A lane runs nothing when no delivery of its in-flight list is still pending.
  static Statement relinquish(
      "UPDATE relaybus.lanes l SET lease_owner = NULL, lease_expires_at = NULL,"
      " holder_pid = NULL, holder_started = NULL, holder = NULL, in_flight = '{}'"
      " FROM unnest($1::text[], $2::int2[]) AS u(handler, lane)"
      " WHERE l.handler = u.handler AND l.lane = u.lane"
      " AND cardinality(" RELAYBUS_LIVE_IN_FLIGHT_SQL ") = 0",
      {TEXTARRAYOID, INT2ARRAYOID});
  SpiConnection spi;
  Params params;
  params.text(worker);
  params.text(holder_arg(fcinfo, 1));
  const LaneList locked = LaneList::from_rows(lock.run(params));
  std::uint64_t n = 0;
  if (!locked.empty()) {
    Params lane_params;
    locked.bind(lane_params);
    n = relinquish.run(lane_params);
  }
  spi.finish();
  return Int32GetDatum(static_cast<std::int32_t>(n));
}

// Takes over these lanes, locked by the caller: charges their in-flight deliveries, then
// writes each lane as core plans a takeover that picks nothing (a new epoch, no owner).
void take_over(const std::vector<core::LaneSnapshot>& lanes) {
  static Statement release(
      "UPDATE relaybus.lanes l SET epoch = u.epoch, lease_owner = NULL,"
      " lease_expires_at = NULL, holder_pid = NULL, holder_started = NULL, holder = NULL,"
      " in_flight = '{}'"
      " FROM unnest($1::text[], $2::int2[], $3::int8[]) AS u(handler, lane, epoch)"
      " WHERE l.handler = u.handler AND l.lane = u.lane",
      {TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID});
  PgChargeStore charges;
  std::vector<const core::LaneSnapshot*> taken;
  LaneList list;
  std::vector<std::int64_t> epochs;
  for (const auto& lane : lanes) {
    taken.push_back(&lane);
    list.add(lane.handler, lane.lane);
    const core::LaneWrite w = core::plan_lane_write(core::LaneOrigin::kExpired, lane.epoch,
                                                    /*has_live_in_flight=*/false,
                                                    /*got_picks=*/false);
    epochs.push_back(w.epoch);
  }
  core::charge_in_flight(charges, taken);
  Params params;
  list.bind(params);
  params.int8_array(epochs);
  counters::add(counters::kTakenOver, release.run(params));
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

Datum take_over_expired_body(FunctionCallInfo) {
  // SKIP LOCKED: a lane whose completion is in progress (FOR KEY SHARE) or that a claim is
  // taking right now is left for a later round. The locks are the caller's transaction's,
  // so they outlast the subtransactions below.
  // The WHERE clause is the SQL copy of core::due_for_takeover.
  static Statement lock_expired(
      "SELECT l.handler, l.lane, l.epoch, l.in_flight FROM relaybus.lanes l"
      " WHERE " RELAYBUS_DUE_FOR_TAKEOVER_SQL
      " ORDER BY l.lease_expires_at LIMIT $1 FOR UPDATE OF l SKIP LOCKED",
      {INT4OID});
  SpiConnection spi;
  Params params;
  params.int4(kTakeoverBatch);
  const std::uint64_t n = lock_expired.run(params);
  std::vector<core::LaneSnapshot> expired;
  for (std::uint64_t r = 0; r < n; ++r)
    expired.push_back({row::text(r, 1), row::int2(r, 2), row::int8(r, 3), row::text_array(r, 4)});
  std::int32_t taken = static_cast<std::int32_t>(n);
  // The whole batch in one go (two statements), in a subtransaction so that one lane that
  // cannot be taken over (say, a trigger on deliveries raising for one handler) does not
  // stop the others: then lane by lane, each in its own subtransaction.
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
        report_skipped(lane.handler, lane.lane, error);
      }
    }
  }
  spi.finish();
  return Int32GetDatum(taken);
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_extend_lease, relaybus::pg::extend_lease_body)
RELAYBUS_SQL_FUNCTION(relaybus_relinquish, relaybus::pg::relinquish_body)
RELAYBUS_SQL_FUNCTION(relaybus_take_over_expired, relaybus::pg::take_over_expired_body)
