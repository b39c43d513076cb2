// Where a libpq connection's settings came from, for an error that has to say so: the --db
// string (its password hidden) and the PG* environment variables that filled in what it
// left out, or the environment alone when there is no --db.
#pragma once

#include <string>

namespace relaybus::cli {

// A phrase that completes "the connection settings came from ...", and says what to change.
std::string connection_source(const std::string& conninfo);

}  // namespace relaybus::cli
