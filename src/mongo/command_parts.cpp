#include "command_parts.hpp"

#include "core/attempt_end.hpp"

namespace relaybus::mongo::commands::parts {

std::vector<const Bson*> pointers_to(const std::vector<Bson>& docs) {
  std::vector<const Bson*> out;
  out.reserve(docs.size());
  for (const auto& d : docs) out.push_back(&d);
  return out;
}

// $inc: {claims: 1}. Every end of a claim moves the delivery's claims counter, which kills
// the token that ended it (core::token_holds).
void append_claims_bump(bson_t* u) {
  bson_t inc;
  bson_append_document_begin(u, "$inc", -1, &inc);
  bson_append_int32(&inc, field::kClaims, -1, 1);
  bson_append_document_end(u, &inc);
}

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

void append_in(bson_t* doc, const char* name, const std::vector<const Bson*>& values) {
  bson_t in;
  bson_append_document_begin(doc, name, -1, &in);
  append_documents(&in, "$in", values);
  bson_append_document_end(doc, &in);
}

void append_strings_op(bson_t* doc, const char* name, const char* op,
                       const std::vector<std::string>& values) {
  bson_t in;
  bson_append_document_begin(doc, name, -1, &in);
  append_strings(&in, op, values);
  bson_append_document_end(doc, &in);
}

// {_id: {$in: [{e, h}, ...]}}
Bson delivery_ids_filter(const Refs& refs) {
  std::vector<Bson> ids;
  for (const auto& [h, e] : refs) ids.push_back(delivery_id(e, h));
  std::vector<const Bson*> raw;
  for (const auto& id : ids) raw.push_back(&id);
  Bson filter;
  append_in(filter.get(), field::kId, raw);
  return filter;
}

Bson lane_ids_filter(const LaneRefs& lanes) {
  std::vector<Bson> ids;
  for (const auto& [h, l] : lanes) ids.push_back(lane_id(h, l));
  std::vector<const Bson*> raw;
  for (const auto& id : ids) raw.push_back(&id);
  Bson filter;
  append_in(filter.get(), field::kId, raw);
  return filter;
}

// {_id: {h, l}}
Bson lane_filter(const std::string& handler, std::int16_t lane) {
  Bson id = lane_id(handler, lane);
  Bson q;
  bson_append_document(q.get(), field::kId, -1, id.get());
  return q;
}

Bson with_majority(Bson cmd) {
  append_majority(cmd.get());
  return cmd;
}

void append_optional_string(bson_t* doc, const char* name, const std::optional<std::string>& v) {
  if (v) {
    append_string(doc, name, *v);
  } else {
    bson_append_null(doc, name, -1);
  }
}

void append_due_by(bson_t* doc, std::int64_t now_ms) {
  bson_t lte;
  bson_append_document_begin(doc, field::kAvailableAt, -1, &lte);
  bson_append_date_time(&lte, "$lte", -1, now_ms);
  bson_append_document_end(doc, &lte);
}

// name: {op: [{e, h}, ...]}
void append_delivery_ids(bson_t* doc, const char* name, const char* op, const Refs& refs) {
  std::vector<Bson> ids;
  for (const auto& [h, e] : refs) ids.push_back(delivery_id(e, h));
  bson_t in;
  bson_append_document_begin(doc, name, -1, &in);
  append_documents(&in, op, pointers_to(ids));
  bson_append_document_end(doc, &in);
}

void append_date_op(bson_t* doc, const char* name, const char* op, std::int64_t ms) {
  bson_t cmp;
  bson_append_document_begin(doc, name, -1, &cmp);
  bson_append_date_time(&cmp, op, -1, ms);
  bson_append_document_end(doc, &cmp);
}

Bson sort_by(const std::vector<std::pair<const char*, int>>& keys) {
  Bson sort;
  for (const auto& [name, direction] : keys) bson_append_int32(sort.get(), name, -1, direction);
  return sort;
}

Bson sorted_find(const char* collection, const Bson& filter, const Bson& sort,
                 const std::vector<const char*>& fields, int limit) {
  Bson cmd;
  BSON_APPEND_UTF8(cmd.get(), "find", collection);
  bson_append_document(cmd.get(), "filter", -1, filter.get());
  if (!bson_empty(sort.get())) bson_append_document(cmd.get(), "sort", -1, sort.get());
  bson_t projection;
  bson_append_document_begin(cmd.get(), "projection", -1, &projection);
  for (const char* f : fields) bson_append_int32(&projection, f, -1, 1);
  bson_append_document_end(cmd.get(), &projection);
  BSON_APPEND_INT64(cmd.get(), "limit", limit);
  return cmd;
}

Bson delete_matching(const char* collection, const Bson& q, int limit) {
  Bson one;
  bson_append_document(one.get(), "q", -1, q.get());
  BSON_APPEND_INT32(one.get(), "limit", limit);
  Bson cmd;
  BSON_APPEND_UTF8(cmd.get(), "delete", collection);
  append_documents(cmd.get(), "deletes", {&one});
  BSON_APPEND_BOOL(cmd.get(), "ordered", true);
  append_majority(cmd.get());
  return cmd;
}

Bson requeue_change(std::int64_t now_ms) {
  Bson u;
  bson_t set;
  bson_append_document_begin(u.get(), "$set", -1, &set);
  append_string(&set, field::kStatus, kPending);
  bson_append_int32(&set, field::kAttempts, -1, core::kRequeuedAttempts);
  bson_append_date_time(&set, field::kAvailableAt, -1, now_ms);
  bson_append_date_time(&set, field::kUpdatedAt, -1, now_ms);
  bson_append_document_end(u.get(), &set);
  append_claims_bump(u.get());
  return u;
}

Bson aggregate(const char* collection, const std::vector<const Bson*>& stages) {
  Bson cmd;
  BSON_APPEND_UTF8(cmd.get(), "aggregate", collection);
  append_documents(cmd.get(), "pipeline", stages);
  bson_t cursor;
  bson_append_document_begin(cmd.get(), "cursor", -1, &cursor);
  bson_append_document_end(cmd.get(), &cursor);
  return cmd;
}

Bson stage(const char* name, const Bson& body) {
  Bson s;
  bson_append_document(s.get(), name, -1, body.get());
  return s;
}

// $inc: {version: 1}
void append_version_read(bson_t* q, const std::optional<std::int64_t>& version) {
  if (version) {
    bson_append_int64(q, field::kVersion, -1, *version);
    return;
  }
  bson_t exists;
  bson_append_document_begin(q, field::kVersion, -1, &exists);
  BSON_APPEND_BOOL(&exists, "$exists", false);
  bson_append_document_end(q, &exists);
}

void append_version_bump(bson_t* u) {
  bson_t inc;
  bson_append_document_begin(u, "$inc", -1, &inc);
  bson_append_int64(&inc, field::kVersion, -1, 1);
  bson_append_document_end(u, &inc);
}

}  // namespace relaybus::mongo::commands::parts
