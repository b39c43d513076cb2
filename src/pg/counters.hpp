// Cumulative counters of what relaybus did (events published, deliveries claimed,
// completed, failed, ...), kept in shared memory by the preloaded library, one set per
// database (relaybus.counters()), one per handler (relaybus.handler_counters(), with the
// handler's publish-to-completion latency histogram, relaybus.completion_latency()) and
// one per event type published to no handler (relaybus.unrouted_counters());
// relaybus.reset_counters() zeroes a database's.
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
#include <string_view>

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
  kUnrouted,             // events stored by publish / publish_batch for no handler
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
                                                      "handler_worker_errors",
                                                      "unrouted"};

// Databases that can have counters at once (a slot is taken at a database's first count
// and kept until the server stops).
inline constexpr int kMaxDatabases = 64;

// From _PG_init: shared memory and the transaction callbacks, when preloading.
void install(bool preloading);

// Adds n to counter c in the current (sub)transaction's delta. Never fails.
void add(Counter c, std::uint64_t n = 1) noexcept;

// The same, for the database and for one handler.
void add(Counter c, std::string_view handler, std::uint64_t n = 1) noexcept;

// An event of `type` stored for no handler: kUnrouted, for the database and for the type.
void add_unrouted(std::string_view type) noexcept;

// A delivery of handler completed latency_us after its event was published.
void add_completion(std::string_view handler, std::int64_t latency_us) noexcept;

}  // namespace relaybus::pg::counters
