--------------------------------------------------------------------------------
-- Upgrade 0.1.0 -> 0.2.0, second half: with lane_of in place, every delivery gets the lane
-- new deliveries get; then come the 0.2.0 delivery indexes and every handler's lanes.
--------------------------------------------------------------------------------
UPDATE relaybus.deliveries SET lane = relaybus.lane_of(coalesce(key, event_id));
ALTER TABLE relaybus.deliveries ALTER COLUMN lane SET NOT NULL;
