#include "store_uri.hpp"

#include "client/pg_store.hpp"
#ifdef RELAYBUS_WITH_MONGO
#include <mongoc/mongoc.h>

#include "mongo/mongo_store.hpp"
#endif

namespace relaybus::tool {

bool is_mongodb_uri(const std::string& db) {
  return db.rfind("mongodb://", 0) == 0 || db.rfind("mongodb+srv://", 0) == 0;
}

namespace {

#ifdef RELAYBUS_WITH_MONGO
std::string mongo_database(const std::string& uri) {
  bson_error_t error;
  mongoc_uri_t* parsed = mongoc_uri_new_with_error(uri.c_str(), &error);
  if (!parsed)
    throw store::StoreError(core::ErrorCode::kInvalidParameter,
                            std::string("bad MongoDB URI: ") + error.message);
  const char* name = mongoc_uri_get_database(parsed);
  std::string database = name && *name ? name : "relaybus";
  mongoc_uri_destroy(parsed);
  return database;
}
#else
[[noreturn]] void no_mongo() {
  throw store::StoreError(core::ErrorCode::kInvalidParameter,
                          "this relaybus tool was built without the MongoDB store "
                          "(install libmongoc-dev and rebuild: make client)");
}
#endif

}  // namespace

std::string store_error_text(const store::StoreError& error, const std::string& db) {
  std::string text = error.what();
  if (!error.native_code().empty())
    text += std::string(" (") + (is_mongodb_uri(db) ? "code " : "SQLSTATE ") +
            error.native_code() + ")";
  return text;
}

store::StoreFactory store_factory(const std::string& db) {
  if (!is_mongodb_uri(db))
    return [db] { return std::unique_ptr<store::Store>(new client::PgStore(db)); };
#ifdef RELAYBUS_WITH_MONGO
  const std::string database = mongo_database(db);
  return
      [db, database] { return std::unique_ptr<store::Store>(new mongo::MongoStore(db, database)); };
#else
  no_mongo();
#endif
}

std::unique_ptr<store::Store> open_store(const std::string& db) {
  return store_factory(db)();
}

std::string setup_mongodb_store([[maybe_unused]] const std::string& db) {
#ifdef RELAYBUS_WITH_MONGO
  mongo::MongoStore(db, mongo_database(db)).setup();
  return "MongoDB: collections and indexes ready in database " + mongo_database(db);
#else
  no_mongo();
#endif
}

}  // namespace relaybus::tool
