#include "takeover.hpp"

#include "spi.hpp"
#include "subscription_policy.hpp"

#include "../core/retry_policy.hpp"

namespace relaybus::pg {

void charge_taken_over(const std::vector<InFlightDelivery>& deliveries) {
  if (deliveries.empty()) return;
  static Statement lock_deliveries(
      "SELECT d.handler, d.event_id, d.attempts, " RELAYBUS_POLICY_COLUMNS_SQL
      " FROM unnest($1::text[], $2::text[]) AS f(handler, event_id)"
      " JOIN relaybus.deliveries d ON d.event_id = f.event_id AND d.handler = f.handler"
      "  AND d.status = 'pending'"
      " LEFT JOIN relaybus.subscriptions s ON s.handler = d.handler"
      " FOR UPDATE OF d",
      {TEXTARRAYOID, TEXTARRAYOID});
  static Statement charge(
      "UPDATE relaybus.deliveries d SET attempts = u.attempts, claims = d.claims + 1,"
      " status = u.status, updated_at = now(),"
      " last_error = 'lease lost: lane taken over while the delivery was in flight'"
      " FROM unnest($1::text[], $2::text[], $3::int4[], $4::text[])"
      "  AS u(handler, event_id, attempts, status)"
      " WHERE d.event_id = u.event_id AND d.handler = u.handler",
      {TEXTARRAYOID, TEXTARRAYOID, INT4ARRAYOID, TEXTARRAYOID});

  std::vector<std::string> handlers, event_ids;
  for (const auto& d : deliveries) {
    handlers.push_back(d.handler);
    event_ids.push_back(d.event_id);
  }
  Params lock_params;
  lock_params.text_array(handlers);
  lock_params.text_array(event_ids);
  const std::uint64_t n = lock_deliveries.run(lock_params);

  std::vector<std::string> u_handlers, u_event_ids, u_status;
  std::vector<std::int32_t> u_attempts;
  for (std::uint64_t r = 0; r < n; ++r) {
    const core::RetryPolicy policy = policy_of_row(r, 4);
    const core::FailureOutcome outcome = core::after_lost_attempt(policy, row::int4(r, 3));
    u_handlers.push_back(row::text(r, 1));
    u_event_ids.push_back(row::text(r, 2));
    u_attempts.push_back(outcome.attempts);
    u_status.push_back(outcome.dead ? "dead" : "pending");
  }
  if (u_handlers.empty()) return;
  Params charge_params;
  charge_params.text_array(u_handlers);
  charge_params.text_array(u_event_ids);
  charge_params.int4_array(u_attempts);
  charge_params.text_array(u_status);
  charge.run(charge_params);
}

}  // namespace relaybus::pg
