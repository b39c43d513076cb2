// What a handler throws to dead-letter its delivery at once instead of retrying it: for a
// failure no retry can fix (a payload the handler cannot read, a programming error, an order
// that no longer exists). what() becomes the delivery's last_error, as for any failure; the
// runtime calls bury() rather than fail(), so the delivery waits in the dead letters
// (relaybus dead list; requeue it once the handler is fixed) instead of going through its
// whole retry budget, about 13 hours with the default 25 attempts.
#pragma once

#include <stdexcept>
#include <string>

namespace relaybus::client {

class Bury : public std::runtime_error {
 public:
  explicit Bury(const std::string& reason) : std::runtime_error(reason) {}
};

}  // namespace relaybus::client
