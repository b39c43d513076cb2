// fail, bury and release of 0.3.0 (design.md, "0.3.0: the store"): end an attempt without
// completing it. core::end_position_attempt (src/core/positions_attempt_end.hpp) decides
// from the lane's lease and progress, the delivery and exception rows and the handler's policy;
// this reads and writes. A window pick becomes an exception row and its position is finished; a
// retry's exception row is updated and leaves the lane's retrying list. A rare path: four
// statements.
#include "../core/positions_attempt_end.hpp"

#include "attempt_args.hpp"
#include "counters.hpp"
#include "due_time.hpp"
#include "lane_progress.hpp"
#include "position_token_args.hpp"
#include "progress_hints.hpp"
#include "spi.hpp"
#include "subscription_policy.hpp"

namespace relaybus::pg {

namespace {

using core::AttemptResult;
using core::Ending;

// The exception row's write, for either kind of attempt. Parameters: $1 handler, $2 lane,
// $3 position, $4 status, $5 attempts, $6 claims, $7 retry_at, $8 delay, $9 error;
// available_at is $7, else now() + $8, else as it was (core::DueAt).
#define RELAYBUS_EXCEPTION_WRITE_TYPES \
  { TEXTOID, INT2OID, INT8OID, TEXTOID, INT4OID, INT4OID, TIMESTAMPTZOID, INTERVALOID, TEXTOID }

void write_exception(const core::PositionToken& token, const core::PositionAttemptEnd& end,
                     const std::optional<std::string>& error,
                     const std::optional<TimestampTz>& retry_at) {
  // A window pick's row, from its delivery row. A row already there for a position picked from
  // the window can only be a hand edit's: it is replaced, its claims counter still moving past
  // both, so that no token of it holds again.
  static Statement insert_window(
      "INSERT INTO relaybus.exceptions AS e (handler, lane, position, event_id, key, status,"
      "  attempts, claims, available_at, last_error, created_at, updated_at)"
      " SELECT d.handler, d.lane, d.position, d.event_id, d.key, $4, $5, $6,"
      "  coalesce($7, now() + $8, d.available_at), $9, d.created_at, now()"
      " FROM relaybus.deliveries d"
      " WHERE d.handler = $1 AND d.lane = $2 AND d.position = $3"
      " ON CONFLICT ON CONSTRAINT exceptions_pkey DO UPDATE SET event_id = EXCLUDED.event_id,"
      "  key = EXCLUDED.key, status = EXCLUDED.status, attempts = EXCLUDED.attempts,"
      "  claims = greatest(EXCLUDED.claims, e.claims + 1), available_at = EXCLUDED.available_at,"
      "  last_error = EXCLUDED.last_error, created_at = EXCLUDED.created_at,"
      "  updated_at = EXCLUDED.updated_at",
      RELAYBUS_EXCEPTION_WRITE_TYPES);
  static Statement update_retry(
      "UPDATE relaybus.exceptions e SET status = $4, attempts = $5, claims = $6,"
      " available_at = coalesce($7, now() + $8, e.available_at),"
      " last_error = coalesce($9, e.last_error), updated_at = now()"
      " WHERE e.handler = $1 AND e.lane = $2 AND e.position = $3",
      RELAYBUS_EXCEPTION_WRITE_TYPES);
  Params params;
  params.text(token.handler);
  params.int2(token.lane);
  params.int8(token.position);
  params.text(end.end.dead ? "dead" : "pending");
  params.int4(end.end.attempts);
  params.int4(end.claims);
  params.timestamptz(end.due == core::DueAt::kRetryAt ? retry_at : std::nullopt);
  // Cannot overflow: the policy is clamped to a backoff of at most 365 days
  // (core::kMaxBackoffUs), and the timestamp range ends in the year 294276.
  if (end.due == core::DueAt::kAfterDelay) {
    params.interval_us(end.end.delay_us);
  } else {
    params.datum(0, true);
  }
  params.text(error);
  Statement& write = end.listed == core::Listed::kWindow ? insert_window : update_retry;
  if (write.run(params) != 1)
    throw core::Error(core::ErrorCode::kInternal,
                      "relaybus: the row of an attempt that held its token was not written");
}

AttemptResult end_attempt(const core::PositionToken& token, Ending ending,
                          const std::optional<std::string>& error,
                          const std::optional<TimestampTz>& retry_at) {
  // Locks the lane only while it still has the token's epoch and lists its position (a stale
  // token's call never waits for, or holds up, the lane's new owner); core judges the rest.
  // The filter reads the lane's newest progress row as of this statement; read_progress
  // reads it again once the lane is locked.
  // The newest row is probed from the lane's hint ($5: progress_hints.hpp).
  static Statement lock_lane(
      "SELECT l.epoch FROM relaybus.lanes l"
      " CROSS JOIN LATERAL ("
      "  (SELECT p.in_flight, p.retrying FROM relaybus.lane_progress p"
      "   WHERE p.handler = l.handler AND p.lane = l.lane AND p.seq >= $5"
      "   ORDER BY p.seq DESC LIMIT 1)"
      "  UNION ALL"
      "  (SELECT p.in_flight, p.retrying FROM relaybus.lane_progress p"
      "   WHERE p.handler = l.handler AND p.lane = l.lane ORDER BY p.seq DESC LIMIT 1)"
      "  LIMIT 1) p"
      " WHERE l.handler = $1 AND l.lane = $2 AND l.epoch = $3"
      " AND ($4 = ANY (p.in_flight) OR $4 = ANY (p.retrying))"
      " FOR NO KEY UPDATE OF l",
      {TEXTOID, INT2OID, INT8OID, INT8OID, INT8OID});
  // Read after the lock, by a statement of its own: it sees what committed while the lock
  // waited. Every writer of a lane's exception rows locks the lane first.
  static Statement read_attempt(
      "SELECT d.position IS NOT NULL, e.position IS NOT NULL, e.status = 'pending', e.claims,"
      " e.attempts, " RELAYBUS_POLICY_COLUMNS_SQL
      " FROM (SELECT) AS one"
      " LEFT JOIN relaybus.deliveries d ON d.handler = $1 AND d.lane = $2 AND d.position = $3"
      " LEFT JOIN relaybus.exceptions e ON e.handler = $1 AND e.lane = $2 AND e.position = $3"
      " LEFT JOIN relaybus.subscriptions s ON s.handler = $1",
      {TEXTOID, INT2OID, INT8OID});

  Params lane_params;
  lane_params.text(token.handler);
  lane_params.int2(token.lane);
  lane_params.int8(token.epoch);
  lane_params.int8(token.position);
  lane_params.int8(progress_hints::get(token.handler, token.lane));
  std::optional<core::PositionLane> lane;
  StoredProgress stored;
  if (lock_lane.run(lane_params) == 1) {
    lane = core::PositionLane{};
    lane->epoch = row::int8(0, 1);
    LaneList list;
    list.add(token.handler, token.lane);
    stored = read_progress(list).at(0);
    lane->progress = stored.progress;
    lane->retrying = stored.retrying;
  }
  // A lane that fences the token out settles it: nothing else is read.
  if (!core::lane_holds(token, core::position_fence(token, lane, false, std::nullopt)))
    return AttemptResult::kLost;

  Params read_params;
  read_params.text(token.handler);
  read_params.int2(token.lane);
  read_params.int8(token.position);
  read_attempt.run(read_params);
  const bool delivery_found = row::boolean(0, 1);
  std::optional<core::ExceptionView> exception;
  if (row::boolean(0, 2))
    exception = core::ExceptionView{row::boolean(0, 3), row::int4(0, 4), row::int4(0, 5)};
  const core::RetryPolicy policy = policy_of_row(0, 6);

  const core::PositionAttemptEnd end = core::end_position_attempt(
      ending, token, lane, delivery_found, exception, policy, retry_at.has_value());
  if (end.end.result == AttemptResult::kLost) return AttemptResult::kLost;

  write_exception(token, end, error, retry_at);
  ProgressInserts lane_write;
  lane_write.add(token.handler, token.lane, stored, end.lane.progress, end.lane.retrying);
  lane_write.run();
  if (ending == Ending::kFail) counters::add(counters::kFailed, token.handler);
  if (end.charged > 0)
    counters::add(counters::kAttemptsCharged, token.handler,
                  static_cast<std::uint64_t>(end.charged));
  if (end.end.dead) counters::add(counters::kDeadLettered, token.handler);
  return end.end.result;
}

Datum fail_body(FunctionCallInfo fcinfo) {
  const core::PositionToken token = position_token_arg(fcinfo, 0);
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
  const core::PositionToken token = position_token_arg(fcinfo, 0);
  const auto error = optional_text_arg(fcinfo, 1);
  SpiConnection spi;
  const AttemptResult result = end_attempt(token, Ending::kBury, error, std::nullopt);
  spi.finish();
  return BoolGetDatum(result != AttemptResult::kLost);
}

Datum release_body(FunctionCallInfo fcinfo) {
  const core::PositionToken token = position_token_arg(fcinfo, 0);
  SpiConnection spi;
  const AttemptResult result = end_attempt(token, Ending::kRelease, std::nullopt, std::nullopt);
  spi.finish();
  return BoolGetDatum(result != AttemptResult::kLost);
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_fail_positions, relaybus::pg::fail_body)
RELAYBUS_SQL_FUNCTION(relaybus_bury_positions, relaybus::pg::bury_body)
RELAYBUS_SQL_FUNCTION(relaybus_release_positions, relaybus::pg::release_body)
