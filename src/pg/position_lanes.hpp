// 0.3.0's lane rows in and out of statements: a lane as core sees it (core::PositionLane)
// read from its columns, and the one statement that writes lanes' progress back, for any
// number of lanes at once.
#pragma once

#include "../core/positions_fence.hpp"

#include "spi.hpp"

#include <cstdint>
#include <string>
#include <vector>

// The columns position_lane_of_row reads, in its order, of lane row `l`.
#define RELAYBUS_POSITION_LANE_COLUMNS_SQL "l.epoch, l.acked_upto, l.done, l.in_flight, l.retrying"

namespace relaybus::pg {

// The positions of a bigint[] column of the last statement's row r. A NULL array or NULL
// elements (a row edited by hand) count as no positions, never as an error.
core::PositionSet position_set(std::uint64_t r, int c);

// The lane in columns first .. first + 4 of row r (RELAYBUS_POSITION_LANE_COLUMNS_SQL).
core::PositionLane position_lane_of_row(std::uint64_t r, int first_column);

// Lanes whose progress (acked_upto, done, in_flight) and retrying list are written, in one
// UPDATE whatever their number. The lanes are locked by the caller, so the values written are
// exactly the ones core decided from what the caller read. Each list travels as a slice of one
// flat array: a statement takes no ragged array of arrays.
class LaneProgressWrites {
 public:
  void add(const std::string& handler, std::int16_t lane, const core::PositionLane& after);
  bool empty() const noexcept { return lanes_.empty(); }
  // Writes the lanes added; returns how many rows it updated.
  std::uint64_t run();

 private:
  struct Slices {
    std::vector<std::int64_t> flat;
    std::vector<std::int32_t> firsts;
    std::vector<std::int32_t> counts;
    void add(const core::PositionSet& positions);
  };
  std::vector<std::string> handlers_;
  std::vector<std::int16_t> lanes_;
  std::vector<std::int64_t> acked_;
  Slices done_, in_flight_, retrying_;
};

}  // namespace relaybus::pg
