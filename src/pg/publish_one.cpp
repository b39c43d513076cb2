// Publishing one event, in the caller's transaction, for every version (publish_one.hpp).
#include "counters.hpp"
#include "delivery_writer.hpp"
#include "due_time.hpp"
#include "handler_event.hpp"
#include "publish_one.hpp"
#include "settings.hpp"
#include "spi.hpp"
#include "subscription_cache.hpp"
#include "unrouted.hpp"
#include "wakeup.hpp"

#include "../core/claim_request.hpp"
#include "../core/error.hpp"
#include "../core/republish.hpp"
#include "../core/sql_quote.hpp"

#include <algorithm>

namespace relaybus::pg {

namespace {

bool jsonb_is_object(Datum value) {
  bool is_object = false;
  pg_call([&] {
    Jsonb* jb = DatumGetJsonbP(value);
    is_object = JB_ROOT_IS_OBJECT(jb) && !JB_ROOT_IS_SCALAR(jb);
  });
  return is_object;
}

}  // namespace

[[noreturn]] void invalid(const std::string& message) {
  throw core::Error(core::ErrorCode::kInvalidParameter, message);
}

// A random (version 4) UUID in its canonical text form.
std::string new_event_id() {
  unsigned char bytes[16];
  bool ok = false;
  pg_call([&] { ok = pg_strong_random(bytes, sizeof bytes); });
  if (!ok) throw core::Error(core::ErrorCode::kInternal, "could not generate a random event id");
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  static const char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(36);
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += hex[bytes[i] >> 4];
    out += hex[bytes[i] & 0x0f];
  }
  return out;
}

void validate(PublishInput& in, const std::string& where) {
  core::validate_name(where + "type", in.type);
  if (!jsonb_is_object(in.payload)) invalid(where + "payload must be a JSON object");
  if (!in.headers_null && !jsonb_is_object(in.headers))
    invalid(where + "headers must be a JSON object or NULL");
  if (in.key) core::validate_name(where + "key", *in.key);
  in.available_at = checked_due_time(in.available_at, where + "available_at");
  if (in.event_id) core::validate_name(where + "event_id", *in.event_id);
  if (in.handlers) {
    for (const auto& h : *in.handlers) core::validate_name(where + "handler name", h);
  }
}

// The handlers an event goes to: the given ones (each must be subscribed), or every
// subscriber of its type (core::subscribes_to), from the backend's copy of the
// subscriptions (subscription_cache.hpp).
Targets target_handlers(const std::string& type,
                        const std::optional<std::vector<std::string>>& given) {
  Targets found;
  for (const auto& s : subscription_cache::subscriptions()) {
    const bool wanted = given ? std::find(given->begin(), given->end(), s.handler) != given->end()
                              : core::subscribes_to(s.event_types, type);
    if (!wanted) continue;
    found.handlers.push_back(s.handler);
    found.in_database.push_back(s.in_database);
  }
  if (given) {
    for (const auto& h : *given) {
      if (!std::binary_search(found.handlers.begin(), found.handlers.end(), h))
        throw core::Error(
            core::ErrorCode::kUndefinedObject, "handler \"" + h + "\" is not subscribed",
            "Subscribe it first with relaybus.subscribe(" + core::sql_literal(h) + ", ...).");
    }
  }
  return found;
}

void check_in_database_size(Datum payload, Datum headers, bool headers_null,
                            const std::vector<std::string>& handlers, const Targets& targets,
                            const std::string& where) {
  const std::string* in_database = nullptr;
  for (std::size_t i = 0; i < targets.handlers.size() && in_database == nullptr; ++i) {
    if (targets.in_database[i] &&
        std::binary_search(handlers.begin(), handlers.end(), targets.handlers[i]))
      in_database = &targets.handlers[i];
  }
  if (in_database == nullptr) return;
  std::int64_t size = 0;
  pg_call([&] { size = handler_event::size_of(payload, headers, headers_null); });
  if (size <= settings::sql_handler_max_payload_bytes()) return;
  const char* handler = in_database->c_str();
  const char* prefix = where.c_str();
  pg_call([&] {
    const char* shown = GetConfigOptionByName("relaybus.sql_handler_max_payload", nullptr, false);
    ereport(ERROR,
            (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
             errmsg("%spayload and headers of %lld bytes exceed the %s limit of in-database "
                    "handler \"%s\"",
                    prefix, static_cast<long long>(size), shown, handler),
             errdetail("An in-database handler's worker holds the event in memory; the limit "
                       "counts payload and headers uncompressed."),
             errhint("Publish a reference to large data instead, or raise "
                     "relaybus.sql_handler_max_payload (postgresql.conf, then reload).")));
  });
}

// Deliveries inserted for these handlers: wake their workers at commit. External workers
// LISTEN; in-database handler workers are woken through their latches instead (a NOTIFY
// would only cost every publishing commit the notification queue's lock).
void wake(const std::vector<std::string>& handlers, const Targets& targets) {
  std::vector<std::string> external;
  bool in_database = false;
  for (std::size_t i = 0; i < targets.handlers.size(); ++i) {
    if (!std::binary_search(handlers.begin(), handlers.end(), targets.handlers[i])) continue;
    if (targets.in_database[i]) {
      in_database = true;
    } else {
      external.push_back(targets.handlers[i]);
    }
  }
  wakeup::published(external, in_database);
}

// A repeated event id: deliveries for the handlers core::handlers_to_add names
// (src/core/republish.hpp), with the stored event's key (its lane and order).
void publish_repeat(const std::string& event_id, const PublishInput& in, const std::string& where,
                    const DeliveryWriter& writer) {
  static Statement lock_event(
      "SELECT e.type, e.key, e.handlers, e.payload, e.headers FROM relaybus.events e"
      " WHERE e.id = $1 FOR UPDATE",
      {TEXTOID});
  static Statement add_handlers(
      "UPDATE relaybus.events SET handlers = handlers || $2 WHERE id = $1",
      {TEXTOID, TEXTARRAYOID});
  Params lock_params;
  lock_params.text(event_id);
  if (lock_event.run(lock_params) != 1)
    throw core::Error(core::ErrorCode::kConflict,
                      "event \"" + event_id + "\" was purged while being republished");
  const std::string stored_type = row::text(0, 1);
  const std::optional<std::string> stored_key = row::text_or_null(0, 2);
  std::vector<std::string> had = row::text_array(0, 3);  // before the next statement
  // The stored event is what the added handlers get, whatever this call's payload is.
  bool null = false;
  bool headers_null = false;
  const Datum payload = row::datum(0, 4, &null);
  const Datum headers = row::datum(0, 5, &headers_null);
  const Targets targets = target_handlers(stored_type, in.handlers);
  const std::vector<std::string> added = core::handlers_to_add(targets.handlers, std::move(had));
  if (added.empty()) return;
  check_in_database_size(payload, headers, headers_null, added, targets, where);

  Params update_params;
  update_params.text(event_id);
  update_params.text_array(added);
  add_handlers.run(update_params);
  writer.write(event_id, stored_key, added, in.available_at);
  wake(added, targets);
}

std::string publish_one(PublishInput& in, const std::string& where, const DeliveryWriter& writer) {
  if (in.handlers) {
    std::sort(in.handlers->begin(), in.handlers->end());
    in.handlers->erase(std::unique(in.handlers->begin(), in.handlers->end()), in.handlers->end());
  }
  validate(in, where);
  const std::string event_id = in.event_id ? *in.event_id : new_event_id();
  const Targets targets = target_handlers(in.type, in.handlers);
  const std::vector<std::string>& handlers = targets.handlers;
  check_in_database_size(in.payload, in.headers, in.headers_null, handlers, targets, where);

  static Statement insert_event(
      "INSERT INTO relaybus.events (id, type, key, payload, headers, handlers)"
      " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING",
      {TEXTOID, TEXTOID, TEXTOID, JSONBOID, JSONBOID, TEXTARRAYOID});
  Params params;
  params.text(event_id);
  params.text(in.type);
  params.text(in.key);
  params.datum(in.payload, false);
  params.datum(in.headers, in.headers_null);
  params.text_array(handlers);
  if (insert_event.run(params) == 1) {
    // Routed by its type to no handler (an explicit empty list of handlers is a choice).
    if (handlers.empty() && !in.handlers) unrouted::stored({in.type});
    counters::add(counters::kPublished);
    writer.write(event_id, in.key, handlers, in.available_at);
    wake(handlers, targets);
  } else {
    publish_repeat(event_id, in, where, writer);
  }
  return event_id;
}

}  // namespace relaybus::pg
