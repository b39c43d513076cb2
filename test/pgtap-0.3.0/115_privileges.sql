-- Guarantee: least privilege (test/pgtap/15_privileges.sql on 0.3.0). Nothing in schema
-- relaybus (or relaybus_internal, the helpers') is granted to PUBLIC; the three rights
-- (grant_rights) give EXECUTE on exactly the functions of their job and no direct write
-- privilege on any table; every SECURITY DEFINER function pins its search_path (otherwise
-- a caller could shadow pg_catalog objects with its own and run code as the owner).
-- 26_catalog_comments checks the helpers' schema itself. The rights are then exercised for
-- real: a LOGIN role with the worker right can claim and complete but cannot touch a table
-- directly, publish, subscribe or switch the superuser-only settings. A forgotten REVOKE, a
-- GRANT to the wrong role or a missing SET search_path fails here.
--
-- How 0.3.0 stores it: failures, retries and dead letters are rows of relaybus.exceptions
-- and a lane's progress rows of relaybus.lane_progress (written by the same functions, so no
-- right writes them directly either), and a completed delivery is finished, not deleted:
-- what is left is read with list_deliveries.
SELECT rb_reset();
SELECT plan(73);

SET client_min_messages = warning;
DO $$ DECLARE r text; BEGIN
  FOREACH r IN ARRAY ARRAY['rbtest_p15_nobody', 'rbtest_p15_worker', 'rbtest_p15_publisher', 'rbtest_p15_admin'] LOOP
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN
      EXECUTE format('DROP OWNED BY %I', r);
      EXECUTE format('DROP ROLE %I', r);
    END IF;
  END LOOP;
END $$;
RESET client_min_messages;
CREATE ROLE rbtest_p15_nobody NOLOGIN;
CREATE ROLE rbtest_p15_worker LOGIN;
CREATE ROLE rbtest_p15_publisher LOGIN;
CREATE ROLE rbtest_p15_admin LOGIN;

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
-- The three rights, given in this database by name (grant_rights)
--------------------------------------------------------------------------------
SELECT is(relaybus.grant_rights('rbtest_p15_publisher', 'publisher'), '{publisher}', 'grant_rights gives publisher');
SELECT is(relaybus.grant_rights('rbtest_p15_worker', 'worker'), '{worker}', 'grant_rights gives worker');
SELECT is(relaybus.grant_rights('rbtest_p15_admin', 'admin'), '{admin,publisher,worker}',
          'grant_rights gives admin, which brings publisher and worker');
SELECT is(has_schema_privilege(r, 'relaybus', 'USAGE'), true, r || ' has USAGE on schema relaybus')
  FROM unnest(ARRAY['rbtest_p15_publisher', 'rbtest_p15_worker', 'rbtest_p15_admin']) AS r;
SELECT is((SELECT array_agg(role || '=' || array_to_string(rights, '+') ORDER BY role) FROM relaybus.rights()
            WHERE role LIKE 'rbtest_p15%'),
          ARRAY['rbtest_p15_admin=admin+publisher+worker', 'rbtest_p15_publisher=publisher', 'rbtest_p15_worker=worker'],
          'rights() lists who holds what in this database');
-- 0.2.0's cluster-wide roles, where another database (or an update) made them, hold nothing here
SELECT is((SELECT array_agg(r.rolname ORDER BY r.rolname) FROM pg_roles r
            WHERE r.rolname IN ('relaybus_publisher', 'relaybus_worker', 'relaybus_admin')
              AND (has_schema_privilege(r.oid, 'relaybus', 'USAGE')
                   OR EXISTS (SELECT FROM rb_functions f WHERE has_function_privilege(r.oid, f.oid, 'EXECUTE')))),
          NULL, 'the cluster-wide roles of 0.2.0 hold no right in a 0.2.1 database');

SELECT ok(pg_temp.executable('rbtest_p15_publisher', true) @> ARRAY['publish', 'publish_batch'],
          'publisher can execute publish and publish_batch');
SELECT is(pg_temp.executable('rbtest_p15_publisher', true) &&
            ARRAY['claim', 'complete', 'complete_many', 'fail', 'bury', 'release', 'extend_lease', 'relinquish',
                  'subscribe', 'unsubscribe', 'requeue', 'requeue_dead', 'take_over_expired', 'purge_expired',
                  'grant_rights', 'revoke_rights', 'rights'],
          false, 'publisher cannot execute claim, complete, the other worker functions, subscribe or grant_rights');

SELECT ok(pg_temp.executable('rbtest_p15_worker', true) @>
            ARRAY['claim', 'complete', 'complete_many', 'fail', 'bury', 'release', 'extend_lease', 'relinquish'],
          'worker can execute claim, complete, complete_many, fail, bury, release, extend_lease, relinquish');
SELECT is(pg_temp.executable('rbtest_p15_worker', true) &&
            ARRAY['publish', 'publish_batch', 'subscribe', 'unsubscribe', 'requeue', 'requeue_dead', 'purge_expired',
                  'grant_rights', 'revoke_rights', 'rights'],
          false, 'worker cannot execute publish, publish_batch, subscribe or the admin functions');

-- the SQL API of the architecture brief (the internal helpers, in relaybus_internal, are
-- not part of it)
SELECT is(ARRAY(SELECT f FROM unnest(ARRAY['lane_of', 'subscribe', 'unsubscribe', 'publish', 'publish_batch',
                  'claim', 'extend_lease', 'complete', 'complete_many', 'fail', 'bury', 'release', 'relinquish',
                  'requeue', 'requeue_dead', 'take_over_expired', 'purge_expired', 'statistics',
                  'list_deliveries', 'grant_rights', 'revoke_rights', 'rights']) AS f
                 WHERE f <> ALL (pg_temp.executable('rbtest_p15_admin', true))), '{}',
          'admin can execute every function of the SQL API');
SELECT is(pg_temp.executable('rbtest_p15_admin', true) && ARRAY(SELECT proname::text FROM rb_functions
            WHERE signature LIKE 'relaybus_internal.%'), false,
          'admin can execute no internal helper');

SELECT is((SELECT array_agg(r || ' ' || p || ' ' || relname ORDER BY r, p, relname)
             FROM rb_tables,
                  unnest(ARRAY['rbtest_p15_publisher', 'rbtest_p15_worker', 'rbtest_p15_admin']) AS r,
                  unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) AS p
            WHERE has_table_privilege(r, oid, p)),
          NULL, 'no right gives INSERT, UPDATE, DELETE or TRUNCATE on a relaybus table');
SELECT is((SELECT array_agg(r || ' ' || relname ORDER BY r, relname)
             FROM rb_tables, unnest(ARRAY['rbtest_p15_publisher', 'rbtest_p15_worker']) AS r
            WHERE has_table_privilege(r, oid, 'SELECT')),
          NULL, 'publisher and worker cannot read the tables directly');

-- revoke_rights takes exactly what it names; admin takes its publisher and worker along
SELECT is(relaybus.grant_rights('rbtest_p15_nobody', 'publisher', 'worker'), '{publisher,worker}',
          'grant_rights gives several rights at once');
SELECT is(relaybus.revoke_rights('rbtest_p15_nobody', 'publisher'), '{worker}', 'revoke_rights takes one of them');
SELECT is(pg_temp.executable('rbtest_p15_nobody', true),
          ARRAY['bury', 'claim', 'complete', 'complete_many', 'extend_lease', 'fail', 'lane_of', 'release',
                'relinquish'],
          'what publisher and worker share (lane_of, USAGE) stays with the right still held');
SELECT is(has_schema_privilege('rbtest_p15_nobody', 'relaybus', 'USAGE'), true, 'and so does USAGE on the schema');
SELECT is(relaybus.grant_rights('rbtest_p15_nobody', 'admin'), '{admin,publisher,worker}', 'admin on top of worker');
SELECT is(relaybus.revoke_rights('rbtest_p15_nobody', 'admin'), '{}', 'revoking admin takes publisher and worker along');
SELECT is(pg_temp.executable('rbtest_p15_nobody', true), '{}', 'and leaves the role nothing to execute');
SELECT is(has_schema_privilege('rbtest_p15_nobody', 'relaybus', 'USAGE'), false, 'nor USAGE on the schema');
SELECT is((SELECT count(*)::int FROM rb_tables WHERE has_table_privilege('rbtest_p15_nobody', oid, 'SELECT')), 0,
          'nor SELECT on any table');

-- two transactions giving one role different rights at once: both stick (what the role
-- holds is read under the lock, so the second does not undo the first)
SELECT rb_connect('p15_a');
SELECT rb_connect('p15_b');
SELECT p AS p15_b_pid FROM dblink('p15_b', 'SELECT pg_backend_pid()') AS t(p int) \gset
SELECT dblink_exec('p15_a', 'BEGIN');
SELECT is((SELECT r FROM dblink('p15_a', $$SELECT relaybus.grant_rights('rbtest_p15_nobody', 'publisher')$$)
             AS t(r text[])), '{publisher}', 'concurrent grants: A gives publisher, not committed yet');
SELECT dblink_send_query('p15_b', $$SELECT relaybus.grant_rights('rbtest_p15_nobody', 'worker')$$);
SELECT ok(rb_waits_for_lock(:p15_b_pid), 'B''s grant_rights waits for A''s');
SELECT dblink_exec('p15_a', 'COMMIT');
SELECT is((SELECT r FROM dblink_get_result('p15_b') AS t(r text[])), '{publisher,worker}',
          'B gives worker on top of what A gave');
SELECT is((SELECT count(*)::int FROM dblink_get_result('p15_b') AS t(r text[])), 0, '(no further result)');
SELECT is((SELECT rights FROM relaybus.rights() WHERE role = 'rbtest_p15_nobody'), '{publisher,worker}',
          'the role holds both');
SELECT is(relaybus.revoke_rights('rbtest_p15_nobody', 'admin'), '{}', 'and revoking admin takes both');
SELECT dblink_disconnect('p15_a');
SELECT dblink_disconnect('p15_b');

-- bad input: a specific SQLSTATE, nothing changed
SELECT throws_ok($$SELECT relaybus.grant_rights('rbtest_p15_nobody', 'superuser')$$, '22023',
                 'relaybus has no right named ''superuser''', 'an unknown right -> 22023');
SELECT throws_ok($$SELECT relaybus.grant_rights('rbtest_p15_nobody', VARIADIC '{}'::text[])$$, '22023', NULL,
                 'no right -> 22023');
SELECT throws_ok($$SELECT relaybus.grant_rights('rbtest_p15_nobody', NULL)$$, '22004', NULL, 'a NULL right -> 22004');
SELECT throws_ok($$SELECT relaybus.grant_rights(NULL, 'worker')$$, '22004', NULL, 'a NULL role -> 22004');
SELECT throws_ok($$SELECT relaybus.grant_rights('rbtest_p15_no_such_role', 'worker')$$, '42704', NULL,
                 'an unknown role -> 42704');
SELECT throws_ok($$SELECT relaybus.grant_rights(0::oid::regrole, 'worker')$$, '42704', NULL, 'PUBLIC -> 42704');
SELECT throws_ok($$SELECT relaybus.revoke_rights(current_user::regrole, 'admin')$$, '22023', NULL,
                 'the owner of relaybus''s objects -> 22023');
SELECT is(pg_temp.executable('rbtest_p15_nobody', true), '{}', 'the refused calls gave nothing');

-- an admin of this database gives and takes rights here without being a superuser
SET ROLE rbtest_p15_admin;
SELECT is(relaybus.grant_rights('rbtest_p15_nobody', 'worker'), '{worker}', 'admin role: grant_rights works');
SELECT is(relaybus.revoke_rights('rbtest_p15_nobody', 'worker'), '{}', 'admin role: revoke_rights works');
RESET ROLE;
SET ROLE rbtest_p15_worker;
SELECT throws_ok($$SELECT relaybus.grant_rights('rbtest_p15_worker', 'admin')$$, '42501', NULL,
                 'worker role: grant_rights (to itself) -> 42501');
SELECT throws_ok($$SELECT * FROM relaybus.rights()$$, '42501', NULL, 'worker role: rights() -> 42501');
RESET ROLE;
--------------------------------------------------------------------------------
-- Exercised: a LOGIN role with the worker right
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
SELECT throws_ok($$DELETE FROM relaybus.exceptions$$, '42501', NULL, 'worker role: DELETE FROM relaybus.exceptions -> 42501');
SELECT throws_ok($$UPDATE relaybus.lanes SET epoch = epoch + 1$$, '42501', NULL, 'worker role: UPDATE relaybus.lanes -> 42501');
-- 0.3.0: a lane's progress is its newest lane_progress row; a row of the worker's would move a cursor.
SELECT throws_ok($$INSERT INTO relaybus.lane_progress (handler, lane, seq, acked_upto, done, in_flight, retrying)
                   VALUES ('priv_h', 0, 1000, 1000000, '{}', '{}', '{}')$$, '42501', NULL,
                 'worker role: INSERT INTO relaybus.lane_progress -> 42501');
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

SELECT is((SELECT array_agg(event_id || '/' || attempts ORDER BY event_id) FROM relaybus.list_deliveries()),
          ARRAY['priv-2/0', 'priv-3/0'],
          'only the worker''s completion and the publisher''s publish changed the deliveries');

DROP TABLE priv_claimed;
DROP OWNED BY rbtest_p15_nobody, rbtest_p15_worker, rbtest_p15_publisher, rbtest_p15_admin;
DROP ROLE rbtest_p15_nobody, rbtest_p15_worker, rbtest_p15_publisher, rbtest_p15_admin;

SELECT * FROM finish();
