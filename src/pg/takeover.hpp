// Charging the deliveries a lane had in flight when it was taken over (lease expired, or
// its holder's incarnation is gone): one attempt each, dead-lettered when out of attempts,
// claims counter bumped so the old tokens are dead. Used by claim and take_over_expired.
#pragma once

#include <string>
#include <vector>

namespace relaybus::pg {

struct InFlightDelivery {
  std::string handler;
  std::string event_id;
};

// Must run with the lanes of these deliveries locked FOR UPDATE by the caller.
void charge_taken_over(const std::vector<InFlightDelivery>& deliveries);

}  // namespace relaybus::pg
