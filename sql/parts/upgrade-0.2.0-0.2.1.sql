--------------------------------------------------------------------------------
-- 0.2.0 granted this database's relaybus objects to the cluster-wide roles
-- relaybus_publisher, relaybus_worker and relaybus_admin, so a member of one had that
-- right in every database with relaybus. Here each member gets the same right in this
-- database, named, and the three roles lose theirs: nobody that could act here before is
-- refused after the update, and a WARNING lists who holds what, so that rights that belong
-- to another database can be revoked here (relaybus.revoke_rights). The roles themselves
-- stay: other databases (still on 0.2.0) may use them, and roles are the cluster's.
--------------------------------------------------------------------------------
DO $convert$
DECLARE
  member record;
  converted text[] := '{}';
  old_role name;
BEGIN
  FOR member IN
    SELECT m.oid, m.rolname,
           array_agg(DISTINCT substr(g.rolname, length('relaybus_') + 1)) AS rights
      FROM pg_catalog.pg_auth_members am
      JOIN pg_catalog.pg_roles g ON g.oid = am.roleid
      JOIN pg_catalog.pg_roles m ON m.oid = am.member
     WHERE g.rolname IN ('relaybus_publisher', 'relaybus_worker', 'relaybus_admin')
       AND m.rolname NOT IN ('relaybus_publisher', 'relaybus_worker', 'relaybus_admin')
       AND m.oid <> (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'relaybus')
     GROUP BY m.oid, m.rolname
     ORDER BY m.rolname
  LOOP
    converted := converted || format('%s: %s', quote_ident(member.rolname),
      array_to_string(relaybus_internal.set_rights(member.oid::regrole, member.rights, '{}'), ', '));
  END LOOP;
  FOREACH old_role IN ARRAY ARRAY['relaybus_publisher', 'relaybus_worker', 'relaybus_admin'] LOOP
    IF EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.rolname = old_role) THEN
      PERFORM relaybus_internal.set_rights(old_role::regrole, '{}', '{admin}');
    END IF;
  END LOOP;
  IF cardinality(converted) > 0 THEN
    RAISE WARNING 'relaybus: the members of relaybus_publisher, relaybus_worker and relaybus_admin now hold those rights in this database by name'
      USING DETAIL = 'Rights in this database: ' || array_to_string(converted, '; ') || '.',
            HINT = 'Those roles held them in every database with relaybus. Revoke them where they do not belong, '
                   'with SELECT relaybus.revoke_rights(role, ''admin''), and give rights with relaybus.grant_rights.';
  END IF;
END
$convert$;
