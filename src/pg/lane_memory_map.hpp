// Backend memory of something per lane, for each of a bounded number of keys: what
// lane_changes.hpp remembers of each handler's lanes and lease_memory.hpp of each (worker,
// holder, handler)'s leases. Each value is remembered with the lane's counter as read
// before the statement it came from, and stands while that counter has not moved, for at
// most a given age. A backend that has remembered more keys than the bound starts over:
// forgetting only makes a claim read again what it would have passed over.
#pragma once

#include "../core/lane.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace relaybus::pg {

template <typename T, std::size_t kMaxKeys>
class LaneMemoryMap {
 public:
  // What is remembered of lane `lane` of key, if it was remembered with `counter` less than
  // max_age_us before now_us; nullptr otherwise.
  const T* fresh(const std::string& key, std::size_t lane, std::uint64_t counter,
                 std::int64_t now_us, std::int64_t max_age_us) const {
    const auto it = map_.find(key);
    if (it == map_.end() || lane >= it->second.size()) return nullptr;
    const Entry& e = it->second[lane];
    const bool ok =
        e.valid && e.counter == counter && now_us >= e.at_us && now_us - e.at_us < max_age_us;
    return ok ? &e.value : nullptr;
  }

  void remember(const std::string& key, std::size_t lane, std::uint64_t counter,
                std::int64_t now_us, const T& value) {
    if (lane >= static_cast<std::size_t>(core::kLaneCount)) return;
    auto it = map_.find(key);
    if (it == map_.end()) {
      if (map_.size() >= kMaxKeys) map_.clear();
      it = map_.emplace(key, Lanes{}).first;
    }
    it->second[lane] = Entry{true, counter, now_us, value};
  }

  void forget(const std::string& key, std::size_t lane) {
    const auto it = map_.find(key);
    if (it != map_.end() && lane < it->second.size()) it->second[lane] = Entry{};
  }

 private:
  struct Entry {
    bool valid = false;
    std::uint64_t counter = 0;
    std::int64_t at_us = 0;
    T value{};
  };
  using Lanes = std::array<Entry, core::kLaneCount>;
  std::unordered_map<std::string, Lanes> map_;
};

}  // namespace relaybus::pg
