// What publish and publish_batch share, in every version: one event's input, its checks, the
// handlers it goes to, and publishing it (or republishing a stored id) with its deliveries
// (written by the version's DeliveryWriter, delivery_writer.hpp) and wake-ups. Implemented
// in publish_one.cpp; publish_batch.cpp publishes many at once.
#pragma once

#include "spi.hpp"

#include <optional>
#include <string>
#include <vector>

namespace relaybus::pg {

class DeliveryWriter;

struct PublishInput {
  std::string type;
  Datum payload = 0;
  std::optional<std::string> key;
  std::optional<std::string> event_id;
  std::optional<std::vector<std::string>> handlers;
  std::optional<TimestampTz> available_at;
  Datum headers = 0;
  bool headers_null = true;
};

[[noreturn]] void invalid(const std::string& message);  // 22023

// A random (version 4) UUID in its canonical text form.
std::string new_event_id();

// The checks of one event's input; `where` prefixes the messages ("events[3]: ").
void validate(PublishInput& in, const std::string& where);

struct Targets {
  std::vector<std::string> handlers;
  std::vector<bool> in_database;  // per handler: has an sql_function
};

// The handlers an event goes to: the given ones (each must be subscribed), or every
// subscriber of its type.
Targets target_handlers(const std::string& type,
                        const std::optional<std::vector<std::string>>& given);

// Refuses (54000) an event (payload, headers) over relaybus.sql_handler_max_payload when
// any of these handlers (of `targets`, sorted) is an in-database one, naming the first: its
// workers would refuse the event (handler_event.hpp). The size is handler_event::size_of's
// (payload plus headers, uncompressed, read from their headers without detoasting them),
// taken only when such a handler is there. `where` prefixes the message.
void check_in_database_size(Datum payload, Datum headers, bool headers_null,
                            const std::vector<std::string>& handlers, const Targets& targets,
                            const std::string& where);

// Wakes, at commit, the workers of these handlers (of `targets`).
void wake(const std::vector<std::string>& handlers, const Targets& targets);

// A repeated event id: deliveries for the handlers it does not have yet. `where` prefixes
// the messages.
void publish_repeat(const std::string& event_id, const PublishInput& in, const std::string& where,
                    const DeliveryWriter& writer);

// Publishes one event (or republishes a stored id); returns its id.
std::string publish_one(PublishInput& in, const std::string& where, const DeliveryWriter& writer);

}  // namespace relaybus::pg
