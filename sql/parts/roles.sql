--------------------------------------------------------------------------------
-- Roles. Cluster-wide, so they are created only if missing and survive DROP EXTENSION.
-- They get EXECUTE on the functions of their job; no role gets table privileges: every
-- function is SECURITY DEFINER with a pinned search_path.
--------------------------------------------------------------------------------
DO $roles$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'relaybus_publisher') THEN
    CREATE ROLE relaybus_publisher NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'relaybus_worker') THEN
    CREATE ROLE relaybus_worker NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'relaybus_admin') THEN
    CREATE ROLE relaybus_admin NOLOGIN;
  END IF;
END
$roles$;
