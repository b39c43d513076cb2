// Cumulative counters of what relaybus did (events published, deliveries claimed,
// completed, failed, ...), kept in shared memory by the preloaded library, one set per
// database, read by relaybus.counters() and zeroed by relaybus.reset_counters().
//
// Only what commits is counted. A call adds to a delta of the backend's own, kept per
// subtransaction nesting level: a subtransaction that commits hands its delta to its
// parent, one that rolls back drops it, and the top-level commit (or PREPARE
// TRANSACTION) adds what is left to shared memory with one atomic add per counter that
// moved. The hot path is an addition to backend-local memory: no lock, no allocation.
// Without the preload there is no shared memory: add() does nothing and the SQL functions
// raise 55000.
#pragma once

#include <cstdint>

namespace relaybus::pg::counters {

enum Counter : int {
  kPublished,            // events stored by publish / publish_batch (a repeated id: not)
  kDeliveriesPublished,  // deliveries created by publish / publish_batch
  kClaimed,              // deliveries handed out by claim
  kCompleted,            // deliveries completed (complete, complete_many)
  kFailed,               // fail() calls that charged an attempt (retry or dead)
  kDeadLettered,         // deliveries made dead: by fail, bury or a takeover's charge
  kTakenOver,            // lanes taken over (by claim or take_over_expired)
  kAttemptsCharged,      // attempts charged: fail, bury, takeover charges
  kHandlerWorkerErrors,  // in-database handler calls that raised
  kCounterCount
};

// The names relaybus.counters() reports, in Counter order.
inline constexpr const char* kNames[kCounterCount] = {"published",
                                                      "deliveries_published",
                                                      "claimed",
                                                      "completed",
                                                      "failed",
                                                      "dead_lettered",
                                                      "taken_over",
                                                      "attempts_charged",
                                                      "handler_worker_errors"};

// Databases that can have counters at once (a slot is taken at a database's first count
// and kept until the server stops).
inline constexpr int kMaxDatabases = 64;

// From _PG_init: shared memory and the transaction callbacks, when preloading.
void install(bool preloading);

// Adds n to counter c in the current (sub)transaction's delta. Never fails.
void add(Counter c, std::uint64_t n = 1) noexcept;

}  // namespace relaybus::pg::counters
