-- The installed schema: tables, the only four indexes on deliveries, storage parameters,
-- the functions of the SQL API (schema relaybus) and the internal helpers
-- (relaybus_internal).
SELECT c.relname, c.reloptions
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'relaybus' AND c.relkind = 'r' ORDER BY c.relname;
SELECT indexrelid::regclass AS index, pg_get_indexdef(indexrelid) AS definition
  FROM pg_index WHERE indrelid = 'relaybus.deliveries'::regclass ORDER BY indexrelid::regclass::text;
SELECT indexrelid::regclass AS index FROM pg_index
 WHERE indrelid = 'relaybus.lanes'::regclass ORDER BY indexrelid::regclass::text;
SELECT p.oid::regprocedure AS function, p.prosecdef AS security_definer, p.proconfig
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname IN ('relaybus', 'relaybus_internal') ORDER BY p.oid::regprocedure::text;
