// Events stored for no handler: publish found no subscription for their type (the likeliest
// newcomer mistake is a misspelled type). Each is counted (counters::add_unrouted) and
// reported as relaybus.unrouted_publish says.
#pragma once

#include <string>
#include <vector>

namespace relaybus::pg::unrouted {

// The events of one publish or publish_batch call just stored for no handler, by type in
// input order (empty: nothing to do). Counts each; then, by relaybus.unrouted_publish,
// says nothing, raises one NOTICE or WARNING for the call, or throws core::Error
// kUndefinedObject (42704), which ends the statement and so stores none of them.
void stored(const std::vector<std::string>& types);

}  // namespace relaybus::pg::unrouted
