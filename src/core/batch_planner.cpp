#include "batch_planner.hpp"

#include "lane_lease.hpp"

namespace relaybus::core {

void BatchPlanner::key_in_flight(const std::string& handler, const std::string& key) {
  keys_taken_.insert({handler, key});
}

bool BatchPlanner::offer(const Candidate& candidate) {
  if (full() || candidate.in_flight || candidate.has_pending_predecessor) return false;
  if (lane_room(candidate.lane_in_flight) == 0) return false;
  if (candidate.key != nullptr && candidate.key->has_value()) {
    // insert() reports false when this (handler, key) already has a delivery in the batch.
    if (!keys_taken_.insert({*candidate.handler, **candidate.key}).second) return false;
  }
  --remaining_;
  return true;
}

}  // namespace relaybus::core
