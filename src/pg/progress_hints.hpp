// A backend's memory of the newest lane_progress row it has seen of each lane, used as a
// lower bound when it reads the lane's newest row again.
//
// Why: a lane's progress rows are one B-tree range of lane_progress_pkey, and a B-tree scan
// reads every matching entry of a leaf page before it returns the first. Read as
// "ORDER BY seq DESC LIMIT 1" bounded by the lane alone, the newest row costs a check of
// each of the lane's rows on its page (a few hundred once the lane fills a page); bounded
// by "seq >= hint" as well, it costs one when the hint is the newest row. The worker that
// holds a lane writes all its rows, so its hint is exact.
//
// A hint is only a guess, never trusted: every statement that reads with one falls back to
// the unbounded probe when nothing is at or above it (a transaction that wrote the row
// rolled back, the rows were removed, another database of the same name was created):
//   ((SELECT ... WHERE p.handler = h AND p.lane = l AND p.seq >= hint
//      ORDER BY p.seq DESC LIMIT 1)
//    UNION ALL
//    (SELECT ... WHERE p.handler = h AND p.lane = l ORDER BY p.seq DESC LIMIT 1) LIMIT 1)
// The second branch runs only when the first returns nothing; with hint 0 the first is the
// unbounded probe itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace relaybus::pg::progress_hints {

// The newest seq noted for the lane, or 0.
std::int64_t get(const std::string& handler, std::int16_t lane);

// The hints of lanes (parallel arrays), in their order.
std::vector<std::int64_t> get_all(const std::vector<std::string>& handlers,
                                  const std::vector<std::int16_t>& lanes);

// Every lane of each handler, flattened: the hint of lane l of handlers[i] is at
// i * kLaneCount + l (0-based), for statements that read the lanes table.
std::vector<std::int64_t> get_by_handler(const std::vector<std::string>& handlers);

// The seq of a row read or written as the lane's newest (it may be rolled back: the hint
// is then one too high, and the next read falls back once and notes what it found).
void note(const std::string& handler, std::int16_t lane, std::int64_t seq);

}  // namespace relaybus::pg::progress_hints
