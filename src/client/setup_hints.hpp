// The statements a setup error tells an admin to run, written once for the runtime and the
// operator tool: names quoted so that what is pasted means that name and nothing more, and
// the statement of the installed relaybus version (rights given by name from 0.2.1, by the
// cluster-wide roles relaybus_publisher, relaybus_worker and relaybus_admin on 0.2.0).
#pragma once

#include <string>

namespace relaybus::client {

// Whether relaybus `version` gives rights by name (relaybus.grant_rights): 0.2.1 or later.
// An empty or unfamiliar version is taken for a newer one.
bool rights_by_name(const std::string& version);

// The literal naming `role` where a regrole is read (grant_rights's first argument): an
// identifier, double-quoted inside the literal unless it is all lower case letters, digits
// and underscores.
std::string role_literal(const std::string& role);

// What an admin runs so that `role` gets `right` (publisher, worker or admin) on relaybus
// `version`: SELECT relaybus.grant_rights('role', 'worker'), or on 0.2.0 GRANT
// relaybus_worker TO "role".
std::string grant_statement(const std::string& right, const std::string& role,
                            const std::string& version);

// What a handler needs before a worker may run it:
// SELECT relaybus.subscribe('handler', ARRAY['<event type>']).
std::string subscribe_statement(const std::string& handler);

}  // namespace relaybus::client
