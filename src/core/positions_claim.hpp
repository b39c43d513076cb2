// 0.3.0's claim and takeover over positions (positions.hpp): which lanes a worker keeps,
// takes over and acquires, in which order, which exception rows and window positions it
// picks, what it writes and the tokens it hands out. A store implements
// PositionsClaimStore (reads of lane rows, windows and exception rows; writes of exception
// rows and lane rows, each one set-based statement in the PostgreSQL store) and
// run_positions_claim() makes every decision, as run_claim (claim_protocol.hpp) does for
// 0.2's lanes, with the same pieces: handlers_to_claim, classify_held_lane,
// lanes_to_acquire, plan_lane_write, after_lost_attempt.
//
// The steps (docs/design.md, "0.3.0: the store", Claim):
//   1. the handlers (requested ones subscribed, paused ones left out);
//   2. the lanes held under the worker's name, locked: its own incarnation's are kept, an
//      orphan or another incarnation's expired lane is taken over, another live
//      incarnation's is left alone;
//   3. a takeover (there, and of an expired lane acquired in 4): every window position in
//      flight becomes an exception row charged one lost attempt, every `retrying` position's
//      exception row is charged the same way, the epoch moves, both lists are emptied;
//   4. per lane, oldest work first, while the batch has room: its due pending exception
//      rows first (pick_exceptions), then its window (plan_lane); held lanes first, then
//      free or expired lanes with work, acquired in rounds of 4, 8, 16, ...;
//   5. the writes: exception rows (takeover charges, DEFER, PARK), then one write of every
//      lane that changed; a lane with nothing left goes back (positions_lane_write);
//   6. a token per pick: lane, the written epoch, position, the exception row's claims (0 for
//      a window pick).
//
// Only stores whose reads lock the lanes (LaneConcurrency::kLocks) run it: every lane write
// takes effect. 0.3.0's MongoDB store stays on 0.2's lanes (docs/mongodb.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "claim_protocol.hpp"
#include "lane_lease.hpp"
#include "lease_token.hpp"
#include "positions.hpp"
#include "retry_policy.hpp"

namespace relaybus::core {

// The claims counter of an exception row made from a window position whose attempt ended
// (a takeover's charge): that attempt's token carried 0, so the row starts at 1 and no
// token of the ended attempt matches it. Rows made by DEFER and PARK start at 0: their
// position never ran, so no token of it exists.
inline constexpr std::int32_t kClaimsAfterWindowAttempt = 1;

// A subscribed handler with the retry policy its takeovers charge by.
struct PositionsHandler {
  SubscribedHandler subscription;
  RetryPolicy policy;
};

// A lane row as a store read it, locked for this call.
struct PositionsLane {
  std::string handler;
  std::int16_t lane = 0;
  std::int64_t epoch = 0;
  LaneProgress progress;
  PositionSet retrying;  // positions of exception rows its holder runs
  // A lane the caller holds: less than the claim's lease is left (lease_renewal), so its
  // lease row is written anyway. Until then an idle held lane is kept as it is. False for a
  // lane the claim acquires or takes over (it gets a new lease whatever it holds).
  bool lease_renewal_due = true;
};

// Whether and since when a held lane has work, read without its window: its first window
// delivery neither finished nor in flight, and its earliest due head of pending exception
// rows not being retried, as held_lane_probe says of a read lane.
struct HeldLaneProbe {
  std::optional<std::int64_t> window_since_us;   // that delivery's available_at
  std::optional<std::int64_t> due_exception_us;  // the earliest of those rows' available_at
};

// A lane held under the caller's worker name, with the incarnation it is bound to. From
// held_lanes, also its probe (held_lane_probe of the lane as read, unlocked).
struct HeldPositionsLane {
  PositionsLane lane;
  LaneBinding binding;
  HeldLaneProbe probe;
};

// A free or expired lane a claim locked from a window of lanes_with_work().
struct AcquiredPositionsLane {
  PositionsLane lane;
  bool had_owner = false;           // another worker's expired lease (a takeover)
  std::size_t window_position = 0;  // 1-based, in the window it was locked from
};

// An acquirable lane (free, or another worker's expired lease) as read without a lock,
// with what says whether and since when it has work.
struct LaneWorkProbe {
  LaneRef lane;
  bool has_owner = false;  // an expired lease: its takeover is work
  LaneProgress progress;
  PositionSet retrying;
  // The lane's first delivery above its cursor (nullopt: none), its position and due time.
  // Its position stands in for the tail: lane_has_work only grows with the tail, and what
  // it can miss below the real tail is a lane whose next position is already in flight,
  // which is work here only under an expired lease (counted apart). So one forward probe
  // per lane answers both whether and since when, where a tail would take a second one.
  std::optional<Position> first_position;
  std::optional<std::int64_t> first_available_us;
  // The earliest available_at of the lane's due heads of pending exception rows (the lowest
  // row of a key, or an unkeyed row; nullopt: none).
  std::optional<std::int64_t> due_exception_us;
};

// A delivery of a lane's window, as read.
struct WindowDelivery {
  Position position = 0;
  std::string event_id;
  std::optional<std::string> key;
  std::int64_t available_at_us = 0;
  bool due_when_visible = false;  // published without a delay (WindowEntry)
};

// A pending exception row, as read (or as a takeover of this claim made it).
struct PendingException {
  Position position = 0;
  std::string event_id;
  std::optional<std::string> key;
  std::int64_t available_at_us = 0;
  std::int32_t attempts = 0;
  std::int32_t claims = 0;
};

// What a claim reads of a locked lane, in one snapshot.
struct LaneContents {
  // The deliveries at positions (acked_upto, acked_upto + kPositionWindow], ascending; a
  // position of the window without one (up to the tail) is absent.
  std::vector<WindowDelivery> window;
  Position tail = 0;  // the lane's last position (0: none above the cursor)
  // Its pending exception rows, ascending by position: at least the lowest row of each key,
  // the rows in `retrying`, the lowest unkeyed row, and its due unkeyed rows not being
  // retried (earliest due first, up to kMaxInFlightPerLane of them). A store may pass every
  // pending row: the claim decides the same from either (the rows behind a key's lowest
  // wait for it), except which unkeyed rows it takes when more than a lane's room of them
  // are due (unkeyed rows have no order to keep).
  std::vector<PendingException> pending;
  // Of a held lane due for lease renewal (PositionsLane::lease_renewal_due): whether its last
  // finished delivery (last_finished) was published since LeaseRenewal::in_use_since_us. Not
  // read otherwise, nor for a lane that rotates anyway (in_use_lane_rotates).
  bool in_use = false;
};

// An exception row to insert, taking event id, key and created_at from its delivery row.
struct NewException {
  std::string handler;
  std::int16_t lane = 0;
  Position position = 0;
  bool dead = false;
  std::int32_t attempts = 0;
  std::int32_t claims = 0;
  std::int64_t available_at_us = 0;
  bool lease_lost = false;  // a takeover's charge: last_error says so (kLeaseLostError)
};

// A takeover's charge of a pending exception row that was being retried: attempts and
// status as decided, claims + 1, due at available_at_us, last_error kLeaseLostError.
struct ExceptionCharge {
  std::string handler;
  std::int16_t lane = 0;
  Position position = 0;
  std::int32_t attempts = 0;
  bool dead = false;
  std::int64_t available_at_us = 0;
};

// One lane's write: its lease (LaneWrite: hold or hand back, bind to the caller, epoch)
// and its progress. A lane handed back has empty in_flight and retrying.
struct PositionsLaneWrite {
  std::string handler;
  std::int16_t lane = 0;
  LaneWrite write;
  LaneProgress progress;
  PositionSet retrying;
};

// The writes a claim and a takeover make. Exception rows are written before the lanes.
class PositionsWriteStore {
 public:
  virtual ~PositionsWriteStore() = default;
  virtual void insert_exceptions(const std::vector<NewException>& rows) = 0;
  virtual void charge_exceptions(const std::vector<ExceptionCharge>& charges) = 0;
  virtual void write_lanes(const std::vector<PositionsLaneWrite>& writes) = 0;
};

// What a claim reads and writes. Locks are the store's business; the comments say what
// each call must guarantee.
class PositionsClaimStore : public PositionsWriteStore {
 public:
  // The time due times are judged against (the same clock as available_at).
  virtual std::int64_t now_us() = 0;
  // The handlers external workers run (requested: nullopt), or those of `requested` that
  // are subscribed, sorted, each with whether it is paused and its retry policy.
  virtual std::vector<PositionsHandler> subscribed_handlers(
      const std::optional<std::vector<std::string>>& requested) = 0;
  // The lanes of `handlers` held under the worker's name, as they are now, unlocked, each
  // with its probe (held_lane_probe of what was read, with the claim's now_us). A worker
  // may hold every lane of a handler while a claim acts on a few: only those are locked.
  virtual std::vector<HeldPositionsLane> held_lanes(const std::vector<std::string>& handlers) = 0;
  // Locks these lanes (from held_lanes) against other claims and completions of the worker,
  // in the one lane order, and re-reads them after the lock: those no longer held under
  // the worker's name are left out. Their probe is not read again. `wait`: waits for a lane
  // another transaction has locked; otherwise leaves it out (a claim waits only in its
  // first lock statement, so it never waits while it holds a lane out of order).
  virtual std::vector<HeldPositionsLane> lock_held(const std::vector<LaneRef>& lanes,
                                                   bool wait) = 0;
  // Locks lanes to take over (waiting for a completion in progress in an open
  // transaction) and re-reads them.
  virtual std::vector<PositionsLane> lock_for_takeover(const std::vector<LaneRef>& lanes) = 0;
  // The lanes of `handlers` the worker may acquire (core::acquirable), unlocked, each with
  // its work probe. Order does not matter: run_positions_claim orders them.
  virtual std::vector<LaneWorkProbe> lanes_with_work(const std::vector<std::string>& handlers) = 0;
  // Locks up to `wanted` lanes of `window` that are still acquirable, in window order,
  // skipping lanes another transaction has locked (never waiting).
  virtual std::vector<AcquiredPositionsLane> lock_acquirable(const std::vector<LaneRef>& window,
                                                             int wanted) = 0;
  // The contents of these locked lanes (as they are now: read after the locks and after
  // this claim's earlier writes), one per lane in the order given; LaneContents::in_use of
  // those due for lease renewal.
  virtual std::vector<LaneContents> read_lanes(const std::vector<const PositionsLane*>& lanes) = 0;
};

// A delivery a claim hands out.
struct PositionsClaimed {
  PositionToken token;  // lane, written epoch, position, claims, handler
  std::string event_id;
  std::optional<std::string> key;
  std::int32_t attempts = 0;  // the exception row's (0 for a window pick)
};

// Runs one claim of up to `batch_size` deliveries (validated by the caller) for a worker
// whose incarnation is an explicit holder (`caller_has_holder`) or its backend. Throws
// core::Error kUndefinedObject for a requested handler that is not subscribed.
std::vector<PositionsClaimed> run_positions_claim(
    PositionsClaimStore& store, const std::optional<std::vector<std::string>>& requested,
    int batch_size, bool caller_has_holder);

// ---- The rules run_positions_claim is made of, each usable (and tested) on its own. ----

// Whether an acquirable lane has work for a claim: something to decide in its window
// (lane_has_work), a due pending exception row, or, under an expired lease, positions its
// holder ran (in flight or retrying), which its takeover charges and makes due. The last
// one is what lets a claim take over an expired lane without the background worker.
bool acquirable_lane_has_work(const LaneWorkProbe& probe) noexcept;

// When a lane's work began, for "oldest work first": the earlier of its window's
// (`window_since_us`, when it has window work) and of its due exception rows'. nullopt:
// neither is known.
std::optional<std::int64_t> work_since(std::optional<std::int64_t> window_since_us,
                                       std::optional<std::int64_t> due_exception_us) noexcept;

// A held lane's probe from its contents, the rule held_lanes' probes follow: the first window
// delivery above the cursor neither in done nor in in_flight, and the earliest due
// (available_at <= now_us) head of its pending exception rows not in retrying, a head being
// the lowest row of a key, or an unkeyed row. `contents.pending` may hold every pending row
// of the lane or only what LaneContents promises.
HeldLaneProbe held_lane_probe(const PositionsLane& lane, const LaneContents& contents,
                              std::int64_t now_us);

// Whether a held lane, as held_lanes read it with its probe, can get work only from a
// publish or a requeue: no window delivery left to decide, nothing running or finished
// above its cursor, and no pending exception row at all (`has_pending_rows`: a row not yet
// due becomes work with time alone). A store may pass over such a lane until one of those
// changes it (src/pg/lane_changes.hpp).
bool held_lane_quiet(const PositionsLane& lane, const HeldLaneProbe& probe,
                     bool has_pending_rows) noexcept;

// The acquirable lanes with work, oldest work first (lanes without a known time last), then
// by handler and lane.
std::vector<LaneRef> lanes_to_try(std::vector<LaneWorkProbe> probes);

// A takeover of one lane: every window position in flight becomes an exception row charged
// one lost attempt (takeover_of_positions); every retrying position's pending exception row
// (in `rows`; one without a row is only dropped) is charged the same way from its attempts,
// claims + 1; both lists empty, and the epoch moves as plan_lane_write moves it for a lane
// taken over.
struct LaneTakeover {
  std::vector<NewException> lost;        // from window positions, ascending
  std::vector<ExceptionCharge> retries;  // ascending
  LaneProgress progress;                 // in_flight empty, the lost positions finished
  std::int64_t epoch = 0;                // the epoch after the takeover
};
LaneTakeover take_over_positions_lane(const PositionsLane& lane,
                                      const std::vector<PendingException>& rows,
                                      const RetryPolicy& policy, std::int64_t now_us);

// The exception rows of one lane a claim picks (indexes into `pending`, ascending by
// position): due, not being retried, the lowest pending position of its key only, none of
// a key that is being retried, in flight in the window (`keys_in_flight`) or already in
// the batch (`keys_in_batch`), at most `room` (never below 0). Unkeyed rows need only be
// due and not retried. `pending` ascending by position.
std::vector<std::size_t> pick_exceptions(const std::vector<PendingException>& pending,
                                         const PositionSet& retrying, const KeySet& keys_in_flight,
                                         const KeySet& keys_in_batch, int room,
                                         std::int64_t now_us);

// What a claim did to a lane, for its write.
struct LaneOutcome {
  bool changed = false;         // picks, finished positions or a takeover: the row changes
  bool runs_something = false;  // in_flight or retrying not empty after the claim
  // Something is left for a holder: a position up to the tail unfinished (!lane_idle), or
  // a pending exception row.
  bool has_remaining = false;
  // A held lane's lease row is due for renewal (PositionsLane::lease_renewal_due).
  bool lease_renewal_due = true;
  // A held lane had a delivery published since about its last renewal (LaneContents::in_use).
  bool in_use = false;
};

// The write of one lane at the end of a claim, through plan_lane_write's epoch rule: a lane
// that runs something is held; a held lane with something left stays held (written if it
// changed, or to renew its lease once due); a held lane with nothing left stays held,
// unwritten, until its lease is due for renewal, and then goes back instead unless it is in use
// (renewed: LeaseRenewal says why) (a write either way, and a lease row rewritten at every claim
// would leave a version per claim under a held snapshot);
// a lane acquired in this claim that runs nothing is not kept (written only for what changed; a
// takeover always is, at a new epoch).
LaneWrite positions_lane_write(LaneOrigin origin, std::int64_t epoch,
                               const LaneOutcome& outcome) noexcept;

// Whether an idle held lane in use (LaneContents::in_use) is handed back at its renewal all
// the same: when its last finished position (last_finished) is a multiple of
// kInUseRotation. Renewed whenever in use, a lane a worker keeps busy would never reach a
// worker that joins later; so about one renewal in four hands it back, and lanes still
// spread over the workers claiming the handler within a few half leases, for 1.25 lease
// writes per half lease on average instead of the 2 of handing back at every renewal.
// Deterministic, from the lane's own positions.
inline constexpr Position kInUseRotation = 4;
bool in_use_lane_rotates(Position last_finished) noexcept;

// ---- The maintenance takeover (take_over_expired). ----

// A lane whose lease expired, locked, with its handler's policy (core's defaults for a
// handler no longer subscribed).
struct ExpiredPositionsLane {
  PositionsLane lane;
  RetryPolicy policy;
};

class PositionsTakeoverStore : public PositionsWriteStore {
 public:
  // The pending exception rows of each lane's retrying positions, one list per lane in the
  // order given.
  virtual std::vector<std::vector<PendingException>> retrying_rows(
      const std::vector<const PositionsLane*>& lanes) = 0;
};

// Takes over `lanes` (locked by the caller: due_for_takeover chose them): charges as
// take_over_positions_lane, then hands each lane back at its new epoch. Returns how many.
int take_over_expired_positions(PositionsTakeoverStore& store,
                                const std::vector<ExpiredPositionsLane>& lanes,
                                std::int64_t now_us);

}  // namespace relaybus::core
