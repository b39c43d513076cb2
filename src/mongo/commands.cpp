#include "commands.hpp"

#include <algorithm>

#include "command_parts.hpp"
#include "core/attempt_end.hpp"
#include "core/claim_request.hpp"
#include "core/due_time.hpp"
#include "core/error.hpp"
#include "core/lane.hpp"
#include "core/republish.hpp"
#include "core/retry_policy.hpp"

namespace relaybus::mongo::commands {

// The helpers every builder shares (command_parts.hpp).
using namespace parts;

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
  if (e.delay)
    core::checked_delay_ms(e.delay->count(), core::kDefaultMaxDelayUs, where + "delay",
                           "the store's maximum delay");
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
  Bson one = statement(q, requeue_change(now_ms), false);
  return update(kDeliveries, {&one}, true);
}

}  // namespace relaybus::mongo::commands

// ---------------------------------------------------------------- the worker half

namespace relaybus::mongo::commands {

std::vector<const char*> lane_fields() {
  return {field::kHandler,        field::kLane,     field::kEpoch, field::kOwner,  field::kHolder,
          field::kLeaseExpiresAt, field::kInFlight, field::kLost,  field::kVersion};
}

std::vector<const char*> work_fields() {
  return {field::kEventId, field::kHandler,  field::kKey,    field::kSequence,
          field::kStatus,  field::kAttempts, field::kClaims, field::kAvailableAt};
}

Bson find_subscribed(const std::optional<std::vector<std::string>>& handlers) {
  Bson filter;
  if (handlers) append_strings_op(filter.get(), field::kId, "$in", *handlers);
  return find(kSubscriptions, filter,
              {field::kEventTypes, field::kMaxAttempts, field::kBackoffBaseUs, field::kBackoffMaxUs,
               field::kPaused},
              false);
}

Bson find_held_lanes(const std::vector<std::string>& handlers, const std::string& worker) {
  Bson filter;
  append_strings_op(filter.get(), field::kHandler, "$in", handlers);
  append_string(filter.get(), field::kOwner, worker);
  return find(kLanes, filter, lane_fields(), false);
}

Bson find_lanes(const LaneRefs& lanes) {
  return find(kLanes, lane_ids_filter(lanes), lane_fields(), false);
}

Bson find_owned_lanes(const std::string& worker) {
  Bson filter;
  append_string(filter.get(), field::kOwner, worker);
  return find(kLanes, filter, lane_fields(), false);
}

Bson find_deliveries(const Refs& handler_event, bool pending_only) {
  Bson filter = delivery_ids_filter(handler_event);
  if (pending_only) append_string(filter.get(), field::kStatus, kPending);
  return find(kDeliveries, filter, work_fields(), false);
}

Bson lanes_with_work(const std::vector<std::string>& handlers, std::int64_t now_ms) {
  Bson match;
  append_strings_op(match.get(), field::kHandler, "$in", handlers);
  append_string(match.get(), field::kStatus, kPending);
  append_due_by(match.get(), now_ms);
  Bson by_index;  // the order of deliveries_claim
  for (const char* f : {field::kHandler, field::kLaneId, field::kStatus, field::kAvailableAt})
    bson_append_int32(by_index.get(), f, -1, 1);
  Bson group;
  bson_t id;
  bson_append_document_begin(group.get(), field::kId, -1, &id);
  BSON_APPEND_UTF8(&id, field::kIdHandler, "$handler");
  BSON_APPEND_UTF8(&id, field::kIdLane, "$laneId");
  bson_append_document_end(group.get(), &id);
  bson_t first;
  bson_append_document_begin(group.get(), "at", -1, &first);
  BSON_APPEND_UTF8(&first, "$first", "$availableAt");
  bson_append_document_end(group.get(), &first);
  Bson oldest;
  bson_append_int32(oldest.get(), "at", -1, 1);
  bson_append_int32(oldest.get(), field::kId, -1, 1);
  Bson s1 = stage("$match", match), s2 = stage("$sort", by_index), s3 = stage("$group", group),
       s4 = stage("$sort", oldest);
  return aggregate(kDeliveries, {&s1, &s2, &s3, &s4});
}

Bson find_candidates(const std::string& handler, std::int16_t lane,
                     const std::vector<std::string>& excluded, std::int64_t now_ms, int skip,
                     int limit) {
  Bson cmd;
  BSON_APPEND_UTF8(cmd.get(), "find", kDeliveries);
  bson_t filter;
  bson_append_document_begin(cmd.get(), "filter", -1, &filter);
  append_string(&filter, field::kHandler, handler);
  bson_append_int32(&filter, field::kLaneId, -1, lane);
  append_string(&filter, field::kStatus, kPending);
  append_due_by(&filter, now_ms);
  if (!excluded.empty()) append_strings_op(&filter, field::kEventId, "$nin", excluded);
  bson_append_document_end(cmd.get(), &filter);
  bson_t sort;
  bson_append_document_begin(cmd.get(), "sort", -1, &sort);
  bson_append_int32(&sort, field::kAvailableAt, -1, 1);
  bson_append_int32(&sort, field::kId, -1, 1);
  bson_append_document_end(cmd.get(), &sort);
  bson_t projection;
  bson_append_document_begin(cmd.get(), "projection", -1, &projection);
  for (const char* f : work_fields()) bson_append_int32(&projection, f, -1, 1);
  bson_append_document_end(cmd.get(), &projection);
  if (skip > 0) BSON_APPEND_INT64(cmd.get(), "skip", skip);
  BSON_APPEND_INT64(cmd.get(), "limit", limit);
  return cmd;
}

Bson first_pending_sequences(const std::string& handler, std::int16_t lane,
                             const std::vector<std::string>& keys) {
  Bson match;
  append_string(match.get(), field::kHandler, handler);
  bson_append_int32(match.get(), field::kLaneId, -1, lane);
  append_strings_op(match.get(), field::kKey, "$in", keys);
  append_string(match.get(), field::kStatus, kPending);
  Bson group;
  BSON_APPEND_UTF8(group.get(), field::kId, "$key");
  bson_t first;
  bson_append_document_begin(group.get(), "first", -1, &first);
  BSON_APPEND_UTF8(&first, "$min", "$sequence");
  bson_append_document_end(group.get(), &first);
  Bson s1 = stage("$match", match), s2 = stage("$group", group);
  return aggregate(kDeliveries, {&s1, &s2});
}

Bson charge_updates(const std::vector<core::Charge>& charges,
                    const std::vector<std::int32_t>& claims_read, std::int64_t now_ms) {
  std::vector<Bson> statements;
  for (std::size_t i = 0; i < charges.size(); ++i) {
    const core::Charge& c = charges[i];
    Bson q;
    Bson id = delivery_id(c.event_id, c.handler);
    bson_append_document(q.get(), field::kId, -1, id.get());
    append_string(q.get(), field::kStatus, kPending);
    bson_append_int32(q.get(), field::kClaims, -1, claims_read.at(i));
    Bson u;
    bson_t set;
    bson_append_document_begin(u.get(), "$set", -1, &set);
    bson_append_int32(&set, field::kAttempts, -1, c.attempts);
    append_string(&set, field::kStatus, c.dead ? kDead : kPending);
    BSON_APPEND_UTF8(&set, field::kLastError, core::kLeaseLostError);
    bson_append_date_time(&set, field::kUpdatedAt, -1, now_ms);
    bson_append_document_end(u.get(), &set);
    append_claims_bump(u.get());
    statements.push_back(statement(q, u, false));
  }
  std::vector<const Bson*> raw;
  for (const auto& s : statements) raw.push_back(&s);
  return with_majority(update(kDeliveries, raw, false));
}

Bson lane_writes(const std::vector<core::LaneUpdate>& updates,
                 const std::vector<std::optional<std::int64_t>>& read_versions,
                 const std::string& worker, const std::string& holder,
                 std::int64_t lease_expires_at_ms) {
  std::vector<Bson> statements;
  for (std::size_t i = 0; i < updates.size(); ++i) {
    const core::LaneUpdate& up = updates[i];
    Bson q = lane_filter(up.handler, up.lane);
    bson_append_int64(q.get(), field::kEpoch, -1, up.read_epoch);
    append_version_read(q.get(), read_versions.at(i));
    Bson u;
    bson_t set;
    bson_append_document_begin(u.get(), "$set", -1, &set);
    bson_append_int64(&set, field::kEpoch, -1, up.write.epoch);
    if (up.write.hold) {
      append_string(&set, field::kOwner, worker);
      if (up.write.new_holder) append_string(&set, field::kHolder, holder);
      bson_append_date_time(&set, field::kLeaseExpiresAt, -1, lease_expires_at_ms);
      append_strings(&set, field::kInFlight, up.in_flight);
    } else {
      bson_append_null(&set, field::kOwner, -1);
      bson_append_null(&set, field::kHolder, -1);
      bson_append_null(&set, field::kLeaseExpiresAt, -1);
      append_strings(&set, field::kInFlight, {});
    }
    append_strings(&set, field::kLost, up.lost);
    bson_append_document_end(u.get(), &set);
    append_version_bump(u.get());
    bson_t insert;
    bson_append_document_begin(u.get(), "$setOnInsert", -1, &insert);
    append_string(&insert, field::kHandler, up.handler);
    bson_append_int32(&insert, field::kLane, -1, up.lane);
    bson_append_document_end(u.get(), &insert);
    statements.push_back(statement(q, u, true));
  }
  std::vector<const Bson*> raw;
  for (const auto& s : statements) raw.push_back(&s);
  return with_majority(update(kLanes, raw, false));
}

Bson clear_lost(const std::vector<core::LaneRef>& lanes, const std::vector<std::int64_t>& epochs) {
  std::vector<Bson> statements;
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    Bson q = lane_filter(lanes[i].handler, lanes[i].lane);
    bson_append_int64(q.get(), field::kEpoch, -1, epochs.at(i));
    Bson u;
    bson_t set;
    bson_append_document_begin(u.get(), "$set", -1, &set);
    append_strings(&set, field::kLost, {});
    bson_append_document_end(u.get(), &set);
    statements.push_back(statement(q, u, false));
  }
  std::vector<const Bson*> raw;
  for (const auto& s : statements) raw.push_back(&s);
  return with_majority(update(kLanes, raw, false));
}

Bson find_events(const std::vector<std::string>& ids) {
  Bson filter;
  append_strings_op(filter.get(), field::kId, "$in", ids);
  return find(kEvents, filter, {field::kType, field::kKey, field::kPayload, field::kCreatedAt},
              false);
}

Bson delete_deliveries(const Refs& handler_event) {
  std::vector<Bson> statements;
  for (const auto& [h, e] : handler_event) {
    Bson s;
    Bson id = delivery_id(e, h);
    bson_t q;
    bson_append_document_begin(s.get(), "q", -1, &q);
    bson_append_document(&q, field::kId, -1, id.get());
    bson_append_document_end(s.get(), &q);
    BSON_APPEND_INT32(s.get(), "limit", 1);
    statements.push_back(std::move(s));
  }
  std::vector<const Bson*> raw;
  for (const auto& s : statements) raw.push_back(&s);
  Bson cmd;
  BSON_APPEND_UTF8(cmd.get(), "delete", kDeliveries);
  append_documents(cmd.get(), "deletes", raw);
  BSON_APPEND_BOOL(cmd.get(), "ordered", true);
  return cmd;
}

Bson record_completions(const std::vector<NewCompletion>& completions) {
  std::vector<Bson> statements;
  for (const auto& c : completions) {
    Bson q;
    Bson id = delivery_id(c.event_id, c.handler);
    bson_append_document(q.get(), field::kId, -1, id.get());
    statements.push_back(statement(q, completion_fields(c), true));
  }
  return update(kCompletions, pointers_to(statements), true);
}

Bson end_update(const std::string& handler, const std::string& event_id, std::int32_t claims_read,
                const core::AttemptEnd& end, std::optional<std::int64_t> available_at_ms,
                const std::string& error, std::int64_t now_ms) {
  Bson q;
  Bson id = delivery_id(event_id, handler);
  bson_append_document(q.get(), field::kId, -1, id.get());
  append_string(q.get(), field::kStatus, kPending);
  bson_append_int32(q.get(), field::kClaims, -1, claims_read);
  Bson u;
  bson_t set;
  bson_append_document_begin(u.get(), "$set", -1, &set);
  append_string(&set, field::kStatus, end.dead ? kDead : kPending);
  bson_append_int32(&set, field::kAttempts, -1, end.attempts);
  if (available_at_ms) bson_append_date_time(&set, field::kAvailableAt, -1, *available_at_ms);
  if (!error.empty()) append_string(&set, field::kLastError, error);
  bson_append_date_time(&set, field::kUpdatedAt, -1, now_ms);
  bson_append_document_end(u.get(), &set);
  append_claims_bump(u.get());
  Bson one = statement(q, u, false);
  return update(kDeliveries, {&one}, true);
}

Bson pull_in_flight(const std::string& handler, std::int16_t lane, const std::string& event_id) {
  Bson q = lane_filter(handler, lane);
  Bson u;
  bson_t pull;
  bson_append_document_begin(u.get(), "$pull", -1, &pull);
  append_string(&pull, field::kInFlight, event_id);
  bson_append_document_end(u.get(), &pull);
  append_version_bump(u.get());
  Bson one = statement(q, u, false);
  return update(kLanes, {&one}, true);
}

Bson hand_back(const std::vector<StoredLane>& lanes) {
  std::vector<Bson> statements;
  for (const auto& l : lanes) {
    Bson q = lane_filter(l.handler, l.lane);
    bson_append_int64(q.get(), field::kEpoch, -1, l.epoch);
    append_optional_string(q.get(), field::kOwner, l.owner);
    append_optional_string(q.get(), field::kHolder, l.holder);
    append_strings(q.get(), field::kInFlight, l.in_flight);
    Bson u;
    bson_t set;
    bson_append_document_begin(u.get(), "$set", -1, &set);
    bson_append_null(&set, field::kOwner, -1);
    bson_append_null(&set, field::kHolder, -1);
    bson_append_null(&set, field::kLeaseExpiresAt, -1);
    append_strings(&set, field::kInFlight, {});
    bson_append_document_end(u.get(), &set);
    append_version_bump(u.get());
    statements.push_back(statement(q, u, false));
  }
  std::vector<const Bson*> raw;
  for (const auto& s : statements) raw.push_back(&s);
  return with_majority(update(kLanes, raw, false));
}

Bson renew(const std::vector<StoredLane>& lanes, const std::string& worker,
           const std::string& holder, std::int64_t lease_expires_at_ms) {
  LaneRefs refs;
  for (const auto& l : lanes) refs.push_back({l.handler, l.lane});
  Bson q = lane_ids_filter(refs);
  append_string(q.get(), field::kOwner, worker);
  append_string(q.get(), field::kHolder, holder);
  Bson u;
  bson_t set;
  bson_append_document_begin(u.get(), "$set", -1, &set);
  bson_append_date_time(&set, field::kLeaseExpiresAt, -1, lease_expires_at_ms);
  bson_append_document_end(u.get(), &set);
  Bson one = statement(q, u, false);
  BSON_APPEND_BOOL(one.get(), "multi", true);
  return with_majority(update(kLanes, {&one}, false));
}

}  // namespace relaybus::mongo::commands
