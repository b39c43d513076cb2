-- Upgrade 0.1.0 -> 0.2.0, last: 256 lanes for every handler that is subscribed or still has deliveries.
INSERT INTO relaybus.lanes (handler, lane)
SELECT h.handler, n
  FROM (SELECT handler FROM relaybus.subscriptions
        UNION SELECT DISTINCT handler FROM relaybus.deliveries) h
 CROSS JOIN generate_series(0, 255) n;
