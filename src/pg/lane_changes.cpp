#include "lane_changes.hpp"

#include "lane_memory_map.hpp"
#include "shared_memory.hpp"

#include "../core/lane.hpp"

#include <functional>
#include <set>

extern "C" {
#include "port/atomics.h"
}

namespace relaybus::pg::lane_changes {

namespace {

// Slots of counters, each for every handler of every database whose (database, handler)
// hashes to it: 128 x 256 lanes x 8 bytes = 256 KB for what a probe reads, as much again
// for the leases. Handlers that share a slot move each other's counters, which only makes a
// claim read a lane it could have passed over.
constexpr std::size_t kSlots = 128;

struct SharedState {
  pg_atomic_uint64 lanes[kSlots][core::kLaneCount];
  pg_atomic_uint64 leases[kSlots][core::kLaneCount];
};

SharedState* shared = nullptr;

void attach_shared_memory(void* memory, bool created) {
  shared = static_cast<SharedState*>(memory);
  if (!created) return;
  for (auto& slot : shared->lanes)
    for (auto& counter : slot) pg_atomic_init_u64(&counter, 0);
  for (auto& slot : shared->leases)
    for (auto& counter : slot) pg_atomic_init_u64(&counter, 0);
}

std::size_t slot_of(const std::string& handler) noexcept {
  return (std::hash<std::string>{}(handler) ^
          (static_cast<std::size_t>(MyDatabaseId) * 0x9e3779b97f4a7c15ULL)) %
         kSlots;
}

bool valid_lane(std::int16_t lane) noexcept {
  return lane >= 0 && lane < core::kLaneCount;
}

// What this backend's last probe of each lane found, when it had no pending exception rows.
// Bounded: a lane remembered holds at most a window's positions, so a handler's lanes take
// a few hundred kilobytes at worst.
using Memory = LaneMemoryMap<Known, 256>;

Memory& memory() {
  static Memory map;
  return map;
}

using Counters = pg_atomic_uint64[kSlots][core::kLaneCount];

// Moves the lane's counter. Must not fail: called from the transaction callback.
void moved(Counters& counters, const std::string& handler, std::int16_t lane) noexcept {
  if (shared == nullptr || !valid_lane(lane)) return;
  pg_atomic_fetch_add_u64(&counters[slot_of(handler)][lane], 1);
}

using LaneSet = std::set<std::pair<std::string, std::int16_t>>;

// Lanes changed by the open transaction (changed_at_commit), counted at its commit; each
// once, however many rows a transaction writes.
LaneSet& changed() {
  static LaneSet lanes;
  return lanes;
}

// Lanes whose lease row the open transaction wrote (lease_changed_at_commit).
LaneSet& leases_changed() {
  static LaneSet lanes;
  return lanes;
}

std::vector<std::uint64_t> read_counters(Counters& counters,
                                         const std::vector<std::string>& handlers) {
  if (shared == nullptr) return {};
  std::vector<std::uint64_t> out(handlers.size() * core::kLaneCount);
  for (std::size_t i = 0; i < handlers.size(); ++i) {
    auto& slot = counters[slot_of(handlers[i])];
    for (int l = 0; l < core::kLaneCount; ++l)
      out[i * core::kLaneCount + static_cast<std::size_t>(l)] = pg_atomic_read_u64(&slot[l]);
  }
  // The probe's reads come after these: no counter read may move past them.
  pg_memory_barrier();
  return out;
}

// Runs in every backend at the end of every transaction: must not fail. Counted twice:
// before the commit (before the rows and the transaction's NOTIFY become visible) and after
// it (before the transaction signals listeners and sets the in-database workers' latches:
// this callback is registered after wakeup.cpp's, so PostgreSQL calls it first).
void at_transaction_end(XactEvent event, void*) {
  if (changed().empty() && leases_changed().empty()) return;
  if (event == XACT_EVENT_PRE_COMMIT || event == XACT_EVENT_PARALLEL_PRE_COMMIT ||
      event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT) {
    for (const auto& [handler, lane] : changed()) moved(shared->lanes, handler, lane);
    for (const auto& [handler, lane] : leases_changed()) moved(shared->leases, handler, lane);
  }
  if (event != XACT_EVENT_PRE_COMMIT && event != XACT_EVENT_PARALLEL_PRE_COMMIT &&
      event != XACT_EVENT_PRE_PREPARE) {
    changed().clear();
    leases_changed().clear();
  }
}

}  // namespace

void install(bool preloading) {
  RegisterXactCallback(at_transaction_end, nullptr);
  if (preloading)
    shared_memory::reserve("relaybus lane changes", sizeof(SharedState), attach_shared_memory);
}

void changed_at_commit(const std::string& handler, std::int16_t lane) {
  if (shared == nullptr || !valid_lane(lane)) return;
  changed().emplace(handler, lane);
}

void lease_changed_at_commit(const std::string& handler, std::int16_t lane) {
  if (shared == nullptr || !valid_lane(lane)) return;
  leases_changed().emplace(handler, lane);
}

bool leases_written() noexcept {
  return !leases_changed().empty();
}

std::vector<std::uint64_t> counters(const std::vector<std::string>& handlers) {
  return shared == nullptr ? std::vector<std::uint64_t>{} : read_counters(shared->lanes, handlers);
}

std::vector<std::uint64_t> lease_counters(const std::vector<std::string>& handlers) {
  return shared == nullptr ? std::vector<std::uint64_t>{} : read_counters(shared->leases, handlers);
}

PassOver known_lanes(const std::vector<std::string>& handlers,
                     const std::vector<std::uint64_t>& counters, std::int64_t now_us) {
  PassOver out;
  out.pass.assign(handlers.size() * core::kLaneCount, false);
  out.known.assign(handlers.size() * core::kLaneCount, nullptr);
  if (counters.size() != out.pass.size()) return out;
  for (std::size_t i = 0; i < handlers.size(); ++i)
    for (std::size_t l = 0; l < static_cast<std::size_t>(core::kLaneCount); ++l) {
      const std::size_t at = i * core::kLaneCount + l;
      out.known[at] = memory().fresh(handlers[i], l, counters[at], now_us, kIdleForUs);
      out.pass[at] = out.known[at] != nullptr;
    }
  return out;
}

void probed(const std::string& handler, std::int16_t lane, std::uint64_t counter,
            const Known* known, std::int64_t now_us) {
  if (shared == nullptr || !valid_lane(lane)) return;
  const std::size_t l = static_cast<std::size_t>(lane);
  if (known == nullptr)
    memory().forget(handler, l);
  else
    memory().remember(handler, l, counter, now_us, *known);
}

}  // namespace relaybus::pg::lane_changes
