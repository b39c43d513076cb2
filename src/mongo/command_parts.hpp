// Internal to src/mongo (not installed): the pieces every command builder is made of
// (commands.cpp, operator_commands.cpp, maintenance_commands.cpp), so that each command
// shape (a find, an update statement, an aggregation, a majority write) is spelled once.
#pragma once

#include <bson/bson.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "documents.hpp"

namespace relaybus::mongo::commands::parts {

using Refs = std::vector<std::pair<std::string, std::string>>;  // (handler, event id)
using LaneRefs = std::vector<std::pair<std::string, std::int16_t>>;

// Pointers to each of `docs`, for the builders below.
std::vector<const Bson*> pointers_to(const std::vector<Bson>& docs);

// $inc: {claims: 1}. Every end of a claim moves the delivery's claims counter, which kills
// the token that ended it (core::token_holds).
void append_claims_bump(bson_t* u);
// $inc: {version: 1}
void append_version_bump(bson_t* u);
// A lane filter's condition on its version as read: {version: v}, or for a lane no claim
// has written yet {version: {$exists: false}} (not an equality: an upsert must not copy a
// null into the document it tries).
void append_version_read(bson_t* q, const std::optional<std::int64_t>& version);
// Appends docs as an array.
void append_documents(bson_t* doc, const char* name, const std::vector<const Bson*>& docs);
// writeConcern: {w: "majority"}
void append_majority(bson_t* doc);
Bson with_majority(Bson cmd);
// name: {$in: [values]}
void append_in(bson_t* doc, const char* name, const std::vector<const Bson*>& values);
// name: {op: [strings]}
void append_strings_op(bson_t* doc, const char* name, const char* op,
                       const std::vector<std::string>& values);
// name: {op: [{e, h}, ...]}
void append_delivery_ids(bson_t* doc, const char* name, const char* op, const Refs& refs);
// name: {op: date}
void append_date_op(bson_t* doc, const char* name, const char* op, std::int64_t ms);
// name: value, or null
void append_optional_string(bson_t* doc, const char* name, const std::optional<std::string>& v);
// availableAt: {$lte: now}
void append_due_by(bson_t* doc, std::int64_t now_ms);

// {_id: value} for a string _id.
Bson id_filter(const std::string& id);
// {_id: {$in: [{e, h}, ...]}}
Bson delivery_ids_filter(const Refs& refs);
// {_id: {$in: [{h, l}, ...]}}
Bson lane_ids_filter(const LaneRefs& lanes);
// {_id: {h, l}}
Bson lane_filter(const std::string& handler, std::int16_t lane);

// {find: collection, filter: ..., projection: {fields: 1}}, plus limit/singleBatch for a
// lookup by _id, else sorted by _id.
Bson find(const char* collection, const Bson& filter, const std::vector<const char*>& fields,
          bool by_id);
// {k1: d1, k2: d2, ...}: a sort.
Bson sort_by(const std::vector<std::pair<const char*, int>>& keys);
// {find, filter, sort (left out when empty), projection: {fields: 1}, limit}
Bson sorted_find(const char* collection, const Bson& filter, const Bson& sort,
                 const std::vector<const char*>& fields, int limit);
// {update: collection, updates: [statements], ordered}
Bson update(const char* collection, const std::vector<const Bson*>& statements, bool ordered);
// {q, u, upsert}
Bson statement(const Bson& q, const Bson& u, bool upsert);
// {delete: collection, deletes: [{q, limit}], ordered: true, writeConcern: majority}: `limit`
// 0 deletes every match, 1 the first.
Bson delete_matching(const char* collection, const Bson& q, int limit);
// What a requeue writes (the u of its update): pending, core::kRequeuedAttempts, due now,
// the claims counter bumped (the old token dies).
Bson requeue_change(std::int64_t now_ms);
// {aggregate: collection, pipeline: [stages], cursor: {}}
Bson aggregate(const char* collection, const std::vector<const Bson*>& stages);
// {name: body}
Bson stage(const char* name, const Bson& body);

}  // namespace relaybus::mongo::commands::parts
