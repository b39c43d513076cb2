#include "lease_memory.hpp"

#include "lane_changes.hpp"
#include "lane_memory_map.hpp"
#include "postgres.hpp"

#include "../core/lane.hpp"

namespace relaybus::pg::lease_memory {

namespace {

// Bounded: each (worker, holder, handler) takes 256 lanes x 40 bytes, so at most about
// 1.3 MB.
using Memory = LaneMemoryMap<Lease, 128>;

Memory& memory() {
  static Memory map;
  return map;
}

std::string key_of(const Claimer& claimer, const std::string& handler) {
  // Names cannot hold a NUL byte, so NUL separates them; \x01 marks "no holder", which no
  // holder name is (an empty one is refused).
  std::string key = claimer.worker;
  key += '\0';
  key += claimer.holder ? *claimer.holder : std::string("\x01");
  key += '\0';
  key += handler;
  return key;
}

}  // namespace

std::vector<std::optional<Lease>> known(const Claimer& claimer,
                                        const std::vector<std::string>& handlers,
                                        const std::vector<std::uint64_t>& counters,
                                        std::int64_t now_us) {
  std::vector<std::optional<Lease>> out(handlers.size() * core::kLaneCount);
  // A transaction that wrote lease rows sees them, and their counters move only at its
  // commit: what was remembered before would hide its own lanes from it.
  if (counters.size() != out.size() || lane_changes::leases_written()) return out;
  for (std::size_t i = 0; i < handlers.size(); ++i) {
    const std::string key = key_of(claimer, handlers[i]);
    for (std::size_t l = 0; l < static_cast<std::size_t>(core::kLaneCount); ++l) {
      const std::size_t at = i * core::kLaneCount + l;
      if (const Lease* lease =
              memory().fresh(key, l, counters[at], now_us, lane_changes::kIdleForUs))
        out[at] = *lease;
    }
  }
  return out;
}

bool may_remember() {
  return !IsolationUsesXactSnapshot() && !lane_changes::leases_written();
}

void saw(const Claimer& claimer, const std::string& handler, std::int16_t lane,
         std::uint64_t counter, const Lease& lease, std::int64_t now_us) {
  if (lane < 0 || lane >= core::kLaneCount) return;
  memory().remember(key_of(claimer, handler), static_cast<std::size_t>(lane), counter, now_us,
                    lease);
}

}  // namespace relaybus::pg::lease_memory
