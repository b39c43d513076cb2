--------------------------------------------------------------------------------
-- Privileges: nothing for PUBLIC; each role gets EXECUTE on what its job needs.
--------------------------------------------------------------------------------
REVOKE ALL ON SCHEMA relaybus FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA relaybus FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA relaybus FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA relaybus FROM PUBLIC;
GRANT USAGE ON SCHEMA relaybus TO relaybus_publisher, relaybus_worker, relaybus_admin;

GRANT EXECUTE ON FUNCTION
  relaybus.publish(text, jsonb, text, text, text[], timestamptz, jsonb),
  relaybus.publish_batch(jsonb)
  TO relaybus_publisher;

GRANT EXECUTE ON FUNCTION
  relaybus.claim(text, integer, interval, text[], text),
  relaybus.extend_lease(text, interval, text),
  relaybus.complete(text),
  relaybus.complete_many(text[]),
  relaybus.fail(text, text, timestamptz),
  relaybus.bury(text, text),
  relaybus.release(text),
  relaybus.relinquish(text, text)
  TO relaybus_worker;

GRANT EXECUTE ON FUNCTION relaybus.lane_of(text)
  TO relaybus_publisher, relaybus_worker, relaybus_admin;

GRANT EXECUTE ON FUNCTION
  relaybus.subscribe(text, text[], integer, interval, interval, regprocedure, interval),
  relaybus.unsubscribe(text),
  relaybus.requeue(text, text),
  relaybus.requeue_dead(text),
  relaybus.pause(text),
  relaybus.resume(text),
  relaybus.cancel(text, text),
  relaybus.take_over_expired(),
  relaybus.purge_expired(),
  relaybus.statistics(),
  relaybus.list_deliveries(text, text, integer)
  TO relaybus_admin;
-- An admin can also publish and work, and read the tables to investigate.
GRANT relaybus_publisher, relaybus_worker TO relaybus_admin;
GRANT SELECT ON ALL TABLES IN SCHEMA relaybus TO relaybus_admin;
-- Admin only, as statistics(): the figures name handlers and workers. A monitoring role
-- gets EXECUTE on metrics() and counters() alone (docs/operations.md), not relaybus_admin.
REVOKE ALL ON FUNCTION relaybus.metrics(), relaybus.counters(), relaybus.reset_counters()
  FROM PUBLIC;
GRANT EXECUTE ON FUNCTION relaybus.metrics(), relaybus.counters(), relaybus.reset_counters()
  TO relaybus_admin;
