// Picks the deliveries of one claim from the candidates a store found, in the order the
// store offers them (due time, then event id).
//
// The per-key ordering rule: a keyed delivery may run only if no earlier delivery of its
// handler and key is still pending (a running one is pending too) and none of its key is in
// flight. A key lives in exactly one lane and a lane has one holder, so this is decided
// within one claim. The PostgreSQL store evaluates "no earlier pending delivery" and "not in
// flight" in its candidate query, because that is where an index answers them; the store
// reports both facts and the planner refuses any candidate that breaks the rule, and never
// takes two deliveries of one (handler, key) into one batch.
#pragma once

#include <boost/container/flat_set.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace relaybus::core {

struct Candidate {
  const std::string* handler = nullptr;
  const std::optional<std::string>* key = nullptr;  // nullopt: unordered delivery
  bool in_flight = false;
  bool has_pending_predecessor = false;
  // Deliveries of the candidate's lane in flight, this batch's picks from it included;
  // a lane at kMaxInFlightPerLane takes no more (see lane_lease.hpp).
  std::size_t lane_in_flight = 0;
};

class BatchPlanner {
 public:
  explicit BatchPlanner(int batch_size) : remaining_(batch_size) {}

  // A key with a delivery already in flight (claimed earlier, not yet ended) takes no other
  // delivery until that one ends: a requeued dead head, which has an earlier sequence than
  // the running delivery, must not run beside it.
  void key_in_flight(const std::string& handler, const std::string& key);

  // True if the candidate is taken into the batch.
  bool offer(const Candidate& candidate);

  int remaining() const noexcept { return remaining_; }
  bool full() const noexcept { return remaining_ <= 0; }

 private:
  int remaining_;
  boost::container::flat_set<std::pair<std::string, std::string>> keys_taken_;
};

}  // namespace relaybus::core
