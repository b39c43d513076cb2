// The lease token a claim hands out for one delivery. It names the delivery (handler and
// event id) and fences it: the lane's epoch at claim time and the delivery's claims counter.
// A takeover bumps the epoch and every ended claim bumps the counter, so a token of an
// older attempt can never change a newer one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace relaybus::core {

struct LeaseToken {
  std::int16_t lane = 0;
  std::int64_t epoch = 0;
  std::int32_t claims = 0;
  std::string handler;
  std::string event_id;
};

// "r1.<lane>.<epoch>.<claims>.<handler length>.<handler><event id>": the handler is
// length-prefixed and the event id takes the rest, so both may hold any character.
std::string encode(const LeaseToken& token);

// Parses a token; throws core::Error (SQLSTATE 22023) for anything malformed. A well-formed
// token may still name a lease that is gone: the store checks that, not the parser.
LeaseToken parse_lease_token(std::string_view text);

// 0.3.0's token (positions, src/core/positions.hpp): the lane's epoch at claim time fences
// a takeover; the position names the delivery in its (handler, lane); claims is its
// exception row's counter (0 for a position picked from the window, which has none), moved
// by every attempt that ends without completing, so that a token of an ended attempt never
// changes a later one of the same position under the same epoch.
struct PositionToken {
  std::int16_t lane = 0;
  std::int64_t epoch = 0;
  std::int64_t position = 0;
  std::int32_t claims = 0;
  std::string handler;
  // When the delivery's event was published, in microseconds since the Unix epoch; 0: not
  // carried. Only the completion latency histogram reads it, so a forged value can skew
  // that histogram and nothing else: the fence is the fields above.
  std::int64_t published_us = 0;
};

// "r3.<lane>.<epoch>.<position>.<claims>.<handler length>.<handler>", then
// ".<published_us>" when published_us is positive (the handler is length-prefixed, so
// what follows it is unambiguous).
std::string encode(const PositionToken& token);

// Parses a 0.3.0 token; throws core::Error (SQLSTATE 22023) for anything malformed,
// including a token of the older format (a worker that claimed before an upgrade).
PositionToken parse_position_token(std::string_view text);

}  // namespace relaybus::core
