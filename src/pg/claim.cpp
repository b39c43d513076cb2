// claim: lease lanes to a worker and return its batch. core::run_claim
// (src/core/claim_protocol.hpp) makes every decision; this file is the PostgreSQL store's
// reads and writes for it, each one set-based statement. Writes one lane row per lane whose
// state changes; never writes or locks a delivery row (except to charge the deliveries of a
// lane it takes over).
#include "counters.hpp"
#include "holder.hpp"
#include "in_flight.hpp"
#include "lane_lease_sql.hpp"
#include "lane_list.hpp"
#include "lane_order.hpp"
#include "spi.hpp"
#include "takeover.hpp"
#include "worker_arg.hpp"

#include "../core/claim_protocol.hpp"
#include "../core/claim_request.hpp"
#include "../core/error.hpp"

#include <algorithm>
#include <map>
#include <utility>

// SQL copy of core::has_pending_predecessor (claim_protocol.hpp) for delivery row `d`: no
// earlier pending delivery of its handler and key. Evaluated in the candidate query, where
// the key index answers it; test/contract feeds the same cases to the in-memory store
// (core) and to this.
#define RELAYBUS_NO_PENDING_PREDECESSOR_SQL                            \
  "(d.key IS NULL OR NOT EXISTS (SELECT 1 FROM relaybus.deliveries p"  \
  " WHERE p.handler = d.handler AND p.lane = d.lane AND p.key = d.key" \
  " AND p.status = 'pending' AND p.sequence < d.sequence))"

namespace relaybus::pg {

namespace {

core::LaneSnapshot read_lane(std::uint64_t r, int in_flight_column) {
  // Every lane statement returns handler, lane and epoch first.
  return {row::text(r, 1), row::int2(r, 2), row::int8(r, 3), row::text_array(r, in_flight_column)};
}

LaneList lane_list_of(const std::vector<core::LaneRef>& lanes) {
  LaneList list;
  for (const auto& l : lanes) list.add(l.handler, l.lane);
  return list;
}

// Where a candidate's event columns are: a row of one of the candidate query's results.
struct EventRow {
  SPITupleTable* table = nullptr;
  std::uint64_t row = 0;
};

// The claim's statements, for one worker incarnation: (worker, holder), or (worker, this
// backend) without a holder.
class PgClaimStore final : public core::ClaimStore {
 public:
  PgClaimStore(std::string worker, std::optional<std::string> holder, std::int64_t lease_us)
      : worker_(std::move(worker)), holder_(std::move(holder)), lease_us_(lease_us) {}

  std::vector<core::SubscribedHandler> subscribed_handlers(
      const std::optional<std::vector<std::string>>& requested) override;
  std::vector<core::HeldLane> held_lanes(const std::vector<std::string>& handlers) override;
  std::vector<core::LaneSnapshot> lock_for_takeover(
      const std::vector<core::LaneRef>& lanes) override;
  std::vector<core::LaneRef> lanes_with_work(const std::vector<std::string>& handlers) override;
  std::vector<core::AcquiredLane> lock_acquirable(const std::vector<core::LaneRef>& window,
                                                  int wanted) override;
  std::vector<core::CandidateRow> candidates(const std::vector<core::CandidateLane>& lanes,
                                             int limit) override;
  std::vector<bool> write_lanes(const std::vector<core::LaneUpdate>& updates) override;
  std::vector<core::LostDelivery> lock_lost(
      const std::vector<core::DeliveryRef>& deliveries) override {
    return charges_.lock_lost(deliveries);
  }
  void write_charges(const std::vector<core::Charge>& charges) override {
    charges_.write_charges(charges);
  }

  // The event columns (type, payload, headers, published_at) of a candidate this claim
  // read, as the candidate query returned them; null if it read no such candidate.
  const EventRow* event_row(const std::string& handler, const std::string& event_id) const {
    const auto it = event_rows_.find({handler, event_id});
    return it == event_rows_.end() ? nullptr : &it->second;
  }

 private:
  std::string worker_;
  std::optional<std::string> holder_;  // nullopt: lanes are bound to this backend
  std::int64_t lease_us_;
  PgChargeStore charges_;
  // Every candidate's event row, by (handler, event id). The candidate query reads the
  // events with the deliveries, so the claim needs no second pass over the events for
  // its result; the result sets stay valid until the SPI connection finishes.
  std::map<std::pair<std::string, std::string>, EventRow> event_rows_;
};

std::vector<core::SubscribedHandler> PgClaimStore::subscribed_handlers(
    const std::optional<std::vector<std::string>>& requested) {
  // Without a list: every handler that external workers run (not in-database handlers).
  // Read without a lock: a pause committed while this claim runs applies from the next one.
  static Statement select_handlers(
      "SELECT s.handler, s.paused_at IS NOT NULL FROM relaybus.subscriptions s"
      " WHERE CASE WHEN $1::text[] IS NULL THEN s.sql_function IS NULL"
      "  ELSE s.handler = ANY ($1) END ORDER BY s.handler COLLATE \"C\"",
      {TEXTARRAYOID});
  Params params;
  params.text_array(requested);
  const std::uint64_t n = select_handlers.run(params);
  std::vector<core::SubscribedHandler> handlers;
  for (std::uint64_t r = 0; r < n; ++r) handlers.push_back({row::text(r, 1), row::boolean(r, 2)});
  return handlers;
}

std::vector<core::HeldLane> PgClaimStore::held_lanes(const std::vector<std::string>& handlers) {
  // FOR NO KEY UPDATE: the owner's claims must not wait for its completions in progress
  // (those hold FOR KEY SHARE). In the one order every statement that waits for lanes
  // takes them (handler in byte order, then lane: lane_order.hpp), so this never
  // deadlocks with the worker's other connections renewing or relinquishing.
  // Lock first, read in a second statement: a lane this waits
  // for (another connection of the worker failing or claiming in it) is re-read after the
  // wait, but the rest of that statement would still see deliveries as of before the wait:
  // a delivery published and claimed meanwhile would look absent from the lane's
  // in-flight list and be claimed again. The second statement sees them; the lanes cannot
  // change under its feet any more.
  static Statement lock_held(
      "SELECT l.handler, l.lane FROM relaybus.lanes l"
      " WHERE l.lease_owner = $1 AND l.handler = ANY ($2)"
      " ORDER BY " RELAYBUS_LANE_LOCK_ORDER_SQL " FOR NO KEY UPDATE OF l",
      {TEXTOID, TEXTARRAYOID});
  // The in-flight list is pruned of deliveries that completed; the binding of each lane
  // (core::LaneBinding) is for core to judge.
  static Statement read_held(
      "SELECT l.handler, l.lane, l.epoch, l.holder IS NOT NULL, coalesce(l.holder = $5, false),"
      " " RELAYBUS_HOLDER_ALIVE_SQL("$3", "$4") ", l.lease_expires_at <= now(),"
      " f.ids, f.keys FROM unnest($1::text[], $2::int2[]) AS u(handler, lane)"
      " JOIN relaybus.lanes l ON l.handler = u.handler AND l.lane = u.lane"
      " CROSS JOIN LATERAL " RELAYBUS_LIVE_IN_FLIGHT_WITH_KEYS_SQL " f"
      " ORDER BY l.handler, l.lane",
      {TEXTARRAYOID, INT2ARRAYOID, INT4OID, TIMESTAMPTZOID, TEXTOID});
  LaneList held;
  // Whether a lane's backend is alive is read from backend activity, which PostgreSQL
  // reads once per transaction: a claim in a transaction that had already read it would
  // take a connection opened since then for dead, and its lanes over.
  fresh_backend_activity();
  {
    Params params;
    params.text(worker_);
    params.text_array(handlers);
    held = LaneList::from_rows(lock_held.run(params));
  }
  std::vector<core::HeldLane> out;
  if (held.empty()) return out;
  Params params;
  held.bind(params);
  params.int4(current_holder_pid());
  params.timestamptz(current_holder_started());
  params.text(holder_);
  const std::uint64_t n = read_held.run(params);
  out.reserve(n);
  for (std::uint64_t r = 0; r < n; ++r) {
    core::HeldLane lane;
    lane.lane = read_lane(r, /*in_flight=*/8);
    lane.binding.to_holder = row::boolean(r, 4);
    lane.binding.same_holder = row::boolean(r, 5);
    lane.binding.backend_alive = row::boolean(r, 6);
    lane.binding.lease_expired = row::boolean(r, 7);
    lane.in_flight_keys = row::text_array(r, 9);
    out.push_back(std::move(lane));
  }
  return out;
}

std::vector<core::LaneSnapshot> PgClaimStore::lock_for_takeover(
    const std::vector<core::LaneRef>& lanes) {
  // FOR UPDATE conflicts with the FOR KEY SHARE of a completion still in progress, so this
  // waits for it, then re-reads the in-flight list (the charges find which of it is still
  // pending). In the one lock order (lane_order.hpp), which a completion's groups follow
  // too, so the two never wait for each other crosswise.
  static Statement lock_orphans(
      "SELECT l.handler, l.lane, l.epoch, l.in_flight"
      " FROM relaybus.lanes l JOIN unnest($1::text[], $2::int2[]) AS o(handler, lane)"
      "  ON l.handler = o.handler AND l.lane = o.lane"
      " ORDER BY " RELAYBUS_LANE_LOCK_ORDER_SQL " FOR UPDATE OF l",
      {TEXTARRAYOID, INT2ARRAYOID});
  Params params;
  lane_list_of(lanes).bind(params);
  const std::uint64_t n = lock_orphans.run(params);
  std::vector<core::LaneSnapshot> out;
  out.reserve(n);
  for (std::uint64_t r = 0; r < n; ++r) out.push_back(read_lane(r, 4));
  counters::add(counters::kTakenOver, n);  // each one is taken over (keep_held_lanes)
  return out;
}

std::vector<core::LaneRef> PgClaimStore::lanes_with_work(const std::vector<std::string>& handlers) {
  // Free lanes, and lanes whose lease expired, that have due work, oldest work first. The
  // lanes with work are found by skipping through the pending-delivery index one lane at a
  // time (the first entry of a lane is its earliest delivery), so a shallow queue costs one
  // index probe per lane with work, not one per lane of the handler. Read once per claim,
  // without locks; lock_acquirable locks from this list.
  static Statement with_work(
      "WITH RECURSIVE work(handler, lane, available_at) AS ("
      "  SELECT h.handler, f.lane, f.available_at FROM unnest($1::text[]) AS h(handler)"
      "  CROSS JOIN LATERAL (SELECT d.lane, d.available_at FROM relaybus.deliveries d"
      "   WHERE d.handler = h.handler AND d.status = 'pending'"
      "   ORDER BY d.lane, d.available_at LIMIT 1) f"
      " UNION ALL"
      "  SELECT w.handler, n.lane, n.available_at FROM work w"
      "  CROSS JOIN LATERAL (SELECT d.lane, d.available_at FROM relaybus.deliveries d"
      "   WHERE d.handler = w.handler AND d.lane > w.lane AND d.status = 'pending'"
      "   ORDER BY d.lane, d.available_at LIMIT 1) n)"
      " SELECT l.handler, l.lane"
      " FROM work w JOIN relaybus.lanes l ON l.handler = w.handler AND l.lane = w.lane"
      " WHERE w.available_at <= now() AND " RELAYBUS_ACQUIRABLE_SQL(
          "$2") " ORDER BY w.available_at, l.handler, l.lane",
      {TEXTARRAYOID, TEXTOID});
  Params params;
  params.text_array(handlers);
  params.text(worker_);
  const std::uint64_t n = with_work.run(params);
  std::vector<core::LaneRef> out;
  out.reserve(n);
  for (std::uint64_t r = 0; r < n; ++r) out.push_back({row::text(r, 1), row::int2(r, 2)});
  return out;
}

std::vector<core::AcquiredLane> PgClaimStore::lock_acquirable(
    const std::vector<core::LaneRef>& window, int wanted) {
  // SKIP LOCKED: two claimers never take the same lane, and a lane whose completion is in
  // progress in another transaction (FOR KEY SHARE) is not taken over under it. A lane
  // that changed hands since the list was read fails the re-checked condition.
  static Statement lock(
      "SELECT l.handler, l.lane, l.epoch, l.lease_owner IS NOT NULL, l.in_flight, u.n"
      " FROM unnest($1::text[], $2::int2[]) WITH ORDINALITY AS u(handler, lane, n)"
      " JOIN relaybus.lanes l ON l.handler = u.handler AND l.lane = u.lane"
      " WHERE " RELAYBUS_ACQUIRABLE_SQL("$3") " ORDER BY u.n LIMIT $4 FOR UPDATE OF l SKIP LOCKED",
      {TEXTARRAYOID, INT2ARRAYOID, TEXTOID, INT4OID});
  Params params;
  lane_list_of(window).bind(params);
  params.text(worker_);
  params.int4(wanted);
  const std::uint64_t n = lock.run(params);
  std::vector<core::AcquiredLane> out;
  out.reserve(n);
  for (std::uint64_t r = 0; r < n; ++r)
    out.push_back({read_lane(r, 5), row::boolean(r, 4), static_cast<std::size_t>(row::int8(r, 6))});
  for (const auto& a : out) counters::add(counters::kTakenOver, a.had_owner ? 1 : 0);
  return out;
}

std::vector<core::CandidateRow> PgClaimStore::candidates(
    const std::vector<core::CandidateLane>& lanes, int limit) {
  // Per lane, in due order: pending, due, not excluded, and no pending predecessor (every
  // candidate returned has none). The inner LIMIT (the batch's places, or the lane's room
  // if less) keeps each lane's scan short; the outer one merges the lanes in due order.
  static Statement candidates(
      "SELECT c.lane_index, c.event_id, c.key, c.attempts, c.claims,"
      " e.type, e.payload, e.headers, e.published_at"
      " FROM (SELECT hl.lane_index, d.handler, d.lane, d.event_id, d.key, d.sequence,"
      "   d.attempts, d.claims, d.available_at"
      "  FROM unnest($1::text[], $2::int2[], $6::int4[])"
      "   WITH ORDINALITY AS hl(handler, lane, room, lane_index)"
      "  CROSS JOIN LATERAL (SELECT d.* FROM relaybus.deliveries d"
      "   WHERE d.handler = hl.handler AND d.lane = hl.lane AND d.status = 'pending'"
      "   AND d.available_at <= now()"
      // Uncorrelated, so a hashed subplan: built once per statement, one probe per row.
      // (A correlated NOT EXISTS was a nested loop over every excluded id for every row
      // read: quadratic in the deliveries a worker has in flight.) No NULL is ever in it.
      "   AND (d.handler, d.event_id) NOT IN (SELECT f.handler, f.event_id"
      "    FROM unnest($3::text[], $4::text[]) AS f(handler, event_id))"
      "   AND " RELAYBUS_NO_PENDING_PREDECESSOR_SQL
      "   ORDER BY d.available_at, d.event_id LIMIT least($5, hl.room)) d"
      "  ORDER BY d.available_at, d.event_id LIMIT $5) c"
      // LEFT: a delivery without its event is refused by emit(), not silently left pending.
      " LEFT JOIN relaybus.events e ON e.id = c.event_id"
      " ORDER BY c.available_at, c.event_id",
      {TEXTARRAYOID, INT2ARRAYOID, TEXTARRAYOID, TEXTARRAYOID, INT4OID, INT4ARRAYOID});
  std::vector<std::string> handlers, excluded_handlers, excluded_ids;
  std::vector<std::int16_t> lane_numbers;
  std::vector<std::int32_t> rooms;
  for (const auto& c : lanes) {
    handlers.push_back(c.lane->handler);
    lane_numbers.push_back(c.lane->lane);
    rooms.push_back(c.room);
    for (const auto& id : c.excluded) {
      excluded_handlers.push_back(c.lane->handler);
      excluded_ids.push_back(id);
    }
  }
  Params params;
  params.text_array(handlers);
  params.int2_array(lane_numbers);
  params.text_array(excluded_handlers);
  params.text_array(excluded_ids);
  params.int4(limit);
  params.int4_array(rooms);
  const std::uint64_t n = candidates.run(params);
  std::vector<core::CandidateRow> out;
  out.reserve(n);
  for (std::uint64_t r = 0; r < n; ++r) {
    core::CandidateRow c;
    c.lane_index = static_cast<std::size_t>(row::int8(r, 1)) - 1;
    c.event_id = row::text(r, 2);
    event_rows_[{handlers[c.lane_index], c.event_id}] = {SPI_tuptable, r};
    c.key = row::text_or_null(r, 3);
    c.attempts = row::int4(r, 4);
    c.claims = row::int4(r, 5);
    c.has_pending_predecessor = false;  // excluded by the query (see above)
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<bool> PgClaimStore::write_lanes(const std::vector<core::LaneUpdate>& updates) {
  // One statement for every lane that changes. The new in-flight lists travel flattened in
  // one array, each lane's list the slice [first, first + count - 1] of it (an empty slice
  // when count is 0): cutting slices costs the list's length, where matching every id to
  // its lane cost lanes x ids (half of this statement's time at 50 lanes and 500 ids).
  static Statement write(
      "UPDATE relaybus.lanes l SET epoch = u.epoch,"
      " lease_owner = CASE WHEN u.hold THEN $1 END,"
      " lease_expires_at = CASE WHEN u.hold THEN now() + $2 END,"
      " holder_pid = CASE WHEN u.new_holder THEN $3 WHEN u.hold THEN l.holder_pid END,"
      " holder_started = CASE WHEN u.new_holder THEN $4 WHEN u.hold THEN l.holder_started END,"
      " holder = CASE WHEN u.new_holder THEN $12 WHEN u.hold THEN l.holder END,"
      " in_flight = CASE WHEN u.count = 0 THEN '{}'::text[]"
      "  ELSE ($10::text[])[u.first:u.first + u.count - 1] END"
      " FROM unnest($5::text[], $6::int2[], $7::int8[], $8::bool[], $11::bool[], $9::int4[],"
      "  $13::int4[]) AS u(handler, lane, epoch, hold, new_holder, first, count)"
      " WHERE l.handler = u.handler AND l.lane = u.lane",
      {TEXTOID, INTERVALOID, INT4OID, TIMESTAMPTZOID, TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID,
       BOOLARRAYOID, INT4ARRAYOID, TEXTARRAYOID, BOOLARRAYOID, TEXTOID, INT4ARRAYOID});
  std::vector<std::string> handlers, flight_ids;
  std::vector<std::int16_t> lane_numbers;
  std::vector<std::int64_t> epochs;
  std::vector<bool> holds, new_holders;
  std::vector<std::int32_t> firsts, counts;
  for (const auto& u : updates) {
    handlers.push_back(u.handler);
    lane_numbers.push_back(u.lane);
    epochs.push_back(u.write.epoch);
    holds.push_back(u.write.hold);
    new_holders.push_back(u.write.new_holder);
    firsts.push_back(static_cast<std::int32_t>(flight_ids.size()) + 1);  // SQL arrays: from 1
    counts.push_back(static_cast<std::int32_t>(u.in_flight.size()));
    flight_ids.insert(flight_ids.end(), u.in_flight.begin(), u.in_flight.end());
  }
  Params params;
  params.text(worker_);
  params.interval_us(lease_us_);
  // Bound to the holder, or else to this backend.
  if (holder_) {
    params.datum(0, true);
    params.timestamptz(std::nullopt);
  } else {
    params.int4(current_holder_pid());
    params.timestamptz(current_holder_started());
  }
  params.text_array(handlers);
  params.int2_array(lane_numbers);
  params.int8_array(epochs);
  params.bool_array(holds);
  params.int4_array(firsts);
  params.text_array(flight_ids);
  params.bool_array(new_holders);
  params.text(holder_);
  params.int4_array(counts);
  write.run(params);
  return std::vector<bool>(updates.size(), true);  // the lanes are locked: every write holds
}

// The claimed deliveries with their events, as claim's result rows.
void emit(const std::vector<core::ClaimedDelivery>& claimed, const PgClaimStore& store,
          ReturnSetInfo* rsinfo) {
  for (const core::ClaimedDelivery& c : claimed) {
    const EventRow* event = store.event_row(c.token.handler, c.token.event_id);
    if (event == nullptr)
      throw core::Error(core::ErrorCode::kInternal,
                        "relaybus: a claimed delivery is not among the candidates read");
    const std::string token_text = core::encode(c.token);
    Datum values[9];
    bool nulls[9] = {false, false, false, false, !c.key.has_value(), false, false, false, false};
    bool no_event = false;
    pg_call([&] {
      HeapTuple tuple = event->table->vals[event->row];
      TupleDesc desc = event->table->tupdesc;
      SPI_getbinval(tuple, desc, 6, &no_event);  // events.type is NOT NULL
    });
    if (no_event)
      throw core::Error(core::ErrorCode::kInternal, "relaybus: a claimed delivery has no event");
    pg_call([&] {
      HeapTuple tuple = event->table->vals[event->row];
      TupleDesc desc = event->table->tupdesc;
      values[0] = PointerGetDatum(cstring_to_text_with_len(token_text.data(), token_text.size()));
      values[1] = PointerGetDatum(
          cstring_to_text_with_len(c.token.event_id.data(), c.token.event_id.size()));
      values[2] =
          PointerGetDatum(cstring_to_text_with_len(c.token.handler.data(), c.token.handler.size()));
      values[3] = SPI_getbinval(tuple, desc, 6, &nulls[3]);
      values[4] =
          c.key ? PointerGetDatum(cstring_to_text_with_len(c.key->data(), c.key->size())) : 0;
      values[5] = SPI_getbinval(tuple, desc, 7, &nulls[5]);
      values[6] = SPI_getbinval(tuple, desc, 8, &nulls[6]);
      values[7] = Int32GetDatum(c.attempts);
      values[8] = SPI_getbinval(tuple, desc, 9, &nulls[8]);
      tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    });
  }
}

Datum claim_body(FunctionCallInfo fcinfo) {
  if (PG_ARGISNULL(1))
    throw core::Error(core::ErrorCode::kNullValue, "batch_size must not be NULL");
  if (PG_ARGISNULL(2)) throw core::Error(core::ErrorCode::kNullValue, "lease must not be NULL");
  std::string worker = worker_arg(fcinfo, 0);
  const int batch_size = PG_GETARG_INT32(1);
  core::validate_batch_size(batch_size);
  const std::int64_t lease_us = interval_us_of(PG_GETARG_DATUM(2), "lease");
  core::validate_lease(lease_us);
  std::optional<std::vector<std::string>> requested;
  if (!PG_ARGISNULL(3)) requested = text_array_of(PG_GETARG_DATUM(3), "handlers");
  if (requested) std::sort(requested->begin(), requested->end());

  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  pg_call([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  SpiConnection spi;
  std::optional<std::string> holder = holder_arg(fcinfo, 4);
  const bool has_holder = holder.has_value();
  PgClaimStore store(std::move(worker), std::move(holder), lease_us);
  const std::vector<core::ClaimedDelivery> claimed =
      core::run_claim(store, requested, batch_size, has_holder);
  counters::add(counters::kClaimed, claimed.size());
  emit(claimed, store, rsinfo);
  spi.finish();
  return (Datum)0;
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_claim, relaybus::pg::claim_body)
