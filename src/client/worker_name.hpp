// Worker names identify one process incarnation: a fixed prefix (the service) plus a random
// suffix, so a restarted process never renews leases its dead predecessor still holds.
#pragma once

#include <string>

namespace relaybus::client {

std::string make_worker_name(const std::string& prefix);

// A random holder for this process's incarnation (see Worker in store/store.hpp).
std::string make_holder();

}  // namespace relaybus::client
