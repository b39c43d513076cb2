#include "upgrade_commands.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "command_parts.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "core/lane.hpp"
#include "field_readers.hpp"

namespace relaybus::mongo::upgrade {

using commands::parts::find;
using commands::parts::pointers_to;
using commands::parts::statement;
using commands::parts::update;
using commands::parts::with_majority;
using namespace fields;

namespace {

// --- building

// {name: {op: true|false}}
void append_exists(bson_t* doc, const char* name, bool exists) {
  bson_t e;
  bson_append_document_begin(doc, name, -1, &e);
  BSON_APPEND_BOOL(&e, "$exists", exists);
  bson_append_document_end(doc, &e);
}

// {$or: [{leaseToken: {$exists: true}}, {laneId: {$exists: false}}]}: a 0.1.0 delivery has
// both; a converted one neither.
void append_unconverted(bson_t* filter) {
  Bson leased;
  append_exists(leased.get(), kLeaseToken, true);
  Bson laneless;
  append_exists(laneless.get(), field::kLaneId, false);
  commands::parts::append_documents(filter, "$or", {&leased, &laneless});
}

// {_id: {$gt: value}} for the next batch of a step (each reads in _id order).
void append_after(bson_t* filter, const std::optional<std::string>& after) {
  if (!after) return;
  bson_t gt;
  bson_append_document_begin(filter, field::kId, -1, &gt);
  append_string(&gt, "$gt", *after);
  bson_append_document_end(filter, &gt);
}

void append_after(bson_t* filter, const std::optional<DeliveryKey>& after) {
  if (!after) return;
  Bson id = delivery_id(after->event_id, after->handler);
  bson_t gt;
  bson_append_document_begin(filter, field::kId, -1, &gt);
  bson_append_document(&gt, "$gt", -1, id.get());
  bson_append_document_end(filter, &gt);
}

// A step's batch: find sorted by _id, at most kBatch.
Bson batch_find(const char* collection, const Bson& filter,
                const std::vector<const char*>& fields) {
  Bson cmd = find(collection, filter, fields, false);
  BSON_APPEND_INT64(cmd.get(), "limit", kBatch);
  return cmd;
}

// {_id: {e, h}}
Bson delivery_filter(const DeliveryKey& d) {
  Bson q;
  Bson id = delivery_id(d.event_id, d.handler);
  bson_append_document(q.get(), field::kId, -1, id.get());
  return q;
}

}  // namespace

// ---------------------------------------------------------------- reading

DeliveryKey read_delivery_key(const bson_t* delivery) {
  return {string_field(delivery, field::kEventId), string_field(delivery, field::kHandler)};
}

LegacyDelivery read_legacy_delivery(const bson_t* delivery) {
  LegacyDelivery d;
  d.id = read_delivery_key(delivery);
  d.key = string_or_null_field(delivery, field::kKey);
  d.status = string_field(delivery, field::kStatus);
  if (d.status != kPending && d.status != kProcessing && d.status != kDead)
    unreadable(field::kStatus);
  d.has_claims = has_field(delivery, field::kClaims);
  d.last_error = string_or_null_field(delivery, field::kLastError);
  d.has_created_at = has_field(delivery, field::kCreatedAt);
  d.updated_at_ms = date_field(delivery, field::kUpdatedAt);
  return d;
}

CompletedDelivery read_completed_delivery(const bson_t* delivery) {
  CompletedDelivery c;
  c.id = read_delivery_key(delivery);
  const std::int64_t attempts = integer_field(delivery, field::kAttempts);
  if (attempts < 0 || attempts > INT32_MAX) unreadable(field::kAttempts);
  c.attempts = static_cast<std::int32_t>(attempts);
  c.updated_at_ms = date_field(delivery, field::kUpdatedAt);
  return c;
}

std::string read_index_name(const bson_t* index) {
  return string_field(index, "name");
}

std::pair<std::string, std::int64_t> read_lane_count(const bson_t* group) {
  return {string_field(group, field::kId), integer_field(group, "n")};
}

std::int64_t read_layout_version(const bson_t* mark) {
  bson_iter_t it;
  if (!bson_iter_init_find(&it, mark, field::kVersion) ||
      !(BSON_ITER_HOLDS_INT32(&it) || BSON_ITER_HOLDS_INT64(&it)))
    throw core::Error(core::ErrorCode::kInternal,
                      std::string("relaybus MongoDB store: unreadable layout mark (") + kMeta +
                          " \"" + kLayoutMark + "\"): no integer " + field::kVersion);
  return bson_iter_as_int64(&it);
}

// ---------------------------------------------------------------- the layout mark

Bson find_layout_mark() {
  return find(kMeta, commands::parts::id_filter(kLayoutMark), {field::kVersion}, true);
}

Bson write_layout_mark(std::int64_t now_ms) {
  Bson u;
  bson_t max;
  bson_append_document_begin(u.get(), "$max", -1, &max);
  bson_append_int32(&max, field::kVersion, -1, kLayoutVersion);
  bson_append_document_end(u.get(), &max);
  bson_t insert;
  bson_append_document_begin(u.get(), "$setOnInsert", -1, &insert);
  bson_append_date_time(&insert, field::kConvertedAt, -1, now_ms);
  bson_append_document_end(u.get(), &insert);
  const Bson mark = statement(commands::parts::id_filter(kLayoutMark), u, true);
  return with_majority(update(kMeta, {&mark}, true));
}

// ---------------------------------------------------------------- the marker

Bson find_unconverted_delivery() {
  Bson filter;
  append_unconverted(filter.get());
  return find(kDeliveries, filter, {field::kId}, true);
}

Bson find_event_without_handlers() {
  Bson filter;
  append_exists(filter.get(), field::kHandlers, false);
  return find(kEvents, filter, {field::kId}, true);
}

Bson find_live_lease(std::int64_t now_ms) {
  Bson filter;
  append_string(filter.get(), field::kStatus, kProcessing);
  bson_t gt;
  bson_append_document_begin(filter.get(), field::kLeaseExpiresAt, -1, &gt);
  bson_append_date_time(&gt, "$gt", -1, now_ms);
  bson_append_document_end(filter.get(), &gt);
  return find(kDeliveries, filter, {kLeaseOwner, field::kLeaseExpiresAt}, true);
}

// ---------------------------------------------------------------- indexes

Bson list_indexes(const char* collection) {
  Bson cmd;
  BSON_APPEND_UTF8(cmd.get(), "listIndexes", collection);
  return cmd;
}

std::vector<std::string> obsolete_among(const std::vector<std::string>& index_names) {
  std::vector<std::string> out;
  for (const char* obsolete : kObsoleteIndexes) {
    if (std::find(index_names.begin(), index_names.end(), obsolete) != index_names.end())
      out.emplace_back(obsolete);
  }
  return out;
}

Bson drop_index(const char* collection, const std::string& name) {
  Bson cmd;
  BSON_APPEND_UTF8(cmd.get(), "dropIndexes", collection);
  append_string(cmd.get(), "index", name);
  return with_majority(std::move(cmd));
}

// ---------------------------------------------------------------- lanes

Bson find_subscription_ids() {
  return find(kSubscriptions, Bson(), {field::kId}, false);
}

Bson count_lanes() {
  Bson group;
  BSON_APPEND_UTF8(group.get(), field::kId, "$handler");
  bson_t n;
  bson_append_document_begin(group.get(), "n", -1, &n);
  BSON_APPEND_INT32(&n, "$sum", 1);
  bson_append_document_end(group.get(), &n);
  Bson stage;
  bson_append_document(stage.get(), "$group", -1, group.get());
  Bson cmd;
  BSON_APPEND_UTF8(cmd.get(), "aggregate", kLanes);
  commands::parts::append_documents(cmd.get(), "pipeline", {&stage});
  bson_t cursor;
  bson_append_document_begin(cmd.get(), "cursor", -1, &cursor);
  bson_append_document_end(cmd.get(), &cursor);
  return cmd;
}

std::vector<std::string> handlers_without_lanes(
    const std::vector<std::string>& subscribed,
    const std::vector<std::pair<std::string, std::int64_t>>& counts) {
  const std::map<std::string, std::int64_t> count(counts.begin(), counts.end());
  std::vector<std::string> out;
  for (const auto& h : subscribed) {
    const auto it = count.find(h);
    if (it == count.end() || it->second < core::kLaneCount) out.push_back(h);
  }
  return out;
}

Bson lane_upserts(const std::string& handler) {
  return with_majority(commands::lane_upserts(handler));
}

// ---------------------------------------------------------------- events.handlers

Bson find_events_without_handlers(const std::optional<std::string>& after) {
  Bson filter;
  append_exists(filter.get(), field::kHandlers, false);
  append_after(filter.get(), after);
  return batch_find(kEvents, filter, {field::kId});
}

Bson find_deliveries_of_events(const std::string& first, const std::string& last) {
  Bson from;
  append_string(from.get(), field::kIdEvent, first);
  Bson to;
  append_string(to.get(), field::kIdEvent, last);
  bson_append_maxkey(to.get(), field::kIdHandler, -1);
  Bson filter;
  bson_t range;
  bson_append_document_begin(filter.get(), field::kId, -1, &range);
  bson_append_document(&range, "$gte", -1, from.get());
  bson_append_document(&range, "$lte", -1, to.get());
  bson_append_document_end(filter.get(), &range);
  return find(kDeliveries, filter, {field::kEventId, field::kHandler}, false);
}

std::vector<std::pair<std::string, std::vector<std::string>>> handlers_of(
    const std::vector<std::string>& event_ids, const std::vector<DeliveryKey>& deliveries) {
  std::map<std::string, std::set<std::string>> of;
  for (const auto& id : event_ids) of[id];
  for (const auto& d : deliveries) {
    const auto it = of.find(d.event_id);
    if (it != of.end()) it->second.insert(d.handler);
  }
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  for (const auto& id : event_ids) {
    const auto& handlers = of[id];
    out.emplace_back(id, std::vector<std::string>(handlers.begin(), handlers.end()));
  }
  return out;
}

Bson set_event_handlers(
    const std::vector<std::pair<std::string, std::vector<std::string>>>& events) {
  std::vector<Bson> statements;
  for (const auto& [id, handlers] : events) {
    Bson q;
    append_string(q.get(), field::kId, id);
    append_exists(q.get(), field::kHandlers, false);
    Bson u;
    bson_t set;
    bson_append_document_begin(u.get(), "$set", -1, &set);
    append_strings(&set, field::kHandlers, handlers);
    bson_append_document_end(u.get(), &set);
    statements.push_back(statement(q, u, false));
  }
  return with_majority(update(kEvents, pointers_to(statements), false));
}

// ---------------------------------------------------------------- completed deliveries

Bson find_completed(const std::optional<DeliveryKey>& after) {
  Bson filter;
  append_string(filter.get(), field::kStatus, kCompleted);
  append_after(filter.get(), after);
  return batch_find(kDeliveries, filter,
                    {field::kEventId, field::kHandler, field::kAttempts, field::kUpdatedAt});
}

Bson record_completions(const std::vector<CompletedDelivery>& completed) {
  std::vector<Bson> statements;
  for (const auto& c : completed) {
    Bson u;
    bson_t insert;
    bson_append_document_begin(u.get(), "$setOnInsert", -1, &insert);
    append_string(&insert, field::kEventId, c.id.event_id);
    append_string(&insert, field::kHandler, c.id.handler);
    bson_append_int32(&insert, field::kAttempts, -1, c.attempts);
    bson_append_date_time(&insert, field::kCompletedAt, -1, c.updated_at_ms);
    bson_append_document_end(u.get(), &insert);
    statements.push_back(statement(delivery_filter(c.id), u, true));
  }
  return with_majority(update(kCompletions, pointers_to(statements), false));
}

Bson delete_completed(const std::vector<CompletedDelivery>& completed) {
  std::vector<Bson> statements;
  for (const auto& c : completed) {
    Bson q = delivery_filter(c.id);
    append_string(q.get(), field::kStatus, kCompleted);
    Bson s;
    bson_append_document(s.get(), "q", -1, q.get());
    BSON_APPEND_INT32(s.get(), "limit", 1);
    statements.push_back(std::move(s));
  }
  Bson cmd;
  BSON_APPEND_UTF8(cmd.get(), "delete", kDeliveries);
  commands::parts::append_documents(cmd.get(), "deletes", pointers_to(statements));
  BSON_APPEND_BOOL(cmd.get(), "ordered", false);
  return with_majority(std::move(cmd));
}

// ---------------------------------------------------------------- the other deliveries

std::vector<const char*> legacy_fields() {
  return {field::kEventId, field::kHandler,   field::kKey,       field::kStatus,
          field::kClaims,  field::kLastError, field::kCreatedAt, field::kUpdatedAt};
}

Bson find_unconverted(const std::optional<DeliveryKey>& after) {
  Bson filter;
  bson_t ne;
  bson_append_document_begin(filter.get(), field::kStatus, -1, &ne);
  BSON_APPEND_UTF8(&ne, "$ne", kCompleted);
  bson_append_document_end(filter.get(), &ne);
  append_unconverted(filter.get());
  append_after(filter.get(), after);
  return batch_find(kDeliveries, filter, legacy_fields());
}

Bson convert_deliveries(const std::vector<LegacyDelivery>& deliveries, std::int64_t now_ms) {
  std::vector<Bson> statements;
  for (const auto& d : deliveries) {
    Bson q = delivery_filter(d.id);
    append_string(q.get(), field::kStatus, d.status);
    Bson u;
    bson_t set;
    bson_append_document_begin(u.get(), "$set", -1, &set);
    bson_append_int32(&set, field::kLaneId, -1, delivery_lane(d.id.event_id, d.key));
    if (!d.has_claims) bson_append_int32(&set, field::kClaims, -1, 0);
    if (!d.has_created_at) bson_append_date_time(&set, field::kCreatedAt, -1, d.updated_at_ms);
    if (d.status == kProcessing) {
      // Back to pending, its attempt (charged at claim) kept, as a lost lease is charged.
      append_string(&set, field::kStatus, kPending);
      if (!d.last_error) BSON_APPEND_UTF8(&set, field::kLastError, kInFlightError);
      bson_append_date_time(&set, field::kUpdatedAt, -1, now_ms);
    }
    bson_append_document_end(u.get(), &set);
    bson_t unset;
    bson_append_document_begin(u.get(), "$unset", -1, &unset);
    for (const char* f : {kLeaseOwner, kLeaseToken, field::kLeaseExpiresAt})
      BSON_APPEND_UTF8(&unset, f, "");
    bson_append_document_end(u.get(), &unset);
    statements.push_back(statement(q, u, false));
  }
  return with_majority(update(kDeliveries, pointers_to(statements), false));
}

}  // namespace relaybus::mongo::upgrade
