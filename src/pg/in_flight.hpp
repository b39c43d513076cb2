// "In flight" means one thing everywhere (core::counts_in_flight, lane_lease.hpp): a
// pending delivery listed in the in-flight list of a lane that has an owner (lease_owner),
// live or expired, until a takeover or an end of its attempt takes it off. The list is
// only pruned lazily (a completion deletes the delivery but does not write the lane), so
// readers keep the entries whose delivery is still pending. The same definition is written
// in statistics() and list_deliveries() (sql/parts/api-0.2.0.sql: the in_flight CTE joined
// to pending deliveries).
#pragma once

// SQL: the live in-flight event ids of lane row `l`, looked up through the deliveries
// primary key. The status test sits outside an OFFSET 0 fence on purpose: next to the key
// test it lets the planner pick a partial index on status and filter a whole lane's
// backlog (it does, on a table loaded faster than autovacuum analyzes it).
#define RELAYBUS_LIVE_IN_FLIGHT_SQL                                                      \
  "ARRAY(SELECT x.event_id FROM (SELECT d.event_id, d.status FROM relaybus.deliveries d" \
  " WHERE d.event_id = ANY (l.in_flight) AND d.handler = l.handler OFFSET 0) x"          \
  " WHERE x.status = 'pending')"

// SQL, for a LATERAL join to lane row `l`: one row with the live in-flight event ids of
// the lane (`ids`, text[]) and their distinct ordering keys (`keys`, text[]), from one
// lookup of each in-flight delivery.
#define RELAYBUS_LIVE_IN_FLIGHT_WITH_KEYS_SQL                                           \
  "(SELECT coalesce(array_agg(x.event_id), '{}') AS ids,"                               \
  " coalesce(array_agg(DISTINCT x.key) FILTER (WHERE x.key IS NOT NULL), '{}') AS keys" \
  " FROM (SELECT d.event_id, d.key, d.status FROM relaybus.deliveries d"                \
  " WHERE d.event_id = ANY (l.in_flight) AND d.handler = l.handler OFFSET 0) x"         \
  " WHERE x.status = 'pending')"
