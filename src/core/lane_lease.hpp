// What a claim does with each lane it looked at. Workers lease lanes, not deliveries: a
// claim writes one lane row per lane whose state changes and nothing else.
#pragma once

#include <cstddef>
#include <cstdint>

namespace relaybus::core {

// How the claim came to hold the lane in this call.
enum class LaneOrigin {
  kHeld,      // the worker already held it under its own incarnation: keep it
  kFree,      // nobody held it
  kExpired,   // another worker's lease expired, or another incarnation's of this worker
              // name: take it over
  kOrphaned,  // held under this worker's name by an incarnation that is gone (a name reused
              // after a crash): take it over, exactly like an expired lease
  kOthers,    // held under this worker's name by another live incarnation whose lease is
              // live: leave it alone (neither adopt nor take over)
};

// The incarnation a lane is bound to. A claim that passes a holder binds the lanes it
// acquires to (worker, holder): any connection passing the same pair holds them, so a pool
// that closes or swaps connections changes nothing. Without a holder they are bound to the
// backend that acquired them, and every connection of that worker name shares them while
// that backend lives.
struct LaneBinding {
  bool to_holder = false;      // bound to an explicit holder, else to the acquiring backend
  bool same_holder = false;    // to_holder: it is the caller's holder
  bool backend_alive = false;  // !to_holder: the acquiring backend is alive
  bool lease_expired = false;
};

// Whether a lane held under the caller's worker name belongs to the caller's incarnation:
// same holder; or, for a caller without holder, a backend-bound lane whose backend lives.
// Copied in SQL, for set-based renewals and hand-backs: RELAYBUS_LANE_IS_CALLERS_SQL in
// src/pg/holder.hpp (test/pgtap/24_holders.sql feeds both every combination).
bool is_callers(const LaneBinding& lane, bool caller_has_holder) noexcept;

// What a claim does with a lane held under its worker name: kHeld (the caller's), kOrphaned
// (bound to a backend that is gone), kExpired (another incarnation's, lease expired) or
// kOthers (another live incarnation's, lease live).
LaneOrigin classify_held_lane(const LaneBinding& lane, bool caller_has_holder) noexcept;

// Whether a claim may acquire a lane that is not held under its worker name: nobody holds
// it, or its lease expired (a worker's own lanes, expired or not, come from its held
// lanes instead). SQL copy: RELAYBUS_ACQUIRABLE_SQL (src/pg/lane_lease_sql.hpp); the contract
// suite's expiry cases run both.
bool acquirable(bool has_owner, bool lease_expired, bool owner_is_caller) noexcept;

// Whether the maintenance takeover takes a lane: it is held and its lease expired. SQL
// copy: RELAYBUS_DUE_FOR_TAKEOVER_SQL (src/pg/lane_lease_sql.hpp), take_over_expired's lock.
bool due_for_takeover(bool has_owner, bool lease_expired) noexcept;

// "In flight" means one thing everywhere: an entry of a lane's in-flight list whose
// delivery is still pending (lists are pruned lazily; a completion deletes the delivery
// but does not write the lane). SQL copies: src/pg/in_flight.hpp, and statistics() and
// list_deliveries() in sql/parts/api-0.2.0.sql.
//
// That holds only while an entry's id cannot name a newer delivery, so the purge that
// deletes an event also takes its id off every lane's lists, in the same write: once the
// event is gone, a publish of the id is a new event with a new delivery, and an entry left
// from the old one would pass it off as a running attempt (the lane's worker would keep it
// "in flight" and never hand it out; a takeover would charge it an attempt it never had).
// Every store's purge_expired does so; the contract suite checks it
// (RepublishAfterPurgeIsDeliveredToTheWorkerThatRanTheOld).
bool counts_in_flight(bool delivery_pending) noexcept;

// A takeover charges the in-flight deliveries of the previous holder one attempt each.
bool charges_in_flight(LaneOrigin origin) noexcept;

struct LaneWrite {
  bool write = false;       // false: leave the row untouched (no WAL, no dead tuple)
  bool hold = false;        // true: lease it to the worker; false: hand it back
  bool new_holder = false;  // bind it to the caller's incarnation (holder, or backend)
  std::int64_t epoch = 0;   // the epoch to store; tokens of this claim carry it
};

// The write for one lane after the batch was picked. The epoch moves whenever the lane
// changes hands, which is what fences the previous holder's tokens.
LaneWrite plan_lane_write(LaneOrigin origin, std::int64_t epoch, bool has_live_in_flight,
                          bool got_picks) noexcept;

// At most this many deliveries of one lane are in flight at once (a worker's running ones
// plus a claim's new picks). The in-flight list lives in the lane row, and every claim that
// picks from the lane rewrites that row: bounded, the row stays small enough that its new
// versions fit on the lane's page and the update stays heap-only (HOT). Unbounded, a
// claim of 200 from four lanes wrote rows of 50 event ids and a few percent of lane
// updates moved to other pages (and into the lanes index). A batch larger than this
// simply spreads over more lanes; a lane's ordering keys are unaffected.
//
// One source: scripts/build-sql writes it into the 0.2.0 scripts as @LANE_MAX_IN_FLIGHT@
// (the lanes table's comment; no SQL enforces it, claim does).
inline constexpr int kMaxInFlightPerLane = 32;

// How many more deliveries a lane with `in_flight` deliveries in flight (picks included)
// may take: kMaxInFlightPerLane - in_flight, never below 0.
int lane_room(std::size_t in_flight) noexcept;

// How many free lanes to try to acquire in acquisition round `round` (0-based) when the
// batch still has `remaining` places: 4, 8, 16, ... so a worker only holds as many lanes as
// its batch needs, never more than `remaining` and never more than 64 in one step.
int lanes_to_acquire(int round, int remaining) noexcept;

// When a 0.3.0 claim rewrites the lease of a lane it keeps. A claim promises each lane it
// holds for at least `lease` from now; renewing on every claim would rewrite every held
// lane's lease row once per batch, and under a held snapshot each of those versions stays.
// So a lease is renewed only when less than `lease` is left, and then to now + 1.5 x lease:
// a held lane's row is rewritten at most once per half lease by claims. A lease longer than
// that (taken by an earlier claim with a longer lease) is cut back to it, so a lane is never
// held for more than 1.5 x the lease of the last claim that kept it. The price: a worker
// that dies leaves its lanes for up to 1.5 x lease before they are taken over.
// A held lane that is idle when its renewal falls due is handed back, unless a delivery was
// published into it since about its last renewal (`in_use_since_us`, half a lease ago): a
// lane in use would be acquired again at its next delivery, two writes where a renewal is
// one, and at a steady rate every lane is idle between its deliveries most of the time
// (one such renewal in four hands it back all the same: in_use_lane_rotates).
struct LeaseRenewal {
  std::int64_t renew_before_us = 0;  // a lease expiring before this is renewed
  std::int64_t expires_at_us = 0;    // to this; one expiring after this is cut back to it
  std::int64_t in_use_since_us = 0;  // an idle lane published into since: renewed (mostly)
  // Whether a lease expiring at `expires_at` is rewritten.
  bool due(std::int64_t lease_expires_at_us) const noexcept {
    return lease_expires_at_us < renew_before_us || lease_expires_at_us > expires_at_us;
  }
};
LeaseRenewal lease_renewal(std::int64_t now_us, std::int64_t lease_us) noexcept;

}  // namespace relaybus::core
