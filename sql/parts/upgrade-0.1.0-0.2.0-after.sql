--------------------------------------------------------------------------------
-- Upgrade 0.1.0 -> 0.2.0, second half: with lane_of in place, every delivery gets the lane
-- new deliveries get; then come the 0.2.0 delivery indexes and every handler's lanes.
--------------------------------------------------------------------------------
-- 0.1.0 kept a completed delivery in place; 0.2.0 deletes it and keeps the record, when it
-- keeps one, in completions. Moved there, 0.1.0's completed deliveries stay listable and go
-- after relaybus.retention_completed, and deliveries holds only what is still to run or
-- dead, so nothing has to look for completed rows in it (no index would cover them).
INSERT INTO relaybus.completions (event_id, handler, attempts, completed_at)
  SELECT d.event_id, d.handler, d.attempts, d.updated_at
    FROM relaybus.deliveries d WHERE d.status = 'completed';
DELETE FROM relaybus.deliveries d WHERE d.status = 'completed';
ALTER TABLE relaybus.deliveries
  ADD CONSTRAINT deliveries_status_check CHECK (status IN ('pending', 'dead'));

UPDATE relaybus.deliveries SET lane = relaybus.lane_of(coalesce(key, event_id));
ALTER TABLE relaybus.deliveries ALTER COLUMN lane SET NOT NULL;
