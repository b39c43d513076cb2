--------------------------------------------------------------------------------
-- Rights, per database. PostgreSQL's roles belong to the cluster, but privileges on a
-- database's objects belong to that database. So relaybus grants nothing to any role of
-- its own: each database's relaybus objects are granted, by grant_rights, to the roles its
-- administrator names, and a right given in one database means nothing in another (0.2.0's
-- cluster-wide relaybus_publisher, relaybus_worker and relaybus_admin meant the same in
-- every database that installed relaybus).
--------------------------------------------------------------------------------
REVOKE ALL ON SCHEMA relaybus FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA relaybus FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA relaybus FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA relaybus FROM PUBLIC;

-- right_privileges(right_name): the privileges one right is made of, as GRANT takes them
-- (privilege, object), in this database: publisher publishes, worker claims and ends
-- attempts, admin does everything else (and what publisher and worker do), or nothing for
-- a name that is not a right.
--
-- The one list of what each right may do; grant_rights, revoke_rights and rights() read it.
-- Touches nothing.
CREATE FUNCTION relaybus_internal.right_privileges(right_name text)
  RETURNS TABLE(privilege text, object text)
  LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT p.privilege, p.object
    FROM (VALUES
      ('publisher', 'USAGE', 'SCHEMA relaybus'),
      ('publisher', 'EXECUTE', 'FUNCTION relaybus.lane_of(text)'),
      ('publisher', 'EXECUTE', 'FUNCTION relaybus.publish(text, jsonb, text, text, text[], timestamptz, jsonb)'),
      ('publisher', 'EXECUTE', 'FUNCTION relaybus.publish_batch(jsonb)'),
      ('worker', 'USAGE', 'SCHEMA relaybus'),
      ('worker', 'EXECUTE', 'FUNCTION relaybus.lane_of(text)'),
      ('worker', 'EXECUTE', 'FUNCTION relaybus.claim(text, integer, interval, text[], text)'),
      ('worker', 'EXECUTE', 'FUNCTION relaybus.extend_lease(text, interval, text)'),
      ('worker', 'EXECUTE', 'FUNCTION relaybus.complete(text)'),
      ('worker', 'EXECUTE', 'FUNCTION relaybus.complete_many(text[])'),
      ('worker', 'EXECUTE', 'FUNCTION relaybus.fail(text, text, timestamptz)'),
      ('worker', 'EXECUTE', 'FUNCTION relaybus.bury(text, text)'),
      ('worker', 'EXECUTE', 'FUNCTION relaybus.release(text)'),
      ('worker', 'EXECUTE', 'FUNCTION relaybus.relinquish(text, text)'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.subscribe(text, text[], integer, interval, interval, regprocedure, interval)'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.unsubscribe(text)'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.requeue(text, text)'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.requeue_dead(text)'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.pause(text)'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.resume(text)'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.cancel(text, text)'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.take_over_expired()'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.purge_expired()'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.statistics()'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.list_deliveries(text, text, integer)'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.metrics()'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.counters()'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.reset_counters()'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.rights()'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.grant_rights(regrole, text[])'),
      ('admin', 'EXECUTE', 'FUNCTION relaybus.revoke_rights(regrole, text[])'),
      ('admin', 'SELECT', 'ALL TABLES IN SCHEMA relaybus')
    ) AS p(right_name, privilege, object)
   WHERE p.right_name = $1
      OR ($1 = 'admin' AND p.right_name IN ('publisher', 'worker'))
$fn$;

-- held_rights(role): the rights role holds directly in this database, each known by one
-- privilege only it grants (publish, claim, grant_rights), sorted; admin comes with
-- publisher and worker.
--
-- A function, not a table of grants: the ACLs are what PostgreSQL checks, so they are what
-- is reported. Reads pg_proc's ACLs: a privilege that reaches role through membership in another role
-- is that role's right, not this one's.
CREATE FUNCTION relaybus_internal.held_rights(role oid) RETURNS text[]
  LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT coalesce(array_agg(DISTINCT r.right_name ORDER BY r.right_name), '{}')
    FROM (VALUES
      ('publisher', 'relaybus.publish(text, jsonb, text, text, text[], timestamptz, jsonb)'),
      ('worker', 'relaybus.claim(text, integer, interval, text[], text)'),
      ('admin', 'relaybus.grant_rights(regrole, text[])'),
      ('publisher', 'relaybus.grant_rights(regrole, text[])'),
      ('worker', 'relaybus.grant_rights(regrole, text[])')
    ) AS r(right_name, marker)
    JOIN pg_proc p ON p.oid = to_regprocedure(r.marker)
   WHERE EXISTS (SELECT FROM aclexplode(p.proacl) a
                  WHERE a.grantee = $1 AND a.privilege_type = 'EXECUTE')
$fn$;

-- set_rights(role, given, taken): gives role the rights given and takes those taken (admin
-- with the publisher and worker rights it brings) in this database, on top of what it
-- holds. Returns what role holds afterwards.
--
-- What role holds is read under a transaction advisory lock, then every privilege of every
-- right is revoked and those of the rights kept are granted: two calls never update one
-- ACL at once (PostgreSQL would fail one with "tuple concurrently updated"), and neither
-- undoes the other's change. Writes the ACLs of schema relaybus and its objects. The owner
-- of relaybus's objects grants: grant_rights and revoke_rights run as it.
CREATE FUNCTION relaybus_internal.set_rights(role regrole, given text[], taken text[])
  RETURNS text[]
  LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  grant_item record;
  grantee name := (SELECT r.rolname FROM pg_roles r WHERE r.oid = role);
  kept text[];
BEGIN
  PERFORM pg_advisory_xact_lock(pg_catalog.hashtext('relaybus.rights'));
  kept := ARRAY(SELECT DISTINCT h FROM unnest(relaybus_internal.held_rights(role) || given) h
                 WHERE h <> ALL (taken)
                   AND NOT (h IN ('publisher', 'worker') AND 'admin' = ANY (taken)));
  FOR grant_item IN
    SELECT DISTINCT p.privilege, p.object
      FROM unnest(ARRAY['publisher', 'worker', 'admin']) r, relaybus_internal.right_privileges(r) p
  LOOP
    EXECUTE format('REVOKE %s ON %s FROM %I', grant_item.privilege, grant_item.object,
                   grantee);
  END LOOP;
  FOR grant_item IN
    SELECT DISTINCT p.privilege, p.object
      FROM unnest(kept) r, relaybus_internal.right_privileges(r) p
  LOOP
    EXECUTE format('GRANT %s ON %s TO %I', grant_item.privilege, grant_item.object,
                   grantee);
  END LOOP;
  RETURN relaybus_internal.held_rights(role);
END
$fn$;

-- checked_rights(role, rights): rights as given, refused unless each is a right and role
-- may be given rights. Returns rights.
--
-- 22004 for a NULL; 42704 for a role that no longer exists (or PUBLIC); 22023 for an
-- unknown right, none, or the owner of relaybus's objects,
-- which holds every right by owning them. Touches nothing.
CREATE FUNCTION relaybus_internal.checked_rights(role regrole, rights text[]) RETURNS text[]
  LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  unknown text;
BEGIN
  IF role IS NULL OR rights IS NULL OR array_position(rights, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'role and rights must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF cardinality(rights) = 0 THEN
    RAISE EXCEPTION 'no right named' USING ERRCODE = 'invalid_parameter_value',
      HINT = 'Name one or more of publisher, worker and admin.';
  END IF;
  SELECT r INTO unknown FROM unnest(rights) r
   WHERE r NOT IN ('publisher', 'worker', 'admin') LIMIT 1;
  IF unknown IS NOT NULL THEN
    RAISE EXCEPTION 'relaybus has no right named %', quote_literal(unknown)
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'The rights are publisher, worker and admin.';
  END IF;
  IF role = 0 OR NOT EXISTS (SELECT FROM pg_roles r WHERE r.oid = role) THEN
    RAISE EXCEPTION 'role with OID % does not exist', role::oid USING ERRCODE = 'undefined_object';
  END IF;
  IF role = (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = 'relaybus') THEN
    RAISE EXCEPTION 'role % owns relaybus''s objects in this database', quote_ident((SELECT r.rolname FROM pg_roles r WHERE r.oid = role))
      USING ERRCODE = 'invalid_parameter_value',
            DETAIL = 'An owner holds every right on what it owns; its rights are not changed.';
  END IF;
  RETURN rights;
END
$fn$;

-- grant_rights(role, rights...): gives role the named rights in this database, on top of
-- those it holds: publisher (publish), worker (claim and end attempts), admin (everything,
-- including grant_rights). Returns every right role now holds here.
--
-- Run as the owner of relaybus's objects, so an admin of this database can give rights in
-- it without holding grant options, and nothing in any other database. 22004, 22023: see
-- relaybus_internal.checked_rights; an unknown role is refused by regrole (42704). Writes
-- the ACLs of schema relaybus's objects (relaybus_internal.set_rights).
CREATE FUNCTION relaybus.grant_rights(role regrole, VARIADIC rights text[]) RETURNS text[]
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT relaybus_internal.set_rights($1, relaybus_internal.checked_rights($1, $2), '{}')
$fn$;

-- revoke_rights(role, rights...): takes the named rights from role in this database;
-- taking admin takes the publisher and worker rights it came with. Returns every right
-- role still holds here.
--
-- Privileges role has through membership in another role stay: revoke that membership.
-- Otherwise as grant_rights.
CREATE FUNCTION relaybus.revoke_rights(role regrole, VARIADIC rights text[]) RETURNS text[]
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT relaybus_internal.set_rights($1, '{}', relaybus_internal.checked_rights($1, $2))
$fn$;

-- rights(): every role holding a relaybus right in this database, with the rights it holds
-- (admin listed with the publisher and worker rights it brings).
--
-- Reads the ACLs of the functions that mark each right; rights through membership in a
-- listed role are not listed again. Touches no relaybus table.
CREATE FUNCTION relaybus.rights() RETURNS TABLE(role name, rights text[])
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT r.rolname, relaybus_internal.held_rights(r.oid)
    FROM pg_roles r
   WHERE cardinality(relaybus_internal.held_rights(r.oid)) > 0
     AND r.oid <> (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = 'relaybus')
   ORDER BY r.rolname
$fn$;

REVOKE ALL ON FUNCTION relaybus.grant_rights(regrole, text[]), relaybus.revoke_rights(regrole, text[]),
  relaybus.rights() FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA relaybus_internal FROM PUBLIC;
