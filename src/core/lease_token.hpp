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

}  // namespace relaybus::core
