#include "lane_changes.hpp"

#include "shared_memory.hpp"

#include "../core/lane.hpp"

#include <array>
#include <functional>
#include <set>
#include <unordered_map>

extern "C" {
#include "port/atomics.h"
}

namespace relaybus::pg::lane_changes {

namespace {

// Slots of counters, each for every handler of every database whose (database, handler)
// hashes to it: 128 x 256 lanes x 8 bytes = 256 KB. Handlers that share a slot move each
// other's counters, which only makes a claim probe a lane it could have passed over.
constexpr std::size_t kSlots = 128;

struct SharedState {
  pg_atomic_uint64 lanes[kSlots][core::kLaneCount];
};

SharedState* shared = nullptr;

void attach_shared_memory(void* memory, bool created) {
  shared = static_cast<SharedState*>(memory);
  if (!created) return;
  for (auto& slot : shared->lanes)
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

// What this backend's last probe of a lane found, when it found it idle.
struct Idle {
  bool idle = false;
  std::uint64_t counter = 0;
  std::int64_t probed_at_us = 0;
  std::int64_t acked_upto = 0;
};
using LaneIdles = std::array<Idle, core::kLaneCount>;

// Bounded as progress_hints are: a backend that has probed more handlers starts over.
constexpr std::size_t kMaxHandlers = 4096;

std::unordered_map<std::string, LaneIdles>& idles() {
  static std::unordered_map<std::string, LaneIdles> map;
  return map;
}

// Moves the lane's counter. Must not fail: called from the transaction callback.
void published(const std::string& handler, std::int16_t lane) noexcept {
  if (shared == nullptr || !valid_lane(lane)) return;
  pg_atomic_fetch_add_u64(&shared->lanes[slot_of(handler)][lane], 1);
}

// Lanes changed by the open transaction (changed_at_commit), counted at its commit; each
// once, however many rows a transaction publishes or requeues.
std::set<std::pair<std::string, std::int16_t>>& changed() {
  static std::set<std::pair<std::string, std::int16_t>> lanes;
  return lanes;
}

// Runs in every backend at the end of every transaction: must not fail. Counted twice:
// before the commit (before the rows and the transaction's NOTIFY become visible) and after
// it (before the transaction signals listeners and sets the in-database workers' latches:
// this callback is registered after wakeup.cpp's, so PostgreSQL calls it first).
void at_transaction_end(XactEvent event, void*) {
  if (changed().empty()) return;
  if (event == XACT_EVENT_PRE_COMMIT || event == XACT_EVENT_PARALLEL_PRE_COMMIT ||
      event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
    for (const auto& [handler, lane] : changed()) published(handler, lane);
  if (event != XACT_EVENT_PRE_COMMIT && event != XACT_EVENT_PARALLEL_PRE_COMMIT &&
      event != XACT_EVENT_PRE_PREPARE)
    changed().clear();
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

std::vector<std::uint64_t> counters(const std::vector<std::string>& handlers) {
  if (shared == nullptr) return {};
  std::vector<std::uint64_t> out(handlers.size() * core::kLaneCount);
  for (std::size_t i = 0; i < handlers.size(); ++i) {
    auto& slot = shared->lanes[slot_of(handlers[i])];
    for (int l = 0; l < core::kLaneCount; ++l)
      out[i * core::kLaneCount + static_cast<std::size_t>(l)] = pg_atomic_read_u64(&slot[l]);
  }
  // The probe's reads come after these: no counter read may move past them.
  pg_memory_barrier();
  return out;
}

PassOver idle_lanes(const std::vector<std::string>& handlers,
                    const std::vector<std::uint64_t>& counters, std::int64_t now_us) {
  PassOver out;
  out.pass.assign(handlers.size() * core::kLaneCount, false);
  out.acked_upto.assign(handlers.size() * core::kLaneCount, 0);
  if (counters.size() != out.pass.size()) return out;
  for (std::size_t i = 0; i < handlers.size(); ++i) {
    const auto it = idles().find(handlers[i]);
    if (it == idles().end()) continue;
    for (std::size_t l = 0; l < static_cast<std::size_t>(core::kLaneCount); ++l) {
      const Idle& idle = it->second[l];
      const std::size_t at = i * core::kLaneCount + l;
      if (idle.idle && idle.counter == counters[at] && now_us >= idle.probed_at_us &&
          now_us - idle.probed_at_us < kIdleForUs) {
        out.pass[at] = true;
        out.acked_upto[at] = idle.acked_upto;
      }
    }
  }
  return out;
}

void probed(const std::string& handler, std::int16_t lane, std::uint64_t counter, bool idle,
            std::int64_t acked_upto, std::int64_t now_us) {
  if (shared == nullptr || !valid_lane(lane)) return;
  auto& map = idles();
  auto it = map.find(handler);
  if (it == map.end()) {
    if (!idle) return;
    if (map.size() >= kMaxHandlers) map.clear();
    it = map.emplace(handler, LaneIdles{}).first;
  }
  it->second[static_cast<std::size_t>(lane)] = {idle, counter, now_us, acked_upto};
}

}  // namespace relaybus::pg::lane_changes
