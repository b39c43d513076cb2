// 0.3.0's position lists (bigint[] columns: done, in_flight, retrying) read into core's
// sets.
#pragma once

#include "../core/positions.hpp"

#include "spi.hpp"

#include <cstdint>

namespace relaybus::pg {

// The positions of a bigint[] column of the last statement's row r. A NULL array or NULL
// elements (a row edited by hand) count as no positions, never as an error.
core::PositionSet position_set(std::uint64_t r, int c);

}  // namespace relaybus::pg
