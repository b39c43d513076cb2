// A list of lanes, (handler, lane) pairs, in the shape relaybus's statements take and
// return them: two parallel arrays for unnest($n::text[], $m::int2[]) in, the first two
// columns of a result out.
#pragma once

#include "spi.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace relaybus::pg {

struct LaneList {
  std::vector<std::string> handlers;
  std::vector<std::int16_t> lanes;

  void add(std::string handler, std::int16_t lane) {
    handlers.push_back(std::move(handler));
    lanes.push_back(lane);
  }
  bool empty() const noexcept { return lanes.empty(); }
  std::size_t size() const noexcept { return lanes.size(); }

  // Lanes [first, last) of this list.
  LaneList slice(std::size_t first, std::size_t last) const {
    LaneList out;
    out.handlers.assign(handlers.begin() + first, handlers.begin() + last);
    out.lanes.assign(lanes.begin() + first, lanes.begin() + last);
    return out;
  }

  // Binds the two arrays as the next two parameters: handlers, then lanes.
  void bind(Params& params) const {
    params.text_array(handlers);
    params.int2_array(lanes);
  }

  // The lanes in columns 1 (handler) and 2 (lane) of the last statement's first `rows` rows.
  static LaneList from_rows(std::uint64_t rows) {
    LaneList out;
    for (std::uint64_t r = 0; r < rows; ++r) out.add(row::text(r, 1), row::int2(r, 2));
    return out;
  }
};

}  // namespace relaybus::pg
