-- Guarantee: the monitoring reads (statistics, metrics, list_deliveries) compile no JIT code,
-- whatever jit_above_cost says. They are SQL functions with settings, planned at each call,
-- and the estimate of their probe of every lane crossed the default jit_above_cost: each
-- call compiled its expressions first, 20-24 ms of statistics() against 4-7 ms without,
-- beside no backlog at all. Measured with pg_stat_statements' JIT counters of the
-- statements run inside them (skipped on a server without JIT). Without `SET jit = off` on
-- them, the last test fails.
SELECT rb_reset();
SELECT plan(4);

CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
SET pg_stat_statements.track = 'all';
SET jit = on;
SET jit_above_cost = 0;

SELECT relaybus.subscribe('mj', ARRAY['mj.event']);
SELECT relaybus.publish('mj.event', '{}', 'k', 'mj-1') AS published \gset
SELECT pg_stat_statements_reset();
SELECT is((SELECT pending FROM relaybus.statistics() WHERE handler = 'mj'), 1::bigint,
          'statistics() counts the pending delivery');
SELECT ok((SELECT count(*) FROM relaybus.metrics()) > 0, 'metrics() returns its rows');
SELECT is((SELECT count(*)::int FROM relaybus.list_deliveries(handler => 'mj')), 1,
          'list_deliveries() lists it');
SELECT CASE WHEN pg_jit_available() THEN
  is((SELECT coalesce(sum(jit_functions), 0)::int FROM pg_stat_statements
       WHERE NOT toplevel AND query ~ 'relaybus'),
     0, 'no statement inside them was compiled by JIT')
  ELSE skip('this server has no JIT', 1) END;

RESET jit_above_cost;
RESET jit;
SELECT * FROM finish();
