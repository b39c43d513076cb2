// Lanes: the lease partition. Every delivery of one ordering key shares a lane, so a key
// is only ever run by the one worker that holds its lane.
#pragma once

#include <cstdint>
#include <string_view>

namespace relaybus::core {

// Lanes per handler. One source: scripts/build-sql reads this line and writes it into the
// 0.2.0 scripts as @LANE_COUNT@ (the lane CHECKs of lanes and deliveries, fresh and
// upgraded; comments) and @LANE_MAX@ = kLaneCount - 1 (create_lanes' generate_series, the
// range in lane_of's comment). 0.1.0 had no lanes. test/unit/sql_constants_test.cpp checks
// the generated scripts against it.
inline constexpr int kLaneCount = 256;

// The lane of an ordering key (or of the event id when the event has no key): FNV-1a over
// the UTF-8 bytes, modulo kLaneCount. Stored with each delivery, so changing this function
// would need a data migration; the unit tests pin known values.
std::int16_t lane_of(std::string_view key_or_event_id) noexcept;

}  // namespace relaybus::core
