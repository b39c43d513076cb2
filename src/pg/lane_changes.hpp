// Lane changes: what lets a claim pass over the idle lanes its worker holds without reading
// them. A worker keeps idle lanes until their lease is due for renewal, so it may hold every
// lane of a handler; a claim that probed each of them (its progress, the first delivery of
// its window, its exception rows) cost a few microseconds per lane whether or not anything
// had arrived.
//
// A lane that a probe found idle (nothing above its cursor, nothing running, no exception
// row at all) stays idle until a publish commits a delivery into it, or an operator
// requeues one of its dead rows. These are counted: one counter per (database, handler,
// lane) in shared memory, moved twice by each transaction that wrote deliveries into the
// lane (or requeued one of its rows): at XACT_EVENT_PRE_COMMIT, before its rows become
// visible and before any session can read its NOTIFY (PostgreSQL makes that readable with
// the commit), and at XACT_EVENT_COMMIT, after its rows became visible and before it
// signals listeners or sets the in-database workers' latches. A claim reads the counters
// before its probe's snapshot and remembers, in backend memory, the lanes the probe found
// idle with the counter it read; a later claim passes over such a lane while its counter
// has not moved, for at most kIdleFor. So a claim that sees a publish's NOTIFY sees a moved
// counter; one that read the counter between the two moves sees the second at its next
// claim, which the publish's own wake-up starts. Not remembered: what a claim found under
// REPEATABLE READ (its snapshot predates the counters it read) or in a transaction that
// has written (a rollback could undo what it saw). A change that moves no counter (a row
// written by hand, a requeue in a prepared transaction) is seen within kIdleFor. Handlers
// whose counters share a slot move each other's, which only costs probes. Without shared
// memory (the library not preloaded) every lane is probed, as before.
#pragma once

#include "postgres.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace relaybus::pg::lane_changes {

// How long a claim may pass over a lane it found idle without probing it again.
constexpr std::int64_t kIdleForUs = 1'000'000;

// From _PG_init: reserves the counters when preloading.
void install(bool preloading);

// The open transaction makes work in (handler, lane) of this database: it publishes into
// it (commit_order, once per lane) or requeues one of its dead rows. The lane's counter
// moves at the transaction's XACT_EVENT_PRE_COMMIT and XACT_EVENT_COMMIT; a rollback
// forgets it.
void changed_at_commit(const std::string& handler, std::int16_t lane);

// The counters of every lane of each handler, flattened as progress_hints::get_by_handler
// (handler i, lane l at i * kLaneCount + l); empty without shared memory.
std::vector<std::uint64_t> counters(const std::vector<std::string>& handlers);

// Per lane, flattened the same way: whether the last probe in this backend found it idle,
// with the same counter as now (`counters`, from before this probe's snapshot), less than
// kIdleForUs before now_us. The acked_upto it was idle at, for the lanes passed over.
struct PassOver {
  std::vector<bool> pass;
  std::vector<std::int64_t> acked_upto;
};
PassOver idle_lanes(const std::vector<std::string>& handlers,
                    const std::vector<std::uint64_t>& counters, std::int64_t now_us);

// The result of a probe of (handler, lane) whose counters were read before it: idle (at
// acked_upto) or not.
void probed(const std::string& handler, std::int16_t lane, std::uint64_t counter, bool idle,
            std::int64_t acked_upto, std::int64_t now_us);

}  // namespace relaybus::pg::lane_changes
