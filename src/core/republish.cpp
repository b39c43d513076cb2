#include "republish.hpp"

#include <algorithm>
#include <iterator>

namespace relaybus::core {

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
