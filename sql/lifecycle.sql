-- One event through publish, claim, complete, fail, retry, dead letter and requeue, with
-- fixed ids so every token and count is reproducible.
SELECT relaybus.subscribe('billing', ARRAY['order.created'], max_attempts => 2,
                          backoff_base => '0', backoff_max => '0');
SELECT relaybus.subscribe('audit', ARRAY['*']);
SELECT relaybus.publish('order.created', '{"total": 42}', key => 'customer-1', event_id => 'e1');
SELECT relaybus.publish('order.created', '{"total": 7}', key => 'customer-1', event_id => 'e2');
SELECT relaybus.publish('user.signed_up', event_id => 'e3');
-- a repeat adds nothing
SELECT relaybus.publish('order.created', '{"total": 42}', key => 'customer-1', event_id => 'e1');
-- one delivery per (event, handler), at the next position of its handler's lane (e3 has no
-- key: a lane of its own id)
SELECT event_id, handler, lane, key, position FROM relaybus.deliveries ORDER BY event_id, handler;
SELECT event_id, handler, status, attempts FROM relaybus.list_deliveries() ORDER BY 1, 2;
SELECT id, type, key, handlers FROM relaybus.events ORDER BY id;

-- e2 waits behind e1 (same key), for each handler
CREATE TEMP TABLE batch1 AS SELECT * FROM relaybus.claim('worker-a', 10);
-- A token ends with its event's publish time (microseconds since 1970), shown as <published>.
SELECT regexp_replace(lease_token, '\.[0-9]{16}$', '.<published>') AS lease_token, event_id, handler, type, key, payload, attempts
  FROM batch1 ORDER BY handler, event_id;
SELECT handler, pending, processing, dead, completed FROM relaybus.statistics();
SELECT event_id, handler, status, lease_owner FROM relaybus.list_deliveries() ORDER BY 1, 2;
SELECT relaybus.complete(lease_token) FROM batch1 WHERE handler = 'audit' AND event_id = 'e1';
SELECT relaybus.complete(lease_token) FROM batch1 WHERE handler = 'audit' AND event_id = 'e1';
SELECT relaybus.complete_many(array_agg(lease_token)) FROM batch1 WHERE event_id = 'e3';
SELECT relaybus.fail(lease_token, 'card declined') FROM batch1 WHERE handler = 'billing';
SELECT relaybus.fail(lease_token, 'stale token') FROM batch1 WHERE handler = 'billing';
SELECT event_id, handler, status, attempts, last_error FROM relaybus.list_deliveries()
 ORDER BY 1, 2;

-- billing/e1 is retried at once (backoff 0); audit/e2 is due now that audit/e1 completed
CREATE TEMP TABLE batch2 AS SELECT * FROM relaybus.claim('worker-a', 10);
SELECT regexp_replace(lease_token, '\.[0-9]{16}$', '.<published>') AS lease_token, event_id, handler, attempts FROM batch2 ORDER BY handler, event_id;
SELECT relaybus.fail(lease_token, 'card declined again') FROM batch2 WHERE handler = 'billing';
SELECT event_id, handler, status, attempts, last_error FROM relaybus.list_deliveries('dead');
-- a dead head does not block its key: billing/e2 is claimable
CREATE TEMP TABLE batch3 AS SELECT * FROM relaybus.claim('worker-a', 10);
SELECT regexp_replace(lease_token, '\.[0-9]{16}$', '.<published>') AS lease_token, event_id, handler, attempts FROM batch3 ORDER BY handler, event_id;
SELECT relaybus.release(lease_token) FROM batch3;
SELECT relaybus.requeue('e1', 'billing');
SELECT relaybus.requeue('e1', 'billing');
SELECT event_id, handler, status, attempts FROM relaybus.list_deliveries() ORDER BY 1, 2;
SELECT relaybus.relinquish('worker-a');
SELECT handler, pending, processing, dead, completed FROM relaybus.statistics();
SELECT count(*) AS lanes_held FROM relaybus.lanes WHERE lease_owner IS NOT NULL;
