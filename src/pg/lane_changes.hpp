// Lane changes: what lets a claim pass over the lanes its worker holds without reading them
// when nothing has changed in them since it last did. A worker keeps idle lanes until their
// lease is due for renewal, so it may hold every lane of a handler; a claim that probed each
// of them (its progress, the first delivery of its window, its exception rows) cost a few
// microseconds per lane whether or not anything had happened there, and with a backlog in
// every lane a claim of ten probed all 256.
//
// What a probe reads of a lane changes only when a transaction writes the lane's deliveries
// (a publish), its progress (a claim, a completion, an end of attempt, a takeover, a
// cancel), or its exception rows (a requeue; the others write progress too). These are
// counted: one counter per (database, handler, lane) in shared memory, moved twice by each
// transaction that made such a change: at XACT_EVENT_PRE_COMMIT, before its rows become
// visible and before any session can read its NOTIFY (PostgreSQL makes that readable with
// the commit), and at XACT_EVENT_COMMIT, after its rows became visible and before it
// signals listeners or sets the in-database workers' latches. A claim reads the counters
// before its probe's snapshot and remembers, in backend memory, what the probe found of
// each lane without pending exception rows (whose being due changes with the clock alone),
// with the counter it read; a later claim passes over such a lane while its counter has not
// moved, for at most kIdleFor, and takes what it remembered for what the lane holds. So a
// claim that sees a publish's NOTIFY sees a moved counter; one that read the counter
// between the two moves sees the second at its next claim, which the publish's own wake-up
// starts. What a claim remembers only orders and skips lanes: the lanes it acts on are
// locked and read again. Not remembered: what a claim found under REPEATABLE READ (its
// snapshot predates the counters it read) or in a transaction that has written (a rollback
// could undo what it saw). A change that moves no counter (a row written by hand, a requeue
// in a prepared transaction) is seen within kIdleFor. Handlers whose counters share a slot
// move each other's, which only costs probes. Without shared memory (the library not
// preloaded) every lane is probed, as before.
#pragma once

#include "postgres.hpp"

#include "../core/positions.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace relaybus::pg::lane_changes {

// How long a claim may pass over a lane it remembers without probing it again.
constexpr std::int64_t kIdleForUs = 1'000'000;

// From _PG_init: reserves the counters when preloading.
void install(bool preloading);

// The open transaction changes what a probe reads of (handler, lane) of this database: it
// publishes into it (commit_order, once per lane), writes its progress (lane_progress.cpp)
// or requeues one of its dead rows. The lane's counter moves at the transaction's
// XACT_EVENT_PRE_COMMIT and XACT_EVENT_COMMIT; a rollback forgets it.
void changed_at_commit(const std::string& handler, std::int16_t lane);

// The counters of every lane of each handler, flattened as progress_hints::get_by_handler
// (handler i, lane l at i * kLaneCount + l); empty without shared memory.
std::vector<std::uint64_t> counters(const std::vector<std::string>& handlers);

// Leases have counters of their own, moved the same way by every transaction that writes a
// lease row (relaybus.lanes' trigger, lanes_trigger.cpp): what lease_memory.hpp's memory
// of each lane's lease is checked against. Apart from the others, which every publish,
// claim and completion moves: a lease changes a few times a minute.
void lease_changed_at_commit(const std::string& handler, std::int16_t lane);
// Whether the open transaction has written a lease row (lease_changed_at_commit).
bool leases_written() noexcept;
std::vector<std::uint64_t> lease_counters(const std::vector<std::string>& handlers);

// What a probe found of a lane without pending exception rows.
struct Known {
  core::LaneProgress progress;
  core::PositionSet retrying;
  std::optional<std::int64_t> window_since_us;  // core::HeldLaneProbe::window_since_us
  bool idle = false;                            // core::held_lane_quiet
};

// Per lane, flattened the same way: whether this backend remembers it, with the same
// counter as now (`counters`, from before this probe's snapshot), probed less than
// kIdleForUs before now_us, and what it remembers. The pointers stay valid until the next
// call of `probed`.
struct PassOver {
  std::vector<bool> pass;
  std::vector<const Known*> known;
};
PassOver known_lanes(const std::vector<std::string>& handlers,
                     const std::vector<std::uint64_t>& counters, std::int64_t now_us);

// The result of a probe of (handler, lane) whose counters were read before it: remembered
// when it has no pending exception rows (`known`), forgotten otherwise (nullptr).
void probed(const std::string& handler, std::int16_t lane, std::uint64_t counter,
            const Known* known, std::int64_t now_us);

}  // namespace relaybus::pg::lane_changes
