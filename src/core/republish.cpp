#include "republish.hpp"

#include <algorithm>
#include <iterator>

namespace relaybus::core {

bool subscribes_to(const std::vector<std::string>& event_types, std::string_view type) noexcept {
  return std::any_of(event_types.begin(), event_types.end(),
                     [&](const std::string& t) { return t == type || t == kEveryEventType; });
}

std::vector<std::string> handlers_to_add(std::vector<std::string> targets,
                                         std::vector<std::string> had) {
  std::sort(targets.begin(), targets.end());
  targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
  std::sort(had.begin(), had.end());
  std::vector<std::string> added;
  std::set_difference(targets.begin(), targets.end(), had.begin(), had.end(),
                      std::back_inserter(added));
  return added;
}

}  // namespace relaybus::core
