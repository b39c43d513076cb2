#include "mongo_store.hpp"

#include "commands.hpp"
#include "core/claim_request.hpp"
#include "core/error.hpp"
#include "documents.hpp"
#include "driver.hpp"
#include "upgrade.hpp"

namespace relaybus::mongo {

using namespace detail;

// ---------------------------------------------------------------- the store

MongoStore::MongoStore(const std::string& uri, std::string database)
    : MongoStore(uri, std::move(database), MongoOptions{}) {}

MongoStore::MongoStore(const std::string& uri, std::string database, const MongoOptions& options)
    : database_(std::move(database)), options_(options) {
  init_driver();
  if (options_.retention_completed.count() < 0 || options_.retention_dead.count() < 0)
    throw StoreError(core::ErrorCode::kInvalidParameter,
                     "relaybus MongoDB store: a retention must not be negative");
  reported([&] { core::validate_name("database", database_); });
  if (database_.find_first_of(std::string("/\\. \"$\0", 7)) != std::string::npos)
    throw StoreError(core::ErrorCode::kInvalidParameter,
                     "database name must not contain / \\ . space \" $ or NUL");
  bson_error_t error;
  mongoc_uri_t* parsed = mongoc_uri_new_with_error(uri.c_str(), &error);
  if (!parsed)
    throw StoreError(core::ErrorCode::kInvalidParameter,
                     std::string("relaybus MongoDB store: bad URI: ") + error.message);
  client_ = mongoc_client_new_from_uri_with_error(parsed, &error);
  const bool has_appname = mongoc_uri_get_appname(parsed) != nullptr;
  mongoc_uri_destroy(parsed);
  if (!client_)
    throw StoreError(core::ErrorCode::kInvalidParameter,
                     std::string("relaybus MongoDB store: ") + error.message);
  mongoc_client_set_error_api(client_, MONGOC_ERROR_API_VERSION_2);
  if (!has_appname) mongoc_client_set_appname(client_, "relaybus");
}

MongoStore::~MongoStore() {
  if (client_) mongoc_client_destroy(client_);
}

void MongoStore::in_transaction(const Body& body) {
  bson_error_t error;
  mongoc_client_session_t* session = mongoc_client_start_session(client_, nullptr, &error);
  if (!session) fail_with("start a session", error, Bson());
  const TransactionOptions& options = transaction_options();
  TransactionRun run;
  run.body = &body;
  bson_t raw;
  const bool ok =
      mongoc_client_session_with_transaction(session, run_body, options.opts, &run, &raw, &error);
  Bson reply(bson_copy(&raw));
  bson_destroy(&raw);
  mongoc_client_session_destroy(session);
  if (ok) return;
  if (run.failure) reported([&] { std::rethrow_exception(run.failure); });
  fail_with("commit", error, std::move(reply));  // the commit failed
}

void MongoStore::require_session(mongoc_client_session_t* session) const {
  if (!session)
    throw StoreError(core::ErrorCode::kInvalidParameter, "relaybus MongoDB store: no session");
  if (mongoc_client_session_get_client(session) != client_)
    throw StoreError(core::ErrorCode::kInvalidParameter,
                     "relaybus MongoDB store: the session belongs to another client");
  if (!mongoc_client_session_in_transaction(session))
    throw StoreError(core::ErrorCode::kInvalidParameter,
                     "relaybus MongoDB store: the session is not in a transaction");
}

void MongoStore::setup() {
  const bool marked = layout_marked(client_, database_);  // first: a newer layout is refused
  for (const char* collection : kCollections) {
    try {
      run(client_, database_, nullptr, commands::create_collection(collection), "create");
    } catch (const CommandFailed& e) {
      if (e.error().code != 48) throw;  // NamespaceExists: done already
    }
  }
  upgrade_layout(client_, database_, marked);  // 0.1.0 converted, lanes, no 0.1.0 index
  for (const char* collection : commands::indexed_collections())
    run(client_, database_, nullptr, commands::create_indexes(collection), "createIndexes");
}

// ---------------------------------------------------------------- operators

void MongoStore::subscribe_checked(mongoc_client_session_t* session, const store::Subscription& s) {
  mongoc_client_t* client = mongoc_client_session_get_client(session);
  run(client, database_, session, commands::subscription_upsert(s), "upsert subscription");
  run(client, database_, session, commands::lane_upserts(s.handler), "upsert lanes");
}

void MongoStore::subscribe(const store::Subscription& s) {
  reported([&] { commands::validate_subscription(s); });
  in_transaction([&](mongoc_client_session_t* session) { subscribe_checked(session, s); });
}

void MongoStore::subscribe(mongoc_client_session_t* session, const store::Subscription& s) {
  reported([&] { commands::validate_subscription(s); });
  require_session(session);
  subscribe_checked(session, s);
}

bool MongoStore::requeue(const std::string& event_id, const std::string& handler) {
  bool requeued = false;
  in_transaction([&](mongoc_client_session_t* session) {
    requeued = false;
    auto found = find_all(client_, database_, session, commands::find_delivery(event_id, handler),
                          "find delivery");
    if (found.empty()) return;
    const StoredDelivery seen = reported([&] { return read_delivery(found.front().get()); });
    const auto update = commands::requeue_update(event_id, handler, seen, now_ms());
    if (!update) return;
    Bson reply = run(client_, database_, session, *update, "requeue");
    requeued = count_of(reply, "nModified") == 1;
  });
  return requeued;
}

std::optional<store::DeliveryState> MongoStore::lookup(const std::string& event_id,
                                                       const std::string& handler) {
  auto found = find_all(client_, database_, nullptr, commands::find_delivery(event_id, handler),
                        "find delivery");
  if (found.empty()) return std::nullopt;
  const StoredDelivery d = reported([&] { return read_delivery(found.front().get()); });
  return store::DeliveryState{d.status, d.attempts};
}

}  // namespace relaybus::mongo
