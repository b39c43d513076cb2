// Which store a --db argument names: a mongodb:// (or mongodb+srv://) URI is the MongoDB
// store (src/mongo), anything else a libpq connection string or URI of a database with the
// relaybus extension.
#pragma once

#include <memory>
#include <string>

#include "store/store.hpp"

namespace relaybus::cli {

bool is_mongodb_uri(const std::string& db);

// One store instance per call (a connection each). For MongoDB the database is the URI's
// path (mongodb://host/shop?replicaSet=rs0), "relaybus" when it has none. Throws
// StoreError kInvalidParameter for a MongoDB URI when this tool was built without libmongoc.
store::StoreFactory store_factory(const std::string& db);
std::unique_ptr<store::Store> open_store(const std::string& db);

// MongoDB: creates the collections and indexes (and converts a 0.1.0 layout), repeatably.
// PostgreSQL: nothing to do here (CREATE EXTENSION relaybus and ALTER EXTENSION ... UPDATE
// do it); says so.
std::string setup_store(const std::string& db);

}  // namespace relaybus::cli
