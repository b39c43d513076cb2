-- With the primary key, the only four indexes on deliveries: none covers a column the
-- happy path writes.

-- claim: due pending deliveries of one (handler, lane) in due order.
CREATE INDEX deliveries_lane_due_idx ON relaybus.deliveries (handler, lane, available_at, event_id)
  WHERE status = 'pending';
-- claim: "no earlier pending delivery of this handler and key".
CREATE INDEX deliveries_lane_key_idx ON relaybus.deliveries (handler, lane, key, sequence)
  WHERE key IS NOT NULL AND status = 'pending';
-- purge_expired: dead letters by age.
CREATE INDEX deliveries_dead_idx ON relaybus.deliveries (updated_at, event_id)
  WHERE status = 'dead';
