// Who an event goes to, and publishing an event id that exists already (an outbox relay retrying, a
// producer replaying): only handlers the event never had get a delivery, with the stored event's
// key (its lane and order), never the repeat's. A handler that had it, whether it is still
// pending, dead or long completed, never gets it twice: the event remembers its handlers
// for that (inbox deduplication).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace relaybus::core {

// Whether a subscription to `event_types` receives an event of `type`: it names the type,
// or "*" (every type). The in-memory store and PostgreSQL's publish (target_handlers in
// src/pg/publish.cpp, over its cached subscriptions) call this. The query copy, where the
// store selects subscribers in one query: find_subscribers in src/mongo/commands.cpp
// (`eventTypes $in [type, "*"]`); the contract suite's publish cases run the in-memory
// store and the PostgreSQL store.
inline constexpr std::string_view kEveryEventType = "*";
bool subscribes_to(const std::vector<std::string>& event_types, std::string_view type) noexcept;

// The handlers of `targets` not in `had`; the result is sorted and has no duplicates.
std::vector<std::string> handlers_to_add(std::vector<std::string> targets,
                                         std::vector<std::string> had);

}  // namespace relaybus::core
