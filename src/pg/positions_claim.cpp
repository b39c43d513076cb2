// claim (0.3.0): lease lanes to a worker and return its batch from positions.
// core::run_positions_claim (src/core/positions_claim.hpp) makes every decision; this file
// is the PostgreSQL store's reads and writes for it, each one set-based statement along an
// index (the function runs with sequential, bitmap, hash and merge plans disabled):
// the held lanes locked and their progress read, the acquirable lanes probed, locked in
// rounds and read, the windows, tails and pending exception rows of the lanes in one
// statement per step, then the exception rows (takeover charges, DEFER, PARK), the lanes'
// progress rows and the leases that change in one statement each, and the events of the
// picks only. No delivery row is ever written, and a lane kept as it was not at all.
#include "counters.hpp"
#include "exception_heads.hpp"
#include "holder.hpp"
#include "lane_lease_sql.hpp"
#include "lane_changes.hpp"
#include "lane_list.hpp"
#include "lease_memory.hpp"
#include "lane_order.hpp"
#include "position_lanes.hpp"
#include "positions_claim_writes.hpp"
#include "progress_hints.hpp"
#include "spi.hpp"
#include "subscription_policy.hpp"
#include "unix_time.hpp"
#include "worker_arg.hpp"

#include "../core/claim_request.hpp"
#include "../core/error.hpp"
#include "../core/lane.hpp"
#include "../core/lane_lease.hpp"
#include "../core/positions_claim.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace relaybus::pg {

namespace {

LaneList lane_list_of(const std::vector<core::LaneRef>& lanes) {
  LaneList list;
  for (const auto& l : lanes) list.add(l.handler, l.lane);
  return list;
}

// The claim's statements, for one worker incarnation: (worker, holder), or (worker, this
// backend) without a holder.
class PgPositionsClaimStore final : public core::PositionsClaimStore {
 public:
  explicit PgPositionsClaimStore(LaneHolder holder) : holder_(holder), writes_(std::move(holder)) {}

  std::int64_t now_us() override;
  std::vector<core::PositionsHandler> subscribed_handlers(
      const std::optional<std::vector<std::string>>& requested) override;
  std::vector<core::HeldPositionsLane> held_lanes(
      const std::vector<std::string>& handlers) override;
  std::vector<core::HeldPositionsLane> lock_held(const std::vector<core::LaneRef>& lanes,
                                                 bool wait) override;
  std::vector<core::PositionsLane> lock_for_takeover(
      const std::vector<core::LaneRef>& lanes) override;
  std::vector<core::LaneWorkProbe> lanes_with_work(
      const std::vector<std::string>& handlers) override;
  std::vector<core::AcquiredPositionsLane> lock_acquirable(const std::vector<core::LaneRef>& window,
                                                           int wanted) override;
  std::vector<core::LaneContents> read_lanes(
      const std::vector<const core::PositionsLane*>& lanes) override;
  // Per lane, the earliest due head of its pending exception rows (exception_heads.hpp),
  // leaving out the lane's retrying positions if `skip_retrying`.
  std::vector<std::optional<std::int64_t>> due_heads(
      const std::vector<const core::PositionsLane*>& lanes, bool skip_retrying);
  // due_heads of the lanes that have pending exception rows at all (found one step a lane:
  // usually none has), nullopt for the others, which is what due_heads says of them.
  // has_rows (if given): per lane, whether it has pending rows at all.
  std::vector<std::optional<std::int64_t>> due_heads_where_pending(
      const std::vector<const core::PositionsLane*>& lanes, bool skip_retrying,
      std::vector<bool>* has_rows = nullptr);
  void insert_exceptions(const std::vector<core::NewException>& rows) override {
    writes_.insert_exceptions(rows);
  }
  void charge_exceptions(const std::vector<core::ExceptionCharge>& charges) override {
    writes_.charge_exceptions(charges);
  }
  void write_lanes(const std::vector<core::PositionsLaneWrite>& writes) override {
    writes_.write_lanes(writes);
  }

 private:
  // Binds $1..$7 of held_lanes' and lock_held's statements (worker, handlers, this backend,
  // holder, lease renewal bounds).
  void bind_held(Params& params);
  lease_memory::Claimer claimer() const { return {holder_.worker, holder_.holder}; }

  LaneHolder holder_;
  std::vector<std::string> handlers_;  // held_lanes' handlers, for lock_held
  PositionsWrites writes_;
};

std::int64_t PgPositionsClaimStore::now_us() {
  // now(): the clock of every available_at and of the statements' own "<= now()".
  return GetCurrentTransactionStartTimestamp();
}

std::vector<core::PositionsHandler> PgPositionsClaimStore::subscribed_handlers(
    const std::optional<std::vector<std::string>>& requested) {
  // Without a list: every handler that external workers run (not in-database handlers).
  // Read without a lock: a pause committed while this claim runs applies from the next one.
  static Statement select_handlers(
      "SELECT s.handler, s.paused_at IS NOT NULL, " RELAYBUS_POLICY_COLUMNS_SQL
      " FROM relaybus.subscriptions s"
      " WHERE CASE WHEN $1::text[] IS NULL THEN s.sql_function IS NULL"
      "  ELSE s.handler = ANY ($1) END ORDER BY s.handler COLLATE \"C\"",
      {TEXTARRAYOID});
  Params params;
  params.text_array(requested);
  const std::uint64_t n = select_handlers.run(params);
  std::vector<core::PositionsHandler> handlers;
  handlers.reserve(n);
  for (std::uint64_t r = 0; r < n; ++r)
    handlers.push_back({{row::text(r, 1), row::boolean(r, 2)}, policy_of_row(r, 3)});
  return handlers;
}

// Columns of a held lane after RELAYBUS_POSITIONS_LANE_COLUMNS_SQL: its binding and whether
// its lease is due for renewal ($3, $4: this backend's pid and start; $5: the holder; $6,
// $7: core::LeaseRenewal), for held_lanes and lock_held.
#define RELAYBUS_HELD_LANE_COLUMNS_SQL \
  ", l.holder IS NOT NULL, coalesce(l.holder = $5, false), " RELAYBUS_HOLDER_ALIVE_SQL( \
      "$3", "$4") ", l.lease_expires_at <= now(),"                                       \
                  /* core::LeaseRenewal::due, set-based. */                              \
                  " coalesce(l.lease_expires_at < $6 OR l.lease_expires_at > $7, true)"
constexpr int kHeldLaneColumns = kPositionsLaneColumns + 5;

void PgPositionsClaimStore::bind_held(Params& params) {
  // Whether a lane's backend is alive is read from backend activity, which PostgreSQL
  // reads once per transaction: a claim in a transaction that had already read it would
  // take a connection opened since then for dead, and its lanes over. Read again once per
  // claim (held_lanes): lock_held, a moment later, judges by the same reading.
  params.text(holder_.worker);
  params.text_array(handlers_);
  params.int4(current_holder_pid());
  params.timestamptz(current_holder_started());
  params.text(holder_.holder);
  const core::LeaseRenewal renewal =
      core::lease_renewal(GetCurrentTransactionStartTimestamp(), holder_.lease_us);
  params.timestamptz(renewal.renew_before_us);
  params.timestamptz(renewal.expires_at_us);
}

core::HeldPositionsLane held_lane_of_row(std::uint64_t r) {
  core::HeldPositionsLane lane;
  lane.lane = positions_lane_of_row(r);
  lane.binding.to_holder = row::boolean(r, kPositionsLaneColumns + 1);
  lane.binding.same_holder = row::boolean(r, kPositionsLaneColumns + 2);
  lane.binding.backend_alive = row::boolean(r, kPositionsLaneColumns + 3);
  lane.binding.lease_expired = row::boolean(r, kPositionsLaneColumns + 4);
  lane.lane.lease_renewal_due = row::boolean(r, kPositionsLaneColumns + 5);
  return lane;
}

std::vector<core::HeldPositionsLane> PgPositionsClaimStore::held_lanes(
    const std::vector<std::string>& handlers) {
  // Unlocked, in one statement: each held lane with its binding, its progress (the newest
  // lane_progress row, probed from the lane's hint as lanes_with_work does) and the window
  // half of core::held_lane_probe (the first delivery of the window neither done nor in
  // flight: one range scan of deliveries_pkey); then the exception half (due heads not
  // being retried) for the lanes that have pending rows. Nothing is locked: lock_held locks
  // the lanes core acts on and reads their progress again.
  //
  // Only the lanes listed are read, one probe of lanes_pkey each (lease_memory.hpp): a
  // lane whose lease this backend does not remember; one it remembers as the worker's whose
  // lease core must act on (expired, due for renewal, another incarnation's) or that changed
  // since this backend probed it (lane_changes.hpp, $11). A lane it remembers as someone
  // else's is lanes_with_work's; one it remembers as the caller's, live and unchanged is not
  // read at all, and what was remembered of it stands for its probe. A listed lane another
  // worker holds comes back with its lease only, to be remembered.
  static Statement read(
      "SELECT " RELAYBUS_POSITIONS_LANE_COLUMNS_SQL RELAYBUS_HELD_LANE_COLUMNS_SQL
      ","
      " p.seq, coalesce(p.acked_upto, 0), p.done, p.in_flight, p.retrying, f.available_at, u.at,"
      " coalesce(l.lease_owner = $1, false), l.lease_owner IS NULL, l.lease_expires_at"
      " FROM unnest($12::text[], $13::int2[], $14::int4[]) AS u(handler, lane, at)"
      " JOIN relaybus.lanes l ON l.handler = u.handler AND l.lane = u.lane"
      // Whether to pass over the lane's progress: another worker's, or unchanged ($11).
      " CROSS JOIN LATERAL (SELECT NOT coalesce(l.lease_owner = $1, false)"
      "  OR coalesce(($11::bool[])[u.at], false) AS pass) s"
      " LEFT JOIN LATERAL ("
      "  (SELECT p.seq, p.acked_upto, p.done, p.in_flight, p.retrying"
      "   FROM relaybus.lane_progress p WHERE NOT s.pass AND p.handler = l.handler"
      "   AND p.lane = l.lane AND p.seq >= coalesce(($8::int8[])[u.at], 0)"
      "   ORDER BY p.seq DESC LIMIT 1)"
      "  UNION ALL"
      "  (SELECT p.seq, p.acked_upto, p.done, p.in_flight, p.retrying"
      "   FROM relaybus.lane_progress p WHERE NOT s.pass AND p.handler = l.handler"
      "   AND p.lane = l.lane ORDER BY p.seq DESC LIMIT 1)"
      "  LIMIT 1) p ON true"
      " LEFT JOIN LATERAL (SELECT d.available_at FROM relaybus.deliveries d"
      "  WHERE NOT s.pass AND d.handler = l.handler AND d.lane = l.lane"
      "  AND d.position > coalesce(p.acked_upto, 0) AND d.position <= coalesce(p.acked_upto, 0) + "
      "$10"
      "  AND d.position <> ALL (coalesce(p.done, '{}') || coalesce(p.in_flight, '{}'))"
      "  ORDER BY d.position LIMIT 1) f ON true",
      {TEXTOID, TEXTARRAYOID, INT4OID, TIMESTAMPTZOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
       INT8ARRAYOID, INT4OID, INT8OID, BOOLARRAYOID, TEXTARRAYOID, INT2ARRAYOID, INT4ARRAYOID});
  handlers_ = handlers;
  // Before the statement's snapshot: a publish or a lease write that commits after it moves
  // a counter.
  const std::vector<std::uint64_t> changes = lane_changes::counters(handlers);
  const std::vector<std::uint64_t> lease_changes = lane_changes::lease_counters(handlers);
  const std::int64_t clock_us = GetCurrentTimestamp();
  const lane_changes::PassOver pass = lane_changes::known_lanes(handlers, changes, clock_us);
  const std::vector<std::optional<lease_memory::Lease>> leases =
      lease_memory::known(claimer(), handlers, lease_changes, clock_us);
  const std::int64_t now = GetCurrentTransactionStartTimestamp();
  const core::LeaseRenewal renewal = core::lease_renewal(now, holder_.lease_us);
  // Per lane: read it, or take it as remembered (the caller's, live, not due, unchanged), or
  // leave it out (remembered as nobody's or another worker's).
  std::vector<bool> listed(pass.pass.size(), true);
  LaneList list;
  std::vector<std::int32_t> list_at;
  for (std::size_t i = 0; i < listed.size(); ++i) {
    if (const auto& m = leases[i]) {
      if (m->holder != lease_memory::Lease::Holder::kWorker)
        listed[i] = false;
      else
        listed[i] = !m->callers || m->expires_at_us <= now || renewal.due(m->expires_at_us) ||
                    !pass.pass[i];
    }
    if (!listed[i]) continue;
    list.add(handlers[i / core::kLaneCount], static_cast<std::int16_t>(i % core::kLaneCount));
    list_at.push_back(static_cast<std::int32_t>(i) + 1);
  }
  std::vector<core::HeldPositionsLane> out;
  std::vector<std::size_t> at;  // each lane's place in the flattened arrays, from 0
  // A lane passed over: what this backend remembers of it stands for its probe.
  const auto remembered = [&pass](core::HeldPositionsLane& lane, std::size_t i) {
    const lane_changes::Known& k = *pass.known[i];
    lane.lane.progress = k.progress;
    lane.lane.retrying = k.retrying;
    lane.probe.window_since_us = k.window_since_us;
  };
  // Whether a lane's backend lives is read once per claim, here, also when nothing is read
  // now: lock_held judges by the same reading (bind_held).
  fresh_backend_activity();
  if (!list_at.empty()) {
    Params params;
    bind_held(params);
    params.int8_array(progress_hints::get_by_handler(handlers));
    params.int4(core::kLaneCount);
    params.int8(core::kPositionWindow);
    params.bool_array(pass.pass);
    list.bind(params);
    params.int4_array(list_at);
    const std::uint64_t n = read.run(params);
    out.reserve(n);
    constexpr int c = kHeldLaneColumns;
    const bool remember = !lease_changes.empty() && lease_memory::may_remember();
    for (std::uint64_t r = 0; r < n; ++r) {
      const std::size_t i = static_cast<std::size_t>(row::int4(r, c + 7)) - 1;
      const bool workers = row::boolean(r, c + 8);
      // The binding columns are read of the worker's lanes only (a free lane's expiry is NULL).
      core::HeldPositionsLane lane;
      if (workers) lane = held_lane_of_row(r);
      if (remember) {
        lease_memory::Lease lease;
        lease.holder = workers                  ? lease_memory::Lease::Holder::kWorker
                       : row::boolean(r, c + 9) ? lease_memory::Lease::Holder::kNobody
                                                : lease_memory::Lease::Holder::kOtherWorker;
        if (!row::is_null(r, c + 10)) lease.expires_at_us = timestamp_of_row(r, c + 10);
        lease.callers = workers && core::is_callers(lane.binding, holder_.holder.has_value());
        lease_memory::saw(claimer(), handlers[i / core::kLaneCount],
                          static_cast<std::int16_t>(i % core::kLaneCount), lease_changes[i], lease,
                          clock_us);
      }
      if (!workers) continue;
      at.push_back(i);
      if (pass.pass[i]) {  // unchanged since this backend probed it; its lease to act on
        remembered(lane, i);
        out.push_back(std::move(lane));
        continue;
      }
      if (!row::is_null(r, c + 1))
        progress_hints::note(lane.lane.handler, lane.lane.lane, row::int8(r, c + 1));
      lane.lane.progress.acked_upto = row::int8(r, c + 2);
      lane.lane.progress.done = position_set(r, c + 3);
      lane.lane.progress.in_flight = position_set(r, c + 4);
      lane.lane.retrying = position_set(r, c + 5);
      if (!row::is_null(r, c + 6)) lane.probe.window_since_us = timestamp_of_row(r, c + 6);
      out.push_back(std::move(lane));
    }
  }
  // The lanes not read: the caller's, their lease live and not due for renewal, unchanged
  // since this backend probed them. An idle one needs nothing from the claim; one with work
  // is returned as remembered, for core to order and pick: the lanes it picks from are
  // locked and read again (lock_held), and one no longer held is not locked.
  for (std::size_t i = 0; i < listed.size(); ++i) {
    if (listed[i] || !leases[i] || leases[i]->holder != lease_memory::Lease::Holder::kWorker ||
        !pass.pass[i] || pass.known[i]->idle)
      continue;
    core::HeldPositionsLane lane;
    lane.lane.handler = handlers[i / core::kLaneCount];
    lane.lane.lane = static_cast<std::int16_t>(i % core::kLaneCount);
    lane.lane.lease_renewal_due = false;
    lane.binding.to_holder = holder_.holder.has_value();
    lane.binding.same_holder = holder_.holder.has_value();
    lane.binding.backend_alive = !holder_.holder.has_value();
    lane.binding.lease_expired = false;
    remembered(lane, i);
    at.push_back(i);
    out.push_back(std::move(lane));
  }
  std::vector<const core::PositionsLane*> lanes;
  std::vector<std::size_t> probed;
  for (std::size_t i = 0; i < out.size(); ++i)
    if (!pass.pass[at[i]]) {
      lanes.push_back(&out[i].lane);
      probed.push_back(i);
    }
  std::vector<bool> has_rows;
  const std::vector<std::optional<std::int64_t>> due =
      due_heads_where_pending(lanes, /*skip_retrying=*/true, &has_rows);
  for (std::size_t k = 0; k < probed.size(); ++k) {
    core::HeldPositionsLane& l = out[probed[k]];
    l.probe.due_exception_us = due[k];
    // Not remembered under REPEATABLE READ (the snapshot predates the counters read) nor in a
    // transaction that has written (a rollback could bring back what it finished); nor a
    // lane with pending exception rows, whose being due moves with the clock alone.
    if (changes.empty() || IsolationUsesXactSnapshot() ||
        TransactionIdIsValid(GetTopTransactionIdIfAny()))
      continue;
    if (has_rows[k]) {
      lane_changes::probed(l.lane.handler, l.lane.lane, changes[at[probed[k]]], nullptr, clock_us);
      continue;
    }
    lane_changes::Known known;
    known.progress = l.lane.progress;
    known.retrying = l.lane.retrying;
    known.window_since_us = l.probe.window_since_us;
    known.idle = core::held_lane_quiet(l.lane, l.probe, /*has_pending_rows=*/false);
    lane_changes::probed(l.lane.handler, l.lane.lane, changes[at[probed[k]]], &known, clock_us);
  }
  return out;
}

std::vector<core::HeldPositionsLane> PgPositionsClaimStore::lock_held(
    const std::vector<core::LaneRef>& lanes, bool wait) {
  // FOR NO KEY UPDATE, in the one order every statement that waits for lanes takes them
  // (lane_order.hpp), so this never deadlocks with the worker's other connections renewing,
  // relinquishing or completing; without `wait`, SKIP LOCKED. A lane this waits for is
  // returned as it is after the wait (the lock re-reads the row, and a lane that changed
  // hands meanwhile fails the re-checked owner); its progress is read by a later statement,
  // after the lock. Whose incarnation each lane is (core::LaneBinding) is for core to judge.
  // One probe of lanes_pkey per lane to lock ($8, $9), not a scan of the worker's lanes:
  // under a held snapshot each lane row read is every version of it the snapshot keeps.
#define RELAYBUS_LOCK_HELD_SQL(skip_locked)                                    \
  "SELECT " RELAYBUS_POSITIONS_LANE_COLUMNS_SQL RELAYBUS_HELD_LANE_COLUMNS_SQL \
  " FROM unnest($8::text[], $9::int2[]) AS u(handler, lane)"                   \
  " JOIN relaybus.lanes l ON l.handler = u.handler AND l.lane = u.lane"        \
  " WHERE l.lease_owner = $1"                                                  \
  " ORDER BY " RELAYBUS_LANE_LOCK_ORDER_SQL " FOR NO KEY UPDATE OF l" skip_locked
  static Statement lock(RELAYBUS_LOCK_HELD_SQL(""),
                        {TEXTOID, TEXTARRAYOID, INT4OID, TIMESTAMPTZOID, TEXTOID, TIMESTAMPTZOID,
                         TIMESTAMPTZOID, TEXTARRAYOID, INT2ARRAYOID});
  static Statement lock_unlocked(RELAYBUS_LOCK_HELD_SQL(" SKIP LOCKED"),
                                 {TEXTOID, TEXTARRAYOID, INT4OID, TIMESTAMPTZOID, TEXTOID,
                                  TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTARRAYOID, INT2ARRAYOID});
#undef RELAYBUS_LOCK_HELD_SQL
  if (lanes.empty()) return {};
  for (const core::LaneRef& l : lanes)
    if (std::find(handlers_.begin(), handlers_.end(), l.handler) == handlers_.end() || l.lane < 0 ||
        l.lane >= core::kLaneCount)
      throw core::Error(core::ErrorCode::kInternal, "relaybus: a lane to lock not held_lanes'");
  Params params;
  bind_held(params);
  lane_list_of(lanes).bind(params);
  const std::uint64_t n = (wait ? lock : lock_unlocked).run(params);
  std::vector<core::HeldPositionsLane> out;
  out.reserve(n);
  for (std::uint64_t r = 0; r < n; ++r) out.push_back(held_lane_of_row(r));
  std::vector<core::PositionsLane*> locked;
  for (auto& l : out) locked.push_back(&l.lane);
  writes_.load_progress(locked);
  return out;
}

std::vector<core::PositionsLane> PgPositionsClaimStore::lock_for_takeover(
    const std::vector<core::LaneRef>& lanes) {
  // FOR UPDATE conflicts with every lock a completion or an end of attempt in progress
  // holds on the lane, so this waits for them and re-reads the lane as they left it. In
  // the one lock order (lane_order.hpp).
  static Statement lock(
      "SELECT " RELAYBUS_POSITIONS_LANE_COLUMNS_SQL
      " FROM relaybus.lanes l JOIN unnest($1::text[], $2::int2[]) AS o(handler, lane)"
      "  ON l.handler = o.handler AND l.lane = o.lane"
      " ORDER BY " RELAYBUS_LANE_LOCK_ORDER_SQL " FOR UPDATE OF l",
      {TEXTARRAYOID, INT2ARRAYOID});
  Params params;
  lane_list_of(lanes).bind(params);
  const std::uint64_t n = lock.run(params);
  std::vector<core::PositionsLane> out;
  out.reserve(n);
  for (std::uint64_t r = 0; r < n; ++r) out.push_back(positions_lane_of_row(r));
  std::vector<core::PositionsLane*> locked;
  for (auto& l : out) {
    locked.push_back(&l);
    counters::add(counters::kTakenOver, l.handler);  // each one is taken over
  }
  writes_.load_progress(locked);
  return out;
}

std::vector<core::LaneWorkProbe> PgPositionsClaimStore::lanes_with_work(
    const std::vector<std::string>& handlers) {
  // The acquirable lanes of the handlers, each with its progress (a backward probe of
  // lane_progress_pkey from the lane's hint, $3: progress_hints.hpp) and its first delivery
  // above the cursor (a forward probe of deliveries_pkey: core::LaneWorkProbe says why that
  // is all it needs), looked for within the window first: a B-tree scan reads all the
  // entries of a leaf page in its range before returning one, so an unbounded probe of a
  // lane with a backlog reads a page of it; the unbounded one runs only where the window
  // holds none. Unlocked, as of this statement; lock_acquirable locks from core's list,
  // and the progress is read again.
  //
  // Only the lanes listed are read ($6, $7, $8: one probe of lanes_pkey each), those that
  // may be acquirable as far as this backend knows: not remembered, remembered free, or
  // remembered as another worker's whose lease has expired (lease_memory.hpp); a lane it
  // remembers as its worker's is held_lanes'. A free lane it found idle and that nothing has
  // changed since (lane_changes.hpp) is left out too: a handler whose lanes nobody holds
  // (an in-database handler between batches, a quiet one) had all 256 probed by every claim
  // that named it. A listed lane that is not acquirable comes back with its lease only, to
  // be remembered.
  static Statement probe(
      "SELECT l.handler, l.lane, l.lease_owner IS NOT NULL, coalesce(p.acked_upto, 0), p.done,"
      " p.in_flight, p.retrying, f.position, f.available_at, p.seq, a.acquirable,"
      " coalesce(l.lease_owner = $2, false), l.lease_expires_at, u.at"
      " FROM unnest($6::text[], $7::int2[], $8::int4[]) AS u(handler, lane, at)"
      " JOIN relaybus.lanes l ON l.handler = u.handler AND l.lane = u.lane"
      " CROSS JOIN LATERAL (SELECT " RELAYBUS_ACQUIRABLE_SQL("$2") " AS acquirable) a"
      " LEFT JOIN LATERAL ("
      "  (SELECT p.seq, p.acked_upto, p.done, p.in_flight, p.retrying"
      "   FROM relaybus.lane_progress p WHERE a.acquirable AND p.handler = l.handler"
      "   AND p.lane = l.lane AND p.seq >= coalesce(($3::int8[])[u.at], 0)"
      "   ORDER BY p.seq DESC LIMIT 1)"
      "  UNION ALL"
      "  (SELECT p.seq, p.acked_upto, p.done, p.in_flight, p.retrying"
      "   FROM relaybus.lane_progress p WHERE a.acquirable AND p.handler = l.handler"
      "   AND p.lane = l.lane ORDER BY p.seq DESC LIMIT 1)"
      "  LIMIT 1) p ON true"
      " LEFT JOIN LATERAL ("
      "  (SELECT d.position, d.available_at FROM relaybus.deliveries d"
      "   WHERE a.acquirable AND d.handler = l.handler AND d.lane = l.lane"
      "   AND d.position > coalesce(p.acked_upto, 0) AND d.position <= coalesce(p.acked_upto, 0) + "
      "$5"
      "   ORDER BY d.position LIMIT 1)"
      "  UNION ALL"
      "  (SELECT d.position, d.available_at FROM relaybus.deliveries d"
      "   WHERE a.acquirable AND d.handler = l.handler AND d.lane = l.lane"
      "   AND d.position > coalesce(p.acked_upto, 0) ORDER BY d.position LIMIT 1)"
      "  LIMIT 1) f ON true",
      {TEXTARRAYOID, TEXTOID, INT8ARRAYOID, INT4OID, INT8OID, TEXTARRAYOID, INT2ARRAYOID,
       INT4ARRAYOID});
  // Before the statement's snapshot: a publish or a lease write that commits after it moves
  // a counter.
  const std::vector<std::uint64_t> changes = lane_changes::counters(handlers);
  const std::vector<std::uint64_t> lease_changes = lane_changes::lease_counters(handlers);
  const std::int64_t clock_us = GetCurrentTimestamp();
  const lane_changes::PassOver pass = lane_changes::known_lanes(handlers, changes, clock_us);
  const std::vector<std::optional<lease_memory::Lease>> leases =
      lease_memory::known(claimer(), handlers, lease_changes, clock_us);
  const std::int64_t now = GetCurrentTransactionStartTimestamp();
  LaneList list;
  std::vector<std::int32_t> list_at;
  for (std::size_t i = 0; i < pass.pass.size(); ++i) {
    if (const auto& m = leases[i]) {
      using Holder = lease_memory::Lease::Holder;
      if (m->holder == Holder::kWorker) continue;
      if (m->holder == Holder::kOtherWorker && m->expires_at_us > now) continue;
      if (m->holder == Holder::kNobody && pass.pass[i] && pass.known[i]->idle) continue;
    }
    list.add(handlers[i / core::kLaneCount], static_cast<std::int16_t>(i % core::kLaneCount));
    list_at.push_back(static_cast<std::int32_t>(i) + 1);
  }
  std::vector<core::LaneWorkProbe> out;
  if (list_at.empty()) return out;
  Params params;
  params.text_array(handlers);
  params.text(holder_.worker);
  params.int8_array(progress_hints::get_by_handler(handlers));
  params.int4(core::kLaneCount);
  params.int8(core::kPositionWindow);
  list.bind(params);
  params.int4_array(list_at);
  const std::uint64_t n = probe.run(params);
  out.reserve(n);
  std::vector<std::size_t> out_at;  // each returned lane's place in the flattened arrays
  const bool remember = !lease_changes.empty() && lease_memory::may_remember();
  for (std::uint64_t r = 0; r < n; ++r) {
    const std::size_t i = static_cast<std::size_t>(row::int4(r, 14)) - 1;
    // A lane of the caller's worker is remembered by held_lanes, with its binding.
    if (remember && !row::boolean(r, 12)) {
      lease_memory::Lease lease;
      lease.holder = row::boolean(r, 3) ? lease_memory::Lease::Holder::kOtherWorker
                                        : lease_memory::Lease::Holder::kNobody;
      if (!row::is_null(r, 13)) lease.expires_at_us = timestamp_of_row(r, 13);
      lease_memory::saw(claimer(), handlers[i / core::kLaneCount],
                        static_cast<std::int16_t>(i % core::kLaneCount), lease_changes[i], lease,
                        clock_us);
    }
    if (!row::boolean(r, 11)) continue;  // not acquirable
    core::LaneWorkProbe p;
    p.lane = {row::text(r, 1), row::int2(r, 2)};
    p.has_owner = row::boolean(r, 3);
    p.progress.acked_upto = row::int8(r, 4);
    p.progress.done = position_set(r, 5);
    p.progress.in_flight = position_set(r, 6);
    p.retrying = position_set(r, 7);
    if (!row::is_null(r, 8)) p.first_position = row::int8(r, 8);
    if (!row::is_null(r, 9)) p.first_available_us = timestamp_of_row(r, 9);
    if (!row::is_null(r, 10)) progress_hints::note(p.lane.handler, p.lane.lane, row::int8(r, 10));
    out.push_back(std::move(p));
    out_at.push_back(i);
  }
  // The earliest due head of pending exception rows (exception_heads.hpp) of each lane. A
  // lane's retried rows count too: of an acquirable lane only an expired one has any, and
  // its takeover makes them due.
  std::vector<core::PositionsLane> lanes;
  for (const auto& p : out) {
    core::PositionsLane l;
    l.handler = p.lane.handler;
    l.lane = p.lane.lane;
    lanes.push_back(std::move(l));
  }
  std::vector<const core::PositionsLane*> asked;
  for (const auto& l : lanes) asked.push_back(&l);
  std::vector<bool> has_rows;
  const std::vector<std::optional<std::int64_t>> due =
      due_heads_where_pending(asked, /*skip_retrying=*/false, &has_rows);
  for (std::size_t i = 0; i < out.size(); ++i) out[i].due_exception_us = due[i];
  // A free lane with nothing above its cursor, nothing running and no exception row is
  // remembered idle, as held_lanes remembers one (and under the same conditions); any other
  // is forgotten. An expired lease is work (its takeover), whatever the lane holds.
  if (!changes.empty() && !IsolationUsesXactSnapshot() &&
      !TransactionIdIsValid(GetTopTransactionIdIfAny())) {
    for (std::size_t i = 0; i < out.size(); ++i) {
      const core::LaneWorkProbe& p = out[i];
      const std::size_t at = out_at[i];
      if (p.has_owner || p.first_position || !p.progress.in_flight.empty() || !p.retrying.empty() ||
          has_rows[i]) {
        lane_changes::probed(p.lane.handler, p.lane.lane, changes[at], nullptr, clock_us);
        continue;
      }
      lane_changes::Known known;
      known.progress = p.progress;
      known.idle = true;
      lane_changes::probed(p.lane.handler, p.lane.lane, changes[at], &known, clock_us);
    }
  }
  return out;
}

std::vector<std::optional<std::int64_t>> PgPositionsClaimStore::due_heads_where_pending(
    const std::vector<const core::PositionsLane*>& lanes, bool skip_retrying,
    std::vector<bool>* has_rows) {
  std::vector<std::optional<std::int64_t>> out(lanes.size());
  if (has_rows != nullptr) has_rows->assign(lanes.size(), false);
  std::vector<std::string> handlers;
  for (const core::PositionsLane* l : lanes) handlers.push_back(l->handler);
  std::sort(handlers.begin(), handlers.end());
  handlers.erase(std::unique(handlers.begin(), handlers.end()), handlers.end());
  if (handlers.empty()) return out;
  static Statement with_exceptions(RELAYBUS_LANES_WITH_EXCEPTIONS_SQL, {TEXTARRAYOID});
  Params params;
  params.text_array(handlers);
  std::set<std::pair<std::string, std::int16_t>> have;
  const std::uint64_t m = with_exceptions.run(params);
  for (std::uint64_t r = 0; r < m; ++r) have.insert({row::text(r, 1), row::int2(r, 2)});
  std::vector<std::size_t> indexes;
  std::vector<const core::PositionsLane*> asked;
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    if (have.count({lanes[i]->handler, lanes[i]->lane}) == 0) continue;
    if (has_rows != nullptr) (*has_rows)[i] = true;
    indexes.push_back(i);
    asked.push_back(lanes[i]);
  }
  if (asked.empty()) return out;
  const std::vector<std::optional<std::int64_t>> due = due_heads(asked, skip_retrying);
  for (std::size_t k = 0; k < indexes.size(); ++k) out[indexes[k]] = due[k];
  return out;
}

std::vector<core::AcquiredPositionsLane> PgPositionsClaimStore::lock_acquirable(
    const std::vector<core::LaneRef>& window, int wanted) {
  // SKIP LOCKED: two claimers never take the same lane, and a lane whose completion is in
  // progress in another transaction is not taken over under it. A lane that changed hands
  // since it was probed fails the re-checked condition.
  static Statement lock(
      "SELECT " RELAYBUS_POSITIONS_LANE_COLUMNS_SQL
      ", l.lease_owner IS NOT NULL, u.n"
      " FROM unnest($1::text[], $2::int2[]) WITH ORDINALITY AS u(handler, lane, n)"
      " JOIN relaybus.lanes l ON l.handler = u.handler AND l.lane = u.lane"
      " WHERE " RELAYBUS_ACQUIRABLE_SQL("$3") " ORDER BY u.n LIMIT $4 FOR UPDATE OF l SKIP LOCKED",
      {TEXTARRAYOID, INT2ARRAYOID, TEXTOID, INT4OID});
  Params params;
  lane_list_of(window).bind(params);
  params.text(holder_.worker);
  params.int4(wanted);
  const std::uint64_t n = lock.run(params);
  std::vector<core::AcquiredPositionsLane> out;
  out.reserve(n);
  for (std::uint64_t r = 0; r < n; ++r) {
    core::AcquiredPositionsLane a;
    a.lane = positions_lane_of_row(r);
    a.had_owner = row::boolean(r, kPositionsLaneColumns + 1);
    a.window_position = static_cast<std::size_t>(row::int8(r, kPositionsLaneColumns + 2));
    counters::add(counters::kTakenOver, a.lane.handler, a.had_owner ? 1 : 0);
    out.push_back(std::move(a));
  }
  std::vector<core::PositionsLane*> locked;
  for (auto& a : out) locked.push_back(&a.lane);
  writes_.load_progress(locked);
  return out;
}

std::vector<core::LaneContents> PgPositionsClaimStore::read_lanes(
    const std::vector<const core::PositionsLane*>& lanes) {
  // Per lane, in one snapshot: the window (one range scan of deliveries_pkey), the tail
  // (one backward probe of it) and the pending exception rows core::LaneContents asks for
  // (the heads: exception_heads.hpp), and whether a lane due for renewal is in use. Kind 0,
  // 1, 2 and 3 rows, each with the lane's place in the list.
  // The tail is probed above the cursor only (none there reads as 0, which core takes as
  // "nothing above the cursor", as it takes a tail at or below it): a B-tree scan reads
  // every matching entry of a leaf page before it returns one, so a probe bounded by the
  // lane alone reads a page of the lane's finished positions (up to about 180 entries,
  // 30 us a lane once the lane fills its pages) where this one stops at the cursor.
  static Statement read(
      RELAYBUS_EXCEPTION_HEADS_CTE
      "SELECT 0, u.n, d.position, d.event_id, d.key, d.available_at, 0, 0,"
      " d.available_at <= d.created_at"
      " FROM unnest($1::text[], $2::int2[], $3::int8[]) WITH ORDINALITY AS u(handler, lane, acked, "
      "n)"
      " CROSS JOIN LATERAL (SELECT d.position, d.event_id, d.key, d.available_at, d.created_at"
      "  FROM relaybus.deliveries d WHERE d.handler = u.handler AND d.lane = u.lane"
      "  AND d.position > u.acked AND d.position <= u.acked + $4 ORDER BY d.position) d"
      " UNION ALL"
      " SELECT 1, u.n, t.position, NULL, NULL, NULL, 0, 0, false"
      " FROM unnest($1::text[], $2::int2[], $3::int8[]) WITH ORDINALITY AS u(handler, lane, acked, "
      "n)"
      " CROSS JOIN LATERAL (SELECT d.position FROM relaybus.deliveries d"
      "  WHERE d.handler = u.handler AND d.lane = u.lane AND d.position > u.acked"
      "  ORDER BY d.position DESC LIMIT 1) t"
      " UNION ALL"
      // The lowest pending row of each key (a loose scan: exception_heads.hpp).
      " SELECT 2, h.n, x.position, x.event_id, x.key, x.available_at, x.attempts, x.claims, false"
      " FROM heads h JOIN relaybus.exceptions x"
      "  ON x.handler = h.handler AND x.lane = h.lane AND x.position = h.position"
      " UNION ALL"
      // The rows being retried, the lowest unkeyed row, and the due unkeyed rows not being
      // retried, earliest due first, up to a lane's room ($8).
      " SELECT 2, u.n, x.position, x.event_id, x.key, x.available_at, x.attempts, x.claims, false"
      " FROM unnest($1::text[], $2::int2[], $6::int4[], $7::int4[]) WITH ORDINALITY"
      "  AS u(handler, lane, rf, rc, n)"
      " CROSS JOIN LATERAL ("
      "  (SELECT x.* FROM relaybus.exceptions x WHERE x.handler = u.handler AND x.lane = u.lane"
      "   AND x.position = ANY (coalesce(($5::int8[])[u.rf:u.rf + u.rc - 1], '{}'))"
      "   AND x.status = 'pending')"
      "  UNION ALL"
      "  (SELECT x.* FROM relaybus.exceptions x WHERE x.handler = u.handler AND x.lane = u.lane"
      "   AND x.status = 'pending' AND x.key IS NULL ORDER BY x.position LIMIT 1)"
      "  UNION ALL"
      "  (SELECT x.* FROM relaybus.exceptions x WHERE x.handler = u.handler AND x.lane = u.lane"
      "   AND x.status = 'pending' AND x.key IS NULL AND x.available_at <= now()"
      "   AND x.position <> ALL (coalesce(($5::int8[])[u.rf:u.rf + u.rc - 1], '{}'))"
      "   ORDER BY x.available_at LIMIT $8)) x"
      " UNION ALL"
      // A lane due for lease renewal: its last finished delivery ($9, 0: not asked), if it
      // was published since core::LeaseRenewal::in_use_since_us ($10). One point lookup.
      " SELECT 3, u.n, d.position, NULL, NULL, NULL, 0, 0, false"
      " FROM unnest($1::text[], $2::int2[], $9::int8[]) WITH ORDINALITY"
      "  AS u(handler, lane, last, n)"
      " CROSS JOIN LATERAL (SELECT d.position FROM relaybus.deliveries d"
      "  WHERE u.last > 0 AND d.handler = u.handler AND d.lane = u.lane AND d.position = u.last"
      "  AND d.created_at >= $10 OFFSET 0) d",
      {TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID, INT8OID, INT8ARRAYOID, INT4ARRAYOID, INT4ARRAYOID,
       INT4OID, INT8ARRAYOID, TIMESTAMPTZOID});
  LaneList list;
  std::vector<std::int64_t> acked, retrying, last_finished;
  std::vector<std::int32_t> retry_firsts, retry_counts;
  for (const core::PositionsLane* l : lanes) {
    list.add(l->handler, l->lane);
    acked.push_back(l->progress.acked_upto);
    // A lane that rotates anyway (core::in_use_lane_rotates) is not looked up.
    const core::Position last = core::last_finished(l->progress);
    last_finished.push_back(l->lease_renewal_due && !core::in_use_lane_rotates(last) ? last : 0);
    retry_firsts.push_back(static_cast<std::int32_t>(retrying.size()) + 1);  // from 1
    retrying.insert(retrying.end(), l->retrying.begin(), l->retrying.end());
    retry_counts.push_back(static_cast<std::int32_t>(retrying.size()) + 1 - retry_firsts.back());
  }
  Params params;
  list.bind(params);
  params.int8_array(acked);
  params.int8(core::kPositionWindow);
  params.int8_array(retrying);
  params.int4_array(retry_firsts);
  params.int4_array(retry_counts);
  params.int4(core::kMaxInFlightPerLane);
  params.int8_array(last_finished);
  params.timestamptz(
      core::lease_renewal(GetCurrentTransactionStartTimestamp(), holder_.lease_us).in_use_since_us);
  const std::uint64_t n = read.run(params);
  std::vector<core::LaneContents> out(lanes.size());
  for (std::uint64_t r = 0; r < n; ++r) {
    const std::int32_t kind = row::int4(r, 1);
    const std::int64_t lane = row::int8(r, 2);
    if (lane < 1 || static_cast<std::size_t>(lane) > out.size())
      throw core::Error(core::ErrorCode::kInternal, "relaybus: a row of a lane not asked for");
    core::LaneContents& c = out[static_cast<std::size_t>(lane) - 1];
    const core::Position position = row::int8(r, 3);
    if (kind == 1) {
      c.tail = position;
    } else if (kind == 3) {
      c.in_use = true;
    } else if (kind == 0) {
      // Column 9: published without a delay (core::WindowEntry::due_when_visible): its
      // available_at is its publish's now(), as created_at is.
      c.window.push_back({position, row::text(r, 4), row::text_or_null(r, 5),
                          timestamp_of_row(r, 6), row::boolean(r, 9)});
    } else {
      c.pending.push_back({position, row::text(r, 4), row::text_or_null(r, 5),
                           timestamp_of_row(r, 6), row::int4(r, 7), row::int4(r, 8)});
    }
  }
  // Ascending, as core takes them (each arm returns them so; the union does not promise),
  // and each pending row once (a head may also be retried, due, or the lowest unkeyed).
  for (auto& c : out) {
    std::sort(c.window.begin(), c.window.end(),
              [](const auto& a, const auto& b) { return a.position < b.position; });
    std::sort(c.pending.begin(), c.pending.end(),
              [](const auto& a, const auto& b) { return a.position < b.position; });
    c.pending.erase(
        std::unique(c.pending.begin(), c.pending.end(),
                    [](const auto& a, const auto& b) { return a.position == b.position; }),
        c.pending.end());
  }
  return out;
}

std::vector<std::optional<std::int64_t>> PgPositionsClaimStore::due_heads(
    const std::vector<const core::PositionsLane*>& lanes, bool skip_retrying) {
  static Statement read(RELAYBUS_DUE_HEADS_SQL,
                        {TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID, INT4ARRAYOID, INT4ARRAYOID});
  std::vector<std::optional<std::int64_t>> out(lanes.size());
  if (lanes.empty()) return out;
  LaneList list;
  std::vector<std::int64_t> retrying;
  std::vector<std::int32_t> firsts, counts;
  for (const core::PositionsLane* l : lanes) {
    list.add(l->handler, l->lane);
    firsts.push_back(static_cast<std::int32_t>(retrying.size()) + 1);  // SQL arrays: from 1
    if (skip_retrying) retrying.insert(retrying.end(), l->retrying.begin(), l->retrying.end());
    counts.push_back(static_cast<std::int32_t>(retrying.size()) + 1 - firsts.back());
  }
  Params params;
  list.bind(params);
  params.int8_array(retrying);
  params.int4_array(firsts);
  params.int4_array(counts);
  const std::uint64_t n = read.run(params);
  for (std::uint64_t r = 0; r < n; ++r) {
    const std::int64_t lane = row::int8(r, 1);
    if (lane < 1 || static_cast<std::size_t>(lane) > out.size())
      throw core::Error(core::ErrorCode::kInternal, "relaybus: due heads of a lane not asked for");
    if (!row::is_null(r, 2)) out[static_cast<std::size_t>(lane) - 1] = timestamp_of_row(r, 2);
  }
  return out;
}

// The claimed deliveries with their events, as claim's result rows: one statement reads
// the events of the picks (type, payload, headers, published_at), in the picks' order.
void emit(const std::vector<core::PositionsClaimed>& claimed, ReturnSetInfo* rsinfo) {
  if (claimed.empty()) return;
  static Statement events(
      "SELECT e.type, e.payload, e.headers, e.published_at"
      " FROM unnest($1::text[]) WITH ORDINALITY AS u(id, n)"
      // One lookup per pick (fenced, OFFSET 0): a join planned while events looked empty
      // would read the whole table for every claim.
      " LEFT JOIN LATERAL (SELECT e.* FROM relaybus.events e WHERE e.id = u.id OFFSET 0) e"
      "  ON true ORDER BY u.n",
      {TEXTARRAYOID});
  std::vector<std::string> ids;
  ids.reserve(claimed.size());
  for (const auto& c : claimed) ids.push_back(c.event_id);
  Params params;
  params.text_array(ids);
  const std::uint64_t n = events.run(params);
  if (n != claimed.size())
    throw core::Error(core::ErrorCode::kInternal, "relaybus: the events of a claim were not read");
  for (std::uint64_t r = 0; r < n; ++r) {
    // A delivery without its event: refused, not handed out without a type or payload.
    if (row::is_null(r, 1))
      throw core::Error(core::ErrorCode::kInternal, "relaybus: a claimed delivery has no event");
  }
  for (std::uint64_t r = 0; r < n; ++r) {
    const core::PositionsClaimed& c = claimed[r];
    // The token carries the event's publish time, for the completion latency histogram.
    core::PositionToken carried = c.token;
    bool no_time = true;
    const TimestampTz published = DatumGetTimestampTz(row::datum(r, 4, &no_time));
    if (!no_time && !TIMESTAMP_NOT_FINITE(published)) carried.published_us = unix_us_of(published);
    const std::string token = core::encode(carried);
    Datum values[9];
    bool nulls[9] = {false, false, false, false, !c.key.has_value(), false, false, false, false};
    pg_call([&] {
      HeapTuple tuple = SPI_tuptable->vals[r];
      TupleDesc desc = SPI_tuptable->tupdesc;
      values[0] = PointerGetDatum(cstring_to_text_with_len(token.data(), token.size()));
      values[1] = PointerGetDatum(cstring_to_text_with_len(c.event_id.data(), c.event_id.size()));
      values[2] =
          PointerGetDatum(cstring_to_text_with_len(c.token.handler.data(), c.token.handler.size()));
      values[3] = SPI_getbinval(tuple, desc, 1, &nulls[3]);
      values[4] =
          c.key ? PointerGetDatum(cstring_to_text_with_len(c.key->data(), c.key->size())) : 0;
      values[5] = SPI_getbinval(tuple, desc, 2, &nulls[5]);
      values[6] = SPI_getbinval(tuple, desc, 3, &nulls[6]);
      values[7] = Int32GetDatum(c.attempts);
      values[8] = SPI_getbinval(tuple, desc, 4, &nulls[8]);
      tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    });
  }
}

// The same arguments, checks and errors as 0.2's claim (src/pg/claim.cpp).
Datum claim_positions_body(FunctionCallInfo fcinfo) {
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
  PgPositionsClaimStore store(LaneHolder{std::move(worker), lease_us, std::move(holder)});
  const std::vector<core::PositionsClaimed> claimed =
      core::run_positions_claim(store, requested, batch_size, has_holder);
  // One count per run of a handler's deliveries (a claim returns them handler by handler).
  for (std::size_t i = 0, j = 0; i < claimed.size(); i = j) {
    while (j < claimed.size() && claimed[j].token.handler == claimed[i].token.handler) ++j;
    counters::add(counters::kClaimed, claimed[i].token.handler, j - i);
  }
  emit(claimed, rsinfo);
  spi.finish();
  return (Datum)0;
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_claim_positions, relaybus::pg::claim_positions_body)
