// extend_lease, relinquish and take_over_expired: what happens to lanes outside a claim.
#include "holder.hpp"
#include "in_flight.hpp"
#include "lane_list.hpp"
#include "spi.hpp"
#include "takeover.hpp"

#include "../core/claim_request.hpp"
#include "../core/error.hpp"

namespace relaybus::pg {

namespace {

// Lanes taken over per call, so one call never holds many locks for long.
constexpr int kTakeoverBatch = 1000;

std::string worker_arg(FunctionCallInfo fcinfo) {
  if (PG_ARGISNULL(0)) throw core::Error(core::sqlstate::kNullValue, "worker must not be NULL");
  std::string worker = text_of(PG_GETARG_DATUM(0));
  core::validate_worker(worker);
  return worker;
}

Datum extend_lease_body(FunctionCallInfo fcinfo) {
  const std::string worker = worker_arg(fcinfo);
  if (PG_ARGISNULL(1)) throw core::Error(core::sqlstate::kNullValue, "lease must not be NULL");
  const std::int64_t lease_us = interval_us_of(PG_GETARG_DATUM(1));
  core::validate_lease(lease_us);
  // Only lanes whose acquiring incarnation is alive: a successor reusing the name must not
  // keep its dead predecessor's in-flight deliveries hidden behind renewed leases.
  static Statement extend(
      "UPDATE relaybus.lanes l SET lease_expires_at = now() + $2"
      " WHERE l.lease_owner = $1 AND " RELAYBUS_HOLDER_ALIVE_SQL("$3", "$4"),
      {TEXTOID, INTERVALOID, INT4OID, TIMESTAMPTZOID});
  SpiConnection spi;
  Params params;
  params.text(worker);
  params.interval_us(lease_us);
  params.int4(current_holder_pid());
  params.timestamptz(current_holder_started());
  const std::uint64_t n = extend.run(params);
  spi.finish();
  return Int32GetDatum(static_cast<std::int32_t>(n));
}

Datum relinquish_body(FunctionCallInfo fcinfo) {
  const std::string worker = worker_arg(fcinfo);
  // Lock first, then look at the in-flight deliveries in a second statement, which sees
  // what committed while this waited for a lane (a delivery another connection of the
  // worker claimed into it meanwhile must keep the lane held).
  static Statement lock(
      "SELECT l.handler, l.lane FROM relaybus.lanes l WHERE l.lease_owner = $1"
      " ORDER BY l.handler, l.lane FOR NO KEY UPDATE OF l",
      {TEXTOID});
  // A lane runs nothing when no delivery of its in-flight list is still pending.
  static Statement relinquish(
      "UPDATE relaybus.lanes l SET lease_owner = NULL, lease_expires_at = NULL,"
      " holder_pid = NULL, holder_started = NULL, in_flight = '{}'"
      " FROM unnest($1::text[], $2::int2[]) AS u(handler, lane)"
      " WHERE l.handler = u.handler AND l.lane = u.lane"
      " AND cardinality(" RELAYBUS_LIVE_IN_FLIGHT_SQL ") = 0",
      {TEXTARRAYOID, INT2ARRAYOID});
  SpiConnection spi;
  Params params;
  params.text(worker);
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

Datum take_over_expired_body(FunctionCallInfo) {
  // SKIP LOCKED: a lane whose completion is in progress (FOR KEY SHARE) or that a claim is
  // taking right now is left for a later round.
  static Statement lock_expired(
      "SELECT l.handler, l.lane, l.in_flight FROM relaybus.lanes l"
      " WHERE l.lease_owner IS NOT NULL AND l.lease_expires_at <= now()"
      " ORDER BY l.lease_expires_at LIMIT $1 FOR UPDATE OF l SKIP LOCKED",
      {INT4OID});
  static Statement release(
      "UPDATE relaybus.lanes l SET epoch = l.epoch + 1, lease_owner = NULL,"
      " lease_expires_at = NULL, holder_pid = NULL, holder_started = NULL, in_flight = '{}'"
      " FROM unnest($1::text[], $2::int2[]) AS u(handler, lane)"
      " WHERE l.handler = u.handler AND l.lane = u.lane",
      {TEXTARRAYOID, INT2ARRAYOID});
  SpiConnection spi;
  Params params;
  params.int4(kTakeoverBatch);
  const std::uint64_t n = lock_expired.run(params);
  const LaneList expired = LaneList::from_rows(n);
  std::vector<InFlightDelivery> in_flight;
  for (std::uint64_t r = 0; r < n; ++r) {
    for (auto& id : row::text_array(r, 3))
      in_flight.push_back({expired.handlers[r], std::move(id)});
  }
  charge_taken_over(in_flight);
  if (!expired.empty()) {
    Params release_params;
    expired.bind(release_params);
    release.run(release_params);
  }
  spi.finish();
  return Int32GetDatum(static_cast<std::int32_t>(n));
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_extend_lease, relaybus::pg::extend_lease_body)
RELAYBUS_SQL_FUNCTION(relaybus_relinquish, relaybus::pg::relinquish_body)
RELAYBUS_SQL_FUNCTION(relaybus_take_over_expired, relaybus::pg::take_over_expired_body)
