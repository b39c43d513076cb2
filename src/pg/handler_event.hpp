// The event an in-database handler function gets: one jsonb value
// {id, handler, type, key, payload, headers, attempts, published_at}, built from the
// claim's columns inside the call's subtransaction.
//
// Built as a value, not as JSON text: the text of a stored payload can be six times its
// size (every control character is written \u00XX), and a payload of 180 MB of them has a
// text over PostgreSQL's 1 GB limit. The worker's claim used to make that text for its
// whole batch, so one such event failed every claim of its handler, for good. Now what
// can still fail (payload and headers each fit in a jsonb, together they do not) fails
// inside the call's subtransaction: that delivery alone.
#pragma once

#include "postgres.hpp"

namespace relaybus::pg::handler_event {

// Plain fields, so that building can raise a PostgreSQL error through it (no C++ object
// with a destructor). The strings and datums belong to the caller.
struct Fields {
  const char* id = nullptr;
  const char* handler = nullptr;
  const char* type = nullptr;
  const char* key = nullptr;  // nullptr: the event has none
  Datum payload = 0;          // jsonb
  Datum headers = 0;          // jsonb, unless headers_null
  bool headers_null = true;
  int32 attempts = 0;
  TimestampTz published_at = 0;
};

// The event as a jsonb datum, in the current memory context. Raises PostgreSQL errors.
Datum to_jsonb(const Fields* fields);

}  // namespace relaybus::pg::handler_event
