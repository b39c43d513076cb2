// Publishing an event id that exists already (an outbox relay retrying, a producer
// replaying): only handlers the event never had get a delivery, with the stored event's
// key (its lane and order), never the repeat's. A handler that had it, whether it is still
// pending, dead or long completed, never gets it twice: the event remembers its handlers
// for that (inbox deduplication).
#pragma once

#include <string>
#include <vector>

namespace relaybus::core {

// The handlers of `targets` not in `had`; the result is sorted and has no duplicates.
std::vector<std::string> handlers_to_add(std::vector<std::string> targets,
                                         std::vector<std::string> had);

}  // namespace relaybus::core
