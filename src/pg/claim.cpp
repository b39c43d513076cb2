// claim: lease lanes to a worker and return its batch. Writes one lane row per lane whose
// state changes; never writes or locks a delivery row (except to charge the deliveries of a
// lane it takes over).
#include "holder.hpp"
#include "in_flight.hpp"
#include "lane_list.hpp"
#include "spi.hpp"
#include "worker_arg.hpp"
#include "takeover.hpp"

#include "../core/batch_planner.hpp"
#include "../core/claim_request.hpp"
#include "../core/error.hpp"
#include "../core/lane_lease.hpp"
#include "../core/lease_token.hpp"

#include <algorithm>

// SQL: lane row `l` may be acquired by worker $<worker>: nobody holds it, or another
// worker's lease expired (a worker's own lanes, expired or not, come from its held lanes).
#define RELAYBUS_ACQUIRABLE_SQL(worker)                    \
  "(l.lease_owner IS NULL OR (l.lease_expires_at <= now()" \
  " AND l.lease_owner <> " worker "))"

namespace relaybus::pg {

namespace {

struct LaneInClaim {
  std::string handler;
  std::int16_t lane = 0;
  std::int64_t epoch = 0;
  core::LaneOrigin origin = core::LaneOrigin::kFree;
  std::vector<std::string> in_flight;  // live in-flight event ids (after any takeover)
  std::vector<std::string> picks;      // event ids claimed into this lane now
  core::LaneWrite write;
};

struct Claimed {
  std::size_t lane_index;
  std::string event_id;
  std::optional<std::string> key;
  std::int32_t attempts;
  std::int32_t claims;
};

// One claim. run() is the whole of it, its steps in the one order that is right: the
// handlers, the lanes the worker holds (and takeovers of its other incarnations' lanes),
// free lanes while the batch has room, one write of every changed lane, the rows.
class Claim {
 public:
  Claim(std::string worker, std::optional<std::string> holder, int batch_size,
        std::int64_t lease_us)
      : worker_(std::move(worker)),
        holder_(std::move(holder)),
        lease_us_(lease_us),
        planner_(batch_size) {}

  void run(const std::optional<std::vector<std::string>>& requested, ReturnSetInfo* rsinfo) {
    resolve_handlers(requested);
    take_held_lanes();
    acquire_free_lanes();
    write_lanes();
    emit(rsinfo);
  }

 private:
  void resolve_handlers(const std::optional<std::vector<std::string>>& requested);
  void take_held_lanes();
  void acquire_free_lanes();
  void write_lanes();
  void emit(ReturnSetInfo* rsinfo);
  void charge(const std::vector<std::size_t>& lane_indexes);
  void fetch_candidates(std::size_t first_lane);

  std::string worker_;
  std::optional<std::string> holder_;  // nullopt: lanes are bound to this backend
  std::int64_t lease_us_;
  core::BatchPlanner planner_;
  std::vector<std::string> handlers_;
  std::vector<LaneInClaim> lanes_;
  std::vector<Claimed> claimed_;
};

// Every lane statement returns handler, lane and epoch first, then what it needs.
LaneInClaim read_lane(std::uint64_t r, core::LaneOrigin origin, int in_flight_column) {
  LaneInClaim lane;
  lane.handler = row::text(r, 1);
  lane.lane = row::int2(r, 2);
  lane.epoch = row::int8(r, 3);
  lane.origin = origin;
  lane.in_flight = row::text_array(r, in_flight_column);
  return lane;
}

void Claim::resolve_handlers(const std::optional<std::vector<std::string>>& requested) {
  // Without a list: every handler that external workers run (not in-database handlers).
  static Statement select_handlers(
      "SELECT s.handler FROM relaybus.subscriptions s"
      " WHERE CASE WHEN $1::text[] IS NULL THEN s.sql_function IS NULL"
      "  ELSE s.handler = ANY ($1) END ORDER BY s.handler COLLATE \"C\"",
      {TEXTARRAYOID});
  Params params;
  params.text_array(requested);
  const std::uint64_t n = select_handlers.run(params);
  for (std::uint64_t r = 0; r < n; ++r) handlers_.push_back(row::text(r, 1));
  if (requested) {
    for (const auto& h : *requested) {
      core::validate_name("handler name", h);
      if (!std::binary_search(handlers_.begin(), handlers_.end(), h))
        throw core::Error(core::ErrorCode::kUndefinedObject,
                          "handler \"" + h + "\" is not subscribed",
                          "Subscribe it first with relaybus.subscribe('" + h + "', ...).");
    }
  }
}

void Claim::take_held_lanes() {
  // FOR NO KEY UPDATE: the owner's claims must not wait for its completions in progress
  // (those hold FOR KEY SHARE). Lock first, read in a second statement: a lane this waits
  // for (another connection of the worker failing or claiming in it) is re-read after the
  // wait, but the rest of that statement would still see deliveries as of before the wait:
  // a delivery published and claimed meanwhile would look absent from the lane's
  // in-flight list and be claimed again. The second statement sees them; the lanes cannot
  // change under its feet any more.
  static Statement lock_held(
      "SELECT l.handler, l.lane FROM relaybus.lanes l"
      " WHERE l.lease_owner = $1 AND l.handler = ANY ($2)"
      " ORDER BY l.handler, l.lane FOR NO KEY UPDATE OF l",
      {TEXTOID, TEXTARRAYOID});
  // The in-flight list is pruned of deliveries that completed. The binding of each lane
  // (core::LaneBinding) decides whose it is.
  static Statement read_held(
      "SELECT l.handler, l.lane, l.epoch, l.holder IS NOT NULL, coalesce(l.holder = $5, false),"
      " " RELAYBUS_HOLDER_ALIVE_SQL("$3", "$4") ", l.lease_expires_at <= now(),"
      " f.ids, f.keys FROM unnest($1::text[], $2::int2[]) AS u(handler, lane)"
      " JOIN relaybus.lanes l ON l.handler = u.handler AND l.lane = u.lane"
      " CROSS JOIN LATERAL " RELAYBUS_LIVE_IN_FLIGHT_WITH_KEYS_SQL " f"
      " ORDER BY l.handler, l.lane",
      {TEXTARRAYOID, INT2ARRAYOID, INT4OID, TIMESTAMPTZOID, TEXTOID});
  // An orphan (its incarnation is gone), or another incarnation's lane whose lease expired,
  // is taken over. FOR UPDATE conflicts with the FOR KEY SHARE of a completion still in
  // progress, so this waits for it, then re-reads the in-flight list (charge() finds which
  // of it is still pending).
  static Statement lock_orphans(
      "SELECT l.handler, l.lane, l.epoch, l.in_flight"
      " FROM relaybus.lanes l JOIN unnest($1::text[], $2::int2[]) AS o(handler, lane)"
      "  ON l.handler = o.handler AND l.lane = o.lane"
      " ORDER BY l.handler, l.lane FOR UPDATE OF l",
      {TEXTARRAYOID, INT2ARRAYOID});
  if (handlers_.empty()) return;
  LaneList held;
  {
    Params params;
    params.text(worker_);
    params.text_array(handlers_);
    held = LaneList::from_rows(lock_held.run(params));
  }
  if (held.empty()) return;
  Params params;
  held.bind(params);
  params.int4(current_holder_pid());
  params.timestamptz(current_holder_started());
  params.text(holder_);
  const std::uint64_t n = read_held.run(params);
  LaneList orphans;
  for (std::uint64_t r = 0; r < n; ++r) {
    core::LaneBinding binding;
    binding.to_holder = row::boolean(r, 4);
    binding.same_holder = row::boolean(r, 5);
    binding.backend_alive = row::boolean(r, 6);
    binding.lease_expired = row::boolean(r, 7);
    LaneInClaim lane =
        read_lane(r, core::classify_held_lane(binding, holder_.has_value()), /*in_flight=*/8);
    switch (lane.origin) {
      case core::LaneOrigin::kHeld:
        for (const auto& key : row::text_array(r, 9)) planner_.key_in_flight(lane.handler, key);
        lanes_.push_back(std::move(lane));
        break;
      case core::LaneOrigin::kOrphaned:
      case core::LaneOrigin::kExpired:
        orphans.add(lane.handler, lane.lane);
        break;
      case core::LaneOrigin::kOthers:
      case core::LaneOrigin::kFree:
        break;  // another live incarnation's: left alone
    }
  }
  if (!orphans.empty()) {
    Params orphan_params;
    orphans.bind(orphan_params);
    const std::uint64_t m = lock_orphans.run(orphan_params);
    std::vector<std::size_t> taken;
    for (std::uint64_t r = 0; r < m; ++r) {
      taken.push_back(lanes_.size());
      lanes_.push_back(read_lane(r, core::LaneOrigin::kOrphaned, 4));
    }
    charge(taken);
  }
  fetch_candidates(0);
}

void Claim::charge(const std::vector<std::size_t>& lane_indexes) {
  std::vector<InFlightDelivery> lost;
  for (std::size_t i : lane_indexes) {
    for (auto& id : lanes_[i].in_flight) lost.push_back({lanes_[i].handler, std::move(id)});
    lanes_[i].in_flight.clear();
  }
  charge_taken_over(lost);
}

// Offers the due deliveries of lanes_[first_lane..] to the planner, in due order.
void Claim::fetch_candidates(std::size_t first_lane) {
  if (first_lane >= lanes_.size() || planner_.full()) return;
  // Per lane, in due order: pending, due, not in flight, and (per-key order) no earlier
  // pending delivery of the same handler and key: the SQL copy of core's "no pending
  // predecessor" (batch_planner.hpp), evaluated here where the key index answers it, so
  // every candidate returned has none. The inner LIMIT (the batch's places, or the lane's
  // room if less) keeps each lane's scan short; the outer one merges the lanes in due order.
  static Statement candidates(
      "SELECT c.lane_index, c.event_id, c.key, c.attempts, c.claims"
      " FROM (SELECT hl.lane_index, d.handler, d.lane, d.event_id, d.key, d.sequence,"
      "   d.attempts, d.claims, d.available_at"
      "  FROM unnest($1::text[], $2::int2[], $6::int4[])"
      "   WITH ORDINALITY AS hl(handler, lane, room, lane_index)"
      "  CROSS JOIN LATERAL (SELECT d.* FROM relaybus.deliveries d"
      "   WHERE d.handler = hl.handler AND d.lane = hl.lane AND d.status = 'pending'"
      "   AND d.available_at <= now()"
      "   AND NOT EXISTS (SELECT 1 FROM unnest($3::text[], $4::text[]) AS f(handler, event_id)"
      "    WHERE f.handler = d.handler AND f.event_id = d.event_id)"
      "   AND (d.key IS NULL OR NOT EXISTS (SELECT 1 FROM relaybus.deliveries p"
      "    WHERE p.handler = d.handler AND p.lane = d.lane AND p.key = d.key"
      "    AND p.status = 'pending' AND p.sequence < d.sequence))"
      "   ORDER BY d.available_at, d.event_id LIMIT least($5, hl.room)) d"
      "  ORDER BY d.available_at, d.event_id LIMIT $5) c"
      " ORDER BY c.available_at, c.event_id",
      {TEXTARRAYOID, INT2ARRAYOID, TEXTARRAYOID, TEXTARRAYOID, INT4OID, INT4ARRAYOID});
  std::vector<std::string> handlers, flight_handlers, flight_ids;
  std::vector<std::int16_t> lane_numbers;
  std::vector<std::int32_t> rooms;
  for (std::size_t i = first_lane; i < lanes_.size(); ++i) {
    handlers.push_back(lanes_[i].handler);
    lane_numbers.push_back(lanes_[i].lane);
    rooms.push_back(core::lane_room(lanes_[i].in_flight.size() + lanes_[i].picks.size()));
    for (const auto& id : lanes_[i].in_flight) {
      flight_handlers.push_back(lanes_[i].handler);
      flight_ids.push_back(id);
    }
  }
  Params params;
  params.text_array(handlers);
  params.int2_array(lane_numbers);
  params.text_array(flight_handlers);
  params.text_array(flight_ids);
  params.int4(planner_.remaining());
  params.int4_array(rooms);
  const std::uint64_t n = candidates.run(params);
  for (std::uint64_t r = 0; r < n && !planner_.full(); ++r) {
    const std::size_t lane_index = first_lane + static_cast<std::size_t>(row::int8(r, 1)) - 1;
    Claimed c{lane_index, row::text(r, 2), row::text_or_null(r, 3), row::int4(r, 4),
              row::int4(r, 5)};
    core::Candidate candidate;
    candidate.handler = &lanes_[lane_index].handler;
    candidate.key = &c.key;
    candidate.has_pending_predecessor = false;  // excluded by the query (see above)
    candidate.lane_in_flight =
        lanes_[lane_index].in_flight.size() + lanes_[lane_index].picks.size();
    if (!planner_.offer(candidate)) continue;
    lanes_[lane_index].picks.push_back(c.event_id);
    claimed_.push_back(std::move(c));
  }
}

void Claim::acquire_free_lanes() {
  // Free lanes, and lanes whose lease expired, that have due work, oldest work first. The
  // lanes with work are found by skipping through the pending-delivery index one lane at a
  // time (the first entry of a lane is its earliest delivery), so a shallow queue costs one
  // index probe per lane with work, not one per lane of the handler. Read once per claim,
  // without locks; the rounds below lock from this list.
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
  // SKIP LOCKED: two claimers never take the same lane, and a lane whose completion is in
  // progress in another transaction (FOR KEY SHARE) is not taken over under it. A lane
  // that changed hands since the list was read fails the re-checked condition.
  static Statement lock(
      "SELECT l.handler, l.lane, l.epoch, l.lease_owner IS NOT NULL, l.in_flight, u.n"
      " FROM unnest($1::text[], $2::int2[]) WITH ORDINALITY AS u(handler, lane, n)"
      " JOIN relaybus.lanes l ON l.handler = u.handler AND l.lane = u.lane"
      " WHERE " RELAYBUS_ACQUIRABLE_SQL("$3") " ORDER BY u.n LIMIT $4 FOR UPDATE OF l SKIP LOCKED",
      {TEXTARRAYOID, INT2ARRAYOID, TEXTOID, INT4OID});
  if (handlers_.empty() || planner_.full()) return;
  LaneList work;
  {
    Params params;
    params.text_array(handlers_);
    params.text(worker_);
    work = LaneList::from_rows(with_work.run(params));
  }
  std::size_t next = 0;
  for (int round = 0; !planner_.full() && next < work.size(); ++round) {
    const std::size_t wanted =
        static_cast<std::size_t>(core::lanes_to_acquire(round, planner_.remaining()));
    // Each round looks at a window of the list four times the lanes it wants, so lanes
    // that others took or locked meanwhile are passed over in the same statement, and
    // continues after the last lane it took (or after the window, if it fell short).
    const std::size_t end = std::min(work.size(), next + 4 * wanted);
    Params params;
    work.slice(next, end).bind(params);
    params.text(worker_);
    params.int4(static_cast<std::int32_t>(wanted));
    const std::uint64_t n = lock.run(params);
    next = n < wanted ? end : next + static_cast<std::size_t>(row::int8(n - 1, 6));
    const std::size_t first = lanes_.size();
    std::vector<std::size_t> expired;
    for (std::uint64_t r = 0; r < n; ++r) {
      LaneInClaim lane = read_lane(
          r, row::boolean(r, 4) ? core::LaneOrigin::kExpired : core::LaneOrigin::kFree, 5);
      if (lane.origin == core::LaneOrigin::kExpired) expired.push_back(lanes_.size());
      if (lane.origin == core::LaneOrigin::kFree) lane.in_flight.clear();
      lanes_.push_back(std::move(lane));
    }
    charge(expired);
    fetch_candidates(first);
  }
}

void Claim::write_lanes() {
  // One statement for every lane that changes. The new in-flight lists travel flattened as
  // (lane position, event id) pairs.
  static Statement write(
      "UPDATE relaybus.lanes l SET epoch = u.epoch,"
      " lease_owner = CASE WHEN u.hold THEN $1 END,"
      " lease_expires_at = CASE WHEN u.hold THEN now() + $2 END,"
      " holder_pid = CASE WHEN u.new_holder THEN $3 WHEN u.hold THEN l.holder_pid END,"
      " holder_started = CASE WHEN u.new_holder THEN $4 WHEN u.hold THEN l.holder_started END,"
      " holder = CASE WHEN u.new_holder THEN $12 WHEN u.hold THEN l.holder END,"
      " in_flight = coalesce(ARRAY(SELECT f.event_id FROM unnest($9::int4[], $10::text[])"
      "  WITH ORDINALITY AS f(position, event_id, n) WHERE f.position = u.position"
      "  ORDER BY f.n), '{}')"
      " FROM unnest($5::text[], $6::int2[], $7::int8[], $8::bool[], $11::bool[])"
      "  WITH ORDINALITY AS u(handler, lane, epoch, hold, new_holder, position)"
      " WHERE l.handler = u.handler AND l.lane = u.lane",
      {TEXTOID, INTERVALOID, INT4OID, TIMESTAMPTZOID, TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID,
       BOOLARRAYOID, INT4ARRAYOID, TEXTARRAYOID, BOOLARRAYOID, TEXTOID});
  std::vector<std::string> handlers, flight_ids;
  std::vector<std::int16_t> lane_numbers;
  std::vector<std::int64_t> epochs;
  std::vector<bool> holds, new_holders;
  std::vector<std::int32_t> flight_positions;
  for (auto& lane : lanes_) {
    lane.write = core::plan_lane_write(lane.origin, lane.epoch, !lane.in_flight.empty(),
                                       !lane.picks.empty());
    if (!lane.write.write) continue;
    handlers.push_back(lane.handler);
    lane_numbers.push_back(lane.lane);
    epochs.push_back(lane.write.epoch);
    holds.push_back(lane.write.hold);
    new_holders.push_back(lane.write.new_holder);
    const auto position = static_cast<std::int32_t>(handlers.size());
    if (!lane.write.hold) continue;
    for (const auto* list : {&lane.in_flight, &lane.picks}) {
      for (const auto& id : *list) {
        flight_positions.push_back(position);
        flight_ids.push_back(id);
      }
    }
  }
  if (handlers.empty()) return;
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
  params.int4_array(flight_positions);
  params.text_array(flight_ids);
  params.bool_array(new_holders);
  params.text(holder_);
  write.run(params);
}

void Claim::emit(ReturnSetInfo* rsinfo) {
  if (claimed_.empty()) return;
  static Statement events(
      "SELECT e.type, e.payload, e.headers, e.published_at"
      " FROM unnest($1::text[]) WITH ORDINALITY AS c(id, n)"
      " JOIN relaybus.events e ON e.id = c.id ORDER BY c.n",
      {TEXTARRAYOID});
  std::vector<std::string> ids;
  for (const auto& c : claimed_) ids.push_back(c.event_id);
  Params params;
  params.text_array(ids);
  const std::uint64_t n = events.run(params);
  if (n != claimed_.size())
    throw core::Error(core::ErrorCode::kInternal, "relaybus: a claimed delivery has no event");
  for (std::uint64_t r = 0; r < n; ++r) {
    const Claimed& c = claimed_[r];
    const LaneInClaim& lane = lanes_[c.lane_index];
    core::LeaseToken token{lane.lane, lane.write.epoch, c.claims, lane.handler, c.event_id};
    const std::string token_text = core::encode(token);
    Datum values[9];
    bool nulls[9] = {false, false, false, false, !c.key.has_value(), false, false, false, false};
    pg_call([&] {
      values[0] = PointerGetDatum(cstring_to_text_with_len(token_text.data(), token_text.size()));
      values[1] = PointerGetDatum(cstring_to_text_with_len(c.event_id.data(), c.event_id.size()));
      values[2] =
          PointerGetDatum(cstring_to_text_with_len(lane.handler.data(), lane.handler.size()));
      values[3] = SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &nulls[3]);
      values[4] =
          c.key ? PointerGetDatum(cstring_to_text_with_len(c.key->data(), c.key->size())) : 0;
      values[5] = SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2, &nulls[5]);
      values[6] = SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 3, &nulls[6]);
      values[7] = Int32GetDatum(c.attempts);
      values[8] = SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 4, &nulls[8]);
      tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    });
  }
}

Datum claim_body(FunctionCallInfo fcinfo) {
  if (PG_ARGISNULL(1)) throw core::Error(core::ErrorCode::kNullValue, "batch_size must not be NULL");
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
  Claim claim(std::move(worker), holder_arg(fcinfo, 4), batch_size, lease_us);
  claim.run(requested, rsinfo);
  spi.finish();
  return (Datum)0;
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_claim, relaybus::pg::claim_body)
