#include "progress_hints.hpp"

#include "../core/lane.hpp"

#include <algorithm>
#include <array>
#include <unordered_map>

namespace relaybus::pg::progress_hints {

namespace {

using LaneSeqs = std::array<std::int64_t, core::kLaneCount>;

// Bounded: a backend that has touched more handlers than this starts over (the hints are
// guesses; losing them costs unbounded probes until they are noted again). 2 KB a handler.
constexpr std::size_t kMaxHandlers = 4096;

std::unordered_map<std::string, LaneSeqs>& hints() {
  static std::unordered_map<std::string, LaneSeqs> map;
  return map;
}

bool valid_lane(std::int16_t lane) noexcept {
  return lane >= 0 && lane < core::kLaneCount;
}

}  // namespace

std::int64_t get(const std::string& handler, std::int16_t lane) {
  if (!valid_lane(lane)) return 0;
  const auto it = hints().find(handler);
  return it == hints().end() ? 0 : it->second[static_cast<std::size_t>(lane)];
}

std::vector<std::int64_t> get_all(const std::vector<std::string>& handlers,
                                  const std::vector<std::int16_t>& lanes) {
  std::vector<std::int64_t> out;
  out.reserve(lanes.size());
  for (std::size_t i = 0; i < lanes.size() && i < handlers.size(); ++i)
    out.push_back(get(handlers[i], lanes[i]));
  return out;
}

std::vector<std::int64_t> get_by_handler(const std::vector<std::string>& handlers) {
  std::vector<std::int64_t> out(handlers.size() * core::kLaneCount, 0);
  for (std::size_t i = 0; i < handlers.size(); ++i) {
    const auto it = hints().find(handlers[i]);
    if (it == hints().end()) continue;
    std::copy(it->second.begin(), it->second.end(),
              out.begin() + static_cast<std::ptrdiff_t>(i * core::kLaneCount));
  }
  return out;
}

void note(const std::string& handler, std::int16_t lane, std::int64_t seq) {
  if (!valid_lane(lane)) return;
  auto& map = hints();
  auto it = map.find(handler);
  if (it == map.end()) {
    if (map.size() >= kMaxHandlers) map.clear();
    it = map.emplace(handler, LaneSeqs{}).first;
  }
  it->second[static_cast<std::size_t>(lane)] = seq;
}

}  // namespace relaybus::pg::progress_hints
