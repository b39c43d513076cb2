-- Upgrade 0.1.0 -> 0.2.0, last: @LANE_COUNT@ lanes for every handler that is subscribed or still has deliveries.
SELECT relaybus_internal.create_lanes(h.handler)
  FROM (SELECT handler FROM relaybus.subscriptions
        UNION SELECT DISTINCT handler FROM relaybus.deliveries) h;
