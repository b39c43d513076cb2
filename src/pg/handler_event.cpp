#include "handler_event.hpp"

#include <cstring>

extern "C" {
#include "access/detoast.h"
#include "utils/fmgrprotos.h"
#include "utils/json.h"
}

namespace relaybus::pg::handler_event {

namespace {

// One member of the event object, as jsonb's binary format stores it: a JEntry type and the
// bytes of the value (a string's characters, a numeric's varlena, a container).
struct Member {
  const char* key;
  uint32 type;  // JENTRY_IS*
  const char* data;
  Size length;
  bool aligned;  // numerics and containers start at a 4-byte boundary
};

Member string_member(const char* key, const char* value) {
  if (value == nullptr) return {key, JENTRY_ISNULL, nullptr, 0, false};
  return {key, JENTRY_ISSTRING, value, strlen(value), false};
}

// A stored jsonb as a member's value. An object or array goes in as it is: a nested
// container has the root container's layout, so its bytes are copied once, never taken
// apart into a tree of values (which costs several times a payload of many small
// elements). A scalar root (a pseudo-array of one element; relaybus stores objects, but a
// row edited by hand may hold anything) goes in as that scalar.
Member jsonb_member(const char* key, const Jsonb* jb) {
  if (!JB_ROOT_IS_SCALAR(jb))
    return {key, JENTRY_ISCONTAINER, reinterpret_cast<const char*>(&jb->root),
            VARSIZE(jb) - VARHDRSZ, true};
  JsonbValue v;
  if (!JsonbExtractScalar(const_cast<JsonbContainer*>(&jb->root), &v))
    elog(ERROR, "relaybus: a scalar jsonb holds no scalar");
  switch (v.type) {
    case jbvNull:
      return {key, JENTRY_ISNULL, nullptr, 0, false};
    case jbvString:
      return {key, JENTRY_ISSTRING, v.val.string.val, static_cast<Size>(v.val.string.len), false};
    case jbvNumeric:
      return {key, JENTRY_ISNUMERIC, reinterpret_cast<const char*>(v.val.numeric),
              VARSIZE_ANY(v.val.numeric), true};
    case jbvBool:
      return {key, static_cast<uint32>(v.val.boolean ? JENTRY_ISBOOL_TRUE : JENTRY_ISBOOL_FALSE),
              nullptr, 0, false};
    default:
      elog(ERROR, "relaybus: unexpected jsonb scalar type %d", static_cast<int>(v.type));
  }
  return {};  // not reached
}

// A jsonb object of these members, which must be in jsonb's key order (shorter keys first,
// then bytewise), written straight into one allocation of its final size, as jsonb's own
// writer (convertJsonbObject) lays it out: the header, a JEntry per key then per value
// (every JB_OFFSET_STRIDE-th one holding its end offset instead of its length), the keys,
// then the values, each numeric or container after zero padding to a 4-byte boundary, the
// padding counted in its length.
Jsonb* write_object(const Member* members, int n) {
  const Size entries_at = VARHDRSZ + sizeof(uint32);
  const Size data_at = entries_at + 2 * n * sizeof(JEntry);
  Size end = data_at;
  for (int i = 0; i < n; ++i) end += strlen(members[i].key);
  for (int i = 0; i < n; ++i) {
    if (members[i].aligned) end = INTALIGN(end);
    end += members[i].length;
  }
  if (end - data_at > JENTRY_OFFLENMASK)
    ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
                    errmsg("total size of jsonb object elements exceeds the maximum of %d bytes",
                           JENTRY_OFFLENMASK)));
  char* out = static_cast<char*>(palloc(end));
  SET_VARSIZE(out, end);
  const uint32 header = static_cast<uint32>(n) | JB_FOBJECT;
  memcpy(out + VARHDRSZ, &header, sizeof header);
  Size at = data_at;
  auto entry = [&](int index, uint32 type, Size start) {
    const JEntry e = index % JB_OFFSET_STRIDE == 0
                         ? type | static_cast<uint32>(at - data_at) | JENTRY_HAS_OFF
                         : type | static_cast<uint32>(at - start);
    memcpy(out + entries_at + index * sizeof(JEntry), &e, sizeof e);
  };
  for (int i = 0; i < n; ++i) {
    const Size start = at;
    const Size length = strlen(members[i].key);
    memcpy(out + at, members[i].key, length);
    at += length;
    entry(i, JENTRY_ISSTRING, start);
  }
  for (int i = 0; i < n; ++i) {
    const Member& m = members[i];
    const Size start = at;
    if (m.aligned) {
      memset(out + at, 0, INTALIGN(at) - at);
      at = INTALIGN(at);
    }
    if (m.length > 0) memcpy(out + at, m.data, m.length);
    at += m.length;
    entry(n + i, m.type, start);
  }
  return reinterpret_cast<Jsonb*>(out);
}

// 54000 naming the limit, for a stored event over it: published before the limit was
// lowered, or while its handler was not yet an in-database one.
void refuse_too_large(std::int64_t size) {
  const char* limit = GetConfigOptionByName("relaybus.sql_handler_max_payload", nullptr, false);
  ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
                  errmsg("the event's payload and headers are %lld bytes, over the %s of "
                         "relaybus.sql_handler_max_payload",
                         static_cast<long long>(size), limit)));
}

}  // namespace

std::int64_t size_of(Datum payload, Datum headers, bool headers_null) {
  std::int64_t size = static_cast<std::int64_t>(toast_raw_datum_size(payload));
  if (!headers_null) size += static_cast<std::int64_t>(toast_raw_datum_size(headers));
  return size;
}

Datum load(const Fields* f, SPIPlanPtr load, std::int64_t max_bytes) {
  // SPI_execute_plan returns in SPI's procedure context, which lives to the end of the
  // batch: what is made after it (the payload detoasted, the event) must go where the
  // caller freed it after the call, not pile up there.
  const MemoryContext caller = CurrentMemoryContext;
  Datum id = PointerGetDatum(cstring_to_text(f->id));
  const int status = SPI_execute_plan(load, &id, nullptr, true, 1);
  MemoryContextSwitchTo(caller);
  if (status != SPI_OK_SELECT || SPI_processed != 1)
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("the event no longer exists")));
  SPITupleTable* const row = SPI_tuptable;
  bool payload_null = false;
  bool headers_null = false;
  const Datum stored_payload = SPI_getbinval(row->vals[0], row->tupdesc, 1, &payload_null);
  const Datum stored_headers = SPI_getbinval(row->vals[0], row->tupdesc, 2, &headers_null);
  if (payload_null)
    ereport(ERROR,
            (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("the event's payload is NULL")));
  const std::int64_t size = size_of(stored_payload, stored_headers, headers_null);
  if (size > max_bytes) refuse_too_large(size);

  Jsonb* const payload = DatumGetJsonbP(stored_payload);
  Jsonb* const headers = headers_null ? nullptr : DatumGetJsonbP(stored_headers);
  const Numeric attempts =
      DatumGetNumeric(DirectFunctionCall1(int4_numeric, Int32GetDatum(f->attempts)));
  // As to_jsonb(timestamptz) writes it.
  const char* published_at =
      JsonEncodeDateTime(nullptr, TimestampTzGetDatum(f->published_at), TIMESTAMPTZOID, nullptr);
  // In jsonb's key order (write_object).
  const Member members[] = {
      string_member("id", f->id),
      string_member("key", f->key),
      string_member("type", f->type),
      string_member("handler", f->handler),
      headers != nullptr ? jsonb_member("headers", headers) : string_member("headers", nullptr),
      jsonb_member("payload", payload),
      {"attempts", JENTRY_ISNUMERIC, reinterpret_cast<const char*>(attempts), VARSIZE_ANY(attempts),
       true},
      string_member("published_at", published_at),
  };
  Jsonb* const event = write_object(members, sizeof members / sizeof members[0]);
  // The detoasted copies go at once: the call then holds the event alone.
  if (reinterpret_cast<Pointer>(payload) != DatumGetPointer(stored_payload)) pfree(payload);
  if (headers != nullptr && reinterpret_cast<Pointer>(headers) != DatumGetPointer(stored_headers))
    pfree(headers);
  SPI_freetuptable(row);
  return JsonbPGetDatum(event);
}

}  // namespace relaybus::pg::handler_event
