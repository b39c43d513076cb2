// publish_batch: many events in one call, in the caller's transaction. A batch of new ids
// has its events written with one statement and its deliveries as the version's
// DeliveryWriter writes a batch (delivery_writer.hpp); anything else goes element by
// element through publish_one (publish_one.cpp). Either way the rows are those of one
// publish per element. One body for every version.
#include "counters.hpp"
#include "delivery_writer.hpp"
#include "publish_one.hpp"
#include "spi.hpp"
#include "unrouted.hpp"
#include "wakeup.hpp"

#include "../core/error.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace relaybus::pg {

namespace {

// publish_batch without repeated event ids: every event written by one statement, the
// deliveries by the writer's write_new, instead of several statements per event. What each
// event gets is what publish_one would give it in input order: the same checks in the same
// order (so the same first error), the same handlers, the deliveries write() would make
// event by event. Returns false, having written nothing, when an id repeats within the
// batch or is already stored: publish_one's republication path handles those, in order.
bool publish_new_events(std::vector<PublishInput>& inputs, std::vector<std::string>& ids,
                        const DeliveryWriter& writer) {
  const std::size_t n = inputs.size();
  ids.clear();
  std::vector<Targets> targets(n);
  std::map<std::pair<std::string, std::optional<std::vector<std::string>>>, Targets> cache;
  for (std::size_t i = 0; i < n; ++i) {
    PublishInput& in = inputs[i];
    if (in.handlers) {
      std::sort(in.handlers->begin(), in.handlers->end());
      in.handlers->erase(std::unique(in.handlers->begin(), in.handlers->end()), in.handlers->end());
    }
    const std::string where = "events[" + std::to_string(i) + "]: ";
    validate(in, where);
    ids.push_back(in.event_id ? *in.event_id : new_event_id());
    auto found = cache.find({in.type, in.handlers});
    if (found == cache.end())
      found =
          cache.emplace(std::make_pair(in.type, in.handlers), target_handlers(in.type, in.handlers))
              .first;
    targets[i] = found->second;
    check_in_database_size(in.payload, in.headers, in.headers_null, targets[i].handlers, targets[i],
                           where);
  }
  std::vector<std::string> sorted_ids(ids);
  std::sort(sorted_ids.begin(), sorted_ids.end());
  if (std::adjacent_find(sorted_ids.begin(), sorted_ids.end()) != sorted_ids.end()) return false;
  static Statement stored("SELECT 1 FROM relaybus.events WHERE id = ANY ($1) LIMIT 1",
                          {TEXTARRAYOID});
  {
    Params params;
    params.text_array(ids);
    if (stored.run(params) > 0) return false;
  }

  // The events; each one's handlers are the slice [first, first + count - 1] of one array.
  static Statement insert_events(
      "INSERT INTO relaybus.events (id, type, key, payload, headers, handlers)"
      " SELECT u.id, u.type, u.key, u.payload, u.headers,"
      "  CASE WHEN u.count = 0 THEN '{}'::text[]"
      "  ELSE ($6::text[])[u.first:u.first + u.count - 1] END"
      " FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[], $7::int4[],"
      "  $8::int4[]) WITH ORDINALITY AS u(id, type, key, payload, headers, first, count, n)"
      " ORDER BY u.n ON CONFLICT (id) DO NOTHING RETURNING id",
      {TEXTARRAYOID, TEXTARRAYOID, TEXTARRAYOID, JSONBARRAYOID, JSONBARRAYOID, TEXTARRAYOID,
       INT4ARRAYOID, INT4ARRAYOID});
  std::vector<std::string> types, flat_handlers;
  std::vector<Datum> payloads, headers;
  std::vector<bool> key_nulls, no_nulls(n, false), header_nulls;
  std::vector<std::int32_t> firsts, counts;
  for (std::size_t i = 0; i < n; ++i) {
    const PublishInput& in = inputs[i];
    types.push_back(in.type);
    payloads.push_back(in.payload);
    headers.push_back(in.headers_null ? 0 : in.headers);
    header_nulls.push_back(in.headers_null);
    firsts.push_back(static_cast<std::int32_t>(flat_handlers.size()) + 1);  // from 1
    counts.push_back(static_cast<std::int32_t>(targets[i].handlers.size()));
    flat_handlers.insert(flat_handlers.end(), targets[i].handlers.begin(),
                         targets[i].handlers.end());
  }
  // Each input's key as a text datum (0 when it has none), built once for both inserts.
  std::vector<Datum> key_datums(n, 0);
  pg_call([&] {
    for (std::size_t i = 0; i < n; ++i)
      if (inputs[i].key)
        key_datums[i] =
            PointerGetDatum(cstring_to_text_with_len(inputs[i].key->data(), inputs[i].key->size()));
  });
  for (const auto& in : inputs) key_nulls.push_back(!in.key);
  Params event_params;
  event_params.text_array(ids);
  event_params.text_array(types);
  event_params.datum_array(key_datums, key_nulls, TEXTOID);
  event_params.datum_array(payloads, no_nulls, JSONBOID);
  event_params.datum_array(headers, header_nulls, JSONBOID);
  event_params.text_array(flat_handlers);
  event_params.int4_array(firsts);
  event_params.int4_array(counts);
  const std::uint64_t inserted_count = insert_events.run(event_params);
  counters::add(counters::kPublished, inserted_count);
  std::set<std::string> inserted;
  for (std::uint64_t r = 0; r < inserted_count; ++r) inserted.insert(row::text(r, 1));
  std::vector<std::string> unrouted_types;
  for (std::size_t i = 0; i < n; ++i)
    if (targets[i].handlers.empty() && !inputs[i].handlers && inserted.count(ids[i]))
      unrouted_types.push_back(inputs[i].type);
  unrouted::stored(unrouted_types);

  // An id stored by a concurrent transaction between the check and the insert (the insert
  // waited for it to commit, then skipped it): that element is a republication, and the
  // elements after it must still take their keys' places after it. So the deliveries
  // then go element by element, in input order, as publish_one would write them. Taking
  // the raced ones last gave a later event of the same key the lower sequence (0.2).
  if (inserted.size() != n) {
    for (std::size_t i = 0; i < n; ++i) {
      if (!inserted.count(ids[i])) {
        publish_repeat(ids[i], inputs[i], "events[" + std::to_string(i) + "]: ", writer);
        continue;
      }
      writer.write(ids[i], inputs[i].key, targets[i].handlers, inputs[i].available_at);
      wake(targets[i].handlers, targets[i]);
    }
    return true;
  }

  writer.write_new(NewEvents{inputs, ids, targets, key_datums});
  // One wake-up call for the batch: the external handlers that got a delivery, and whether
  // an in-database one did.
  std::set<std::string> external;
  bool in_database = false;
  for (const Targets& t : targets) {
    for (std::size_t h = 0; h < t.handlers.size(); ++h) {
      if (t.in_database[h]) {
        in_database = true;
      } else {
        external.insert(t.handlers[h]);
      }
    }
  }
  wakeup::published(std::vector<std::string>(external.begin(), external.end()), in_database);
  return true;
}

Datum publish_batch_with(FunctionCallInfo fcinfo, const DeliveryWriter& writer) {
  if (PG_ARGISNULL(0)) throw core::Error(core::ErrorCode::kNullValue, "events must not be NULL");
  Datum events = PG_GETARG_DATUM(0);
  bool is_array = false;
  pg_call([&] {
    Jsonb* jb = DatumGetJsonbP(events);
    is_array = JB_ROOT_IS_ARRAY(jb) && !JB_ROOT_IS_SCALAR(jb);
  });
  if (!is_array) invalid("events must be a JSON array of event objects");

  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  pg_call([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  SpiConnection spi;
  // SQL takes the array apart: one row per element, each field with its JSON type; an
  // absent payload is the empty object, as publish's default; JSON null means absent.
  static Statement elements(
      "SELECT jsonb_typeof(e), jsonb_typeof(e->'type'), e->>'type',"
      " coalesce(e->'payload', '{}'::jsonb),"
      " jsonb_typeof(e->'key'), e->>'key', jsonb_typeof(e->'id'), e->>'id',"
      " jsonb_typeof(e->'handlers'),"
      " CASE WHEN jsonb_typeof(e->'handlers') = 'array' THEN ARRAY("
      "   SELECT CASE WHEN jsonb_typeof(h) = 'string' THEN h #>> '{}' END"  // else NULL: refused
      "   FROM jsonb_array_elements(e->'handlers') h) END,"
      " jsonb_typeof(e->'available_at'),"
      " CASE WHEN jsonb_typeof(e->'available_at') = 'string'"
      "   THEN (e->>'available_at')::timestamptz END,"
      " CASE WHEN jsonb_typeof(e->'headers') <> 'null' THEN e->'headers' END,"
      // Elements other than strings and JSON null (which stays 22004, as a NULL element
      // of publish's handlers): the NULLs above would hide their wrong type.
      " CASE WHEN jsonb_typeof(e->'handlers') = 'array' THEN EXISTS(SELECT 1"
      "   FROM jsonb_array_elements(e->'handlers') h"
      "   WHERE jsonb_typeof(h) NOT IN ('string', 'null')) ELSE false END"
      " FROM jsonb_array_elements($1) WITH ORDINALITY AS t(e, n) ORDER BY n",
      {JSONBOID});
  Params params;
  params.datum(events, false);
  const std::uint64_t n = elements.run(params);

  // Read every element before publishing any: publishing runs statements of its own.
  std::vector<PublishInput> inputs(n);
  for (std::uint64_t r = 0; r < n; ++r) {
    const std::string where = "events[" + std::to_string(r) + "]: ";
    auto kind = [&](int c) { return row::text_or_null(r, c).value_or("absent"); };
    auto optional_string = [&](int kind_column, const char* field) -> std::optional<std::string> {
      const std::string k = kind(kind_column);
      if (k == "string") return row::text(r, kind_column + 1);
      if (k != "absent" && k != "null") invalid(where + field + " must be a string or null");
      return std::nullopt;
    };
    if (kind(1) != "object") invalid(where + "must be a JSON object");
    if (kind(2) != "string") invalid(where + "type must be a string");
    PublishInput& in = inputs[r];
    bool null = false;
    in.type = row::text(r, 3);
    in.payload = row::datum(r, 4, &null);
    in.key = optional_string(5, "key");
    in.event_id = optional_string(7, "id");
    const std::string handlers_kind = kind(9);
    if (handlers_kind == "array") {
      if (row::boolean(r, 14)) invalid(where + "handlers must be an array of strings or null");
      in.handlers = text_array_of(row::datum(r, 10, &null), (where + "handlers").c_str());
    } else if (handlers_kind != "absent" && handlers_kind != "null") {
      invalid(where + "handlers must be an array of strings or null");
    }
    const std::string at_kind = kind(11);
    if (at_kind == "string") {
      in.available_at = DatumGetTimestampTz(row::datum(r, 12, &null));
    } else if (at_kind != "absent" && at_kind != "null") {
      invalid(where + "available_at must be a timestamp string or null");
    }
    in.headers = row::datum(r, 13, &in.headers_null);
  }

  std::vector<std::string> ids;
  if (!publish_new_events(inputs, ids, writer)) {
    ids.clear();
    for (std::uint64_t r = 0; r < n; ++r)
      ids.push_back(publish_one(inputs[r], "events[" + std::to_string(r) + "]: ", writer));
  }
  for (const std::string& id : ids) {
    pg_call([&] {
      Datum value = PointerGetDatum(cstring_to_text_with_len(id.data(), id.size()));
      bool is_null = false;
      tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &is_null);
    });
  }
  spi.finish();
  return (Datum)0;
}

// 0.2.x: deliveries with key sequences.
Datum publish_batch_body(FunctionCallInfo fcinfo) {
  return publish_batch_with(fcinfo, sequenced_deliveries());
}

// 0.3.0: deliveries staged until commit, at their lanes' next positions.
Datum publish_batch_positions_body(FunctionCallInfo fcinfo) {
  return publish_batch_with(fcinfo, staged_deliveries());
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_publish_batch, relaybus::pg::publish_batch_body)
RELAYBUS_SQL_FUNCTION(relaybus_publish_batch_positions, relaybus::pg::publish_batch_positions_body)
