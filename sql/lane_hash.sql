-- Lanes are stored with every delivery, so the hash must never change: pinned values.
SELECT k, relaybus.lane_of(k) FROM unnest(ARRAY['', 'a', 'order-42', 'customer:7', 'ünïcödé']) AS k;
SELECT min(relaybus.lane_of(i::text)), max(relaybus.lane_of(i::text)),
       count(DISTINCT relaybus.lane_of(i::text)) FROM generate_series(1, 10000) i;
SELECT relaybus.lane_of(NULL);
