// fail, bury and release: end a claim without completing it. Each updates the delivery
// (a rare path: not HOT, accepted) and takes it off its lane's in-flight list so it can be
// claimed again; each bumps the claims counter so the token that ended it is dead.
#include "spi.hpp"
#include "subscription_policy.hpp"
#include "token_args.hpp"

#include "../core/error.hpp"
#include "../core/retry_policy.hpp"

namespace relaybus::pg {

namespace {

enum class Ending { kFail, kBury, kRelease };

enum class Result { kRetry, kDead, kReleased, kLost };

Result end_attempt(const core::LeaseToken& token, Ending ending,
                   const std::optional<std::string>& error,
                   const std::optional<TimestampTz>& retry_at) {
  // Lane first, then delivery: the lock order of every path (claim, complete, takeover).
  static Statement lock_lane(
      "SELECT 1 FROM relaybus.lanes l WHERE l.handler = $1 AND l.lane = $2 AND l.epoch = $3"
      " AND $4 = ANY (l.in_flight) FOR NO KEY UPDATE",
      {TEXTOID, INT2OID, INT8OID, TEXTOID});
  static Statement lock_delivery(
      "SELECT d.attempts, " RELAYBUS_POLICY_COLUMNS_SQL
      " FROM relaybus.deliveries d"
      " LEFT JOIN relaybus.subscriptions s ON s.handler = d.handler"
      " WHERE d.event_id = $1 AND d.handler = $2 AND d.claims = $3 AND d.status = 'pending'"
      " FOR UPDATE OF d",
      {TEXTOID, TEXTOID, INT4OID});
  static Statement update_delivery(
      "UPDATE relaybus.deliveries SET status = $3, attempts = $4, claims = claims + 1,"
      " available_at = coalesce($5, available_at), last_error = coalesce($6, last_error),"
      " updated_at = now() WHERE event_id = $1 AND handler = $2",
      {TEXTOID, TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID, TEXTOID});
  static Statement off_lane(
      "UPDATE relaybus.lanes SET in_flight = array_remove(in_flight, $3)"
      " WHERE handler = $1 AND lane = $2",
      {TEXTOID, INT2OID, TEXTOID});
  static Statement now_plus("SELECT now() + $1", {INTERVALOID});

  Params lane_params;
  lane_params.text(token.handler);
  lane_params.int2(token.lane);
  lane_params.int8(token.epoch);
  lane_params.text(token.event_id);
  if (lock_lane.run(lane_params) != 1) return Result::kLost;

  Params delivery_params;
  delivery_params.text(token.event_id);
  delivery_params.text(token.handler);
  delivery_params.int4(token.claims);
  if (lock_delivery.run(delivery_params) != 1) return Result::kLost;
  const std::int32_t attempts = row::int4(0, 1);
  const core::RetryPolicy policy = policy_of_row(0, 2);

  Result result = Result::kReleased;
  std::int32_t new_attempts = attempts;
  std::optional<TimestampTz> available_at;
  if (ending != Ending::kRelease) {
    core::FailureOutcome outcome = core::after_failed_attempt(policy, attempts);
    if (ending == Ending::kBury) outcome.dead = true;
    new_attempts = outcome.attempts;
    result = outcome.dead ? Result::kDead : Result::kRetry;
    if (!outcome.dead) {
      if (retry_at) {
        available_at = retry_at;
      } else {
        // Cannot overflow: the policy is clamped to a backoff of at most 365 days
        // (core::kMaxBackoffUs), and the timestamp range ends in the year 294276.
        Params delay;
        delay.interval_us(outcome.delay_us);
        now_plus.run(delay);
        bool null = false;
        available_at = DatumGetTimestampTz(row::datum(0, 1, &null));
      }
    }
  }

  Params update;
  update.text(token.event_id);
  update.text(token.handler);
  update.text(result == Result::kDead ? "dead" : "pending");
  update.int4(new_attempts);
  update.timestamptz(available_at);
  update.text(error);
  update_delivery.run(update);

  Params lane_update;
  lane_update.text(token.handler);
  lane_update.int2(token.lane);
  lane_update.text(token.event_id);
  off_lane.run(lane_update);
  return result;
}

std::optional<std::string> optional_text_arg(FunctionCallInfo fcinfo, int n) {
  if (PG_ARGISNULL(n)) return std::nullopt;
  return text_of(PG_GETARG_DATUM(n));
}

Datum fail_body(FunctionCallInfo fcinfo) {
  const core::LeaseToken token = token_arg(fcinfo, 0);
  const auto error = optional_text_arg(fcinfo, 1);
  std::optional<TimestampTz> retry_at;
  if (!PG_ARGISNULL(2)) {
    retry_at = PG_GETARG_TIMESTAMPTZ(2);
    // 'infinity' would park the delivery forever, '-infinity' sort it before every other.
    if (TIMESTAMP_NOT_FINITE(*retry_at))
      throw core::Error(core::ErrorCode::kInvalidParameter, "retry_at must be a finite timestamp");
  }
  SpiConnection spi;
  const Result result = end_attempt(token, Ending::kFail, error, retry_at);
  spi.finish();
  const char* word = result == Result::kRetry ? "retry" : result == Result::kDead ? "dead" : "lost";
  Datum out = 0;
  pg_call([&] { out = PointerGetDatum(cstring_to_text(word)); });
  return out;
}

Datum bury_body(FunctionCallInfo fcinfo) {
  const core::LeaseToken token = token_arg(fcinfo, 0);
  const auto error = optional_text_arg(fcinfo, 1);
  SpiConnection spi;
  const Result result = end_attempt(token, Ending::kBury, error, std::nullopt);
  spi.finish();
  return BoolGetDatum(result != Result::kLost);
}

Datum release_body(FunctionCallInfo fcinfo) {
  const core::LeaseToken token = token_arg(fcinfo, 0);
  SpiConnection spi;
  const Result result = end_attempt(token, Ending::kRelease, std::nullopt, std::nullopt);
  spi.finish();
  return BoolGetDatum(result != Result::kLost);
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_fail, relaybus::pg::fail_body)
RELAYBUS_SQL_FUNCTION(relaybus_bury, relaybus::pg::bury_body)
RELAYBUS_SQL_FUNCTION(relaybus_release, relaybus::pg::release_body)
