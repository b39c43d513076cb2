// The due times the API takes (publish's available_at, fail's retry_at), judged by core's
// rule (src/core/due_time.hpp) against now(), with relaybus.max_delay as the maximum.
#pragma once

#include <optional>
#include <string>

#include "postgres.hpp"

namespace relaybus::pg {

// at, or now() for a due time in the past; nullopt for nullopt. Throws core::Error 22023
// for an infinite value, or one further from now() than relaybus.max_delay.
std::optional<TimestampTz> checked_due_time(const std::optional<TimestampTz>& at,
                                            const std::string& what);

}  // namespace relaybus::pg
