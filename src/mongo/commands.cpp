#include "commands.hpp"

#include <algorithm>

#include "core/attempt_end.hpp"
#include "core/claim_request.hpp"
#include "core/error.hpp"
#include "core/lane.hpp"
#include "core/republish.hpp"
#include "core/retry_policy.hpp"

namespace relaybus::mongo::commands {

namespace {

// Appends docs as an array.
void append_documents(bson_t* doc, const char* name, const std::vector<const Bson*>& docs) {
  bson_t array;
  bson_append_array_begin(doc, name, -1, &array);
  char index[16];
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const char* key = nullptr;
    bson_uint32_to_string(static_cast<std::uint32_t>(i), &key, index, sizeof index);
    bson_append_document(&array, key, -1, docs[i]->get());
  }
  bson_append_array_end(doc, &array);
}

void append_majority(bson_t* doc) {
  bson_t wc;
  bson_append_document_begin(doc, "writeConcern", -1, &wc);
  BSON_APPEND_UTF8(&wc, "w", "majority");
  bson_append_document_end(doc, &wc);
}

// {_id: value} for a string _id.
Bson id_filter(const std::string& id) {
  Bson filter;
  append_string(filter.get(), field::kId, id);
  return filter;
}

// {find: collection, filter: ..., projection: {fields: 1}}, plus limit/singleBatch for a
// lookup by _id.
Bson find(const char* collection, const Bson& filter, const std::vector<const char*>& fields,
          bool by_id) {
  Bson cmd;
  BSON_APPEND_UTF8(cmd.get(), "find", collection);
  bson_append_document(cmd.get(), "filter", -1, filter.get());
  bson_t projection;
  bson_append_document_begin(cmd.get(), "projection", -1, &projection);
  for (const char* f : fields) bson_append_int32(&projection, f, -1, 1);
  bson_append_document_end(cmd.get(), &projection);
  if (by_id) {
    BSON_APPEND_INT64(cmd.get(), "limit", 1);
    BSON_APPEND_BOOL(cmd.get(), "singleBatch", true);
  } else {
    bson_t sort;
    bson_append_document_begin(cmd.get(), "sort", -1, &sort);
    bson_append_int32(&sort, field::kId, -1, 1);
    bson_append_document_end(cmd.get(), &sort);
  }
  return cmd;
}

// {update: collection, updates: [statements], ordered}
Bson update(const char* collection, const std::vector<const Bson*>& statements, bool ordered) {
  Bson cmd;
  BSON_APPEND_UTF8(cmd.get(), "update", collection);
  append_documents(cmd.get(), "updates", statements);
  BSON_APPEND_BOOL(cmd.get(), "ordered", ordered);
  return cmd;
}

// {q, u, upsert}
Bson statement(const Bson& q, const Bson& u, bool upsert) {
  Bson s;
  bson_append_document(s.get(), "q", -1, q.get());
  bson_append_document(s.get(), "u", -1, u.get());
  BSON_APPEND_BOOL(s.get(), "upsert", upsert);
  return s;
}

}  // namespace

// ---------------------------------------------------------------- validation

void validate_subscription(const store::Subscription& s) {
  core::validate_name("handler name", s.handler);
  if (s.event_types.empty())
    throw core::Error(core::ErrorCode::kInvalidParameter, "event_types must not be empty");
  for (const auto& t : s.event_types) core::validate_name("event type", t);
  core::validate(s.retry);
}

Bson validate_event(const store::Event& e, const std::string& where) {
  core::validate_name(where + "type", e.type);
  Bson payload = parse_payload(e.payload, where);
  if (e.key) core::validate_name(where + "key", *e.key);
  if (e.event_id) core::validate_name(where + "event_id", *e.event_id);
  if (e.handlers) {
    for (const auto& h : *e.handlers) core::validate_name(where + "handler name", h);
  }
  if (e.delay && e.delay->count() < 0)
    throw core::Error(core::ErrorCode::kInvalidParameter, where + "delay must not be negative");
  return payload;
}

void check_subscribed(const std::vector<std::string>& given,
                      const std::vector<std::string>& found) {
  for (const auto& h : given) {
    if (std::find(found.begin(), found.end(), h) == found.end())
      throw core::Error(core::ErrorCode::kUndefinedObject,
                        "handler \"" + h + "\" is not subscribed", "Subscribe it first.");
  }
}

// ---------------------------------------------------------------- setup

Bson create_collection(const char* name) {
  Bson cmd;
  BSON_APPEND_UTF8(cmd.get(), "create", name);
  append_majority(cmd.get());
  return cmd;
}

Bson create_indexes(const char* collection) {
  Bson cmd;
  BSON_APPEND_UTF8(cmd.get(), "createIndexes", collection);
  bson_t indexes;
  bson_append_array_begin(cmd.get(), "indexes", -1, &indexes);
  std::uint32_t n = 0;
  for (const auto& spec : index_specs()) {
    if (std::string(spec.collection) != collection) continue;
    char index[16];
    const char* key = nullptr;
    bson_uint32_to_string(n++, &key, index, sizeof index);
    bson_t one;
    bson_append_document_begin(&indexes, key, -1, &one);
    bson_append_document(&one, "key", -1, spec.keys.get());
    BSON_APPEND_UTF8(&one, "name", spec.name);
    if (spec.unique) BSON_APPEND_BOOL(&one, "unique", true);
    if (!bson_empty(spec.partial.get()))
      bson_append_document(&one, "partialFilterExpression", -1, spec.partial.get());
    bson_append_document_end(&indexes, &one);
  }
  bson_append_array_end(cmd.get(), &indexes);
  append_majority(cmd.get());
  return cmd;
}

std::vector<const char*> indexed_collections() {
  std::vector<const char*> out;
  for (const auto& spec : index_specs()) {
    if (std::find_if(out.begin(), out.end(),
                     [&](const char* c) { return std::string(c) == spec.collection; }) == out.end())
      out.push_back(spec.collection);
  }
  return out;
}

// ---------------------------------------------------------------- subscribe

Bson subscription_upsert(const store::Subscription& s) {
  Bson q = id_filter(s.handler);
  Bson fields = subscription_fields(s);
  Bson u;
  bson_append_document(u.get(), "$set", -1, fields.get());
  Bson one = statement(q, u, true);
  return update(kSubscriptions, {&one}, true);
}

Bson lane_upserts(const std::string& handler) {
  std::vector<Bson> statements;
  statements.reserve(core::kLaneCount);
  for (int lane = 0; lane < core::kLaneCount; ++lane) {
    const auto l = static_cast<std::int16_t>(lane);
    Bson id = lane_id(handler, l);
    Bson q;
    bson_append_document(q.get(), field::kId, -1, id.get());
    Bson fields = new_lane_fields(handler, l);
    Bson u;
    bson_append_document(u.get(), "$setOnInsert", -1, fields.get());
    statements.push_back(statement(q, u, true));
  }
  std::vector<const Bson*> docs;
  for (const auto& s : statements) docs.push_back(&s);
  return update(kLanes, docs, false);
}

// ---------------------------------------------------------------- publish

Bson find_event(const std::string& event_id) {
  return find(kEvents, id_filter(event_id), {field::kType, field::kKey, field::kHandlers}, true);
}

Bson find_subscribers(const std::string& type) {
  Bson filter;
  bson_t types;
  bson_append_document_begin(filter.get(), field::kEventTypes, -1, &types);
  // The query copy of core::subscribes_to (republish.hpp).
  append_strings(&types, "$in", {type, std::string(core::kEveryEventType)});
  bson_append_document_end(filter.get(), &types);
  return find(kSubscriptions, filter, {field::kId}, false);
}

Bson find_subscriptions(const std::vector<std::string>& handlers) {
  Bson filter;
  bson_t ids;
  bson_append_document_begin(filter.get(), field::kId, -1, &ids);
  append_strings(&ids, "$in", handlers);
  bson_append_document_end(filter.get(), &ids);
  return find(kSubscriptions, filter, {field::kId}, false);
}

Bson next_sequence(const std::string& key) {
  Bson cmd;
  BSON_APPEND_UTF8(cmd.get(), "findAndModify", kKeyCounters);
  Bson q = id_filter(key);
  bson_append_document(cmd.get(), "query", -1, q.get());
  bson_t u;
  bson_t inc;
  bson_append_document_begin(cmd.get(), "update", -1, &u);
  bson_append_document_begin(&u, "$inc", -1, &inc);
  bson_append_int64(&inc, field::kLast, -1, 1);
  bson_append_document_end(&u, &inc);
  bson_append_document_end(cmd.get(), &u);
  BSON_APPEND_BOOL(cmd.get(), "upsert", true);
  BSON_APPEND_BOOL(cmd.get(), "new", true);
  return cmd;
}

Bson insert_event(const NewEvent& event) {
  Bson doc = event_document(event);
  Bson cmd;
  BSON_APPEND_UTF8(cmd.get(), "insert", kEvents);
  append_documents(cmd.get(), "documents", {&doc});
  return cmd;
}

Bson add_event_handlers(const std::string& event_id, const std::vector<std::string>& added) {
  Bson q = id_filter(event_id);
  Bson u;
  bson_t add;
  bson_t each;
  bson_append_document_begin(u.get(), "$addToSet", -1, &add);
  bson_append_document_begin(&add, field::kHandlers, -1, &each);
  append_strings(&each, "$each", added);
  bson_append_document_end(&add, &each);
  bson_append_document_end(u.get(), &add);
  Bson one = statement(q, u, false);
  return update(kEvents, {&one}, true);
}

Bson insert_deliveries(const std::vector<NewDelivery>& deliveries) {
  std::vector<Bson> docs;
  docs.reserve(deliveries.size());
  for (const auto& d : deliveries) docs.push_back(delivery_document(d));
  std::vector<const Bson*> raw;
  for (const auto& d : docs) raw.push_back(&d);
  Bson cmd;
  BSON_APPEND_UTF8(cmd.get(), "insert", kDeliveries);
  append_documents(cmd.get(), "documents", raw);
  return cmd;
}

PublishPlan plan_publish(const store::Event& event, const std::optional<StoredEvent>& stored) {
  PublishPlan plan;
  plan.new_event = !stored;
  plan.type = stored ? stored->type : event.type;
  plan.key = stored ? stored->key : event.key;
  if (stored) plan.had = stored->handlers;
  return plan;
}

void add_targets(PublishPlan& plan, const std::vector<std::string>& targets) {
  plan.added = core::handlers_to_add(targets, plan.had);
}

// ---------------------------------------------------------------- requeue, lookup

Bson find_delivery(const std::string& event_id, const std::string& handler) {
  Bson filter;
  Bson id = delivery_id(event_id, handler);
  bson_append_document(filter.get(), field::kId, -1, id.get());
  return find(kDeliveries, filter, {field::kStatus, field::kAttempts, field::kClaims}, true);
}

std::optional<Bson> requeue_update(const std::string& event_id, const std::string& handler,
                                   const StoredDelivery& seen, std::int64_t now_ms) {
  if (!core::requeues(seen.dead())) return std::nullopt;
  Bson q;
  Bson id = delivery_id(event_id, handler);
  bson_append_document(q.get(), field::kId, -1, id.get());
  append_string(q.get(), field::kStatus, seen.status);
  bson_append_int32(q.get(), field::kClaims, -1, seen.claims);
  Bson u;
  bson_t set;
  bson_append_document_begin(u.get(), "$set", -1, &set);
  append_string(&set, field::kStatus, kPending);
  bson_append_int32(&set, field::kAttempts, -1, core::kRequeuedAttempts);
  bson_append_date_time(&set, field::kAvailableAt, -1, now_ms);
  bson_append_date_time(&set, field::kUpdatedAt, -1, now_ms);
  bson_append_document_end(u.get(), &set);
  bson_t inc;
  bson_append_document_begin(u.get(), "$inc", -1, &inc);
  bson_append_int32(&inc, field::kClaims, -1, 1);
  bson_append_document_end(u.get(), &inc);
  Bson one = statement(q, u, false);
  return update(kDeliveries, {&one}, true);
}

}  // namespace relaybus::mongo::commands
