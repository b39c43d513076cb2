#include "positions_completion.hpp"

namespace relaybus::core {

std::vector<Position> retries_to_read(const PositionLane& lane,
                                      const std::vector<PositionToken>& tokens) {
  PositionSet positions;
  for (const PositionToken& token : tokens)
    if (listed_as(lane, token.position) == Listed::kRetry) positions.insert(token.position);
  return std::vector<Position>(positions.begin(), positions.end());
}

LaneCompletion complete_lane(const PositionLane& lane, const std::vector<PositionToken>& tokens,
                             const ExceptionRows& exceptions) {
  LaneCompletion out;
  out.lane = lane;
  std::vector<Position> window;
  PositionSet retries;
  for (const PositionToken& token : tokens) {
    const auto row = exceptions.find(token.position);
    const std::optional<ExceptionView> exception =
        row == exceptions.end() ? std::nullopt : std::optional<ExceptionView>(row->second);
    // A window pick's delivery row is not read: completing it writes only the lane.
    if (!token_holds(token, position_fence(token, lane, /*delivery_found=*/true, exception)))
      continue;
    if (listed_as(lane, token.position) == Listed::kWindow) {
      window.push_back(token.position);
    } else {
      retries.insert(token.position);
    }
  }
  const ProgressUpdate update = complete_positions(lane.progress, window);
  out.completed = update.positions;
  out.retries.assign(retries.begin(), retries.end());
  out.write = update.write || !out.retries.empty();
  if (!out.write) return out;
  out.lane.progress = update.progress;
  for (Position p : out.retries) out.lane.retrying.erase(p);
  return out;
}

}  // namespace relaybus::core
