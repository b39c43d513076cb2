// complete and complete_many of 0.3.0 (design.md, "0.3.0: the store"): a completion inserts
// its lane's next progress row (lane_progress.hpp), and writes neither the delivery nor the
// lane's lease row. core::complete_lane
// (src/core/positions_completion.hpp) decides; this locks, reads and writes, in a fixed
// number of statements whatever the number of tokens or lanes:
//   1. lock the tokens' lanes that still have the tokens' epoch and list one of their
//      positions (a stale batch locks nothing, so it never waits for or holds up the lane's
//      new owner), then read their progress (after the locks);
//   2. only with retries among them: read their exception rows;
//   3. only with retries completed: delete their exception rows;
//   4. a progress row for each lane where something took effect (none: no write);
//   5. only with relaybus.completion_history on: one history row per completion.
//
// FOR NO KEY UPDATE on the lane: a completion inside the handler's transaction keeps it until
// commit, so a takeover (which locks the lane to move its epoch) either waits and then finds
// the positions finished, or comes first and this completion finds another epoch and completes
// nothing. Either the handler's writes and the completion commit together, or the delivery
// runs again; never both. The lane's own claims wait too (issue 33 accepts it: complete last,
// then commit).
#include "../core/positions_completion.hpp"

#include "counters.hpp"
#include "lane_progress.hpp"
#include "position_token_args.hpp"
#include "progress_hints.hpp"
#include "settings.hpp"
#include "spi.hpp"
#include "unix_time.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <tuple>

namespace relaybus::pg {

namespace {

// (handler, lane, epoch): std::string compares bytes, so the map's order is the one lane
// order of every lane lock that may wait (RELAYBUS_LANE_LOCK_ORDER_SQL in lane_order.hpp:
// handler COLLATE "C", then lane).
using GroupKey = std::tuple<std::string, std::int16_t, std::int64_t>;
using Groups = std::map<GroupKey, std::vector<core::PositionToken>>;

struct LockedLane {
  const GroupKey* key = nullptr;
  const std::vector<core::PositionToken>* tokens = nullptr;
  core::PositionLane lane;
  StoredProgress stored;  // as read, for the row that follows it
  core::ExceptionRows exceptions;
};

// Step 1. Each group's positions are the slice [first, first + count - 1] of one array; the
// lane is locked only if it lists one of them, in either list.
std::vector<LockedLane> lock_lanes(const Groups& groups) {
  // The filter reads the lane's newest progress row as of this statement (from the lane's
  // hint, $7: progress_hints.hpp); the lanes' progress is read again once they are locked
  // (read_progress), which is what the completion uses.
  static Statement lock(
      "SELECT u.n, l.epoch"
      " FROM unnest($1::text[], $2::int2[], $3::int8[], $4::int4[], $5::int4[], $7::int8[])"
      "  WITH ORDINALITY AS u(handler, lane, epoch, first, count, hint, n)"
      " JOIN relaybus.lanes l ON l.handler = u.handler AND l.lane = u.lane AND l.epoch = u.epoch"
      " CROSS JOIN LATERAL ("
      "  (SELECT p.in_flight, p.retrying FROM relaybus.lane_progress p"
      "   WHERE p.handler = l.handler AND p.lane = l.lane AND p.seq >= u.hint"
      "   ORDER BY p.seq DESC LIMIT 1)"
      "  UNION ALL"
      "  (SELECT p.in_flight, p.retrying FROM relaybus.lane_progress p"
      "   WHERE p.handler = l.handler AND p.lane = l.lane ORDER BY p.seq DESC LIMIT 1)"
      "  LIMIT 1) p"
      " WHERE p.in_flight && ($6::int8[])[u.first:u.first + u.count - 1]"
      "    OR p.retrying && ($6::int8[])[u.first:u.first + u.count - 1]"
      " ORDER BY u.n FOR NO KEY UPDATE OF l",
      {TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID, INT4ARRAYOID, INT4ARRAYOID, INT8ARRAYOID,
       INT8ARRAYOID});
  std::vector<const Groups::value_type*> order;
  std::vector<std::string> handlers;
  std::vector<std::int16_t> lanes;
  std::vector<std::int64_t> epochs, positions;
  std::vector<std::int32_t> firsts, counts;
  for (const auto& group : groups) {
    order.push_back(&group);
    handlers.push_back(std::get<0>(group.first));
    lanes.push_back(std::get<1>(group.first));
    epochs.push_back(std::get<2>(group.first));
    firsts.push_back(static_cast<std::int32_t>(positions.size()) + 1);  // SQL arrays: from 1
    counts.push_back(static_cast<std::int32_t>(group.second.size()));
    for (const core::PositionToken& token : group.second) positions.push_back(token.position);
  }
  Params params;
  params.text_array(handlers);
  params.int2_array(lanes);
  params.int8_array(epochs);
  params.int4_array(firsts);
  params.int4_array(counts);
  params.int8_array(positions);
  params.int8_array(progress_hints::get_all(handlers, lanes));
  const std::uint64_t n = lock.run(params);
  std::vector<LockedLane> locked(n);
  LaneList list;
  for (std::uint64_t r = 0; r < n; ++r) {
    const auto* group = order.at(static_cast<std::size_t>(row::int8(r, 1) - 1));
    locked[r].key = &group->first;
    locked[r].tokens = &group->second;
    locked[r].lane.epoch = row::int8(r, 2);
    list.add(std::get<0>(group->first), std::get<1>(group->first));
  }
  const std::vector<StoredProgress> stored = read_progress(list);
  for (std::size_t i = 0; i < locked.size(); ++i) {
    locked[i].stored = stored[i];
    locked[i].lane.progress = stored[i].progress;
    locked[i].lane.retrying = stored[i].retrying;
  }
  return locked;
}

// Step 2: the exception rows of the retries among the tokens, read under the lanes' locks
// (every writer of a lane's exception rows locks the lane first).
void read_retries(std::vector<LockedLane>& locked) {
  static Statement read(
      "SELECT u.n, e.position, e.status = 'pending', e.claims, e.attempts"
      " FROM unnest($1::int4[], $2::text[], $3::int2[], $4::int8[]) AS u(n, handler, lane, "
      "position)"
      " JOIN relaybus.exceptions e"
      "  ON e.handler = u.handler AND e.lane = u.lane AND e.position = u.position",
      {INT4ARRAYOID, TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID});
  std::vector<std::int32_t> indexes;
  std::vector<std::string> handlers;
  std::vector<std::int16_t> lanes;
  std::vector<std::int64_t> positions;
  for (std::size_t i = 0; i < locked.size(); ++i) {
    for (core::Position p : core::retries_to_read(locked[i].lane, *locked[i].tokens)) {
      indexes.push_back(static_cast<std::int32_t>(i));
      handlers.push_back(std::get<0>(*locked[i].key));
      lanes.push_back(std::get<1>(*locked[i].key));
      positions.push_back(p);
    }
  }
  if (positions.empty()) return;
  Params params;
  params.int4_array(indexes);
  params.text_array(handlers);
  params.int2_array(lanes);
  params.int8_array(positions);
  const std::uint64_t n = read.run(params);
  for (std::uint64_t r = 0; r < n; ++r) {
    LockedLane& lane = locked.at(static_cast<std::size_t>(row::int4(r, 1)));
    lane.exceptions[row::int8(r, 2)] =
        core::ExceptionView{row::boolean(r, 3), row::int4(r, 4), row::int4(r, 5)};
  }
}

// Counts the completions of one lane for its handler, each with its latency from the
// publish time its token carries (tokens without one count without a latency).
void count_completions(const std::string& handler, const std::vector<core::PositionToken>& tokens,
                       const core::LaneCompletion& c, std::int64_t now_unix_us) {
  counters::add(counters::kCompleted, handler, c.count());
  // Each position's publish time, from its first token: sorted once, then looked up (a batch
  // may repeat a token, and a lane holds at most a few dozen).
  std::vector<std::pair<core::Position, std::int64_t>> published;
  published.reserve(tokens.size());
  for (const core::PositionToken& t : tokens) published.emplace_back(t.position, t.published_us);
  std::stable_sort(published.begin(), published.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  auto observe = [&](core::Position p) {
    const auto it = std::lower_bound(published.begin(), published.end(), p,
                                     [](const auto& e, core::Position q) { return e.first < q; });
    if (it != published.end() && it->first == p && it->second > 0)
      counters::add_completion(handler, now_unix_us - it->second);
  };
  for (core::Position p : c.completed) observe(p);
  for (core::Position p : c.retries) observe(p);
}

// The attempt that completed, for the history: a window pick was never charged.
std::int32_t completing_attempt(std::int32_t charged) {
  return charged < std::numeric_limits<std::int32_t>::max() ? charged + 1 : charged;
}

std::uint64_t complete_position_tokens(std::vector<core::PositionToken> tokens) {
  static Statement delete_retries(
      "DELETE FROM relaybus.exceptions e"
      " USING unnest($1::text[], $2::int2[], $3::int8[]) AS u(handler, lane, position)"
      " WHERE e.handler = u.handler AND e.lane = u.lane AND e.position = u.position",
      {TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID});
  // Deliveries are never deleted by a completion: a retry's delivery row is there too.
  static Statement history(
      "INSERT INTO relaybus.completions (event_id, handler, attempts)"
      " SELECT d.event_id, d.handler, u.attempts"
      " FROM unnest($1::text[], $2::int2[], $3::int8[], $4::int4[])"
      "  AS u(handler, lane, position, attempts)"
      " JOIN relaybus.deliveries d"
      "  ON d.handler = u.handler AND d.lane = u.lane AND d.position = u.position",
      {TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID, INT4ARRAYOID});
  if (tokens.empty()) return 0;
  Groups groups;
  for (core::PositionToken& token : tokens) {
    GroupKey key{token.handler, token.lane, token.epoch};
    groups[std::move(key)].push_back(std::move(token));
  }
  std::vector<LockedLane> locked = lock_lanes(groups);
  if (locked.empty()) return 0;
  read_retries(locked);

  ProgressInserts writes;
  std::vector<std::string> handlers, done_handlers;
  std::vector<std::int16_t> lanes, done_lanes;
  std::vector<std::int64_t> retries, done_positions;
  std::vector<std::int32_t> done_attempts;
  std::uint64_t completed = 0;
  const std::int64_t now_unix_us = unix_us_of(GetCurrentTimestamp());
  for (const LockedLane& l : locked) {
    const core::LaneCompletion c = core::complete_lane(l.lane, *l.tokens, l.exceptions);
    if (!c.write) continue;
    const std::string& handler = std::get<0>(*l.key);
    const std::int16_t lane = std::get<1>(*l.key);
    writes.add(handler, lane, l.stored, c.lane.progress, c.lane.retrying);
    completed += c.count();
    count_completions(handler, *l.tokens, c, now_unix_us);
    for (core::Position p : c.retries) {
      handlers.push_back(handler);
      lanes.push_back(lane);
      retries.push_back(p);
    }
    for (core::Position p : c.completed) {
      done_handlers.push_back(handler);
      done_lanes.push_back(lane);
      done_positions.push_back(p);
      done_attempts.push_back(completing_attempt(0));
    }
    for (core::Position p : c.retries) {
      done_handlers.push_back(handler);
      done_lanes.push_back(lane);
      done_positions.push_back(p);
      done_attempts.push_back(completing_attempt(l.exceptions.at(p).attempts));
    }
  }
  if (!retries.empty()) {
    Params params;
    params.text_array(handlers);
    params.int2_array(lanes);
    params.int8_array(retries);
    delete_retries.run(params);
  }
  writes.run();
  if (completed > 0 && settings::completion_history()) {
    Params params;
    params.text_array(done_handlers);
    params.int2_array(done_lanes);
    params.int8_array(done_positions);
    params.int4_array(done_attempts);
    history.run(params);
  }
  return completed;
}

Datum complete_body(FunctionCallInfo fcinfo) {
  std::vector<core::PositionToken> tokens{position_token_arg(fcinfo, 0)};
  SpiConnection spi;
  const bool completed = complete_position_tokens(std::move(tokens)) == 1;
  spi.finish();
  return BoolGetDatum(completed);
}

Datum complete_many_body(FunctionCallInfo fcinfo) {
  if (PG_ARGISNULL(0))
    throw core::Error(core::ErrorCode::kNullValue, "lease_tokens must not be NULL");
  std::vector<core::PositionToken> tokens;
  // Every token is parsed before anything is locked or written: one malformed token fails
  // the call.
  for (const auto& text : text_array_of(PG_GETARG_DATUM(0), "lease_tokens"))
    tokens.push_back(core::parse_position_token(text));
  SpiConnection spi;
  const std::uint64_t completed = complete_position_tokens(std::move(tokens));
  spi.finish();
  return Int32GetDatum(static_cast<std::int32_t>(completed));
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_complete_positions, relaybus::pg::complete_body)
RELAYBUS_SQL_FUNCTION(relaybus_complete_many_positions, relaybus::pg::complete_many_body)
