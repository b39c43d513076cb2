// The PostgreSQL store's writes of 0.3.0's claim and takeover (core::PositionsWriteStore,
// src/core/positions_claim.hpp), one set-based statement each, and the reading of a lane
// row into core's values. Used by relaybus.claim (positions_claim.cpp) and
// relaybus.take_over_expired (positions_takeover.cpp).
#pragma once

#include "spi.hpp"

#include "../core/positions_claim.hpp"

namespace relaybus::pg {

// The columns every statement that reads a lane row for these selects first, in this
// order (read back by positions_lane_of_row).
#define RELAYBUS_POSITIONS_LANE_COLUMNS_SQL \
  "l.handler, l.lane, l.epoch, l.acked_upto, l.done, l.in_flight, l.retrying"
inline constexpr int kPositionsLaneColumns = 7;

// Row r of the last statement, columns 1..kPositionsLaneColumns.
core::PositionsLane positions_lane_of_row(std::uint64_t r);

// A bigint[] column (NULL or NULL elements: left out) as positions.
core::PositionSet position_set_of_row(std::uint64_t r, int c);

// A timestamptz column in core's microseconds (PostgreSQL's TimestampTz, the clock of
// now() and of every available_at).
std::int64_t timestamp_of_row(std::uint64_t r, int c);

// Who a lane write binds held lanes to: the claim's worker, lease and incarnation (a
// takeover holds nothing: no identity).
struct LaneHolder {
  std::string worker;
  std::int64_t lease_us = 0;
  std::optional<std::string> holder;  // nullopt: bound to this backend
};

class PositionsWrites {
 public:
  explicit PositionsWrites(std::optional<LaneHolder> holder) : holder_(std::move(holder)) {}
  void insert_exceptions(const std::vector<core::NewException>& rows);
  void charge_exceptions(const std::vector<core::ExceptionCharge>& charges);
  void write_lanes(const std::vector<core::PositionsLaneWrite>& writes);

 private:
  std::optional<LaneHolder> holder_;
};

}  // namespace relaybus::pg
