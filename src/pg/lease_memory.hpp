// Lease memory: what this backend last read of each lane's lease, so that a claim reads only
// the lease rows it must. A worker may hold every lane of a handler and a claim acts on a
// few; every claim read all 256 lease rows of each handler up to three times (its held
// lanes, their locks, the free lanes), and under a held snapshot every read of a lease row
// walks every version of it the snapshot keeps: a row renewed every half lease has dozens
// after a few minutes, and the claims' cost grew with the length of the hold.
//
// A lease changes only when a transaction writes its row, and relaybus.lanes' trigger
// (lanes_trigger.cpp) moves the lane's lease counter at that transaction's commit, twice,
// as lane_changes.hpp moves the others. A claim reads the lease counters before each
// statement's snapshot and remembers, per (worker, holder, handler, lane), what the
// statement found of the lease with the counter it read. A later claim takes a lease it
// remembers for the row while the counter has not moved, for at most kIdleForUs (a lease
// written in a prepared transaction moves no counter, nor does a holder's backend ending):
// it reads only the lanes that changed, that it does not remember, or whose remembered
// lease core must act on (expired, due for renewal, another incarnation's). What it
// remembers only chooses what to read: a lane a claim acts on is locked and read again.
// Not remembered: a lease read under REPEATABLE READ (the snapshot predates the counters)
// or by a transaction that wrote a lease row (a rollback would undo what it read). Without
// shared memory nothing is remembered and every lease is read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace relaybus::pg::lease_memory {

// A lease as a claim read it, relative to the claiming worker incarnation.
struct Lease {
  enum class Holder : std::uint8_t { kNobody, kWorker, kOtherWorker };
  Holder holder = Holder::kNobody;
  bool callers = false;            // kWorker: bound to the caller's incarnation
  std::int64_t expires_at_us = 0;  // kWorker, kOtherWorker
};

// Who is asking: the worker and its holder (nullopt: bound to this backend).
struct Claimer {
  std::string worker;
  std::optional<std::string> holder;
};

// Per lane of `handlers`, flattened as lane_changes::counters (handler i, lane l at
// i * kLaneCount + l): the lease remembered with the same counter as `counters` (from
// lane_changes::lease_counters, read before the statement this is for), seen less than
// kIdleForUs before now_us; nullopt otherwise. All nullopt without shared memory, and in a
// transaction that has written a lease row (its own writes move no counter until it commits).
std::vector<std::optional<Lease>> known(const Claimer& claimer,
                                        const std::vector<std::string>& handlers,
                                        const std::vector<std::uint64_t>& counters,
                                        std::int64_t now_us);

// Whether a lease read now may be remembered: not under REPEATABLE READ, not after this
// transaction wrote a lease row, and with shared memory.
bool may_remember();

// A statement read this lane's lease, its counter read before the statement's snapshot.
void saw(const Claimer& claimer, const std::string& handler, std::int16_t lane,
         std::uint64_t counter, const Lease& lease, std::int64_t now_us);

}  // namespace relaybus::pg::lease_memory
