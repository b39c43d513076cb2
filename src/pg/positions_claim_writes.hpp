// The PostgreSQL store's writes of 0.3.0's claim and takeover (core::PositionsWriteStore,
// src/core/positions_claim.hpp), one set-based statement each, and the reading of a lane
// row into core's values. Used by relaybus.claim (positions_claim.cpp) and
// relaybus.take_over_expired (positions_takeover.cpp).
#pragma once

#include "lane_progress.hpp"
#include "spi.hpp"

#include "../core/positions_claim.hpp"

#include <map>
#include <utility>

namespace relaybus::pg {

// The columns every statement that locks a lane's lease row for these selects first, in this
// order (read back by positions_lane_of_row).
#define RELAYBUS_POSITIONS_LANE_COLUMNS_SQL "l.handler, l.lane, l.epoch"
inline constexpr int kPositionsLaneColumns = 3;

// Row r of the last statement, columns 1..kPositionsLaneColumns: the lane without its
// progress, which PositionsWrites::load_progress reads once the lane is locked.
core::PositionsLane positions_lane_of_row(std::uint64_t r);

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
  // Reads the progress of these lanes, locked by the caller (read_progress), into them, and
  // keeps what it read: write_lanes writes each lane's next progress row after it.
  void load_progress(const std::vector<core::PositionsLane*>& lanes);
  void insert_exceptions(const std::vector<core::NewException>& rows);
  void charge_exceptions(const std::vector<core::ExceptionCharge>& charges);
  // A progress row for each lane whose progress changed, and a lease write for each lane
  // whose lease changes (acquired, handed back, a new epoch or incarnation) or is due for
  // renewal (core::lease_renewal); a lane kept as it was is not written at all.
  void write_lanes(const std::vector<core::PositionsLaneWrite>& writes);

 private:
  std::optional<LaneHolder> holder_;
  std::map<std::pair<std::string, std::int16_t>, StoredProgress> read_;
};

}  // namespace relaybus::pg
