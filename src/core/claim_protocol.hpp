// The claim, as one protocol every store runs: which lanes a worker keeps, takes over and
// acquires, in which order, what each costs, which deliveries it picks and what it writes.
// A store implements ClaimStore (reads of lane and delivery state, writes of decisions,
// each a set-based statement in the PostgreSQL store) and run_claim() makes every decision.
//
// The steps, in the one order that is right:
//   1. the handlers (the requested ones must be subscribed);
//   2. the lanes held under the worker's name, locked: its own incarnation's are kept, an
//      orphan or another incarnation's expired lane is taken over, another live
//      incarnation's is left alone (lane_lease.hpp, classify_held_lane);
//   3. takeovers charge the deliveries in flight one lost attempt each, with no backoff
//      (retry_policy.hpp, after_lost_attempt), then the kept lanes' due deliveries are
//      offered to the batch;
//   4. while the batch has room: free or expired lanes with due work, oldest work first,
//      acquired in rounds of 4, 8, 16, ... (lanes_to_acquire), their expired ones charged,
//      their due deliveries offered;
//   5. one write of every lane whose state changed (plan_lane_write: the epoch moves when
//      a lane changes hands, which fences the previous holder's tokens);
//   6. a token per picked delivery (lease_token.hpp).
// Per-key order is decided by BatchPlanner (batch_planner.hpp) over the candidates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lane_lease.hpp"
#include "lease_token.hpp"
#include "retry_policy.hpp"

namespace relaybus::core {

struct LaneRef {
  std::string handler;
  std::int16_t lane = 0;
};

// A subscribed handler as a claim sees it. A paused one (relaybus.pause) keeps its
// deliveries, and no claim hands them out until it is resumed.
struct SubscribedHandler {
  std::string name;
  bool paused = false;
};

// Step 1 of a claim, shared by run_claim and run_positions_claim (positions_claim.hpp):
// validates the requested names (before the store is asked), then, from what the store
// found subscribed, the handlers the claim runs, in the store's order. A requested handler
// that is not subscribed is kUndefinedObject with a hint; a paused one is subscribed (asking
// for it is no error) but left out, so none of its lanes is kept, taken over or acquired.
void validate_requested_handlers(const std::optional<std::vector<std::string>>& requested);
std::vector<std::string> handlers_to_claim(const std::optional<std::vector<std::string>>& requested,
                                           const std::vector<SubscribedHandler>& subscribed);

struct DeliveryRef {
  std::string handler;
  std::string event_id;
};

// A lane as a store read it, locked for this claim.
struct LaneSnapshot {
  std::string handler;
  std::int16_t lane = 0;
  std::int64_t epoch = 0;
  std::vector<std::string> in_flight;  // event ids of its live in-flight deliveries
  // Stores with conditional writes only: what a takeover moved out of in_flight in the
  // write that bumped the epoch, not charged yet (a claim that died in between left it).
  std::vector<std::string> lost;
};

// A lane held under the caller's worker name, with whose incarnation it is bound to.
struct HeldLane {
  LaneSnapshot lane;
  LaneBinding binding;
  std::vector<std::string> in_flight_keys;  // the ordering keys of its in-flight deliveries
};

// A free or expired lane a claim locked from a window of lanes_with_work().
struct AcquiredLane {
  LaneSnapshot lane;
  bool had_owner = false;           // another worker's expired lease (a takeover), not a free lane
  std::size_t window_position = 0;  // 1-based, in the window it was locked from
};

// A delivery that was in flight in a lane taken over, locked, as it is now.
struct LostDelivery {
  std::string handler;
  std::string event_id;
  std::int32_t attempts = 0;
  RetryPolicy policy;
};

// What a takeover writes to one lost delivery: its attempts, dead or still pending (due
// as it was), its claims counter bumped, last_error saying the lease was lost.
struct Charge {
  std::string handler;
  std::string event_id;
  std::int32_t attempts = 0;
  bool dead = false;
};

// The last_error a takeover charge writes.
inline constexpr const char* kLeaseLostError =
    "lease lost: lane taken over while the delivery was in flight";

// The charges of deliveries lost in a takeover (after_lost_attempt for each).
std::vector<Charge> charges_for(const std::vector<LostDelivery>& lost);

// A lane whose due deliveries a claim asks for, and how many it may still take.
struct CandidateLane {
  const LaneSnapshot* lane = nullptr;
  std::vector<std::string> excluded;  // in flight, or already picked: not candidates
  // At most this many rows of the lane: lane_room() of its in-flight deliveries and
  // picks, widened in a later round of the same claim when rows of the lane were refused
  // (run_claim takes no more than the room; see offer_candidates).
  int room = 0;
};

// A due pending delivery of one of the lanes asked for.
struct CandidateRow {
  std::size_t lane_index = 0;  // into the CandidateLane list passed
  std::string event_id;
  std::optional<std::string> key;
  std::int32_t attempts = 0;
  std::int32_t claims = 0;
  // An earlier pending delivery of its handler and key exists. A store may answer it in
  // its query instead and return no such candidate (the PostgreSQL store does: the SQL
  // copy of has_pending_predecessor() is RELAYBUS_NO_PENDING_PREDECESSOR_SQL in
  // src/pg/claim.cpp).
  bool has_pending_predecessor = false;
};

// The per-key rule for one keyed delivery: an earlier delivery (lower sequence) of its
// handler and key is still pending (a running one is pending too; dead or completed ones
// are not).
bool has_pending_predecessor(std::int64_t sequence,
                             const std::vector<std::int64_t>& pending_sequences_of_key) noexcept;

// The takeover step a claim and the maintenance worker share: lock what was in flight,
// write the charges.
class ChargeStore {
 public:
  virtual ~ChargeStore() = default;
  // Locks those of `deliveries` that are still pending, and reads them.
  virtual std::vector<LostDelivery> lock_lost(const std::vector<DeliveryRef>& deliveries) = 0;
  virtual void write_charges(const std::vector<Charge>& charges) = 0;
};

// Charges everything in flight in `lanes` (taken over): after_lost_attempt for each.
void charge_in_flight(ChargeStore& store, const std::vector<const LaneSnapshot*>& lanes);

// One lane's write at the end of a claim.
struct LaneUpdate {
  std::string handler;
  std::int16_t lane = 0;
  LaneWrite write;
  std::vector<std::string> in_flight;  // when held: its in-flight deliveries and the picks
  // Stores with conditional writes only: the epoch the claim read, which the write is
  // conditional on, and the lost list to record with it (a takeover's in-flight
  // deliveries, charged once the write took effect).
  std::int64_t read_epoch = 0;
  std::vector<std::string> lost;
};

// How a store keeps two claims off one lane.
enum class LaneConcurrency {
  // Its reads lock the lanes (PostgreSQL: FOR UPDATE, SKIP LOCKED): a claim's writes cannot
  // fail, so a takeover charges what was in flight at once.
  kLocks,
  // Nothing is locked (MongoDB): every lane write is conditional on the lane being as the
  // claim read it (its epoch, and a write counter the store keeps that every lane write
  // moves, an attempt's end included) and may fail, because another write got there first. Then a
  // takeover records the
  // in-flight deliveries as lost in the write that bumps the epoch and charges them only
  // once that write took effect (they run in a later claim, not this one); a lane whose
  // write failed gives up its picks; a lane found with a lost list left by a claim that
  // died in between is charged first, by whoever holds it next.
  kConditionalWrites,
};

// What a claim reads and writes. Locks are the store's business; the comments say what
// each call must guarantee.
class ClaimStore : public ChargeStore {
 public:
  virtual LaneConcurrency concurrency() const { return LaneConcurrency::kLocks; }
  // The handlers external workers run (requested: nullopt), or those of `requested` that
  // are subscribed, sorted, each with whether it is paused (run_claim skips those).
  virtual std::vector<SubscribedHandler> subscribed_handlers(
      const std::optional<std::vector<std::string>>& requested) = 0;
  // The lanes of `handlers` held under the worker's name, locked against other claims of
  // it, with their live in-flight deliveries read after the lock.
  virtual std::vector<HeldLane> held_lanes(const std::vector<std::string>& handlers) = 0;
  // Locks lanes to take over and re-reads them. A lane whose completion is in progress in
  // an open transaction must not be taken over under it: the store waits for it, or
  // leaves the lane out of the result.
  virtual std::vector<LaneSnapshot> lock_for_takeover(const std::vector<LaneRef>& lanes) = 0;
  // Lanes of `handlers` with due work that the worker may acquire (free, or another
  // worker's expired lease), oldest work first; unlocked.
  virtual std::vector<LaneRef> lanes_with_work(const std::vector<std::string>& handlers) = 0;
  // Locks up to `wanted` lanes of `window` that are still acquirable, in window order,
  // skipping lanes another transaction has locked (never waiting).
  virtual std::vector<AcquiredLane> lock_acquirable(const std::vector<LaneRef>& window,
                                                    int wanted) = 0;
  // Due pending deliveries of `lanes` not excluded, in due order (available_at, event id),
  // at most `limit` in all and at most each lane's room from it.
  virtual std::vector<CandidateRow> candidates(const std::vector<CandidateLane>& lanes,
                                               int limit) = 0;
  // Writes every lane update (one statement, or one bulk write); returns, per update,
  // whether it took effect (kLocks: always).
  virtual std::vector<bool> write_lanes(const std::vector<LaneUpdate>& updates) = 0;
  // kConditionalWrites: the lost lists of these lanes (at these epochs) were charged.
  virtual void clear_lost(const std::vector<LaneRef>& lanes,
                          const std::vector<std::int64_t>& epochs) {
    (void)lanes;
    (void)epochs;
  }
};

struct ClaimedDelivery {
  LeaseToken token;  // lane, epoch, claims, handler, event id
  std::optional<std::string> key;
  std::int32_t attempts = 0;
};

// Runs one claim of up to `batch_size` deliveries (validated by the caller) for a worker
// whose incarnation is an explicit holder (`caller_has_holder`) or its backend. Throws
// core::Error kUndefinedObject for a requested handler that is not subscribed.
std::vector<ClaimedDelivery> run_claim(ClaimStore& store,
                                       const std::optional<std::vector<std::string>>& requested,
                                       int batch_size, bool caller_has_holder);

}  // namespace relaybus::core
