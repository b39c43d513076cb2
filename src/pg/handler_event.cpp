#include "handler_event.hpp"

extern "C" {
#include "utils/fmgrprotos.h"
#include "utils/json.h"
#include "utils/jsonb.h"
}

namespace relaybus::pg::handler_event {

namespace {

void push_key(JsonbParseState** state, const char* name) {
  JsonbValue v;
  v.type = jbvString;
  v.val.string.val = const_cast<char*>(name);
  v.val.string.len = static_cast<int>(strlen(name));
  pushJsonbValue(state, WJB_KEY, &v);
}

void push_text(JsonbParseState** state, const char* value) {
  JsonbValue v;
  if (value == nullptr) {
    v.type = jbvNull;
  } else {
    v.type = jbvString;
    v.val.string.val = const_cast<char*>(value);
    v.val.string.len = static_cast<int>(strlen(value));
  }
  pushJsonbValue(state, WJB_VALUE, &v);
}

// A stored jsonb as the value: pushJsonbValue takes a binary value apart token by token,
// its strings by reference, with no text in between.
void push_jsonb(JsonbParseState** state, Datum value) {
  Jsonb* jb = DatumGetJsonbP(value);
  JsonbValue v;
  v.type = jbvBinary;
  v.val.binary.data = &jb->root;
  v.val.binary.len = static_cast<int>(VARSIZE(jb) - VARHDRSZ);
  pushJsonbValue(state, WJB_VALUE, &v);
}

}  // namespace

Datum to_jsonb(const Fields* f) {
  JsonbParseState* state = nullptr;
  pushJsonbValue(&state, WJB_BEGIN_OBJECT, nullptr);
  push_key(&state, "id");
  push_text(&state, f->id);
  push_key(&state, "handler");
  push_text(&state, f->handler);
  push_key(&state, "type");
  push_text(&state, f->type);
  push_key(&state, "key");
  push_text(&state, f->key);
  push_key(&state, "payload");
  push_jsonb(&state, f->payload);
  push_key(&state, "headers");
  if (f->headers_null) {
    push_text(&state, nullptr);
  } else {
    push_jsonb(&state, f->headers);
  }
  push_key(&state, "attempts");
  JsonbValue attempts;
  attempts.type = jbvNumeric;
  attempts.val.numeric =
      DatumGetNumeric(DirectFunctionCall1(int4_numeric, Int32GetDatum(f->attempts)));
  pushJsonbValue(&state, WJB_VALUE, &attempts);
  // As to_jsonb(timestamptz) writes it.
  push_key(&state, "published_at");
  push_text(&state, JsonEncodeDateTime(nullptr, TimestampTzGetDatum(f->published_at),
                                       TIMESTAMPTZOID, nullptr));
  JsonbValue* object = pushJsonbValue(&state, WJB_END_OBJECT, nullptr);
  return JsonbPGetDatum(JsonbValueToJsonb(object));
}

}  // namespace relaybus::pg::handler_event
