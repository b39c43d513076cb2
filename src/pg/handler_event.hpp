// The event an in-database handler function gets: one jsonb value
// {id, handler, type, key, payload, headers, attempts, published_at}, built inside the
// call's subtransaction from the claim's columns and the stored payload and headers.
//
// Built as a value, not as JSON text: the text of a stored payload can be six times its
// size (every control character is written \u00XX), and a payload of 180 MB of them has a
// text over PostgreSQL's 1 GB limit. The worker's claim used to make that text for its
// whole batch, so one such event failed every claim of its handler, for good.
//
// The payload and headers are read here, by event id, not by the claim: a worker holds one
// event's payload at a time, however large the batch's payloads are. The claim used to copy
// every payload of its batch into the worker's memory, outside any subtransaction, so a
// batch of large payloads could exhaust a worker's memory in the claim, where the error
// ended the worker without charging an attempt: it was restarted, claimed the same batch
// and ended again, for good. Now what can fail (an event over the size limit, memory that
// runs out while loading, payload and headers that do not fit in one jsonb) fails inside
// the call's subtransaction: that delivery alone, charged an attempt.
#pragma once

#include "postgres.hpp"

#include <cstdint>

namespace relaybus::pg::handler_event {

// Plain fields, so that building can raise a PostgreSQL error through it (no C++ object
// with a destructor). The strings belong to the caller.
struct Fields {
  const char* id = nullptr;
  const char* handler = nullptr;
  const char* type = nullptr;
  const char* key = nullptr;  // nullptr: the event has none
  int32 attempts = 0;
  TimestampTz published_at = 0;
};

// The size relaybus.sql_handler_max_payload limits: payload plus headers, each as its
// uncompressed size, read from the value's header (a stored, compressed or out-of-line
// value is neither fetched nor decompressed). It is what a worker holds in memory for the
// event, whatever the storage made of it. Raises no error.
std::int64_t size_of(Datum payload, Datum headers, bool headers_null);

// The event as a jsonb datum, in the current memory context, with event f->id's payload and
// headers read by the kept plan `load` (parameter: the event id, text; columns: payload,
// headers). Raises 54000 when the event is larger than max_bytes (size_of), and whatever
// PostgreSQL raises when it cannot load or build it (53200 out of memory, say). Needs an
// active snapshot. Holds at most the loaded payload and headers and the event built from
// them at once; frees what it loaded before it returns.
Datum load(const Fields* f, SPIPlanPtr load, std::int64_t max_bytes);

}  // namespace relaybus::pg::handler_event
