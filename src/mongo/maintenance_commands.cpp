#include "maintenance_commands.hpp"

#include <map>

#include "command_parts.hpp"
#include "commands.hpp"

namespace relaybus::mongo::commands {

using namespace parts;

Bson find_expired_lanes(std::int64_t now_ms, int limit) {
  Bson filter;
  bson_t ne;
  bson_append_document_begin(filter.get(), field::kOwner, -1, &ne);
  bson_append_null(&ne, "$ne", -1);
  bson_append_document_end(filter.get(), &ne);
  append_date_op(filter.get(), field::kLeaseExpiresAt, "$lte", now_ms);
  return sorted_find(kLanes, filter, sort_by({{field::kLeaseExpiresAt, 1}}), lane_fields(), limit);
}

Bson find_expired_dead(std::int64_t cutoff_ms, int limit) {
  Bson filter;
  append_string(filter.get(), field::kStatus, kDead);
  append_date_op(filter.get(), field::kUpdatedAt, "$lt", cutoff_ms);
  return sorted_find(kDeliveries, filter, sort_by({{field::kUpdatedAt, 1}}), {field::kId}, limit);
}

Bson delete_expired_dead(const Refs& ids, std::int64_t cutoff_ms) {
  Bson q = delivery_ids_filter(ids);  // and the condition they were found by
  append_string(q.get(), field::kStatus, kDead);
  append_date_op(q.get(), field::kUpdatedAt, "$lt", cutoff_ms);
  return delete_matching(kDeliveries, q, 0);
}

Bson find_unsubscribed_handlers(const std::vector<std::string>& subscribed) {
  Bson match;
  append_strings_op(match.get(), field::kHandler, "$nin", subscribed);
  Bson by_index = sort_by({{field::kHandler, 1}});  // the order of lanes_handler_lane
  Bson group;
  BSON_APPEND_UTF8(group.get(), field::kId, (std::string("$") + field::kHandler).c_str());
  Bson s1 = stage("$match", match), s2 = stage("$sort", by_index), s3 = stage("$group", group);
  return aggregate(kLanes, {&s1, &s2, &s3});
}

Bson find_expired_unsubscribed(const std::vector<std::string>& handlers, std::int64_t cutoff_ms,
                               int limit) {
  Bson filter;
  append_strings_op(filter.get(), field::kHandler, "$in", handlers);
  append_string(filter.get(), field::kStatus, kPending);
  append_date_op(filter.get(), field::kCreatedAt, "$lt", cutoff_ms);
  // No sort: PostgreSQL takes any slice too, and a sort would ask for a second index.
  return sorted_find(kDeliveries, filter, Bson(), {field::kId}, limit);
}

Bson delete_expired_unsubscribed(const Refs& ids, std::int64_t cutoff_ms) {
  Bson q = delivery_ids_filter(ids);  // and the condition they were found by
  append_string(q.get(), field::kStatus, kPending);
  append_date_op(q.get(), field::kCreatedAt, "$lt", cutoff_ms);
  return delete_matching(kDeliveries, q, 0);
}

Bson find_expired_completions(std::int64_t cutoff_ms, int limit) {
  Bson filter;
  append_date_op(filter.get(), field::kCompletedAt, "$lt", cutoff_ms);
  return sorted_find(kCompletions, filter, sort_by({{field::kCompletedAt, 1}}), {field::kId},
                     limit);
}

Bson delete_expired_completions(const Refs& ids, std::int64_t cutoff_ms) {
  Bson q = delivery_ids_filter(ids);  // and the condition they were found by
  append_date_op(q.get(), field::kCompletedAt, "$lt", cutoff_ms);
  return delete_matching(kCompletions, q, 0);
}

Bson find_expired_events(std::int64_t cutoff_ms, int limit) {
  Bson filter;
  append_date_op(filter.get(), field::kCreatedAt, "$lt", cutoff_ms);
  return sorted_find(kEvents, filter, sort_by({{field::kCreatedAt, 1}}), {field::kHandlers}, limit);
}

Bson find_delivery_ids(const Refs& ids) {
  return find(kDeliveries, delivery_ids_filter(ids), {field::kId}, false);
}

Bson delete_events(const std::vector<ReadEvent>& events) {
  std::vector<Bson> statements;
  for (const auto& e : events) {
    Bson q = id_filter(e.id);
    append_strings(q.get(), field::kHandlers, e.handlers);
    Bson s;
    bson_append_document(s.get(), "q", -1, q.get());
    BSON_APPEND_INT32(s.get(), "limit", 1);
    statements.push_back(std::move(s));
  }
  Bson cmd;
  BSON_APPEND_UTF8(cmd.get(), "delete", kEvents);
  append_documents(cmd.get(), "deletes", pointers_to(statements));
  BSON_APPEND_BOOL(cmd.get(), "ordered", false);
  append_majority(cmd.get());
  return cmd;
}

Bson prune_purged(const std::vector<ReadEvent>& events, bool every_lane) {
  std::map<std::string, std::vector<std::string>> ids_by_handler;
  for (const auto& e : events)
    for (const auto& h : e.handlers) ids_by_handler[h].push_back(e.id);
  std::vector<Bson> statements;
  for (const auto& [handler, ids] : ids_by_handler) {
    Bson listed_in_flight, listed_lost;
    append_strings_op(listed_in_flight.get(), field::kInFlight, "$in", ids);
    append_strings_op(listed_lost.get(), field::kLost, "$in", ids);
    Bson q;
    append_string(q.get(), field::kHandler, handler);
    if (!every_lane) append_documents(q.get(), "$or", {&listed_in_flight, &listed_lost});
    Bson u;
    bson_t pull;
    bson_append_document_begin(u.get(), "$pullAll", -1, &pull);
    append_strings(&pull, field::kInFlight, ids);
    append_strings(&pull, field::kLost, ids);
    bson_append_document_end(u.get(), &pull);
    append_version_bump(u.get());
    Bson s = statement(q, u, false);
    BSON_APPEND_BOOL(s.get(), "multi", true);
    statements.push_back(std::move(s));
  }
  return with_majority(update(kLanes, pointers_to(statements), false));
}

}  // namespace relaybus::mongo::commands
