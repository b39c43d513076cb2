// How an attempt ends without completing (fail, bury, release), and the fence every end
// and every completion checks. Every store applies these; none decides them itself.
#pragma once

#include <cstdint>

#include "lease_token.hpp"
#include "retry_policy.hpp"

namespace relaybus::core {

// What a store read of a token's lane and delivery, as of the lock it took on them.
struct FenceView {
  bool lane_found = false;
  std::int64_t lane_epoch = 0;
  bool listed_in_flight = false;  // the lane's in-flight list names the token's delivery
  bool delivery_found = false;
  bool delivery_pending = false;
  std::int32_t delivery_claims = 0;
};

// The fence of a lease token: it still holds its delivery when the lane still has the
// token's epoch and lists the delivery in flight, and the delivery is pending with the
// token's claims counter. A takeover moves the epoch; every end of a claim (fail, bury,
// release, takeover, requeue) bumps the claims counter; so an older attempt's token can
// never change a newer one. Copied in SQL where it must be set-based:
// RELAYBUS_COMPLETE_HELD_SQL (src/pg/completion.cpp, complete and complete_many; no status
// test there, the bumped counter covers it) and the WHERE clauses of the lock statements in
// src/pg/attempt_end.cpp (which lock only rows that hold, then let this judge them).
// test/contract runs the same fencing cases against the in-memory store (this function)
// and the PostgreSQL store (the SQL).
bool token_holds(const LeaseToken& token, const FenceView& fence) noexcept;
// Its lane half, which a store may check before it locks the delivery at all.
bool lane_holds(const LeaseToken& token, const FenceView& fence) noexcept;

enum class Ending { kFail, kBury, kRelease };

enum class AttemptResult {
  kRetry,     // fail: charged, claimable again after the delay
  kDead,      // fail at the budget's end, or bury: charged, dead-lettered
  kReleased,  // release: given back uncharged, claimable at once
  kLost,      // the token no longer holds its delivery: nothing is written
};

// The write an ended attempt makes to its delivery. Every one also bumps the delivery's
// claims counter (its token dies) and takes it off its lane's in-flight list.
struct AttemptEnd {
  AttemptResult result = AttemptResult::kLost;
  std::int32_t attempts = 0;  // the delivery's attempts afterwards
  bool dead = false;
  // kRetry without a caller-given retry time: due again this long from now. Otherwise
  // the due time stays as it was (release: it was due, so it is at once).
  std::int64_t delay_us = 0;
  bool use_delay = false;
};

// The outcome of ending an attempt that `fence` shows held by `token`, for a delivery with
// `attempts_before` attempts under `policy` (clamped here). `retry_at_given`: fail was
// passed its own retry time, which replaces the backoff.
AttemptEnd end_attempt(Ending ending, const LeaseToken& token, const FenceView& fence,
                       const RetryPolicy& policy, std::int32_t attempts_before,
                       bool retry_at_given) noexcept;

// relinquish: which of the worker's lanes a caller hands back (with a holder, that
// holder's; without, the backend-bound ones, any backend: a dead backend's lane that runs
// nothing may as well go back now), and whether one goes: only when none of its in-flight
// deliveries is still pending. SQL copy: relinquish_body in src/pg/lane_admin.cpp.
bool relinquish_covers(bool lane_has_holder, bool same_holder, bool caller_has_holder) noexcept;
bool relinquishes(std::size_t live_in_flight) noexcept;

// requeue: only a dead delivery moves, back to pending with a fresh budget, due now, its
// claims counter bumped. SQL copy: relaybus.requeue and requeue_dead in
// sql/parts/api-0.2.0.sql; test/contract checks both stores agree.
inline constexpr std::int32_t kRequeuedAttempts = 0;
bool requeues(bool dead) noexcept;

// cancel: a dead delivery, or a pending one not in flight, is removed (never to run again);
// one in flight is refused (kObjectInUse), because its attempt is running: removing it
// would free its ordering key for the next delivery of the key while this one still runs.
// SQL copy: relaybus.cancel in sql/parts/api-0.2.0.sql; test/contract checks the stores
// agree.
enum class CancelVerdict { kCancel, kInFlight };
CancelVerdict cancel_verdict(bool dead, bool in_flight) noexcept;

}  // namespace relaybus::core
