#include "positions_fence.hpp"

namespace relaybus::core {

namespace {

// In in_flight and unfinished: the same normalization as positions.cpp applies (a position
// at or below the cursor, or in done, is finished whatever in_flight says).
bool window_pick(const LaneProgress& p, Position position) noexcept {
  return position > p.acked_upto && p.done.count(position) == 0 && p.in_flight.count(position) != 0;
}

}  // namespace

Listed listed_as(const PositionLane& lane, Position position) noexcept {
  if (window_pick(lane.progress, position)) return Listed::kWindow;
  if (lane.retrying.count(position) != 0) return Listed::kRetry;
  return Listed::kNowhere;
}

std::size_t running_positions(const PositionLane& lane) noexcept {
  std::size_t n = 0;
  for (Position p : lane.progress.in_flight)
    if (window_pick(lane.progress, p)) ++n;
  for (Position p : lane.retrying)
    if (!window_pick(lane.progress, p)) ++n;
  return n;
}

FenceView position_fence(const PositionToken& token, const std::optional<PositionLane>& lane,
                         bool delivery_found, const std::optional<ExceptionView>& exception) {
  FenceView fence;
  if (!lane) return fence;
  fence.lane_found = true;
  fence.lane_epoch = lane->epoch;
  switch (listed_as(*lane, token.position)) {
    case Listed::kNowhere:
      break;
    case Listed::kWindow:
      fence.listed_in_flight = true;
      fence.delivery_found = delivery_found;
      fence.delivery_pending = true;
      fence.delivery_claims = 0;
      break;
    case Listed::kRetry:
      fence.listed_in_flight = true;
      if (exception) {
        fence.delivery_found = true;
        fence.delivery_pending = exception->pending;
        fence.delivery_claims = exception->claims;
      }
      break;
  }
  return fence;
}

LeaseToken fence_token(const PositionToken& token) noexcept {
  LeaseToken fenced;
  fenced.lane = token.lane;
  fenced.epoch = token.epoch;
  fenced.claims = token.claims;
  return fenced;
}

bool token_holds(const PositionToken& token, const FenceView& fence) noexcept {
  return core::token_holds(fence_token(token), fence);
}

bool lane_holds(const PositionToken& token, const FenceView& fence) noexcept {
  return core::lane_holds(fence_token(token), fence);
}

}  // namespace relaybus::core
