--------------------------------------------------------------------------------
-- The schema must be safe to install into. relaybus.control names schema relaybus, and
-- CREATE EXTENSION (or ALTER EXTENSION UPDATE) uses a schema of that name as it finds it.
-- Whoever owns it or may create in it could plant an overload of an API function that
-- wins over relaybus's for untyped arguments (relaybus.publish('t', '{}') would then run
-- the planted one, as its owner if it is SECURITY DEFINER, with the caller's event), or
-- drop the schema and the extension with it. So before anything is created: the schema
-- belongs to a superuser, no other role (nor PUBLIC) may create in it, and nothing in it
-- belongs to another role. A schema CREATE EXTENSION made itself passes all three.
--------------------------------------------------------------------------------
DO $guard$
DECLARE
  owner name;
  creators text;
  planted text;
BEGIN
  SELECT pg_catalog.quote_ident(r.rolname) INTO owner
    FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles r ON r.oid = n.nspowner
   WHERE n.nspname = 'relaybus' AND NOT r.rolsuper;
  IF owner IS NOT NULL THEN
    RAISE EXCEPTION 'relaybus: schema relaybus is owned by role %, which is not a superuser', owner
      USING ERRCODE = 'insufficient_privilege',
            DETAIL = 'Its owner could replace relaybus''s functions or drop the extension. Nothing was changed.',
            HINT = 'Check what the schema holds, then ALTER SCHEMA relaybus OWNER TO a superuser, '
                   'or drop it and let CREATE EXTENSION create it.';
  END IF;

  SELECT pg_catalog.string_agg(DISTINCT coalesce(pg_catalog.quote_ident(r.rolname), 'PUBLIC'), ', ') INTO creators
    FROM pg_catalog.pg_namespace n
   CROSS JOIN LATERAL pg_catalog.aclexplode(n.nspacl) a
    LEFT JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
   WHERE n.nspname = 'relaybus' AND a.privilege_type = 'CREATE'
     AND a.grantee <> n.nspowner AND NOT coalesce(r.rolsuper, false);
  IF creators IS NOT NULL THEN
    RAISE EXCEPTION 'relaybus: roles other than superusers may create objects in schema relaybus: %', creators
      USING ERRCODE = 'insufficient_privilege',
            DETAIL = 'They could replace relaybus''s functions. Nothing was changed.',
            HINT = 'REVOKE CREATE ON SCHEMA relaybus FROM those roles, and check what they created there.';
  END IF;

  SELECT pg_catalog.string_agg(x.what, '; ' ORDER BY x.what) INTO planted
    FROM (SELECT pg_catalog.format('function %s (owner %s)', p.oid::pg_catalog.regprocedure, pg_catalog.quote_ident(r.rolname)) AS what
            FROM pg_catalog.pg_proc p
            JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
            JOIN pg_catalog.pg_roles r ON r.oid = p.proowner
           WHERE n.nspname = 'relaybus' AND NOT r.rolsuper
          UNION ALL
          SELECT pg_catalog.format('operator %s (owner %s)', o.oid::pg_catalog.regoperator, pg_catalog.quote_ident(r.rolname))
            FROM pg_catalog.pg_operator o
            JOIN pg_catalog.pg_namespace n ON n.oid = o.oprnamespace
            JOIN pg_catalog.pg_roles r ON r.oid = o.oprowner
           WHERE n.nspname = 'relaybus' AND NOT r.rolsuper
          UNION ALL
          SELECT pg_catalog.format('relation %s (owner %s)', c.oid::pg_catalog.regclass, pg_catalog.quote_ident(r.rolname))
            FROM pg_catalog.pg_class c
            JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
            JOIN pg_catalog.pg_roles r ON r.oid = c.relowner
           WHERE n.nspname = 'relaybus' AND NOT r.rolsuper
          UNION ALL
          SELECT pg_catalog.format('type %s (owner %s)', t.oid::pg_catalog.regtype, pg_catalog.quote_ident(r.rolname))
            FROM pg_catalog.pg_type t
            JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
            JOIN pg_catalog.pg_roles r ON r.oid = t.typowner
           WHERE n.nspname = 'relaybus' AND NOT r.rolsuper AND t.typrelid = 0) x;
  IF planted IS NOT NULL THEN
    RAISE EXCEPTION 'relaybus: schema relaybus holds objects of roles that are not superusers'
      USING ERRCODE = 'insufficient_privilege',
            DETAIL = 'Found: ' || planted || '. They could stand in for relaybus''s own. Nothing was changed.',
            HINT = 'Drop them (or move them to another schema), then run the command again.';
  END IF;
END
$guard$;
