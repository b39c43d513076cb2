--------------------------------------------------------------------------------
-- Rights (0.3.0): the functions 0.3.0 adds belong to the admin right too. 0.2.1's list
-- (rights-0.2.1.sql) stays as it was shipped, under another name; this one adds to it.
--------------------------------------------------------------------------------
ALTER FUNCTION relaybus_internal.right_privileges(text) RENAME TO right_privileges_021;
COMMENT ON FUNCTION relaybus_internal.right_privileges_021(text) IS
  'right_privileges_021(right_name): the privileges of one right as relaybus 0.2.1 defined them; right_privileges adds 0.3.0''s.';

-- right_privileges(right_name): the privileges one right is made of, as GRANT takes them
-- (privilege, object), in this database: 0.2.1's (right_privileges_021) and admin's
-- EXECUTE on handler_counters, completion_latency and unrouted_counters.
--
-- The one list of what each right may do; grant_rights, revoke_rights and rights() read it.
-- Touches nothing.
CREATE FUNCTION relaybus_internal.right_privileges(right_name text)
  RETURNS TABLE(privilege text, object text)
  LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT p.privilege, p.object FROM relaybus_internal.right_privileges_021($1) p
  UNION ALL
  SELECT p.privilege, p.object
    FROM (VALUES
      ('admin', 'EXECUTE', 'FUNCTION relaybus.handler_counters()'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.completion_latency()'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.unrouted_counters()')
    ) AS p(right_name, privilege, object)
   WHERE p.right_name = $1
$fn$;
REVOKE ALL ON FUNCTION relaybus_internal.right_privileges(text) FROM PUBLIC;

-- On an update, the roles that hold admin here get what 0.3.0 adds to it: the functions
-- above, and SELECT on the tables 0.3.0 makes (the right reads every relaybus table:
-- without this an admin kept SELECT on events but not on deliveries, lanes or exceptions,
-- while relaybus.rights() still listed it as admin). Only granted, nothing revoked:
-- relaybus_internal.set_rights revokes every privilege of the rights and grants them again,
-- which fails where an admin passed on a privilege held with the grant option, and drops
-- any given by hand. On a fresh install no role holds a right yet.
DO $grants$
DECLARE
  holder name;
BEGIN
  FOR holder IN
    SELECT r.rolname FROM pg_catalog.pg_roles r
     WHERE 'admin' = ANY (relaybus_internal.held_rights(r.oid))
       AND r.oid <> (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'relaybus')
  LOOP
    EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION relaybus.handler_counters(), '
                              'relaybus.completion_latency(), relaybus.unrouted_counters() TO %I',
                              holder);
    EXECUTE pg_catalog.format('GRANT SELECT ON ALL TABLES IN SCHEMA relaybus TO %I', holder);
  END LOOP;
END
$grants$;
