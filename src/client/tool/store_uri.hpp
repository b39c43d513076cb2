// Which store a --db argument names, in both programs (bin/relaybus, bin/relaybus-bench): a
// mongodb:// (or mongodb+srv://) URI is the MongoDB store (src/mongo), anything else a libpq
// connection string or URI of a database with the relaybus extension (empty: libpq's PG*
// environment variables).
#pragma once

#include <memory>
#include <string>

#include "store/store.hpp"

namespace relaybus::tool {

bool is_mongodb_uri(const std::string& db);

// A store error as one line: the message and the store's own code, labelled as what it is
// (a SQLSTATE for PostgreSQL, a MongoDB error code), which only `db` tells apart.
std::string store_error_text(const store::StoreError& error, const std::string& db);

// One store instance per call (a connection each). For MongoDB the database is the URI's
// path (mongodb://host/shop?replicaSet=rs0), "relaybus" when it has none. Throws
// StoreError kInvalidParameter for a MongoDB URI when this tool was built without libmongoc.
store::StoreFactory store_factory(const std::string& db);
std::unique_ptr<store::Store> open_store(const std::string& db);

// MongoDB: creates the collections and indexes (and converts a 0.1.0 layout), repeatably;
// returns what it did. (On PostgreSQL CREATE EXTENSION relaybus and ALTER EXTENSION ...
// UPDATE do it.) `db` is a mongodb:// URI.
std::string setup_mongodb_store(const std::string& db);

}  // namespace relaybus::tool
