// The store an operator command works on, from its --db (empty: libpq's PG* environment).
#pragma once

#include <memory>
#include <string>

#include "store/store.hpp"

namespace relaybus::cli {

// On PostgreSQL, first checks that the tool can connect, that relaybus is installed and that
// the role has relaybus's admin right in that database (check_pg_ready), so that each of
// those failures says what to do. `command` ("relaybus stats") is named in the error.
// MongoDB has no such rights: the store's own errors tell.
std::unique_ptr<store::Store> open_operator_store(const std::string& db,
                                                  const std::string& command);

}  // namespace relaybus::cli
