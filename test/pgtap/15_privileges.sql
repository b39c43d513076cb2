-- Guarantee: least privilege. Nothing in schema relaybus (or relaybus_internal, the
-- helpers') is granted to PUBLIC; the three roles get EXECUTE on exactly the functions of
-- their job and no direct write privilege on any table; every SECURITY DEFINER function
-- pins its search_path (otherwise a caller could shadow pg_catalog objects with its own and
-- run code as the owner). 26_catalog_comments checks the helpers' schema itself. The roles
-- are then exercised for real: a LOGIN member of relaybus_worker can claim and complete but
-- cannot touch a table directly, publish, subscribe or switch the superuser-only settings.
-- A forgotten REVOKE, a GRANT to the wrong role or a missing SET search_path fails here.
SELECT rb_reset();
SELECT plan(41);

SET client_min_messages = warning;
DROP ROLE IF EXISTS rbtest_p15_nobody;
DROP ROLE IF EXISTS rbtest_p15_worker;
DROP ROLE IF EXISTS rbtest_p15_publisher;
RESET client_min_messages;
CREATE ROLE rbtest_p15_nobody NOLOGIN;
CREATE ROLE rbtest_p15_worker LOGIN IN ROLE relaybus_worker;
CREATE ROLE rbtest_p15_publisher LOGIN IN ROLE relaybus_publisher;

-- every function relaybus installs: the API (schema relaybus) and the internal helpers
CREATE TEMP VIEW rb_functions AS
  SELECT p.oid, p.proname, p.oid::regprocedure::text AS signature, p.prosecdef, p.proconfig, p.proacl
    FROM pg_proc p
   WHERE p.pronamespace IN ('relaybus'::regnamespace, 'relaybus_internal'::regnamespace);
CREATE TEMP VIEW rb_tables AS
  SELECT c.oid, c.relname, c.relacl FROM pg_class c
   WHERE c.relnamespace = 'relaybus'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S');
-- the names of relaybus functions role may (or may not) execute
CREATE FUNCTION pg_temp.executable(role name, yes boolean) RETURNS text[] LANGUAGE sql AS $$
  SELECT coalesce(array_agg(DISTINCT proname ORDER BY proname), '{}') FROM rb_functions
   WHERE has_function_privilege(role, oid, 'EXECUTE') = yes
$$;

SELECT ok((SELECT count(*) FROM rb_functions) >= 21, 'the relaybus functions are there (API and helpers)');

--------------------------------------------------------------------------------
-- PUBLIC
--------------------------------------------------------------------------------
SELECT is(has_schema_privilege('public', 'relaybus', 'USAGE'), false, 'PUBLIC has no USAGE on schema relaybus');
SELECT is(has_schema_privilege('public', 'relaybus', 'CREATE'), false, 'PUBLIC has no CREATE on schema relaybus');
SELECT is(has_schema_privilege('rbtest_p15_nobody', 'relaybus', 'USAGE'), false,
          'a role without memberships has no USAGE on schema relaybus');
SELECT is(pg_temp.executable('rbtest_p15_nobody', true), '{}',
          'a role without memberships can execute no relaybus function');
SELECT is((SELECT array_agg(signature ORDER BY signature) FROM rb_functions
            WHERE proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(proacl) a WHERE a.grantee = 0)),
          NULL, 'no relaybus function has a default ACL or an entry for PUBLIC (pg_proc.proacl)');
SELECT is((SELECT array_agg(relname ORDER BY relname) FROM rb_tables
            WHERE EXISTS (SELECT 1 FROM aclexplode(relacl) a WHERE a.grantee = 0)),
          NULL, 'no relaybus table has a privilege for PUBLIC');
SELECT is((SELECT array_agg(relname ORDER BY relname) FROM rb_tables
            WHERE has_table_privilege('rbtest_p15_nobody', oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE')),
          NULL, 'a role without memberships has no privilege on any relaybus table');
SELECT is((SELECT array_agg(nspacl::text) FROM pg_namespace n, aclexplode(n.nspacl) a
            WHERE n.nspname = 'relaybus' AND a.grantee = 0), NULL, 'schema relaybus has no ACL entry for PUBLIC');

--------------------------------------------------------------------------------
-- SECURITY DEFINER functions pin search_path (to pg_catalog, pg_temp last)
--------------------------------------------------------------------------------
SELECT ok((SELECT count(*) FROM rb_functions WHERE prosecdef) >= 17, 'the API functions are SECURITY DEFINER');
-- subscribe takes its owner's rights in C (it must know the role calling it): it is the one
-- API function that is not SECURITY DEFINER, and it pins search_path all the same.
SELECT is((SELECT prosecdef::text || ' ' || array_to_string(proconfig, ',') FROM rb_functions
            WHERE proname = 'subscribe'),
          'false search_path=pg_catalog, pg_temp', 'subscribe is SECURITY INVOKER and pins search_path');
SELECT is((SELECT array_agg(signature ORDER BY signature) FROM rb_functions
            WHERE prosecdef AND NOT EXISTS (SELECT 1 FROM unnest(proconfig) c WHERE c LIKE 'search_path=%')),
          NULL, 'every SECURITY DEFINER function has a proconfig pinning search_path');
SELECT is((SELECT array_agg(signature || ': ' || c ORDER BY signature) FROM rb_functions, unnest(proconfig) c
            WHERE prosecdef AND c LIKE 'search_path=%'
              AND regexp_replace(c, '\s', '', 'g') NOT IN ('search_path=pg_catalog,pg_temp', 'search_path=""')),
          NULL, 'the pinned search_path is pg_catalog, pg_temp (no writable schema, pg_temp last)');

--------------------------------------------------------------------------------
-- The three roles
--------------------------------------------------------------------------------
SELECT has_role('relaybus_publisher');
SELECT has_role('relaybus_worker');
SELECT has_role('relaybus_admin');
SELECT is(has_schema_privilege(r, 'relaybus', 'USAGE'), true, r || ' has USAGE on schema relaybus')
  FROM unnest(ARRAY['relaybus_publisher', 'relaybus_worker', 'relaybus_admin']) AS r;

SELECT ok(pg_temp.executable('relaybus_publisher', true) @> ARRAY['publish', 'publish_batch'],
          'publisher can execute publish and publish_batch');
SELECT is(pg_temp.executable('relaybus_publisher', true) &&
            ARRAY['claim', 'complete', 'complete_many', 'fail', 'bury', 'release', 'extend_lease', 'relinquish',
                  'subscribe', 'unsubscribe', 'requeue', 'requeue_dead', 'take_over_expired', 'purge_expired'],
          false, 'publisher cannot execute claim, complete, the other worker functions or subscribe');

SELECT ok(pg_temp.executable('relaybus_worker', true) @>
            ARRAY['claim', 'complete', 'complete_many', 'fail', 'bury', 'release', 'extend_lease', 'relinquish'],
          'worker can execute claim, complete, complete_many, fail, bury, release, extend_lease, relinquish');
SELECT is(pg_temp.executable('relaybus_worker', true) &&
            ARRAY['publish', 'publish_batch', 'subscribe', 'unsubscribe', 'requeue', 'requeue_dead', 'purge_expired'],
          false, 'worker cannot execute publish, publish_batch, subscribe or the admin functions');

-- the SQL API of the architecture brief (the internal helpers, in relaybus_internal, are
-- not part of it)
SELECT is(ARRAY(SELECT f FROM unnest(ARRAY['lane_of', 'subscribe', 'unsubscribe', 'publish', 'publish_batch',
                  'claim', 'extend_lease', 'complete', 'complete_many', 'fail', 'bury', 'release', 'relinquish',
                  'requeue', 'requeue_dead', 'take_over_expired', 'purge_expired', 'statistics',
                  'list_deliveries']) AS f
                 WHERE f <> ALL (pg_temp.executable('relaybus_admin', true))), '{}',
          'admin can execute every function of the SQL API');

SELECT is((SELECT array_agg(r || ' ' || p || ' ' || relname ORDER BY r, p, relname)
             FROM rb_tables,
                  unnest(ARRAY['relaybus_publisher', 'relaybus_worker', 'relaybus_admin']) AS r,
                  unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) AS p
            WHERE has_table_privilege(r, oid, p)),
          NULL, 'no relaybus role has INSERT, UPDATE, DELETE or TRUNCATE on a relaybus table');
SELECT is((SELECT array_agg(r || ' ' || relname ORDER BY r, relname)
             FROM rb_tables, unnest(ARRAY['relaybus_publisher', 'relaybus_worker']) AS r
            WHERE has_table_privilege(r, oid, 'SELECT')),
          NULL, 'publisher and worker cannot read the tables directly');

--------------------------------------------------------------------------------
-- Exercised: a LOGIN member of relaybus_worker
--------------------------------------------------------------------------------
SELECT relaybus.subscribe('priv_h', ARRAY['priv.t']);
SELECT relaybus.publish('priv.t', '{"n": 1}', event_id => 'priv-1');
SELECT relaybus.publish('priv.t', '{"n": 2}', event_id => 'priv-2');

SET ROLE rbtest_p15_worker;
SELECT is(current_user::text, 'rbtest_p15_worker', 'running as the worker login role');
CREATE TEMP TABLE priv_claimed AS
  SELECT lease_token, event_id FROM relaybus.claim('priv-worker', 1, '30 seconds', ARRAY['priv_h']);
SELECT is((SELECT count(*)::int FROM priv_claimed), 1, 'worker role: claim works');
-- a second claim under the same name must see its first lane as held by a live backend
-- (the liveness check reads pg_stat_activity), not as an orphan to take over
INSERT INTO priv_claimed
  SELECT lease_token, event_id FROM relaybus.claim('priv-worker', 1, '30 seconds', ARRAY['priv_h']);
SELECT is((SELECT count(DISTINCT event_id)::int FROM priv_claimed), 2, 'worker role: a second claim gets the other delivery');
SELECT is(relaybus.extend_lease('priv-worker'), 2, 'worker role: extend_lease renews both lanes');
SELECT is(relaybus.complete((SELECT lease_token FROM priv_claimed WHERE event_id = 'priv-1')), true,
          'worker role: complete works, the first lease survived the second claim');
SELECT throws_ok($$DELETE FROM relaybus.deliveries$$, '42501', NULL, 'worker role: DELETE FROM relaybus.deliveries -> 42501');
SELECT throws_ok($$UPDATE relaybus.lanes SET epoch = epoch + 1$$, '42501', NULL, 'worker role: UPDATE relaybus.lanes -> 42501');
SELECT throws_ok($$SELECT count(*) FROM relaybus.events$$, '42501', NULL, 'worker role: SELECT FROM relaybus.events -> 42501');
SELECT throws_ok($$SELECT relaybus.publish('priv.t', '{}')$$, '42501', NULL, 'worker role: publish -> 42501');
SELECT throws_ok($$SELECT relaybus.subscribe('priv_evil', ARRAY['*'])$$, '42501', NULL, 'worker role: subscribe -> 42501');
SELECT throws_ok($$SET relaybus.completion_history = on$$, '42501', NULL,
                 'worker role: cannot switch relaybus.completion_history');
RESET ROLE;

SET ROLE rbtest_p15_publisher;
SELECT is(relaybus.publish('priv.t', '{"n": 3}', event_id => 'priv-3'), 'priv-3', 'publisher role: publish works');
SELECT throws_ok($$SELECT * FROM relaybus.claim('priv-worker-2')$$, '42501', NULL, 'publisher role: claim -> 42501');
RESET ROLE;

SET ROLE rbtest_p15_nobody;
SELECT throws_ok($$SELECT relaybus.lane_of('x')$$, '42501', NULL, 'role without memberships: lane_of -> 42501');
RESET ROLE;

SELECT is((SELECT array_agg(event_id || '/' || attempts ORDER BY event_id) FROM relaybus.deliveries),
          ARRAY['priv-2/0', 'priv-3/0'],
          'only the worker''s completion and the publisher''s publish changed the deliveries');

DROP TABLE priv_claimed;
DROP ROLE rbtest_p15_nobody;
DROP ROLE rbtest_p15_worker;
DROP ROLE rbtest_p15_publisher;

SELECT * FROM finish();
