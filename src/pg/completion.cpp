// complete and complete_many: delete the delivery if its lane still has the token's epoch
// and still lists it in flight, and the delivery's claims counter still matches.
//
// FOR KEY SHARE on the lane row: inside the handler's transaction it conflicts with a
// takeover's FOR UPDATE (which skips the lane until this transaction ends, or makes this
// statement wait and then see the new epoch), but not with the owner's own claims and
// renewals, which are plain updates. Either the handler's writes and the deletion commit
// together, or the takeover redelivers; never both.
#include "counters.hpp"
#include "settings.hpp"
#include "spi.hpp"
#include "token_args.hpp"

#include <map>
#include <string_view>
#include <tuple>

namespace relaybus::pg {

namespace {

// No status test on the delivery: every way a delivery stops being pending (fail, bury,
// release, takeover, requeue) bumps its claims counter, which the token must match. Leaving
// it out also leaves the primary key as the only index the DELETE can use.
//
// The tokens travel grouped by lane: one (handler, lane, epoch) row per group, its tokens
// the slice [first, first + count - 1] of the event id and claims arrays. Each lane is
// locked once, in group order, and only if one of its tokens is in its in-flight list (a
// stale batch locks nothing a takeover would wait for), not once per token (a batch of 500 tokens
// spans some 50 lanes, and locking a row this transaction already holds still costs a lock call),
// and each token is checked against its own lane's locked version with no join of tokens to lanes:
// a join of two arrays the planner cannot size became a nested loop of tokens x lanes.
#define RELAYBUS_COMPLETE_HELD_SQL                                                    \
  "WITH lanes AS (SELECT u.handler, u.first, u.count, l.in_flight"                    \
  "  FROM unnest($1::text[], $2::int2[], $3::int8[], $4::int4[], $5::int4[])"         \
  "   WITH ORDINALITY AS u(handler, lane, epoch, first, count, n)"                    \
  "  JOIN relaybus.lanes l ON l.handler = u.handler AND l.lane = u.lane"              \
  "   AND l.epoch = u.epoch"                                                          \
  "   AND l.in_flight && ($6::text[])[u.first:u.first + u.count - 1]"                 \
  "  ORDER BY u.n FOR KEY SHARE OF l),"                                               \
  " held AS (SELECT g.handler, t.event_id, t.claims FROM lanes g CROSS JOIN LATERAL"  \
  "  unnest(($6::text[])[g.first:g.first + g.count - 1],"                             \
  "   ($7::int4[])[g.first:g.first + g.count - 1]) AS t(event_id, claims)"            \
  "  WHERE t.event_id = ANY (g.in_flight)),"                                          \
  " done AS (DELETE FROM relaybus.deliveries d USING held h"                          \
  "  WHERE d.event_id = h.event_id AND d.handler = h.handler AND d.claims = h.claims" \
  "  RETURNING d.event_id, d.handler, d.attempts)"

std::uint64_t complete_tokens(const std::vector<core::LeaseToken>& tokens) {
#define RELAYBUS_COMPLETE_HELD_TYPES                                                    \
  {                                                                                     \
    TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID, INT4ARRAYOID, INT4ARRAYOID, TEXTARRAYOID, \
        INT4ARRAYOID                                                                    \
  }
  static Statement without_history(RELAYBUS_COMPLETE_HELD_SQL " SELECT count(*) FROM done",
                                   RELAYBUS_COMPLETE_HELD_TYPES);
  static Statement with_history(
      RELAYBUS_COMPLETE_HELD_SQL
      ", history AS (INSERT INTO relaybus.completions (event_id, handler, attempts)"
      "  SELECT event_id, handler, attempts + 1 FROM done)"
      " SELECT count(*) FROM done",
      RELAYBUS_COMPLETE_HELD_TYPES);
  if (tokens.empty()) return 0;
  // Grouped in (handler, lane, epoch) order, which is also the order the lanes are locked
  // in by every completion.
  std::map<std::tuple<std::string_view, std::int16_t, std::int64_t>, std::vector<std::size_t>>
      groups;
  for (std::size_t i = 0; i < tokens.size(); ++i)
    groups[{tokens[i].handler, tokens[i].lane, tokens[i].epoch}].push_back(i);
  std::vector<std::string> handlers, event_ids;
  std::vector<std::int16_t> lanes;
  std::vector<std::int64_t> epochs;
  std::vector<std::int32_t> firsts, counts, claims;
  for (const auto& [lane, members] : groups) {
    handlers.emplace_back(std::get<0>(lane));
    lanes.push_back(std::get<1>(lane));
    epochs.push_back(std::get<2>(lane));
    firsts.push_back(static_cast<std::int32_t>(event_ids.size()) + 1);  // SQL arrays: from 1
    counts.push_back(static_cast<std::int32_t>(members.size()));
    for (std::size_t i : members) {
      event_ids.push_back(tokens[i].event_id);
      claims.push_back(tokens[i].claims);
    }
  }
  Params params;
  params.text_array(handlers);
  params.int2_array(lanes);
  params.int8_array(epochs);
  params.int4_array(firsts);
  params.int4_array(counts);
  params.text_array(event_ids);
  params.int4_array(claims);
  Statement& statement = settings::completion_history() ? with_history : without_history;
  statement.run(params);
  const auto completed = static_cast<std::uint64_t>(row::int8(0, 1));
  counters::add(counters::kCompleted, completed);
  return completed;
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
