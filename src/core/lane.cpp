#include "lane.hpp"

namespace relaybus::core {

std::int16_t lane_of(std::string_view key_or_event_id) noexcept {
  std::uint32_t hash = 2166136261u;  // FNV-1a 32-bit offset basis
  for (unsigned char c : key_or_event_id) {
    hash ^= c;
    hash *= 16777619u;  // FNV-1a 32-bit prime
  }
  return static_cast<std::int16_t>(hash % kLaneCount);
}

}  // namespace relaybus::core
