#include "completion.hpp"

#include <algorithm>

#include "commands.hpp"
#include "driver.hpp"
#include "lanes.hpp"

namespace relaybus::mongo::detail {

std::vector<core::LeaseToken> parse_tokens(const std::vector<std::string>& tokens) {
  return reported([&] {
    std::vector<core::LeaseToken> out;
    for (const auto& t : tokens) out.push_back(core::parse_lease_token(t));
    return out;
  });
}

core::FenceView fence_of(const core::LeaseToken& token, const StoredLane* lane,
                         const WorkDelivery* delivery) {
  core::FenceView fence;
  if (lane) {
    fence.lane_found = true;
    fence.lane_epoch = lane->epoch;
    fence.listed_in_flight = std::find(lane->in_flight.begin(), lane->in_flight.end(),
                                       token.event_id) != lane->in_flight.end();
  }
  if (delivery) {
    fence.delivery_found = true;
    fence.delivery_pending = delivery->pending();
    fence.delivery_claims = delivery->claims;
  }
  return fence;
}

int complete_in(mongoc_client_t* client, const std::string& database,
                mongoc_client_session_t* session, const std::vector<core::LeaseToken>& tokens,
                bool history) {
  LaneIds lane_ids;
  HandlerEvents refs;
  for (const auto& t : tokens) {
    lane_ids.push_back({t.handler, t.lane});
    refs.push_back({t.handler, t.event_id});
  }
  const auto lanes = lanes_by_id(
      find_all(client, database, session, commands::find_lanes(lane_ids), "find lanes"));
  const auto deliveries = deliveries_of(find_all(
      client, database, session, commands::find_deliveries(refs, false), "find deliveries"));
  HandlerEvents holding;
  std::vector<NewCompletion> completed;
  const std::int64_t now = now_ms();
  for (const auto& t : tokens) {
    auto l = lanes.find({t.handler, t.lane});
    auto d = deliveries.find({t.handler, t.event_id});
    const core::FenceView fence = fence_of(t, l == lanes.end() ? nullptr : &l->second,
                                           d == deliveries.end() ? nullptr : &d->second);
    if (!core::token_holds(t, fence)) continue;
    holding.push_back({t.handler, t.event_id});
    // The attempts it took, this one included (PostgreSQL's history: attempts + 1).
    completed.push_back({t.event_id, t.handler, d->second.attempts + 1, now});
  }
  if (holding.empty()) return 0;
  Bson reply =
      run(client, database, session, commands::delete_deliveries(holding), "delete deliveries");
  if (history)
    run(client, database, session, commands::record_completions(completed), "record completions");
  return static_cast<int>(count_of(reply, "n"));
}

}  // namespace relaybus::mongo::detail
