// complete and complete_many: delete the delivery if its lane still has the token's epoch
// and still lists it in flight, and the delivery's claims counter still matches.
//
// FOR KEY SHARE on the lane row: inside the handler's transaction it conflicts with a
// takeover's FOR UPDATE (which skips the lane until this transaction ends, or makes this
// statement wait and then see the new epoch), but not with the owner's own claims and
// renewals, which are plain updates. Either the handler's writes and the deletion commit
// together, or the takeover redelivers; never both.
#include "settings.hpp"
#include "spi.hpp"
#include "token_args.hpp"

namespace relaybus::pg {

namespace {

// No status test on the delivery: every way a delivery stops being pending (fail, bury,
// release, takeover, requeue) bumps its claims counter, which the token must match. Leaving
// it out also leaves the primary key as the only index the DELETE can use.
#define RELAYBUS_COMPLETE_HELD_SQL                                                    \
  "WITH t AS (SELECT * FROM unnest($1::text[], $2::int2[], $3::int8[], $4::text[],"   \
  "  $5::int4[]) AS t(handler, lane, epoch, event_id, claims)),"                      \
  " held AS (SELECT t.handler, t.event_id, t.claims FROM t JOIN relaybus.lanes l"     \
  "  ON l.handler = t.handler AND l.lane = t.lane AND l.epoch = t.epoch"              \
  "  AND t.event_id = ANY (l.in_flight) FOR KEY SHARE OF l),"                         \
  " done AS (DELETE FROM relaybus.deliveries d USING held h"                          \
  "  WHERE d.event_id = h.event_id AND d.handler = h.handler AND d.claims = h.claims" \
  "  RETURNING d.event_id, d.handler, d.attempts)"

std::uint64_t complete_tokens(const std::vector<core::LeaseToken>& tokens) {
  static Statement without_history(
      RELAYBUS_COMPLETE_HELD_SQL " SELECT count(*) FROM done",
      {TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID, TEXTARRAYOID, INT4ARRAYOID});
  static Statement with_history(
      RELAYBUS_COMPLETE_HELD_SQL
      ", history AS (INSERT INTO relaybus.completions (event_id, handler, attempts)"
      "  SELECT event_id, handler, attempts + 1 FROM done)"
      " SELECT count(*) FROM done",
      {TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID, TEXTARRAYOID, INT4ARRAYOID});
  if (tokens.empty()) return 0;
  std::vector<std::string> handlers, event_ids;
  std::vector<std::int16_t> lanes;
  std::vector<std::int64_t> epochs;
  std::vector<std::int32_t> claims;
  for (const auto& t : tokens) {
    handlers.push_back(t.handler);
    lanes.push_back(t.lane);
    epochs.push_back(t.epoch);
    event_ids.push_back(t.event_id);
    claims.push_back(t.claims);
  }
  Params params;
  params.text_array(handlers);
  params.int2_array(lanes);
  params.int8_array(epochs);
  params.text_array(event_ids);
  params.int4_array(claims);
  Statement& statement = settings::completion_history() ? with_history : without_history;
  statement.run(params);
  return static_cast<std::uint64_t>(row::int8(0, 1));
}

Datum complete_body(FunctionCallInfo fcinfo) {
  std::vector<core::LeaseToken> tokens{token_arg(fcinfo, 0)};
  SpiConnection spi;
  const bool completed = complete_tokens(tokens) == 1;
  spi.finish();
  return BoolGetDatum(completed);
}

Datum complete_many_body(FunctionCallInfo fcinfo) {
  if (PG_ARGISNULL(0))
    throw core::Error(core::ErrorCode::kNullValue, "lease_tokens must not be NULL");
  std::vector<core::LeaseToken> tokens;
  // Every token is parsed before anything is written: one malformed token fails the call.
  for (const auto& text : text_array_of(PG_GETARG_DATUM(0), "lease_tokens"))
    tokens.push_back(core::parse_lease_token(text));
  SpiConnection spi;
  const std::uint64_t completed = complete_tokens(tokens);
  spi.finish();
  return Int32GetDatum(static_cast<std::int32_t>(completed));
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_complete, relaybus::pg::complete_body)
RELAYBUS_SQL_FUNCTION(relaybus_complete_many, relaybus::pg::complete_many_body)
