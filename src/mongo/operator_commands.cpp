#include "operator_commands.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "command_parts.hpp"
#include "commands.hpp"
#include "core/claim_request.hpp"
#include "core/error.hpp"

namespace relaybus::mongo::commands {

using namespace parts;

namespace {

// {$sum: {$cond: [{$eq: ["$status", status]}, 1, 0]}}: how many of a group have `status`.
void append_count_of(bson_t* group, const char* name, const char* status) {
  bson_t sum, cond, args, eq, eq_args;
  bson_append_document_begin(group, name, -1, &sum);
  bson_append_document_begin(&sum, "$sum", -1, &cond);
  bson_append_array_begin(&cond, "$cond", -1, &args);
  bson_append_document_begin(&args, "0", -1, &eq);
  bson_append_array_begin(&eq, "$eq", -1, &eq_args);
  BSON_APPEND_UTF8(&eq_args, "0", "$status");
  BSON_APPEND_UTF8(&eq_args, "1", status);
  bson_append_array_end(&eq, &eq_args);
  bson_append_document_end(&args, &eq);
  BSON_APPEND_INT32(&args, "1", 1);
  BSON_APPEND_INT32(&args, "2", 0);
  bson_append_array_end(&cond, &args);
  bson_append_document_end(&sum, &cond);
  bson_append_document_end(group, &sum);
}

// {$min: {$cond: [{$eq: ["$status", "pending"]}, "$createdAt", null]}}: $min skips the nulls.
void append_oldest_pending(bson_t* group, const char* name) {
  bson_t min, cond, args, eq, eq_args;
  bson_append_document_begin(group, name, -1, &min);
  bson_append_document_begin(&min, "$min", -1, &cond);
  bson_append_array_begin(&cond, "$cond", -1, &args);
  bson_append_document_begin(&args, "0", -1, &eq);
  bson_append_array_begin(&eq, "$eq", -1, &eq_args);
  BSON_APPEND_UTF8(&eq_args, "0", "$status");
  BSON_APPEND_UTF8(&eq_args, "1", kPending);
  bson_append_array_end(&eq, &eq_args);
  bson_append_document_end(&args, &eq);
  BSON_APPEND_UTF8(&args, "1", (std::string("$") + field::kCreatedAt).c_str());
  bson_append_null(&args, "2", -1);
  bson_append_array_end(&cond, &args);
  bson_append_document_end(&min, &cond);
  bson_append_document_end(group, &min);
}

}  // namespace

// ---------------------------------------------------------------- validation

void validate_handler(const std::string& handler) {
  core::validate_name("handler name", handler);
}

void validate_filter(const store::DeliveryFilter& filter) {
  store::validate(filter);  // the statuses and the row limit: the seam's rule
  if (filter.handler) validate_handler(*filter.handler);
}

// ---------------------------------------------------------------- pause, resume, cancel

Bson set_paused(const std::string& handler, bool paused) {
  Bson q = id_filter(handler);
  bson_t ne;
  bson_append_document_begin(q.get(), field::kPaused, -1, &ne);
  BSON_APPEND_BOOL(&ne, "$ne", paused);
  bson_append_document_end(q.get(), &ne);
  Bson u;
  bson_t change;
  if (paused) {
    bson_append_document_begin(u.get(), "$set", -1, &change);
    BSON_APPEND_BOOL(&change, field::kPaused, true);
  } else {
    bson_append_document_begin(u.get(), "$unset", -1, &change);
    BSON_APPEND_UTF8(&change, field::kPaused, "");
  }
  bson_append_document_end(u.get(), &change);
  Bson one = statement(q, u, false);
  return with_majority(update(kSubscriptions, {&one}, true));
}

Bson find_cancel_target(const std::string& event_id, const std::string& handler) {
  Bson filter;
  Bson id = delivery_id(event_id, handler);
  bson_append_document(filter.get(), field::kId, -1, id.get());
  return find(kDeliveries, filter,
              {field::kStatus, field::kAttempts, field::kClaims, field::kLaneId}, true);
}

Bson fence_lane(const std::string& handler, std::int16_t lane,
                const std::optional<std::int64_t>& version) {
  Bson q = lane_filter(handler, lane);
  append_version_read(q.get(), version);
  Bson u;
  append_version_bump(u.get());
  Bson one = statement(q, u, false);
  return update(kLanes, {&one}, true);
}

// ---------------------------------------------------------------- unsubscribe, requeue_dead

Bson delete_subscription(const std::string& handler) {
  return delete_matching(kSubscriptions, id_filter(handler), 1);
}

Bson find_any_delivery(const std::string& handler) {
  Bson filter;
  append_string(filter.get(), field::kHandler, handler);
  return find(kDeliveries, filter, {field::kId}, true);
}

Bson requeue_dead_update(const std::optional<std::string>& handler, std::int64_t now_ms) {
  Bson q;
  append_string(q.get(), field::kStatus, kDead);  // the query copy of core::requeues
  if (handler) append_string(q.get(), field::kHandler, *handler);
  Bson one = statement(q, requeue_change(now_ms), false);
  BSON_APPEND_BOOL(one.get(), "multi", true);
  return with_majority(update(kDeliveries, {&one}, true));
}

// ---------------------------------------------------------------- statistics, listing

Bson find_subscription_names() {
  return find(kSubscriptions, Bson(), {field::kId, field::kPaused}, false);
}

Bson find_in_flight_lanes(const std::optional<std::string>& handler) {
  Bson filter;
  if (handler) append_string(filter.get(), field::kHandler, *handler);
  bson_t ne;
  bson_append_document_begin(filter.get(), field::kOwner, -1, &ne);
  bson_append_null(&ne, "$ne", -1);
  bson_append_document_end(filter.get(), &ne);
  bson_t exists;
  bson_append_document_begin(filter.get(), (std::string(field::kInFlight) + ".0").c_str(), -1,
                             &exists);
  BSON_APPEND_BOOL(&exists, "$exists", true);
  bson_append_document_end(filter.get(), &exists);
  return find(kLanes, filter, lane_fields(), false);
}

Bson count_deliveries(const Refs& in_flight) {
  Bson match;
  append_delivery_ids(match.get(), field::kId, "$nin", in_flight);
  Bson group;
  BSON_APPEND_UTF8(group.get(), field::kId, (std::string("$") + field::kHandler).c_str());
  append_count_of(group.get(), kPending, kPending);
  append_count_of(group.get(), kDead, kDead);
  append_oldest_pending(group.get(), "oldest");
  Bson s1 = stage("$match", match), s2 = stage("$group", group);
  return aggregate(kDeliveries, {&s1, &s2});
}

Bson count_completions() {
  Bson by_index = sort_by({{field::kHandler, 1}});  // the order of completions_handler
  Bson group;
  BSON_APPEND_UTF8(group.get(), field::kId, (std::string("$") + field::kHandler).c_str());
  bson_t sum;
  bson_append_document_begin(group.get(), "completed", -1, &sum);
  BSON_APPEND_INT32(&sum, "$sum", 1);
  bson_append_document_end(group.get(), &sum);
  Bson s1 = stage("$sort", by_index), s2 = stage("$group", group);
  return aggregate(kCompletions, {&s1, &s2});
}

std::vector<const char*> listed_fields() {
  return {field::kEventId,  field::kHandler,     field::kKey,       field::kStatus,
          field::kAttempts, field::kAvailableAt, field::kLastError, field::kCreatedAt};
}

Bson find_listed_deliveries(const store::DeliveryFilter& f, const Refs& in_flight) {
  Bson filter;
  if (f.handler) append_string(filter.get(), field::kHandler, *f.handler);
  if (f.status == std::string(kPending)) {
    append_string(filter.get(), field::kStatus, kPending);
    append_delivery_ids(filter.get(), field::kId, "$nin", in_flight);
  } else if (f.status == std::string(kProcessing)) {
    append_delivery_ids(filter.get(), field::kId, "$in", in_flight);
  } else if (f.status == std::string(kDead)) {
    append_string(filter.get(), field::kStatus, kDead);
  }
  return sorted_find(kDeliveries, filter,
                     sort_by({{field::kCreatedAt, -1}, {field::kEventId, 1}, {field::kHandler, 1}}),
                     listed_fields(), f.max_rows);
}

Bson find_completions(const std::optional<std::string>& handler, int limit) {
  Bson filter;
  if (handler) append_string(filter.get(), field::kHandler, *handler);
  // Of one handler, the handler is no key of the order: completions_handler gives it as is.
  Bson sort =
      handler ? sort_by({{field::kCompletedAt, -1}, {field::kEventId, 1}})
              : sort_by({{field::kCompletedAt, -1}, {field::kEventId, 1}, {field::kHandler, 1}});
  return sorted_find(kCompletions, filter, sort,
                     {field::kEventId, field::kHandler, field::kAttempts, field::kCompletedAt},
                     limit);
}

Bson find_event_summaries(const std::vector<std::string>& ids) {
  Bson filter;
  append_strings_op(filter.get(), field::kId, "$in", ids);
  return find(kEvents, filter, {field::kType, field::kKey}, false);
}

}  // namespace relaybus::mongo::commands
