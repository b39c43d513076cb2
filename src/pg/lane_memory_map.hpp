// Backend memory of something per lane, for each of a bounded number of keys: what
// lane_changes.hpp remembers of each handler's lanes and lease_memory.hpp of each (worker,
// holder, handler)'s leases. A backend that has remembered more keys than the bound starts
// over: forgetting only makes a claim read again what it would have passed over.
#pragma once

#include "../core/lane.hpp"

#include <array>
#include <cstddef>
#include <string>
#include <unordered_map>

namespace relaybus::pg {

template <typename T, std::size_t kMaxKeys>
class LaneMemoryMap {
 public:
  using Lanes = std::array<T, core::kLaneCount>;

  // The lanes remembered for key; nullptr: none.
  const Lanes* find(const std::string& key) const {
    const auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second;
  }

  // The lanes remembered for key, made (each T value-initialized) if there are none.
  Lanes& at(const std::string& key) {
    auto it = map_.find(key);
    if (it == map_.end()) {
      if (map_.size() >= kMaxKeys) map_.clear();
      it = map_.emplace(key, Lanes{}).first;
    }
    return it->second;
  }

 private:
  std::unordered_map<std::string, Lanes> map_;
};

}  // namespace relaybus::pg
