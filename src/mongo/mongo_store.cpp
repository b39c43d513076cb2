#include "mongo_store.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "commands.hpp"
#include "core/attempt_end.hpp"
#include "core/claim_protocol.hpp"
#include "core/claim_request.hpp"
#include "core/lane_lease.hpp"
#include "core/lease_token.hpp"
#include "core/error.hpp"
#include "documents.hpp"

namespace relaybus::mongo {

namespace {

using store::StoreError;

constexpr char kTransientLabel[] = "TransientTransactionError";

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
// for an error reply; a reply with write errors is returned as it is.
Bson command(mongoc_client_t* client, const std::string& database, mongoc_client_session_t* session,
             const Bson& cmd, const char* what) {
  Bson opts;
  bson_error_t error;
  if (session && !mongoc_client_session_append(session, opts.get(), &error))
    fail_with(what, error, Bson());
  bson_t raw;
  const bool ok = mongoc_client_command_with_opts(client, database.c_str(), cmd.get(), nullptr,
                                                  opts.get(), &raw, &error);
  Bson reply(bson_copy(&raw));
  bson_destroy(&raw);
  if (!ok) fail_with(what, error, std::move(reply));
  return reply;
}

// command(), and throws CommandFailed for a write error or a write concern error too.
Bson run(mongoc_client_t* client, const std::string& database, mongoc_client_session_t* session,
         const Bson& cmd, const char* what) {
  Bson reply = command(client, database, session, cmd, what);
  bson_error_t error;
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
  // The collection: the value of the command's first field (find, aggregate).
  bson_iter_t it;
  const std::string collection =
      bson_iter_init(&it, find.get()) && bson_iter_next(&it) && BSON_ITER_HOLDS_UTF8(&it)
          ? bson_iter_utf8(&it, nullptr)
          : "";
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

const TransactionOptions& transaction_options() {
  static const TransactionOptions options;
  return options;
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

// ---------------------------------------------------------------- the worker half

namespace {

using HandlerEvents = std::vector<std::pair<std::string, std::string>>;  // (handler, event id)
using LaneIds = std::vector<std::pair<std::string, std::int16_t>>;

constexpr std::int32_t kDuplicateKey = 11000;

// The holder of a Worker that passes none. MongoDB has no backends to bind lanes to, so
// the store binds them to a holder of its own: one random holder per process, shared by
// every MongoStore of the process (a dispatcher's threads, each with its instance, share
// their lanes, as connections without a holder do in PostgreSQL). A restarted process has
// another, so it waits for its predecessor's leases to expire (PostgreSQL takes over the
// lanes of a dead backend at once).
const std::string& process_holder() {
  static const std::string holder = "mongo-process-" + new_event_id();
  return holder;
}

const std::string& holder_of(const store::Worker& worker) {
  return worker.holder.empty() ? process_holder() : worker.holder;
}

std::vector<StoredLane> lanes_of(const std::vector<Bson>& docs) {
  std::vector<StoredLane> out;
  for (const auto& d : docs) out.push_back(reported([&] { return read_lane(d.get()); }));
  return out;
}

std::map<std::pair<std::string, std::string>, WorkDelivery> deliveries_of(
    const std::vector<Bson>& docs) {
  std::map<std::pair<std::string, std::string>, WorkDelivery> out;
  for (const auto& d : docs) {
    WorkDelivery w = reported([&] { return read_work_delivery(d.get()); });
    auto key = std::make_pair(w.handler, w.event_id);
    out.emplace(std::move(key), std::move(w));
  }
  return out;
}

std::map<std::pair<std::string, std::int16_t>, StoredLane> lanes_by_id(
    const std::vector<Bson>& docs) {
  std::map<std::pair<std::string, std::int16_t>, StoredLane> out;
  for (auto& l : lanes_of(docs)) {
    auto key = std::make_pair(l.handler, l.lane);
    out.emplace(std::move(key), std::move(l));
  }
  return out;
}

bool lease_expired(const StoredLane& lane, std::int64_t now) {
  return !lane.lease_expires_at_ms || *lane.lease_expires_at_ms <= now;
}

core::LaneBinding binding_of(const StoredLane& lane, const std::string& holder, std::int64_t now) {
  core::LaneBinding b;
  b.to_holder = lane.holder.has_value();
  b.same_holder = lane.holder && *lane.holder == holder;
  b.backend_alive = false;  // no backends: a lane without holder is an orphan
  b.lease_expired = lease_expired(lane, now);
  return b;
}

// Per statement of commands::lane_writes, whether it matched: a failed condition is a
// DuplicateKey write error at the statement's index. Any other write error, or a write
// concern error, is thrown.
std::vector<bool> matched_per_statement(Bson reply, std::size_t statements, const char* what) {
  std::vector<bool> took(statements, true);
  bson_iter_t it;
  bson_iter_t errors;
  if (bson_iter_init_find(&it, reply.get(), "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
      bson_iter_recurse(&it, &errors)) {
    while (bson_iter_next(&errors)) {
      std::int64_t index = -1;
      std::int64_t code = 0;
      bson_iter_t e;
      if (BSON_ITER_HOLDS_DOCUMENT(&errors) && bson_iter_recurse(&errors, &e)) {
        while (bson_iter_next(&e)) {
          if (std::strcmp(bson_iter_key(&e), "index") == 0) index = bson_iter_as_int64(&e);
          if (std::strcmp(bson_iter_key(&e), "code") == 0) code = bson_iter_as_int64(&e);
        }
      }
      if (code != kDuplicateKey || index < 0 || static_cast<std::size_t>(index) >= statements) {
        bson_error_t error;
        write_error_of(reply.get(), &error);
        fail_with(what, error, std::move(reply));
      }
      took[static_cast<std::size_t>(index)] = false;
    }
  }
  if (bson_iter_init_find(&it, reply.get(), "writeConcernError")) {
    Bson only;
    bson_append_iter(only.get(), "writeConcernError", -1, &it);
    bson_error_t error;
    write_error_of(only.get(), &error);
    fail_with(what, error, std::move(reply));
  }
  return took;
}

// core::ClaimStore on MongoDB, for one claim. Nothing is locked
// (LaneConcurrency::kConditionalWrites): each call is its own command(s), outside any
// transaction, and every lane write is conditional on the epoch the claim read. The clock
// is the client's, read once per claim (as publish stamps availableAt).
class MongoClaimStore final : public core::ClaimStore {
 public:
  MongoClaimStore(mongoc_client_t* client, const std::string& database, const std::string& worker,
                  const std::string& holder, std::int64_t lease_ms)
      : client_(client),
        database_(database),
        worker_(worker),
        holder_(holder),
        lease_ms_(lease_ms),
        now_(now_ms()) {}

  core::LaneConcurrency concurrency() const override {
    return core::LaneConcurrency::kConditionalWrites;
  }

  std::vector<std::string> subscribed_handlers(
      const std::optional<std::vector<std::string>>& requested) override {
    std::vector<std::string> out;
    for (const auto& d : all(commands::find_subscribed(requested), "find subscriptions")) {
      store::Subscription s = reported([&] { return read_subscription(d.get()); });
      policies_[s.handler] = s.retry;
      out.push_back(s.handler);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  std::vector<core::HeldLane> held_lanes(const std::vector<std::string>& handlers) override {
    const std::vector<StoredLane> lanes =
        lanes_of(all(commands::find_held_lanes(handlers, worker_), "find held lanes"));
    HandlerEvents refs;
    for (const auto& l : lanes)
      for (const auto& id : l.in_flight) refs.push_back({l.handler, id});
    const auto pending =
        refs.empty() ? decltype(deliveries_of({})){}
                     : deliveries_of(all(commands::find_deliveries(refs, true), "find in flight"));
    std::vector<core::HeldLane> out;
    for (const auto& l : lanes) {
      core::HeldLane held;
      held.lane = {l.handler, l.lane, l.epoch, {}, l.lost};
      for (const auto& id : l.in_flight) {
        auto d = pending.find({l.handler, id});
        if (!core::counts_in_flight(d != pending.end() && d->second.pending())) continue;
        held.lane.in_flight.push_back(id);
        const auto& key = d->second.key;
        if (key && std::find(held.in_flight_keys.begin(), held.in_flight_keys.end(), *key) ==
                       held.in_flight_keys.end())
          held.in_flight_keys.push_back(*key);
      }
      held.binding = binding_of(l, holder_, now_);
      held_epochs_[{l.handler, l.lane}] = l.epoch;
      versions_[{l.handler, l.lane}] = l.version;
      out.push_back(std::move(held));
    }
    return out;
  }

  // Re-reads the lanes; one whose epoch moved since held_lanes read it changed hands
  // meanwhile and is left out. A completion in an open transaction is not visible here:
  // it and the takeover's charge write the same delivery document, so one of them fails.
  std::vector<core::LaneSnapshot> lock_for_takeover(
      const std::vector<core::LaneRef>& lanes) override {
    const auto read = lanes_by_id(all(commands::find_lanes(ids(lanes)), "find lanes"));
    std::vector<core::LaneSnapshot> out;
    for (const auto& ref : lanes) {
      auto l = read.find({ref.handler, ref.lane});
      if (l == read.end()) continue;
      auto held = held_epochs_.find({ref.handler, ref.lane});
      if (held != held_epochs_.end() && held->second != l->second.epoch) continue;
      versions_[{ref.handler, ref.lane}] = l->second.version;
      out.push_back(snapshot(l->second));
    }
    return out;
  }

  std::vector<core::LostDelivery> lock_lost(
      const std::vector<core::DeliveryRef>& deliveries) override {
    HandlerEvents refs;
    for (const auto& d : deliveries) refs.push_back({d.handler, d.event_id});
    const auto pending = deliveries_of(all(commands::find_deliveries(refs, true), "find lost"));
    std::vector<core::LostDelivery> out;
    for (const auto& ref : deliveries) {
      auto d = pending.find({ref.handler, ref.event_id});
      if (d == pending.end()) continue;
      claims_read_[{ref.handler, ref.event_id}] = d->second.claims;
      out.push_back({ref.handler, ref.event_id, d->second.attempts, policy_of(ref.handler)});
    }
    return out;
  }

  void write_charges(const std::vector<core::Charge>& charges) override {
    std::vector<std::int32_t> claims;
    for (const auto& c : charges) claims.push_back(claims_read_.at({c.handler, c.event_id}));
    run(client_, database_, nullptr, commands::charge_updates(charges, claims, now_), "charge");
  }

  std::vector<core::LaneRef> lanes_with_work(const std::vector<std::string>& handlers) override {
    LaneIds groups;
    for (const auto& d : all(commands::lanes_with_work(handlers, now_), "find lanes with work"))
      groups.push_back(reported([&] { return read_lane_group(d.get()); }));
    if (groups.empty()) return {};
    const auto lanes = lanes_by_id(all(commands::find_lanes(groups), "find lanes"));
    std::vector<core::LaneRef> out;
    for (const auto& g : groups) {
      auto l = lanes.find(g);
      if (l != lanes.end() && acquirable(l->second)) out.push_back({g.first, g.second});
    }
    return out;
  }

  std::vector<core::AcquiredLane> lock_acquirable(const std::vector<core::LaneRef>& window,
                                                  int wanted) override {
    if (window.empty() || wanted <= 0) return {};
    const auto lanes = lanes_by_id(all(commands::find_lanes(ids(window)), "find lanes"));
    std::vector<core::AcquiredLane> out;
    for (std::size_t i = 0; i < window.size() && static_cast<int>(out.size()) < wanted; ++i) {
      auto l = lanes.find({window[i].handler, window[i].lane});
      if (l == lanes.end() || !acquirable(l->second)) continue;
      versions_[{window[i].handler, window[i].lane}] = l->second.version;
      out.push_back({snapshot(l->second), l->second.owner.has_value(), i + 1});
    }
    return out;
  }

  // Per lane, pages of its due deliveries in due order; a keyed one is left out when
  // core::has_pending_predecessor says so over the first pending sequence of its key (any
  // lower pending sequence exists exactly when the lowest one is lower). Left out before
  // the lane's room is counted, as the other stores do.
  std::vector<core::CandidateRow> candidates(const std::vector<core::CandidateLane>& lanes,
                                             int limit) override {
    struct Row {
      std::int64_t at;
      core::CandidateRow row;
    };
    std::vector<Row> rows;
    for (std::size_t i = 0; i < lanes.size(); ++i) {
      const core::LaneSnapshot& lane = *lanes[i].lane;
      const int take = std::max(0, std::min(limit, lanes[i].room));
      int taken = 0;
      int skip = 0;
      for (int page = take; taken < take; page = std::min(page * 2, kMaxCandidatePage)) {
        std::vector<WorkDelivery> found;
        for (const auto& d : all(commands::find_candidates(lane.handler, lane.lane,
                                                           lanes[i].excluded, now_, skip, page),
                                 "find candidates"))
          found.push_back(reported([&] { return read_work_delivery(d.get()); }));
        skip += static_cast<int>(found.size());
        const auto firsts = first_sequences(lane, found);
        for (auto& d : found) {
          if (taken == take) break;
          if (d.key && core::has_pending_predecessor(d.sequence, {firsts.at(*d.key)})) continue;
          rows.push_back({d.available_at_ms, {i, d.event_id, d.key, d.attempts, d.claims, false}});
          ++taken;
        }
        if (static_cast<int>(found.size()) < page) break;
      }
    }
    std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
      return a.at != b.at ? a.at < b.at : a.row.event_id < b.row.event_id;
    });
    if (rows.size() > static_cast<std::size_t>(std::max(limit, 0))) rows.resize(limit);
    std::vector<core::CandidateRow> out;
    for (auto& r : rows) out.push_back(std::move(r.row));
    return out;
  }

  std::vector<bool> write_lanes(const std::vector<core::LaneUpdate>& updates) override {
    if (updates.empty()) return {};
    // Conditional on the version each lane was read at too (see commands::lane_writes):
    // the list a claim writes is the one it read plus its picks.
    std::vector<std::optional<std::int64_t>> read;
    for (const auto& u : updates) read.push_back(versions_[{u.handler, u.lane}]);
    Bson reply = command(client_, database_, nullptr,
                         commands::lane_writes(updates, read, worker_, holder_, now_ + lease_ms_),
                         "write lanes");
    std::vector<bool> took = matched_per_statement(std::move(reply), updates.size(), "write lanes");
    for (std::size_t i = 0; i < updates.size(); ++i)
      if (took[i]) versions_[{updates[i].handler, updates[i].lane}] = read[i].value_or(0) + 1;
    return took;
  }

  void clear_lost(const std::vector<core::LaneRef>& lanes,
                  const std::vector<std::int64_t>& epochs) override {
    if (lanes.empty()) return;
    run(client_, database_, nullptr, commands::clear_lost(lanes, epochs), "clear lost");
  }

 private:
  // The page of candidates grows from the lane's room up to this, while deliveries with a
  // pending predecessor fill the pages.
  static constexpr int kMaxCandidatePage = 1024;

  std::vector<Bson> all(const Bson& cmd, const char* what) {
    return find_all(client_, database_, nullptr, cmd, what);
  }

  static LaneIds ids(const std::vector<core::LaneRef>& lanes) {
    LaneIds out;
    for (const auto& l : lanes) out.push_back({l.handler, l.lane});
    return out;
  }

  static core::LaneSnapshot snapshot(const StoredLane& l) {
    return {l.handler, l.lane, l.epoch, l.in_flight, l.lost};
  }

  bool acquirable(const StoredLane& l) const {
    return core::acquirable(l.owner.has_value(), lease_expired(l, now_), l.owner == worker_);
  }

  std::map<std::string, std::int64_t> first_sequences(const core::LaneSnapshot& lane,
                                                      const std::vector<WorkDelivery>& found) {
    std::vector<std::string> keys;
    for (const auto& d : found)
      if (d.key && std::find(keys.begin(), keys.end(), *d.key) == keys.end())
        keys.push_back(*d.key);
    std::map<std::string, std::int64_t> out;
    if (keys.empty()) return out;
    for (const auto& d :
         all(commands::first_pending_sequences(lane.handler, lane.lane, keys), "find key order"))
      out.insert(reported([&] { return read_first_sequence(d.get()); }));
    for (const auto& k : keys) out.emplace(k, INT64_MAX);  // none pending: no predecessor
    return out;
  }

  core::RetryPolicy policy_of(const std::string& handler) const {
    auto it = policies_.find(handler);
    return it == policies_.end() ? core::RetryPolicy{} : it->second;
  }

  mongoc_client_t* client_;
  const std::string& database_;
  const std::string& worker_;
  const std::string& holder_;
  std::int64_t lease_ms_;
  std::int64_t now_;
  std::map<std::string, core::RetryPolicy> policies_;
  std::map<std::pair<std::string, std::int16_t>, std::int64_t> held_epochs_;
  // The version of each lane as last read or written by this claim.
  std::map<std::pair<std::string, std::int16_t>, std::optional<std::int64_t>> versions_;
  std::map<std::pair<std::string, std::string>, std::int32_t> claims_read_;
};

std::string utc_text(std::int64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[48];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &tm);
  std::snprintf(text + n, sizeof text - n, ".%03d+00", static_cast<int>(ms % 1000));
  return text;
}

std::vector<core::LeaseToken> parse_tokens(const std::vector<std::string>& tokens) {
  return reported([&] {
    std::vector<core::LeaseToken> out;
    for (const auto& t : tokens) out.push_back(core::parse_lease_token(t));
    return out;
  });
}

core::FenceView fence_of(const core::LeaseToken& token, const StoredLane* lane,
                         const WorkDelivery* delivery) {
  core::FenceView fence;
  if (lane) {
    fence.lane_found = true;
    fence.lane_epoch = lane->epoch;
    fence.listed_in_flight = std::find(lane->in_flight.begin(), lane->in_flight.end(),
                                       token.event_id) != lane->in_flight.end();
  }
  if (delivery) {
    fence.delivery_found = true;
    fence.delivery_pending = delivery->pending();
    fence.delivery_claims = delivery->claims;
  }
  return fence;
}

// Completes `tokens` in `session`'s transaction: reads their lanes and deliveries in its
// snapshot, deletes those core::token_holds. A takeover charges (writes) the same delivery
// documents, so of a completion and a charge only one commits: the other conflicts.
int complete_in(mongoc_client_t* client, const std::string& database,
                mongoc_client_session_t* session, const std::vector<core::LeaseToken>& tokens) {
  LaneIds lane_ids;
  HandlerEvents refs;
  for (const auto& t : tokens) {
    lane_ids.push_back({t.handler, t.lane});
    refs.push_back({t.handler, t.event_id});
  }
  const auto lanes = lanes_by_id(
      find_all(client, database, session, commands::find_lanes(lane_ids), "find lanes"));
  const auto deliveries = deliveries_of(find_all(
      client, database, session, commands::find_deliveries(refs, false), "find deliveries"));
  HandlerEvents holding;
  for (const auto& t : tokens) {
    auto l = lanes.find({t.handler, t.lane});
    auto d = deliveries.find({t.handler, t.event_id});
    const core::FenceView fence = fence_of(t, l == lanes.end() ? nullptr : &l->second,
                                           d == deliveries.end() ? nullptr : &d->second);
    if (core::token_holds(t, fence)) holding.push_back({t.handler, t.event_id});
  }
  if (holding.empty()) return 0;
  Bson reply =
      run(client, database, session, commands::delete_deliveries(holding), "delete deliveries");
  return static_cast<int>(count_of(reply, "n"));
}

// Completion inside the caller's MongoDB transaction (store::Transaction).
class MongoTransaction final : public store::Transaction {
 public:
  MongoTransaction(mongoc_client_t* client, const std::string& database)
      : client_(client), database_(database) {
    bson_error_t error;
    session_ = mongoc_client_start_session(client_, nullptr, &error);
    if (!session_) fail_with("start a session", error, Bson());
    if (!mongoc_client_session_start_transaction(session_, transaction_options().opts, &error)) {
      mongoc_client_session_destroy(session_);
      fail_with("start a transaction", error, Bson());
    }
  }
  ~MongoTransaction() override {
    if (open_) mongoc_client_session_abort_transaction(session_, nullptr);
    mongoc_client_session_destroy(session_);
  }

  bool complete(const std::string& token) override {
    return complete_in(client_, database_, session_, parse_tokens({token})) == 1;
  }

  void commit() override {
    if (!open_) return;
    open_ = false;
    bson_t raw;
    bson_error_t error;
    const bool ok = mongoc_client_session_commit_transaction(session_, &raw, &error);
    Bson reply(bson_copy(&raw));
    bson_destroy(&raw);
    if (!ok) fail_with("commit", error, std::move(reply));
  }

  void rollback() override {
    if (!open_) return;
    open_ = false;
    bson_error_t error;
    if (!mongoc_client_session_abort_transaction(session_, &error))
      fail_with("abort", error, Bson());
  }

 private:
  mongoc_client_t* client_;
  std::string database_;
  mongoc_client_session_t* session_ = nullptr;
  bool open_ = true;
};

}  // namespace

std::vector<store::Delivery> MongoStore::claim(const store::Worker& worker, int batch,
                                               std::chrono::milliseconds lease,
                                               const std::vector<std::string>& handlers) {
  std::optional<std::vector<std::string>> requested;
  reported([&] {
    core::validate_worker(worker.name);
    core::validate_batch_size(batch);
    core::validate_lease(std::chrono::duration_cast<std::chrono::microseconds>(lease).count());
  });
  if (!handlers.empty()) {
    requested = handlers;
    std::sort(requested->begin(), requested->end());
  }
  MongoClaimStore claims(client_, database_, worker.name, holder_of(worker), lease.count());
  // Every Worker has a holder here (the process's when it passes none).
  std::vector<core::ClaimedDelivery> claimed =
      reported([&] { return core::run_claim(claims, requested, batch, true); });
  if (claimed.empty()) return {};
  std::vector<std::string> ids;
  for (const auto& c : claimed) ids.push_back(c.token.event_id);
  std::map<std::string, ClaimedEvent> events;
  for (const auto& d :
       find_all(client_, database_, nullptr, commands::find_events(ids), "find events")) {
    ClaimedEvent e = reported([&] { return read_claimed_event(d.get()); });
    std::string id = e.id;
    events.emplace(std::move(id), std::move(e));
  }
  std::vector<store::Delivery> out;
  for (auto& c : claimed) {
    auto e = events.find(c.token.event_id);
    if (e == events.end())
      throw StoreError(
          core::ErrorCode::kInternal,
          "relaybus MongoDB store: a delivery of a missing event: " + c.token.event_id);
    store::Delivery d;
    d.token = core::encode(c.token);
    d.event_id = c.token.event_id;
    d.handler = c.token.handler;
    d.type = e->second.type;
    d.has_key = c.key.has_value();
    d.key = c.key.value_or("");
    d.payload = e->second.payload;
    d.attempts = c.attempts;
    d.published_at = utc_text(e->second.created_at_ms);
    out.push_back(std::move(d));
  }
  return out;
}

int MongoStore::complete_many(const std::vector<std::string>& tokens) {
  const std::vector<core::LeaseToken> parsed = parse_tokens(tokens);
  if (parsed.empty()) return 0;
  int n = 0;
  in_transaction([&](mongoc_client_session_t* session) {
    n = 0;
    n = complete_in(client_, database_, session, parsed);
  });
  return n;
}

core::AttemptResult MongoStore::end(const std::string& token_text, core::Ending ending,
                                    const std::string& error,
                                    std::optional<std::chrono::milliseconds> retry_after) {
  const core::LeaseToken token = parse_tokens({token_text}).front();
  core::AttemptResult result = core::AttemptResult::kLost;
  in_transaction([&](mongoc_client_session_t* session) {
    result = core::AttemptResult::kLost;
    const auto lanes =
        lanes_by_id(find_all(client_, database_, session,
                             commands::find_lanes({{token.handler, token.lane}}), "find lane"));
    const auto deliveries = deliveries_of(find_all(
        client_, database_, session,
        commands::find_deliveries({{token.handler, token.event_id}}, false), "find delivery"));
    core::RetryPolicy policy;
    for (const auto& d :
         find_all(client_, database_, session,
                  commands::find_subscribed(std::vector<std::string>{token.handler}),
                  "find subscription"))
      policy = reported([&] { return read_subscription(d.get()); }).retry;
    auto l = lanes.find({token.handler, token.lane});
    auto d = deliveries.find({token.handler, token.event_id});
    const WorkDelivery* delivery = d == deliveries.end() ? nullptr : &d->second;
    const core::FenceView fence =
        fence_of(token, l == lanes.end() ? nullptr : &l->second, delivery);
    const core::AttemptEnd end = core::end_attempt(
        ending, token, fence, policy, delivery ? delivery->attempts : 0, retry_after.has_value());
    if (end.result == core::AttemptResult::kLost) return;
    const std::int64_t now = now_ms();
    std::optional<std::int64_t> due;
    if (end.result == core::AttemptResult::kRetry)
      due = now + (retry_after ? retry_after->count() : end.delay_us / 1000);
    run(client_, database_, session,
        commands::end_update(token.handler, token.event_id, delivery->claims, end, due,
                             ending == core::Ending::kRelease ? std::string() : error, now),
        "end attempt");
    run(client_, database_, session,
        commands::pull_in_flight(token.handler, token.lane, token.event_id), "leave lane");
    result = end.result;
  });
  return result;
}

store::FailOutcome MongoStore::fail(const std::string& token, const std::string& error,
                                    std::optional<std::chrono::milliseconds> retry_after) {
  switch (end(token, core::Ending::kFail, error, retry_after)) {
    case core::AttemptResult::kRetry:
      return store::FailOutcome::kRetry;
    case core::AttemptResult::kDead:
      return store::FailOutcome::kDead;
    default:
      return store::FailOutcome::kLost;
  }
}

bool MongoStore::bury(const std::string& token, const std::string& error) {
  return end(token, core::Ending::kBury, error, std::nullopt) != core::AttemptResult::kLost;
}

bool MongoStore::release(const std::string& token) {
  return end(token, core::Ending::kRelease, "", std::nullopt) != core::AttemptResult::kLost;
}

int MongoStore::relinquish(const store::Worker& worker) {
  reported([&] { core::validate_worker(worker.name); });
  const std::string& holder = holder_of(worker);
  std::vector<StoredLane> covered;
  for (auto& l : lanes_of(find_all(client_, database_, nullptr,
                                   commands::find_owned_lanes(worker.name), "find lanes"))) {
    if (core::relinquish_covers(l.holder.has_value(), l.holder == holder, true))
      covered.push_back(std::move(l));
  }
  HandlerEvents refs;
  for (const auto& l : covered)
    for (const auto& id : l.in_flight) refs.push_back({l.handler, id});
  const auto pending =
      refs.empty()
          ? decltype(deliveries_of({})){}
          : deliveries_of(find_all(client_, database_, nullptr,
                                   commands::find_deliveries(refs, true), "find in flight"));
  std::vector<StoredLane> going;
  for (auto& l : covered) {
    std::size_t live = 0;
    for (const auto& id : l.in_flight) {
      auto d = pending.find({l.handler, id});
      if (core::counts_in_flight(d != pending.end() && d->second.pending())) ++live;
    }
    if (core::relinquishes(live)) going.push_back(std::move(l));
  }
  if (going.empty()) return 0;
  Bson reply = run(client_, database_, nullptr, commands::hand_back(going), "hand back lanes");
  return static_cast<int>(count_of(reply, "n"));
}

int MongoStore::extend_lease(const store::Worker& worker, std::chrono::milliseconds lease) {
  reported([&] {
    core::validate_worker(worker.name);
    core::validate_lease(std::chrono::duration_cast<std::chrono::microseconds>(lease).count());
  });
  const std::string& holder = holder_of(worker);
  const std::int64_t now = now_ms();
  std::vector<StoredLane> callers;
  for (auto& l : lanes_of(find_all(client_, database_, nullptr,
                                   commands::find_owned_lanes(worker.name), "find lanes"))) {
    if (core::is_callers(binding_of(l, holder, now), true)) callers.push_back(std::move(l));
  }
  if (callers.empty()) return 0;
  Bson reply = run(client_, database_, nullptr,
                   commands::renew(callers, worker.name, holder, now + lease.count()), "renew");
  return static_cast<int>(count_of(reply, "n"));
}

// No change streams yet: polling is the correctness path anyway (store.hpp), so a
// wake-up never arrives and wait_for_wakeup sleeps the timeout out.
void MongoStore::listen() {}

bool MongoStore::wait_for_wakeup(std::chrono::milliseconds timeout) {
  if (timeout.count() > 0) std::this_thread::sleep_for(timeout);
  return false;
}

std::unique_ptr<store::Transaction> MongoStore::begin() {
  return std::make_unique<MongoTransaction>(client_, database_);
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
