// Whether a database still exists, for the shared-memory tables whose slots belong to a
// database (counters.cpp, named_counters.cpp) and are taken back once it is dropped.
#pragma once

#include <cstdint>

namespace relaybus::pg {

// Whether a database with this OID exists; true when that cannot be read (a slot is not
// taken back on a doubt). Only inside a transaction: it reads the catalog. Never fails.
bool database_exists(std::uint32_t database) noexcept;

}  // namespace relaybus::pg
