// The benchmark's meter on MongoDB (bench_meter.hpp). Only built with libmongoc.
#ifdef RELAYBUS_WITH_MONGO
#include <mongoc/mongoc.h>

#include "bench_meter.hpp"
#include "store/store.hpp"

namespace relaybus::bench {

namespace {

[[noreturn]] void failed(const char* what, const bson_error_t& error) {
  throw store::StoreError(core::ErrorCode::kUnavailable,
                          std::string("bench meter: ") + what + ": " + error.message,
                          std::to_string(error.code));
}

class MongoMeter final : public BenchMeter {
 public:
  explicit MongoMeter(const std::string& uri) {
    mongoc_init();  // once per process: libmongoc guards it
    bson_error_t error;
    mongoc_uri_t* parsed = mongoc_uri_new_with_error(uri.c_str(), &error);
    if (!parsed) failed("bad URI", error);
    const char* db = mongoc_uri_get_database(parsed);
    database_ = db && *db ? db : "relaybus";
    client_ = mongoc_client_new_from_uri_with_error(parsed, &error);
    mongoc_uri_destroy(parsed);
    if (!client_) failed("connect", error);
    mongoc_client_set_appname(client_, "relaybus-bench");
  }
  ~MongoMeter() override { mongoc_client_destroy(client_); }

  long long unfinished() override {
    mongoc_collection_t* deliveries =
        mongoc_client_get_collection(client_, database_.c_str(), "deliveries");
    bson_t* filter = BCON_NEW("status", BCON_UTF8("pending"));
    bson_error_t error;
    const int64_t n =
        mongoc_collection_count_documents(deliveries, filter, nullptr, nullptr, nullptr, &error);
    bson_destroy(filter);
    mongoc_collection_destroy(deliveries);
    if (n < 0) failed("count deliveries", error);
    return n;
  }

  // The newest oplog entry's timestamp: the window is every entry after it.
  void mark() override {
    mongoc_collection_t* oplog = mongoc_client_get_collection(client_, "local", "oplog.rs");
    bson_t* filter = bson_new();
    bson_t* opts = BCON_NEW("sort", "{", "$natural", BCON_INT32(-1), "}", "limit", BCON_INT64(1),
                            "projection", "{", "ts", BCON_INT32(1), "}");
    mongoc_cursor_t* cursor = mongoc_collection_find_with_opts(oplog, filter, opts, nullptr);
    const bson_t* doc = nullptr;
    seconds_ = increment_ = 0;
    bson_iter_t it;
    if (mongoc_cursor_next(cursor, &doc) && bson_iter_init_find(&it, doc, "ts") &&
        BSON_ITER_HOLDS_TIMESTAMP(&it))
      bson_iter_timestamp(&it, &seconds_, &increment_);
    bson_error_t error;
    const bool bad = mongoc_cursor_error(cursor, &error);
    mongoc_cursor_destroy(cursor);
    bson_destroy(opts);
    bson_destroy(filter);
    mongoc_collection_destroy(oplog);
    if (bad) failed("read the oplog (a replica set is needed)", error);
  }

  LogUse since_mark() override {
    mongoc_collection_t* oplog = mongoc_client_get_collection(client_, "local", "oplog.rs");
    bson_t* pipeline = BCON_NEW(
        "pipeline", "[", "{", "$match", "{", "ts", "{", "$gt", BCON_TIMESTAMP(seconds_, increment_),
        "}", "}", "}", "{", "$group", "{", "_id", BCON_NULL, "n", "{", "$sum", BCON_INT32(1), "}",
        "bytes", "{", "$sum", "{", "$bsonSize", BCON_UTF8("$$ROOT"), "}", "}", "}", "}", "]");
    mongoc_cursor_t* cursor =
        mongoc_collection_aggregate(oplog, MONGOC_QUERY_NONE, pipeline, nullptr, nullptr);
    LogUse use;
    use.entries = 0;
    const bson_t* doc = nullptr;
    if (mongoc_cursor_next(cursor, &doc)) {
      bson_iter_t it;
      if (bson_iter_init_find(&it, doc, "n")) use.entries = bson_iter_as_int64(&it);
      if (bson_iter_init_find(&it, doc, "bytes")) use.bytes = bson_iter_as_int64(&it);
    }
    bson_error_t error;
    const bool bad = mongoc_cursor_error(cursor, &error);
    mongoc_cursor_destroy(cursor);
    bson_destroy(pipeline);
    mongoc_collection_destroy(oplog);
    if (bad) failed("sum the oplog ($bsonSize needs MongoDB 4.4)", error);
    return use;
  }

  const char* log_name() const override { return "oplog"; }

 private:
  mongoc_client_t* client_ = nullptr;
  std::string database_;
  uint32_t seconds_ = 0, increment_ = 0;
};

}  // namespace

std::unique_ptr<BenchMeter> mongo_meter(const std::string& uri) {
  return std::make_unique<MongoMeter>(uri);
}

}  // namespace relaybus::bench
#endif
