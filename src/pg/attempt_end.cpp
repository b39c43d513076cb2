// fail, bury and release: end a claim without completing it. core::end_attempt
// (src/core/attempt_end.hpp) decides; this reads the fence and writes. Each updates the delivery
// (a rare path: not HOT, accepted) and takes it off its lane's in-flight list so it can be
// claimed again; each bumps the claims counter so the token that ended it is dead.
#include "attempt_args.hpp"
#include "counters.hpp"
#include "due_time.hpp"
#include "spi.hpp"
#include "subscription_policy.hpp"
#include "token_args.hpp"

#include "../core/error.hpp"
#include "../core/attempt_end.hpp"

namespace relaybus::pg {

namespace {

using core::AttemptResult;
using core::Ending;

AttemptResult end_attempt(const core::LeaseToken& token, Ending ending,
                          const std::optional<std::string>& error,
                          const std::optional<TimestampTz>& retry_at) {
  // Lane first, then delivery: the lock order of every path (claim, complete, takeover).
  // The WHERE clauses are the SQL copy of the fence (core::token_holds): only a row that
  // still holds the token is locked, so a stale token's call never waits for, or holds up,
  // the lane's new owner. core judges what they return.
  static Statement lock_lane(
      "SELECT l.epoch, $3 = ANY (l.in_flight) FROM relaybus.lanes l"
      " WHERE l.handler = $1 AND l.lane = $2 AND l.epoch = $4 AND $3 = ANY (l.in_flight)"
      " FOR NO KEY UPDATE",
      {TEXTOID, INT2OID, TEXTOID, INT8OID});
  static Statement lock_delivery(
      "SELECT d.status = 'pending', d.claims, d.attempts, " RELAYBUS_POLICY_COLUMNS_SQL
      " FROM relaybus.deliveries d"
      " LEFT JOIN relaybus.subscriptions s ON s.handler = d.handler"
      " WHERE d.event_id = $1 AND d.handler = $2 AND d.claims = $3 AND d.status = 'pending'"
      " FOR UPDATE OF d",
      {TEXTOID, TEXTOID, INT4OID});
  static Statement update_delivery(
      "UPDATE relaybus.deliveries SET status = $3, attempts = $4, claims = claims + 1,"
      " available_at = coalesce($5, now() + $7, available_at),"
      " last_error = coalesce($6, last_error), updated_at = now()"
      " WHERE event_id = $1 AND handler = $2",
      {TEXTOID, TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID, TEXTOID, INTERVALOID});
  static Statement off_lane(
      "UPDATE relaybus.lanes SET in_flight = array_remove(in_flight, $3)"
      " WHERE handler = $1 AND lane = $2",
      {TEXTOID, INT2OID, TEXTOID});

  core::FenceView fence;
  Params lane_params;
  lane_params.text(token.handler);
  lane_params.int2(token.lane);
  lane_params.text(token.event_id);
  lane_params.int8(token.epoch);
  if (lock_lane.run(lane_params) == 1) {
    fence.lane_found = true;
    fence.lane_epoch = row::int8(0, 1);
    fence.listed_in_flight = row::boolean(0, 2);
  }
  // A lane that fences the token out settles it: its delivery is not even locked.
  if (!core::lane_holds(token, fence)) return AttemptResult::kLost;

  Params delivery_params;
  delivery_params.text(token.event_id);
  delivery_params.text(token.handler);
  delivery_params.int4(token.claims);
  std::int32_t attempts = 0;
  core::RetryPolicy policy;
  if (lock_delivery.run(delivery_params) == 1) {
    fence.delivery_found = true;
    fence.delivery_pending = row::boolean(0, 1);
    fence.delivery_claims = row::int4(0, 2);
    attempts = row::int4(0, 3);
    policy = policy_of_row(0, 4);
  }
  const core::AttemptEnd end =
      core::end_attempt(ending, token, fence, policy, attempts, retry_at.has_value());
  if (end.result == AttemptResult::kLost) return end.result;

  // Cannot overflow: the policy is clamped to a backoff of at most 365 days
  // (core::kMaxBackoffUs), and the timestamp range ends in the year 294276.
  Params update;
  update.text(token.event_id);
  update.text(token.handler);
  update.text(end.dead ? "dead" : "pending");
  update.int4(end.attempts);
  update.timestamptz(end.result == AttemptResult::kRetry ? retry_at : std::nullopt);
  update.text(error);
  if (end.use_delay) {
    update.interval_us(end.delay_us);
  } else {
    update.datum(0, true);
  }
  update_delivery.run(update);
  if (ending == Ending::kFail) counters::add(counters::kFailed);
  if (end.attempts > attempts)
    counters::add(counters::kAttemptsCharged, static_cast<std::uint64_t>(end.attempts - attempts));
  if (end.dead) counters::add(counters::kDeadLettered);

  Params lane_update;
  lane_update.text(token.handler);
  lane_update.int2(token.lane);
  lane_update.text(token.event_id);
  off_lane.run(lane_update);
  return end.result;
}

Datum fail_body(FunctionCallInfo fcinfo) {
  const core::LeaseToken token = token_arg(fcinfo, 0);
  const auto error = optional_text_arg(fcinfo, 1);
  const std::optional<TimestampTz> retry_at = checked_due_time(
      PG_ARGISNULL(2) ? std::nullopt : std::optional<TimestampTz>(PG_GETARG_TIMESTAMPTZ(2)),
      "retry_at");
  SpiConnection spi;
  const AttemptResult result = end_attempt(token, Ending::kFail, error, retry_at);
  spi.finish();
  return fail_result_datum(result);
}

Datum bury_body(FunctionCallInfo fcinfo) {
  const core::LeaseToken token = token_arg(fcinfo, 0);
  const auto error = optional_text_arg(fcinfo, 1);
  SpiConnection spi;
  const AttemptResult result = end_attempt(token, Ending::kBury, error, std::nullopt);
  spi.finish();
  return BoolGetDatum(result != AttemptResult::kLost);
}

Datum release_body(FunctionCallInfo fcinfo) {
  const core::LeaseToken token = token_arg(fcinfo, 0);
  SpiConnection spi;
  const AttemptResult result = end_attempt(token, Ending::kRelease, std::nullopt, std::nullopt);
  spi.finish();
  return BoolGetDatum(result != AttemptResult::kLost);
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_fail, relaybus::pg::fail_body)
RELAYBUS_SQL_FUNCTION(relaybus_bury, relaybus::pg::bury_body)
RELAYBUS_SQL_FUNCTION(relaybus_release, relaybus::pg::release_body)
