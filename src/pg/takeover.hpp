// The PostgreSQL side of a takeover's charges (core::ChargeStore): locks what a lane taken
// over had in flight and writes the charges core decided (claim_protocol.hpp,
// charges_for). Used by claim and take_over_expired.
#pragma once

#include "../core/claim_protocol.hpp"

namespace relaybus::pg {

// Must run with the lanes of the deliveries locked FOR UPDATE by the caller.
class PgChargeStore : public core::ChargeStore {
 public:
  std::vector<core::LostDelivery> lock_lost(
      const std::vector<core::DeliveryRef>& deliveries) override;
  void write_charges(const std::vector<core::Charge>& charges) override;
};

}  // namespace relaybus::pg
