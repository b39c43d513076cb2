#include "documents.hpp"

#include <cstring>

#include "core/error.hpp"
#include "core/lane.hpp"
#include "core/retry_policy.hpp"
#include "field_readers.hpp"

namespace relaybus::mongo {

using namespace fields;

namespace {

void append_string_or_null(bson_t* doc, const char* name, const std::optional<std::string>& value) {
  if (value) {
    append_string(doc, name, *value);
  } else {
    bson_append_null(doc, name, -1);
  }
}

void append_empty_array(bson_t* doc, const char* name) {
  bson_t array;
  bson_append_array_begin(doc, name, -1, &array);
  bson_append_array_end(doc, &array);
}

}  // namespace

void append_string(bson_t* doc, const char* name, const std::string& value) {
  bson_append_utf8(doc, name, -1, value.data(), static_cast<int>(value.size()));
}

void append_strings(bson_t* doc, const char* name, const std::vector<std::string>& values) {
  bson_t array;
  bson_append_array_begin(doc, name, -1, &array);
  char index[16];
  for (std::size_t i = 0; i < values.size(); ++i) {
    const char* key = nullptr;
    bson_uint32_to_string(static_cast<std::uint32_t>(i), &key, index, sizeof index);
    append_string(&array, key, values[i]);
  }
  bson_append_array_end(doc, &array);
}

// ---------------------------------------------------------------- Bson

Bson::Bson() : doc_(bson_new()) {}
Bson::Bson(bson_t* adopt) : doc_(adopt) {}
Bson::Bson(Bson&& other) noexcept : doc_(other.doc_) {
  other.doc_ = nullptr;
}
Bson& Bson::operator=(Bson&& other) noexcept {
  if (this != &other) {
    if (doc_) bson_destroy(doc_);
    doc_ = other.doc_;
    other.doc_ = nullptr;
  }
  return *this;
}
Bson::~Bson() {
  if (doc_) bson_destroy(doc_);
}

std::string Bson::canonical_json() const {
  char* text = bson_as_canonical_extended_json(doc_, nullptr);
  std::string out = text ? text : "";
  bson_free(text);
  return out;
}

std::string Bson::relaxed_json() const {
  char* text = bson_as_relaxed_extended_json(doc_, nullptr);
  std::string out = text ? text : "";
  bson_free(text);
  return out;
}

// ---------------------------------------------------------------- building

Bson parse_payload(const std::string& json, const std::string& where) {
  const auto invalid = [&](const std::string& why) {
    throw core::Error(core::ErrorCode::kInvalidParameter,
                      where + "payload must be a JSON object" + (why.empty() ? "" : ": " + why));
  };
  // libbson reads a top-level array as a document with keys "0", "1", ...: refuse it here.
  const auto first = json.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || json[first] != '{') invalid("");
  bson_error_t error;
  bson_json_reader_t* reader = bson_json_data_reader_new(false, json.size());
  bson_json_data_reader_ingest(reader, reinterpret_cast<const std::uint8_t*>(json.data()),
                               json.size());
  Bson payload;
  const int read = bson_json_reader_read(reader, payload.get(), &error);
  // Exactly one document: a second one (or trailing text) is refused too.
  bson_t rest = BSON_INITIALIZER;
  bson_error_t rest_error;
  const int more = read == 1 ? bson_json_reader_read(reader, &rest, &rest_error) : 0;
  bson_destroy(&rest);
  bson_json_reader_destroy(reader);
  if (read < 0) invalid(error.message);
  if (read == 0) invalid("");
  if (more != 0) invalid("text after the object");
  return payload;
}

Bson delivery_id(const std::string& event_id, const std::string& handler) {
  Bson id;
  append_string(id.get(), field::kIdEvent, event_id);
  append_string(id.get(), field::kIdHandler, handler);
  return id;
}

Bson lane_id(const std::string& handler, std::int16_t lane) {
  Bson id;
  append_string(id.get(), field::kIdHandler, handler);
  bson_append_int32(id.get(), field::kIdLane, -1, lane);
  return id;
}

Bson subscription_fields(const store::Subscription& s) {
  Bson doc;
  append_strings(doc.get(), field::kEventTypes, s.event_types);
  bson_append_int32(doc.get(), field::kMaxAttempts, -1, s.retry.max_attempts);
  bson_append_int64(doc.get(), field::kBackoffBaseUs, -1, s.retry.backoff_base_us);
  bson_append_int64(doc.get(), field::kBackoffMaxUs, -1, s.retry.backoff_max_us);
  return doc;
}

Bson new_lane_fields(const std::string& handler, std::int16_t lane) {
  Bson doc;
  append_string(doc.get(), field::kHandler, handler);
  bson_append_int32(doc.get(), field::kLane, -1, lane);
  bson_append_int64(doc.get(), field::kEpoch, -1, 0);
  bson_append_null(doc.get(), field::kOwner, -1);
  bson_append_null(doc.get(), field::kHolder, -1);
  bson_append_null(doc.get(), field::kLeaseExpiresAt, -1);
  append_empty_array(doc.get(), field::kInFlight);
  append_empty_array(doc.get(), field::kLost);
  return doc;
}

Bson event_document(const NewEvent& e) {
  Bson doc;
  append_string(doc.get(), field::kId, e.id);
  append_string(doc.get(), field::kType, e.type);
  append_string_or_null(doc.get(), field::kKey, e.key);
  if (e.payload) {
    bson_append_document(doc.get(), field::kPayload, -1, e.payload);
  } else {
    bson_t empty = BSON_INITIALIZER;
    bson_append_document(doc.get(), field::kPayload, -1, &empty);
    bson_destroy(&empty);
  }
  append_strings(doc.get(), field::kHandlers, e.handlers);
  bson_append_date_time(doc.get(), field::kCreatedAt, -1, e.created_at_ms);
  return doc;
}

std::int16_t delivery_lane(const std::string& event_id, const std::optional<std::string>& key) {
  return core::lane_of(key ? *key : event_id);
}

Bson delivery_document(const NewDelivery& d) {
  Bson doc;
  Bson id = delivery_id(d.event_id, d.handler);
  bson_append_document(doc.get(), field::kId, -1, id.get());
  append_string(doc.get(), field::kEventId, d.event_id);
  append_string(doc.get(), field::kHandler, d.handler);
  bson_append_int32(doc.get(), field::kLaneId, -1, delivery_lane(d.event_id, d.key));
  append_string_or_null(doc.get(), field::kKey, d.key);
  bson_append_int64(doc.get(), field::kSequence, -1, d.sequence);
  append_string(doc.get(), field::kStatus, kPending);
  bson_append_int32(doc.get(), field::kAttempts, -1, 0);
  bson_append_int32(doc.get(), field::kClaims, -1, 0);
  bson_append_date_time(doc.get(), field::kAvailableAt, -1, d.available_at_ms);
  bson_append_null(doc.get(), field::kLastError, -1);
  // The listing's order and oldest_pending, and the purge of an unsubscribed handler's
  // pending deliveries, go by when the delivery was created, as PostgreSQL's created_at.
  bson_append_date_time(doc.get(), field::kCreatedAt, -1, d.now_ms);
  bson_append_date_time(doc.get(), field::kUpdatedAt, -1, d.now_ms);
  return doc;
}

Bson completion_fields(const NewCompletion& c) {
  Bson doc;
  append_string(doc.get(), field::kEventId, c.event_id);
  append_string(doc.get(), field::kHandler, c.handler);
  bson_append_int32(doc.get(), field::kAttempts, -1, c.attempts);
  bson_append_date_time(doc.get(), field::kCompletedAt, -1, c.completed_at_ms);
  return doc;
}

std::vector<IndexSpec> index_specs() {
  std::vector<IndexSpec> specs;
  {
    IndexSpec s{
        kDeliveries, "deliveries_claim",
        Bson(),      Bson(),
        false,       "claim: a lane's due deliveries in due order, and which lanes have due work"};
    BSON_APPEND_INT32(s.keys.get(), field::kHandler, 1);
    BSON_APPEND_INT32(s.keys.get(), field::kLaneId, 1);
    BSON_APPEND_INT32(s.keys.get(), field::kStatus, 1);
    BSON_APPEND_INT32(s.keys.get(), field::kAvailableAt, 1);
    BSON_APPEND_INT32(s.keys.get(), field::kId, 1);
    specs.push_back(std::move(s));
  }
  {
    IndexSpec s{
        kDeliveries, "deliveries_key_order",
        Bson(),      Bson(),
        false,       "claim: has a keyed delivery an earlier pending one of its handler and key"};
    BSON_APPEND_INT32(s.keys.get(), field::kHandler, 1);
    BSON_APPEND_INT32(s.keys.get(), field::kLaneId, 1);
    BSON_APPEND_INT32(s.keys.get(), field::kKey, 1);
    BSON_APPEND_INT32(s.keys.get(), field::kSequence, 1);
    // Unkeyed deliveries have no predecessor to look for: kept out, as in PostgreSQL.
    append_string(s.partial.get(), field::kStatus, kPending);
    bson_t type;
    bson_append_document_begin(s.partial.get(), field::kKey, -1, &type);
    BSON_APPEND_UTF8(&type, "$type", "string");
    bson_append_document_end(s.partial.get(), &type);
    specs.push_back(std::move(s));
  }
  {
    IndexSpec s{kDeliveries, "deliveries_dead",           Bson(), Bson(),
                false,       "purge: dead letters by age"};
    BSON_APPEND_INT32(s.keys.get(), field::kStatus, 1);
    BSON_APPEND_INT32(s.keys.get(), field::kUpdatedAt, 1);
    append_string(s.partial.get(), field::kStatus, kDead);
    specs.push_back(std::move(s));
  }
  {
    IndexSpec s{kLanes, "lanes_handler_lane",
                Bson(), Bson(),
                true,   "one lane document per (handler, lane), found by handler"};
    BSON_APPEND_INT32(s.keys.get(), field::kHandler, 1);
    BSON_APPEND_INT32(s.keys.get(), field::kLane, 1);
    specs.push_back(std::move(s));
  }
  {
    // PostgreSQL keeps a BRIN index for this; an insert-only, ascending key is as cheap here.
    IndexSpec s{kEvents, "events_created_at",
                Bson(),  Bson(),
                false,   "purge: events by age, without scanning every event"};
    BSON_APPEND_INT32(s.keys.get(), field::kCreatedAt, 1);
    specs.push_back(std::move(s));
  }
  {
    IndexSpec s{kCompletions, "completions_completed_at",
                Bson(),       Bson(),
                false,        "purge: history by age; listing: the newest first"};
    BSON_APPEND_INT32(s.keys.get(), field::kCompletedAt, -1);
    BSON_APPEND_INT32(s.keys.get(), field::kEventId, 1);
    BSON_APPEND_INT32(s.keys.get(), field::kHandler, 1);
    specs.push_back(std::move(s));
  }
  {
    IndexSpec s{kCompletions,
                "completions_handler",
                Bson(),
                Bson(),
                false,
                "listing one handler's history, newest first; statistics: counts per handler"};
    BSON_APPEND_INT32(s.keys.get(), field::kHandler, 1);
    BSON_APPEND_INT32(s.keys.get(), field::kCompletedAt, -1);
    BSON_APPEND_INT32(s.keys.get(), field::kEventId, 1);
    specs.push_back(std::move(s));
  }
  return specs;
}

// ---------------------------------------------------------------- reading

namespace {

// A 0.2.0 delivery is pending or dead (completed ones are deleted).
std::string stored_status(const bson_t* delivery) {
  std::string status = string_field(delivery, field::kStatus);
  if (status != kPending && status != kDead) unreadable(field::kStatus);
  return status;
}

}  // namespace

StoredEvent read_event(const bson_t* event) {
  StoredEvent e;
  e.type = string_field(event, field::kType);
  e.key = string_or_null_field(event, field::kKey);
  e.handlers = strings_field(event, field::kHandlers);
  return e;
}

StoredDelivery read_delivery(const bson_t* delivery) {
  StoredDelivery d;
  d.status = stored_status(delivery);
  d.attempts = to_int32(integer_field(delivery, field::kAttempts), field::kAttempts);
  d.claims = to_int32(integer_field(delivery, field::kClaims), field::kClaims);
  return d;
}

std::int64_t read_counter(const bson_t* counter) {
  return integer_field(counter, field::kLast);
}

store::Subscription read_subscription(const bson_t* subscription) {
  store::Subscription s;
  s.handler = string_field(subscription, field::kId);
  s.event_types = strings_field(subscription, field::kEventTypes);
  core::RetryPolicy policy;
  policy.max_attempts =
      to_int32(integer_field(subscription, field::kMaxAttempts), field::kMaxAttempts);
  policy.backoff_base_us = integer_field(subscription, field::kBackoffBaseUs);
  policy.backoff_max_us = integer_field(subscription, field::kBackoffMaxUs);
  s.retry = core::clamped(policy);
  return s;
}

bool read_paused(const bson_t* subscription) {
  bson_iter_t it;
  return bson_iter_init_find(&it, subscription, field::kPaused) && BSON_ITER_HOLDS_BOOL(&it) &&
         bson_iter_bool(&it);
}

std::string read_string_id(const bson_t* document) {
  return string_field(document, field::kId);
}

namespace {

std::int16_t lane_number(std::int64_t value, const char* name) {
  if (value < 0 || value >= core::kLaneCount) unreadable(name);
  return static_cast<std::int16_t>(value);
}

}  // namespace

StoredLane read_lane(const bson_t* lane) {
  StoredLane l;
  l.handler = string_field(lane, field::kHandler);
  l.lane = lane_number(integer_field(lane, field::kLane), field::kLane);
  l.epoch = integer_field(lane, field::kEpoch);
  l.owner = string_or_null_field(lane, field::kOwner);
  l.holder = string_or_null_field(lane, field::kHolder);
  l.lease_expires_at_ms = date_or_null_field(lane, field::kLeaseExpiresAt);
  l.in_flight = strings_field(lane, field::kInFlight);
  l.lost = strings_field(lane, field::kLost);
  if (has_field(lane, field::kVersion)) l.version = integer_field(lane, field::kVersion);
  return l;
}

WorkDelivery read_work_delivery(const bson_t* delivery) {
  WorkDelivery d;
  d.event_id = string_field(delivery, field::kEventId);
  d.handler = string_field(delivery, field::kHandler);
  d.key = string_or_null_field(delivery, field::kKey);
  d.sequence = integer_field(delivery, field::kSequence);
  d.status = stored_status(delivery);
  d.attempts = to_int32(integer_field(delivery, field::kAttempts), field::kAttempts);
  d.claims = to_int32(integer_field(delivery, field::kClaims), field::kClaims);
  d.available_at_ms = date_field(delivery, field::kAvailableAt);
  return d;
}

ClaimedEvent read_claimed_event(const bson_t* event) {
  ClaimedEvent e;
  e.id = string_field(event, field::kId);
  e.type = string_field(event, field::kType);
  e.key = string_or_null_field(event, field::kKey);
  const Bson payload = document_field(event, field::kPayload);
  // libbson writes an empty document as "{ }"; the other stores return "{}".
  e.payload = bson_empty(payload.get()) ? "{}" : payload.relaxed_json();
  e.created_at_ms = date_field(event, field::kCreatedAt);
  return e;
}

std::pair<std::string, std::int64_t> read_first_sequence(const bson_t* group) {
  return {string_field(group, field::kId), integer_field(group, "first")};
}

std::pair<std::string, std::int16_t> read_lane_group(const bson_t* group) {
  const Bson id = document_field(group, field::kId);
  return {string_field(id.get(), field::kIdHandler),
          lane_number(integer_field(id.get(), field::kIdLane), field::kIdLane)};
}

// ---------------------------------------------------------------- the operator half's reads

std::pair<std::string, std::string> read_delivery_id(const bson_t* document) {
  const Bson id = document_field(document, field::kId);
  return {string_field(id.get(), field::kIdHandler), string_field(id.get(), field::kIdEvent)};
}

ListedDeliveryDocument read_listed_delivery(const bson_t* delivery) {
  ListedDeliveryDocument d;
  d.event_id = string_field(delivery, field::kEventId);
  d.handler = string_field(delivery, field::kHandler);
  d.key = string_or_null_field(delivery, field::kKey);
  d.status = stored_status(delivery);
  d.attempts = to_int32(integer_field(delivery, field::kAttempts), field::kAttempts);
  d.available_at_ms = date_field(delivery, field::kAvailableAt);
  d.last_error = string_or_null_field(delivery, field::kLastError);
  d.created_at_ms = date_field(delivery, field::kCreatedAt);
  return d;
}

StoredCompletion read_completion(const bson_t* completion) {
  StoredCompletion c;
  c.event_id = string_field(completion, field::kEventId);
  c.handler = string_field(completion, field::kHandler);
  c.attempts = to_int32(integer_field(completion, field::kAttempts), field::kAttempts);
  c.completed_at_ms = date_field(completion, field::kCompletedAt);
  return c;
}

EventSummary read_event_summary(const bson_t* event) {
  EventSummary e;
  e.id = string_field(event, field::kId);
  e.type = string_field(event, field::kType);
  e.key = string_or_null_field(event, field::kKey);
  return e;
}

std::pair<std::string, std::vector<std::string>> read_event_handlers(const bson_t* event) {
  return {string_field(event, field::kId), strings_field(event, field::kHandlers)};
}

DeliveryCounts read_delivery_counts(const bson_t* group) {
  DeliveryCounts c;
  c.handler = string_field(group, field::kId);
  c.pending = integer_field(group, kPending);
  c.dead = integer_field(group, kDead);
  c.oldest_pending_ms = date_or_null_field(group, "oldest");
  return c;
}

std::pair<std::string, std::int64_t> read_completion_count(const bson_t* group) {
  return {string_field(group, field::kId), integer_field(group, "completed")};
}

}  // namespace relaybus::mongo
