// Whether a database still exists, for the shared-memory tables whose slots belong to a
// database (counters.cpp, named_counters.cpp) and are taken back once it is dropped.
#pragma once

#include <cstdint>

namespace relaybus::pg {

// Whether a database with this OID exists. Only inside a transaction: it reads the
// catalog, and a PostgreSQL error there (a cancel) comes out as PgError.
bool database_exists(std::uint32_t database);

}  // namespace relaybus::pg
