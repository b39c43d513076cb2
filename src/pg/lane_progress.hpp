// 0.3.0's lane progress in and out of relaybus.lane_progress: a lane's progress is its row
// of highest seq, and every change is a new row, never an update (sql/parts/positions-0.3.0.sql
// says why: under a held snapshot an updated row's versions pile up on every read of it).
//
// The protocol around it: a writer locks the lane's lease row (relaybus.lanes, FOR NO KEY
// UPDATE or FOR UPDATE, which makes no new version), then reads the progress with
// read_progress, then inserts the next row with ProgressInserts. The lock serializes writers
// of a lane, so the newest row read after it is the one to follow, and seq + 1 is free.
#pragma once

#include "lane_list.hpp"
#include "spi.hpp"

#include "../core/positions.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace relaybus::pg {

// A lane's progress as stored.
struct StoredProgress {
  core::LaneProgress progress;
  core::PositionSet retrying;  // positions of exception rows the lane's holder runs
  std::int64_t seq = 0;        // of the row read; 0: the lane has no row yet
};

// The newest progress of each lane of `lanes`, in their order. Call it once the lanes are
// locked: it reads with a snapshot taken now, so it sees whatever an earlier holder of the
// lock committed, even inside a transaction whose snapshot is older. Under REPEATABLE READ
// or SERIALIZABLE, a lane whose newest row that snapshot does not see raises 40001, as
// locking a lane row updated since the snapshot does: the caller's other reads (exception
// rows, deliveries) are of its snapshot, and must not be mixed with a newer lane.
std::vector<StoredProgress> read_progress(const LaneList& lanes);

// New progress rows, one per lane, written in one INSERT. A lane whose progress and retrying
// list are what was read is skipped: nothing changed, nothing is written.
class ProgressInserts {
 public:
  void add(const std::string& handler, std::int16_t lane, const StoredProgress& read,
           const core::LaneProgress& progress, const core::PositionSet& retrying);
  bool empty() const noexcept { return lanes_.empty(); }
  // Inserts the rows added. Every one must go in: a row already there means the lane was
  // written by someone who did not hold its lock (an internal error, never papered over).
  void run();

 private:
  struct Slices {
    std::vector<std::int64_t> flat;
    std::vector<std::int32_t> firsts;
    std::vector<std::int32_t> counts;
    void add(const core::PositionSet& positions);
  };
  std::vector<std::string> handlers_;
  std::vector<std::int16_t> lanes_;
  std::vector<std::int64_t> seqs_;
  std::vector<std::int64_t> acked_;
  Slices done_, in_flight_, retrying_;
};

}  // namespace relaybus::pg
