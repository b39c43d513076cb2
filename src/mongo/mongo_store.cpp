#include "mongo_store.hpp"

#include <cstring>
#include <exception>
#include <mutex>
#include <random>

#include "commands.hpp"
#include "core/claim_request.hpp"
#include "core/error.hpp"
#include "documents.hpp"

namespace relaybus::mongo {

namespace {

using store::StoreError;

constexpr char kTransientLabel[] = "TransientTransactionError";

[[noreturn]] void not_built(const char* method) {
  throw StoreError(core::ErrorCode::kInternal, std::string("relaybus MongoDB store: ") + method +
                                                   " is not built yet (issue 11)");
}

// core::Error as the seam reports errors.
template <typename Body>
auto reported(Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const core::Error& e) {
    throw StoreError(e.code(), e.what());
  }
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A random (version 4) UUID in its canonical text form, as the PostgreSQL store makes them.
std::string new_event_id() {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  unsigned char bytes[16];
  for (int i = 0; i < 16; i += 8) {
    const std::uint64_t r = random();
    std::memcpy(bytes + i, &r, 8);
  }
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += hex[bytes[i] >> 4];
    out += hex[bytes[i] & 0x0f];
  }
  return out;
}

void init_driver() {
  static std::once_flag once;
  std::call_once(once, [] { mongoc_init(); });
}

// Server error codes that mean "raced with another writer; running again is safe":
// WriteConflict (112), DuplicateKey (11000: a concurrent publish of the same event id),
// NoSuchTransaction (251: the server aborted the transaction meanwhile).
bool conflict_code(std::uint32_t code) {
  return code == 112 || code == 11000 || code == 251;
}

// Server error codes of a server that cannot serve now (no primary, stepping down,
// shutting down).
bool unavailable_code(std::uint32_t code) {
  switch (code) {
    case 91:     // ShutdownInProgress
    case 189:    // PrimarySteppedDown
    case 10107:  // NotWritablePrimary
    case 11600:  // InterruptedAtShutdown
    case 11602:  // InterruptedDueToReplStateChange
    case 13435:  // NotPrimaryNoSecondaryOk
    case 13436:  // NotPrimaryOrSecondary
      return true;
    default:
      return false;
  }
}

// A command that failed, with the server's reply (its errorLabels decide whether the
// driver runs the transaction again).
class CommandFailed : public StoreError {
 public:
  CommandFailed(core::ErrorCode code, const std::string& message, std::string native_code,
                std::shared_ptr<Bson> reply, bson_error_t error)
      : StoreError(code, message, std::move(native_code)),
        reply_(std::move(reply)),
        error_(error) {}
  const bson_t* reply() const { return reply_->get(); }
  const bson_error_t& error() const { return error_; }

 private:
  std::shared_ptr<Bson> reply_;
  bson_error_t error_;
};

core::ErrorCode code_of(const bson_error_t& error, const bson_t* reply) {
  if (error.domain == MONGOC_ERROR_STREAM || error.domain == MONGOC_ERROR_SERVER_SELECTION)
    return core::ErrorCode::kUnavailable;
  if (reply && mongoc_error_has_label(reply, kTransientLabel)) return core::ErrorCode::kConflict;
  if (error.domain == MONGOC_ERROR_SERVER || error.domain == MONGOC_ERROR_WRITE_CONCERN) {
    if (conflict_code(error.code)) return core::ErrorCode::kConflict;
    if (unavailable_code(error.code)) return core::ErrorCode::kUnavailable;
  }
  return core::ErrorCode::kInternal;
}

[[noreturn]] void fail_with(const char* what, const bson_error_t& error, Bson reply) {
  auto shared = std::make_shared<Bson>(std::move(reply));
  throw CommandFailed(code_of(error, shared->get()),
                      std::string("relaybus MongoDB store: ") + what + ": " + error.message,
                      std::to_string(error.code), shared, error);
}

// The first write error of a reply that is ok: 1 (insert, update, findAndModify report
// them so), or its write concern error, as a bson_error_t of the server domain.
bool write_error_of(const bson_t* reply, bson_error_t* error) {
  bson_iter_t it;
  bson_iter_t first;
  const char* path = nullptr;
  if (bson_iter_init_find(&it, reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
      bson_iter_recurse(&it, &first) && bson_iter_next(&first) &&
      BSON_ITER_HOLDS_DOCUMENT(&first)) {
    path = "writeErrors";
  } else if (bson_iter_init_find(&it, reply, "writeConcernError") &&
             BSON_ITER_HOLDS_DOCUMENT(&it)) {
    first = it;
    path = "writeConcernError";
  } else {
    return false;
  }
  bson_iter_t entry;
  std::uint32_t code = 0;
  std::string message = path;
  if (bson_iter_recurse(&first, &entry)) {
    while (bson_iter_next(&entry)) {
      if (std::strcmp(bson_iter_key(&entry), "code") == 0 &&
          (BSON_ITER_HOLDS_INT32(&entry) || BSON_ITER_HOLDS_INT64(&entry)))
        code = static_cast<std::uint32_t>(bson_iter_as_int64(&entry));
      if (std::strcmp(bson_iter_key(&entry), "errmsg") == 0 && BSON_ITER_HOLDS_UTF8(&entry))
        message += std::string(": ") + bson_iter_utf8(&entry, nullptr);
    }
  }
  bson_set_error(
      error,
      std::strcmp(path, "writeErrors") == 0 ? MONGOC_ERROR_SERVER : MONGOC_ERROR_WRITE_CONCERN,
      code, "%s", message.c_str());
  return true;
}

// Runs one command on the store's database, in `session` when given. Throws CommandFailed
// for an error reply, a write error or a write concern error.
Bson run(mongoc_client_t* client, const std::string& database, mongoc_client_session_t* session,
         const Bson& command, const char* what) {
  Bson opts;
  bson_error_t error;
  if (session && !mongoc_client_session_append(session, opts.get(), &error))
    fail_with(what, error, Bson());
  bson_t raw;
  const bool ok = mongoc_client_command_with_opts(client, database.c_str(), command.get(), nullptr,
                                                  opts.get(), &raw, &error);
  Bson reply(bson_copy(&raw));
  bson_destroy(&raw);
  if (!ok) fail_with(what, error, std::move(reply));
  if (write_error_of(reply.get(), &error)) fail_with(what, error, std::move(reply));
  return reply;
}

// The documents of a cursor reply's batch (firstBatch or nextBatch), and its cursor id.
std::int64_t take_batch(const bson_t* reply, const char* batch, std::vector<Bson>& out) {
  bson_iter_t it;
  bson_iter_t cursor;
  std::int64_t id = 0;
  if (!bson_iter_init_find(&it, reply, "cursor") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
      !bson_iter_recurse(&it, &cursor))
    throw StoreError(core::ErrorCode::kInternal, "relaybus MongoDB store: a reply without cursor");
  while (bson_iter_next(&cursor)) {
    if (std::strcmp(bson_iter_key(&cursor), "id") == 0) {
      id = bson_iter_as_int64(&cursor);
    } else if (std::strcmp(bson_iter_key(&cursor), batch) == 0 && BSON_ITER_HOLDS_ARRAY(&cursor)) {
      bson_iter_t element;
      bson_iter_recurse(&cursor, &element);
      while (bson_iter_next(&element)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&element)) continue;
        std::uint32_t length = 0;
        const std::uint8_t* data = nullptr;
        bson_iter_document(&element, &length, &data);
        out.emplace_back(bson_new_from_data(data, length));
      }
    }
  }
  return id;
}

// Every document a find returns (getMore while the cursor is open).
std::vector<Bson> find_all(mongoc_client_t* client, const std::string& database,
                           mongoc_client_session_t* session, const Bson& find, const char* what) {
  std::vector<Bson> out;
  Bson reply = run(client, database, session, find, what);
  std::int64_t cursor = take_batch(reply.get(), "firstBatch", out);
  bson_iter_t it;
  const std::string collection =
      bson_iter_init_find(&it, find.get(), "find") ? bson_iter_utf8(&it, nullptr) : "";
  while (cursor != 0) {
    Bson more;
    BSON_APPEND_INT64(more.get(), "getMore", cursor);
    BSON_APPEND_UTF8(more.get(), "collection", collection.c_str());
    Bson next = run(client, database, session, more, what);
    cursor = take_batch(next.get(), "nextBatch", out);
  }
  return out;
}

std::vector<std::string> ids_of(const std::vector<Bson>& docs) {
  std::vector<std::string> ids;
  for (const auto& d : docs) ids.push_back(reported([&] { return read_string_id(d.get()); }));
  return ids;
}

// findAndModify's `value`.
Bson value_of(const Bson& reply) {
  bson_iter_t it;
  if (!bson_iter_init_find(&it, reply.get(), "value") || !BSON_ITER_HOLDS_DOCUMENT(&it))
    throw StoreError(core::ErrorCode::kInternal,
                     "relaybus MongoDB store: findAndModify returned no document");
  std::uint32_t length = 0;
  const std::uint8_t* data = nullptr;
  bson_iter_document(&it, &length, &data);
  return Bson(bson_new_from_data(data, length));
}

std::int64_t count_of(const Bson& reply, const char* name) {
  bson_iter_t it;
  if (!bson_iter_init_find(&it, reply.get(), name)) return 0;
  return bson_iter_as_int64(&it);
}

// The transaction options of every transaction of the store's own.
struct TransactionOptions {
  TransactionOptions() : opts(mongoc_transaction_opts_new()) {
    mongoc_read_concern_t* rc = mongoc_read_concern_new();
    mongoc_read_concern_set_level(rc, MONGOC_READ_CONCERN_LEVEL_SNAPSHOT);
    mongoc_write_concern_t* wc = mongoc_write_concern_new();
    mongoc_write_concern_set_wmajority(wc, 0);
    mongoc_read_prefs_t* rp = mongoc_read_prefs_new(MONGOC_READ_PRIMARY);
    mongoc_transaction_opts_set_read_concern(opts, rc);
    mongoc_transaction_opts_set_write_concern(opts, wc);
    mongoc_transaction_opts_set_read_prefs(opts, rp);
    mongoc_read_concern_destroy(rc);
    mongoc_write_concern_destroy(wc);
    mongoc_read_prefs_destroy(rp);
  }
  ~TransactionOptions() { mongoc_transaction_opts_destroy(opts); }
  mongoc_transaction_opt_t* opts;
};

struct TransactionRun {
  const std::function<void(mongoc_client_session_t*)>* body = nullptr;
  int attempts = 0;
  std::exception_ptr failure;
};

// The body of mongoc_client_session_with_transaction. A failed command hands the driver the
// server's reply, whose TransientTransactionError label makes it run the body again; past
// kMaxTransactionAttempts the body is not run and no label is handed on, so it stops.
bool run_body(mongoc_client_session_t* session, void* ctx, bson_t** reply, bson_error_t* error) {
  auto* run = static_cast<TransactionRun*>(ctx);
  run->failure = nullptr;
  if (++run->attempts > kMaxTransactionAttempts) {
    const std::string message = "relaybus MongoDB store: the transaction ran " +
                                std::to_string(kMaxTransactionAttempts) +
                                " times and conflicted each time (TransientTransactionError)";
    run->failure = std::make_exception_ptr(StoreError(core::ErrorCode::kConflict, message));
    bson_set_error(error, MONGOC_ERROR_TRANSACTION, MONGOC_ERROR_TRANSACTION_INVALID_STATE, "%s",
                   message.c_str());
    return false;
  }
  try {
    (*run->body)(session);
    return true;
  } catch (const CommandFailed& e) {
    run->failure = std::current_exception();
    *reply = bson_copy(e.reply());
    *error = e.error();
  } catch (const std::exception& e) {
    run->failure = std::current_exception();
    bson_set_error(error, MONGOC_ERROR_TRANSACTION, MONGOC_ERROR_TRANSACTION_INVALID_STATE, "%s",
                   e.what());
  } catch (...) {
    run->failure = std::current_exception();
  }
  return false;
}

}  // namespace

// ---------------------------------------------------------------- the store

MongoStore::MongoStore(const std::string& uri, std::string database)
    : database_(std::move(database)) {
  init_driver();
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
  static const TransactionOptions options;
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
  for (const char* collection : kCollections) {
    try {
      run(client_, database_, nullptr, commands::create_collection(collection), "create");
    } catch (const CommandFailed& e) {
      if (e.error().code != 48) throw;  // NamespaceExists: done already
    }
  }
  for (const char* collection : commands::indexed_collections())
    run(client_, database_, nullptr, commands::create_indexes(collection), "createIndexes");
}

// ---------------------------------------------------------------- the worker half: not yet

std::vector<store::Delivery> MongoStore::claim(const store::Worker&, int, std::chrono::milliseconds,
                                               const std::vector<std::string>&) {
  not_built("claim");
}
int MongoStore::complete_many(const std::vector<std::string>&) {
  not_built("complete_many");
}
store::FailOutcome MongoStore::fail(const std::string&, const std::string&,
                                    std::optional<std::chrono::milliseconds>) {
  not_built("fail");
}
bool MongoStore::bury(const std::string&, const std::string&) {
  not_built("bury");
}
bool MongoStore::release(const std::string&) {
  not_built("release");
}
int MongoStore::relinquish(const store::Worker&) {
  not_built("relinquish");
}
int MongoStore::extend_lease(const store::Worker&, std::chrono::milliseconds) {
  not_built("extend_lease");
}
void MongoStore::listen() {
  not_built("listen");
}
bool MongoStore::wait_for_wakeup(std::chrono::milliseconds) {
  not_built("wait_for_wakeup");
}

// ---------------------------------------------------------------- publish

namespace {

struct Checked {
  std::vector<Bson> payloads;
  std::vector<std::string> ids;
};

// Everything is checked (and every id chosen) before any command is sent: all or none.
Checked check_events(const std::vector<store::Event>& events, bool batch) {
  Checked out;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const std::string where = batch ? "events[" + std::to_string(i) + "]: " : "";
    out.payloads.push_back(reported([&] { return commands::validate_event(events[i], where); }));
    out.ids.push_back(events[i].event_id ? *events[i].event_id : new_event_id());
  }
  return out;
}

}  // namespace

void MongoStore::publish_checked(mongoc_client_session_t* session,
                                 const std::vector<store::Event>& events,
                                 const std::vector<Bson>& payloads,
                                 const std::vector<std::string>& ids) {
  mongoc_client_t* client = mongoc_client_session_get_client(session);
  const std::int64_t now = now_ms();
  for (std::size_t i = 0; i < events.size(); ++i) {
    const store::Event& event = events[i];
    const std::string& id = ids[i];
    std::optional<StoredEvent> stored;
    if (event.event_id) {
      auto found = find_all(client, database_, session, commands::find_event(id), "find event");
      if (!found.empty()) stored = reported([&] { return read_event(found.front().get()); });
    }
    commands::PublishPlan plan = commands::plan_publish(event, stored);
    std::vector<std::string> targets;
    if (event.handlers) {
      const auto found =
          ids_of(find_all(client, database_, session, commands::find_subscriptions(*event.handlers),
                          "find subscriptions"));
      reported([&] { commands::check_subscribed(*event.handlers, found); });
      targets = *event.handlers;
    } else {
      targets = ids_of(find_all(client, database_, session, commands::find_subscribers(plan.type),
                                "find subscribers"));
    }
    commands::add_targets(plan, targets);

    std::int64_t sequence = 0;
    if (plan.key && !plan.added.empty()) {
      Bson reply =
          run(client, database_, session, commands::next_sequence(*plan.key), "next key sequence");
      sequence = reported([&] { return read_counter(value_of(reply).get()); });
    }
    if (plan.new_event) {
      NewEvent e{id, event.type, event.key, payloads[i].get(), plan.added, now};
      run(client, database_, session, commands::insert_event(e), "insert event");
    } else if (!plan.added.empty()) {
      run(client, database_, session, commands::add_event_handlers(id, plan.added),
          "add event handlers");
    }
    if (plan.added.empty()) continue;
    const std::int64_t due = now + (event.delay ? event.delay->count() : 0);
    std::vector<NewDelivery> deliveries;
    for (const auto& handler : plan.added)
      deliveries.push_back({id, handler, plan.key, sequence, due, now});
    run(client, database_, session, commands::insert_deliveries(deliveries), "insert deliveries");
  }
}

std::vector<std::string> MongoStore::publish_events(mongoc_client_session_t* session,
                                                    const std::vector<store::Event>& events,
                                                    bool batch) {
  const Checked checked = check_events(events, batch);
  if (session) {
    require_session(session);
    publish_checked(session, events, checked.payloads, checked.ids);
  } else if (!events.empty()) {
    in_transaction([&](mongoc_client_session_t* s) {
      publish_checked(s, events, checked.payloads, checked.ids);
    });
  }
  return checked.ids;
}

std::string MongoStore::publish(const store::Event& event) {
  return publish_events(nullptr, {event}, false).front();
}

std::vector<std::string> MongoStore::publish_batch(const std::vector<store::Event>& events) {
  return publish_events(nullptr, events, true);
}

std::string MongoStore::publish(mongoc_client_session_t* session, const store::Event& event) {
  if (!session) require_session(session);
  return publish_events(session, {event}, false).front();
}

std::vector<std::string> MongoStore::publish_batch(mongoc_client_session_t* session,
                                                   const std::vector<store::Event>& events) {
  if (!session) require_session(session);
  return publish_events(session, events, true);
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
