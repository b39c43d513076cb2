// The heads of lanes' pending exception rows: what a claim needs of them, read in steps
// that do not grow with the rows waiting behind a key.
//
// A key's deliveries behind a failing one are parked as pending exception rows (each
// claim that reads the lane parks its window's), so a hot key can leave hundreds of
// thousands of them in one lane. Of those, a claim only ever picks the lowest row of a
// key (core::pick_exceptions), and only needs to know which keys have rows; of the
// unkeyed rows, the lowest due ones. Reading every pending row of a lane made each claim
// cost a step per parked row (35 ms a claim with 32,000 parked). These statements read
// the lowest row of each key one key at a time (a loose scan of exceptions_heads_idx:
// handler, lane, key, position, pending) and the unkeyed rows earliest due first
// (exceptions_unkeyed_idx: handler, lane, available_at, pending and unkeyed).
#pragma once

// heads(n, handler, lane, key, position): the lowest pending row of each key of each lane
// of unnest($1::text[], $2::int2[]) WITH ORDINALITY (n: the lane's place in the arrays).
// Starts a statement; the rest of it reads heads as a table.
#define RELAYBUS_EXCEPTION_HEADS_CTE                                            \
  "WITH RECURSIVE heads (n, handler, lane, key, position) AS ("                 \
  " SELECT u.n, u.handler, u.lane, f.key, f.position"                           \
  " FROM unnest($1::text[], $2::int2[]) WITH ORDINALITY AS u(handler, lane, n)" \
  " CROSS JOIN LATERAL (SELECT x.key, x.position FROM relaybus.exceptions x"    \
  "  WHERE x.handler = u.handler AND x.lane = u.lane AND x.status = 'pending'"  \
  "  AND x.key IS NOT NULL ORDER BY x.key, x.position LIMIT 1) f"               \
  " UNION ALL"                                                                  \
  " SELECT h.n, h.handler, h.lane, f.key, f.position FROM heads h"              \
  " CROSS JOIN LATERAL (SELECT x.key, x.position FROM relaybus.exceptions x"    \
  "  WHERE x.handler = h.handler AND x.lane = h.lane AND x.status = 'pending'"  \
  "  AND x.key > h.key ORDER BY x.key, x.position LIMIT 1) f) "

// Per lane of unnest($1::text[], $2::int2[], $4::int4[], $5::int4[]) WITH ORDINALITY AS
// u(handler, lane, rf, rc, n): the earliest available_at among its due heads, keyed or not,
// that are not being retried ($3::int8[] sliced by rf, rc: the lane's retrying list). The
// set-based twin of the exception half of core::held_lane_probe.
#define RELAYBUS_DUE_HEADS_SQL                                                      \
  RELAYBUS_EXCEPTION_HEADS_CTE                                                      \
  "SELECT u.n, least("                                                              \
  " (SELECT min(x.available_at) FROM heads h JOIN relaybus.exceptions x"            \
  "   ON x.handler = h.handler AND x.lane = h.lane AND x.position = h.position"     \
  "   WHERE h.n = u.n AND x.available_at <= now()"                                  \
  "   AND x.position <> ALL (coalesce(($3::int8[])[u.rf:u.rf + u.rc - 1], '{}')))," \
  " (SELECT x.available_at FROM relaybus.exceptions x"                              \
  "   WHERE x.handler = u.handler AND x.lane = u.lane AND x.status = 'pending'"     \
  "   AND x.key IS NULL AND x.available_at <= now()"                                \
  "   AND x.position <> ALL (coalesce(($3::int8[])[u.rf:u.rf + u.rc - 1], '{}'))"   \
  "   ORDER BY x.available_at LIMIT 1))"                                            \
  " FROM unnest($1::text[], $2::int2[], $4::int4[], $5::int4[])"                    \
  "  WITH ORDINALITY AS u(handler, lane, rf, rc, n)"

// The lanes of the handlers unnest($1::text[]) that have pending exception rows, one step
// a lane (a loose scan of exceptions_heads_idx), however many rows they hold.
#define RELAYBUS_LANES_WITH_EXCEPTIONS_SQL                                            \
  "WITH RECURSIVE l (handler, lane) AS ("                                             \
  " SELECT h.handler, f.lane FROM unnest($1::text[]) AS h(handler)"                   \
  " CROSS JOIN LATERAL (SELECT x.lane FROM relaybus.exceptions x"                     \
  "  WHERE x.handler = h.handler AND x.status = 'pending' ORDER BY x.lane LIMIT 1) f" \
  " UNION ALL"                                                                        \
  " SELECT l.handler, f.lane FROM l"                                                  \
  " CROSS JOIN LATERAL (SELECT x.lane FROM relaybus.exceptions x"                     \
  "  WHERE x.handler = l.handler AND x.status = 'pending' AND x.lane > l.lane"        \
  "  ORDER BY x.lane LIMIT 1) f)"                                                     \
  " SELECT handler, lane FROM l"
