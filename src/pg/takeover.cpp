#include "takeover.hpp"

#include "counters.hpp"
#include "spi.hpp"
#include "subscription_policy.hpp"

namespace relaybus::pg {

std::vector<core::LostDelivery> PgChargeStore::lock_lost(
    const std::vector<core::DeliveryRef>& deliveries) {
  static Statement lock_deliveries(
      "SELECT d.handler, d.event_id, d.attempts, " RELAYBUS_POLICY_COLUMNS_SQL
      " FROM unnest($1::text[], $2::text[]) AS f(handler, event_id)"
      " JOIN relaybus.deliveries d ON d.event_id = f.event_id AND d.handler = f.handler"
      "  AND d.status = 'pending'"
      " LEFT JOIN relaybus.subscriptions s ON s.handler = d.handler"
      " FOR UPDATE OF d",
      {TEXTARRAYOID, TEXTARRAYOID});
  std::vector<std::string> handlers, event_ids;
  for (const auto& d : deliveries) {
    handlers.push_back(d.handler);
    event_ids.push_back(d.event_id);
  }
  Params params;
  params.text_array(handlers);
  params.text_array(event_ids);
  const std::uint64_t n = lock_deliveries.run(params);
  std::vector<core::LostDelivery> lost;
  lost.reserve(n);
  for (std::uint64_t r = 0; r < n; ++r)
    lost.push_back({row::text(r, 1), row::text(r, 2), row::int4(r, 3), policy_of_row(r, 4)});
  return lost;
}

void PgChargeStore::write_charges(const std::vector<core::Charge>& charges) {
  static Statement charge(
      "UPDATE relaybus.deliveries d SET attempts = u.attempts, claims = d.claims + 1,"
      " status = u.status, updated_at = now(),"
      " last_error = $5"
      " FROM unnest($1::text[], $2::text[], $3::int4[], $4::text[])"
      "  AS u(handler, event_id, attempts, status)"
      " WHERE d.event_id = u.event_id AND d.handler = u.handler",
      {TEXTARRAYOID, TEXTARRAYOID, INT4ARRAYOID, TEXTARRAYOID, TEXTOID});
  std::vector<std::string> handlers, event_ids, status;
  std::vector<std::int32_t> attempts;
  for (const auto& c : charges) {
    handlers.push_back(c.handler);
    event_ids.push_back(c.event_id);
    attempts.push_back(c.attempts);
    status.push_back(c.dead ? "dead" : "pending");
  }
  Params params;
  params.text_array(handlers);
  params.text_array(event_ids);
  params.int4_array(attempts);
  params.text_array(status);
  params.text(std::string(core::kLeaseLostError));
  charge.run(params);
  counters::add(counters::kAttemptsCharged, charges.size());
  std::uint64_t dead = 0;
  for (const auto& c : charges) dead += c.dead ? 1 : 0;
  counters::add(counters::kDeadLettered, dead);
}

}  // namespace relaybus::pg
