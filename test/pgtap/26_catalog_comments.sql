-- Guarantee: the catalog describes and delimits the API. Every object of the extension has
-- a description (COMMENT ON, made by scripts/build-sql from the first paragraph of the
-- header above its CREATE in sql/parts, placeholders expanded); the internal helpers live
-- in schema relaybus_internal, which no role but the owner can use, and no role can execute
-- them; schema relaybus holds exactly the functions docs/sql-api.md documents.
-- A CREATE whose COMMENT was dropped, a helper put back in schema relaybus or granted, or a
-- function added without its section in docs/sql-api.md (or a section without its
-- function) fails here.
-- Reads docs/sql-api.md through psql: run pg_prove from the repository root, as
-- scripts/run-tests does.
\set api_doc `cat docs/sql-api.md 2>/dev/null`
SELECT rb_reset();
SELECT plan(34);

SET client_min_messages = warning;
DROP ROLE IF EXISTS rbtest_p26_admin;
DROP ROLE IF EXISTS rbtest_p26_worker;
RESET client_min_messages;
CREATE ROLE rbtest_p26_admin LOGIN;
SELECT FROM relaybus.grant_rights('rbtest_p26_admin', 'admin');
CREATE ROLE rbtest_p26_worker LOGIN;
SELECT FROM relaybus.grant_rights('rbtest_p26_worker', 'worker');

-- the extension's members (pg_depend deptype 'e') and their descriptions
CREATE TEMP VIEW rb_members AS
  SELECT d.classid, d.objid, pg_describe_object(d.classid, d.objid, 0) AS object,
         obj_description(d.objid, d.classid::regclass::name) AS description
    FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
   WHERE e.extname = 'relaybus' AND d.deptype = 'e';
-- a function's description, by signature
CREATE FUNCTION pg_temp.description(fn regprocedure) RETURNS text LANGUAGE sql AS $$
  SELECT obj_description(fn, 'pg_proc')
$$;
CREATE TEMP VIEW rb_helpers AS
  SELECT p.oid, p.oid::regprocedure::text AS signature, p.proacl, p.proconfig FROM pg_proc p
   WHERE p.pronamespace = 'relaybus_internal'::regnamespace;
-- the function sections of docs/sql-api.md: "## name", a lowercase name alone on its line
CREATE TEMP TABLE rb_documented AS
  SELECT DISTINCT m[1] AS name FROM regexp_matches(:'api_doc', '^## ([a-z_]+)$', 'gn') AS m;
CREATE TEMP VIEW rb_api AS
  SELECT p.proname::text AS name FROM pg_proc p WHERE p.pronamespace = 'relaybus'::regnamespace;

--------------------------------------------------------------------------------
-- Every object has a description
--------------------------------------------------------------------------------
SELECT ok((SELECT count(*) FROM rb_members WHERE classid = 'pg_proc'::regclass) >= 21
          AND (SELECT count(*) FROM rb_members WHERE classid = 'pg_class'::regclass) >= 6,
          'the extension''s members are there (at least 21 functions and 6 tables)');
SELECT is((SELECT array_agg(object ORDER BY object) FROM rb_members
            WHERE coalesce(btrim(description), '') = ''),
          NULL, 'every function, table, view, sequence, type and schema of the extension has a description');
SELECT is((SELECT array_agg(i.indexrelid::regclass::text ORDER BY 1)
             FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
            WHERE c.relnamespace = 'relaybus'::regnamespace
              AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
              AND coalesce(btrim(obj_description(i.indexrelid, 'pg_class')), '') = ''),
          NULL, 'every index relaybus creates (beyond its keys) has a description');
SELECT is((SELECT array_agg(object ORDER BY object) FROM rb_members
            WHERE description ~ '@[A-Z_]+@|--|\n'),
          NULL, 'no description holds a placeholder, a comment marker or a line break');
SELECT is((SELECT array_agg(object ORDER BY object) FROM rb_members WHERE length(description) > 500),
          NULL, 'every description is a few sentences (at most 500 characters), for \df+ and \dt+');

--------------------------------------------------------------------------------
-- A description is its header's first paragraph: it starts with the header's first
-- sentence (after "name: "), constants expanded, and stops before the second paragraph
--------------------------------------------------------------------------------
CREATE FUNCTION pg_temp.starts(description text, first_sentence text) RETURNS text LANGUAGE sql AS $$
  SELECT left(description, length(first_sentence))
$$;
SELECT is(pg_temp.starts(pg_temp.description('relaybus.claim(text,integer,interval,text[],text)'),
            'leases lanes to worker and returns up to batch_size due deliveries of handlers (default: every handler without sql_function), respecting per-key order.'),
          'leases lanes to worker and returns up to batch_size due deliveries of handlers (default: every handler without sql_function), respecting per-key order.',
          'claim: the header''s first sentence');
SELECT ok(pg_temp.description('relaybus.claim(text,integer,interval,text[],text)') NOT LIKE '%Locks:%'
          AND pg_temp.description('relaybus.claim(text,integer,interval,text[],text)') LIKE '%at most 1 day (22023 otherwise).',
          'claim: the first paragraph only, its last sentence with the lease bound expanded');
SELECT is(pg_temp.starts(pg_temp.description('relaybus.publish(text,jsonb,text,text,text[],timestamptz,jsonb)'),
            'in the caller''s transaction, inserts the event and one delivery per handler (the subscribers of type, or handlers).'),
          'in the caller''s transaction, inserts the event and one delivery per handler (the subscribers of type, or handlers).',
          'publish: the header''s first sentence');
SELECT is(pg_temp.starts(pg_temp.description('relaybus.complete(text)'),
            'deletes the delivery if its lane has not changed hands since the claim.'),
          'deletes the delivery if its lane has not changed hands since the claim.',
          'complete: the header''s first sentence');
SELECT is(pg_temp.starts(pg_temp.description('relaybus.subscribe(text,text[],integer,interval,interval,regprocedure,interval)'),
            'registers or updates handler for event_types (''*'' = every type) with its retry policy and creates its 256 lanes;'),
          'registers or updates handler for event_types (''*'' = every type) with its retry policy and creates its 256 lanes;',
          'subscribe: the header''s first sentence, the lane count expanded');
SELECT ok(pg_temp.description('relaybus.subscribe(text,text[],integer,interval,interval,regprocedure,interval)')
            LIKE '%sql_timeout (1 ms..1 hour; NULL: relaybus.sql_handler_timeout)%0..365 days%',
          'subscribe: the sql_timeout and backoff bounds are expanded from src/core');
SELECT is(pg_temp.starts(pg_temp.description('relaybus.lane_of(text)'),
            'the lane (0..255) a delivery with that ordering key, or with that event id when it has no key, lives in'),
          'the lane (0..255) a delivery with that ordering key, or with that event id when it has no key, lives in',
          'lane_of: the header''s first sentence');
SELECT is(pg_temp.starts(obj_description('relaybus.lanes'::regclass, 'pg_class'), 'Lane leases: 256 per handler, made by subscribe;'),
          'Lane leases: 256 per handler, made by subscribe;', 'table lanes: the header''s first sentence');
SELECT is(pg_temp.starts(pg_temp.description('relaybus_internal.create_lanes(text)'),
            'creates the 256 lanes of handler that do not exist yet'),
          'creates the 256 lanes of handler that do not exist yet', 'create_lanes: the header''s first sentence');

--------------------------------------------------------------------------------
-- The internal helpers: in relaybus_internal, usable by no role
--------------------------------------------------------------------------------
SELECT is((SELECT array_agg(name ORDER BY name) FROM rb_api
            WHERE name IN ('create_lanes', 'list_deliveries_impl', 'delivery_counts', 'set_paused',
                           'subscriptions_changed', 'right_privileges', 'held_rights', 'set_rights',
                           'checked_rights')
               OR name LIKE '\_%'),
          NULL, 'no internal helper is in schema relaybus');
SELECT is((SELECT array_agg(signature ORDER BY signature) FROM rb_helpers),
          ARRAY['relaybus_internal.checked_rights(regrole,text[])', 'relaybus_internal.create_lanes(text)',
                'relaybus_internal.delivery_counts()', 'relaybus_internal.held_rights(oid)',
                'relaybus_internal.list_deliveries_impl(text,text,integer)',
                'relaybus_internal.right_privileges(text)', 'relaybus_internal.set_paused(text,boolean)',
                'relaybus_internal.set_rights(regrole,text[],text[])', 'relaybus_internal.subscriptions_changed()'],
          'the internal helpers are in schema relaybus_internal');
SELECT ok(EXISTS (SELECT 1 FROM rb_members WHERE classid = 'pg_namespace'::regclass
                    AND objid = 'relaybus_internal'::regnamespace),
          'relaybus_internal belongs to the extension (DROP EXTENSION drops it)');
SELECT is((SELECT nspowner FROM pg_namespace WHERE nspname = 'relaybus_internal'),
          (SELECT nspowner FROM pg_namespace WHERE nspname = 'relaybus'),
          'relaybus_internal has the owner of schema relaybus (the role that ran CREATE EXTENSION)');
SELECT is((SELECT array_agg(r || ' ' || p ORDER BY r, p)
             FROM unnest(ARRAY['public', 'rbtest_p26_worker', 'rbtest_p26_admin']) AS r,
                  unnest(ARRAY['USAGE', 'CREATE']) AS p
            WHERE has_schema_privilege(r, 'relaybus_internal', p)),
          NULL, 'PUBLIC, a worker and an admin have neither USAGE nor CREATE on relaybus_internal');
SELECT is((SELECT array_agg(signature ORDER BY signature) FROM rb_helpers
            WHERE proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(proacl) a WHERE a.grantee = 0)),
          NULL, 'no helper has a default ACL or an entry for PUBLIC');
-- Before the move, no role had EXECUTE on either helper (they were never granted); so none has it now.
SELECT is((SELECT array_agg(r || ' ' || signature ORDER BY r, signature)
             FROM rb_helpers, unnest(ARRAY['rbtest_p26_worker', 'rbtest_p26_admin']) AS r
            WHERE has_function_privilege(r, oid, 'EXECUTE')),
          NULL, 'neither a worker nor an admin can execute a helper');
SELECT is((SELECT array_agg(signature ORDER BY signature) FROM rb_helpers
            WHERE NOT EXISTS (SELECT 1 FROM unnest(proconfig) c
                               WHERE regexp_replace(c, '\s', '', 'g') = 'search_path=pg_catalog,pg_temp')),
          NULL, 'every helper pins search_path to pg_catalog, pg_temp');
-- A SQL or PL/pgSQL function of the API that names a helper names it with its schema: its
-- own search_path (pg_catalog, pg_temp) would not find it otherwise, and nothing a caller
-- creates can stand in for it.
SELECT is((SELECT array_agg(p.oid::regprocedure::text ORDER BY 1) FROM pg_proc p
            WHERE p.pronamespace = 'relaybus'::regnamespace
              AND p.prosrc ~ '(?<!relaybus_internal\.)\m(create_lanes|list_deliveries_impl|delivery_counts|set_paused|subscriptions_changed|right_privileges|held_rights|set_rights|checked_rights)\M\s*\('),
          NULL, 'the API calls the helpers schema-qualified');
SELECT ok((SELECT prosrc FROM pg_proc WHERE oid = 'relaybus.list_deliveries(text,text,integer)'::regprocedure)
            LIKE '%relaybus_internal.list_deliveries_impl(%',
          'list_deliveries calls relaybus_internal.list_deliveries_impl');

-- Exercised: a LOGIN admin that is not a superuser reaches the helpers only through the API.
SET ROLE rbtest_p26_admin;
SELECT lives_ok($$SELECT relaybus.subscribe('h26', ARRAY['t26'])$$,
                'admin role: subscribe works (it runs relaybus_internal.create_lanes as the owner)');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM relaybus.lanes WHERE handler = 'h26'), 256,
          'and the handler got its 256 lanes');
SELECT relaybus.publish('t26', '{}', event_id => 'e26');
SET ROLE rbtest_p26_admin;
SELECT is((SELECT array_agg(event_id || ' ' || status) FROM relaybus.list_deliveries(handler => 'h26')),
          ARRAY['e26 pending'], 'admin role: list_deliveries works (it runs list_deliveries_impl as the owner)');
SELECT throws_ok($$SELECT relaybus_internal.create_lanes('h26-evil')$$, '42501', NULL,
                 'admin role: calling relaybus_internal.create_lanes directly -> 42501');
SELECT throws_ok($$SELECT * FROM relaybus_internal.list_deliveries_impl(NULL, NULL, 10)$$, '42501', NULL,
                 'admin role: calling relaybus_internal.list_deliveries_impl directly -> 42501');
RESET ROLE;
SET ROLE rbtest_p26_worker;
SELECT throws_ok($$SELECT relaybus_internal.create_lanes('h26-evil')$$, '42501', NULL,
                 'worker role: calling relaybus_internal.create_lanes directly -> 42501');
RESET ROLE;

--------------------------------------------------------------------------------
-- Schema relaybus is exactly the documented API
--------------------------------------------------------------------------------
SELECT ok((SELECT count(*) FROM rb_documented) >= 19,
          'docs/sql-api.md was read and has its function sections (run pg_prove from the repository root)');
SELECT is((SELECT array_agg(DISTINCT name ORDER BY name) FROM rb_api WHERE name NOT IN (SELECT name FROM rb_documented)),
          NULL, 'every function of schema relaybus has its section in docs/sql-api.md');
-- Sections that say "0.3.0 only." document functions 0.2.1 does not have.
SELECT is((SELECT array_agg(name ORDER BY name) FROM rb_documented
            WHERE name NOT IN (SELECT name FROM rb_api)
              AND name NOT IN (SELECT (regexp_match(s, '^([a-z_]+)\n'))[1]
                                 FROM regexp_split_to_table(:'api_doc', '\n## ') s
                                WHERE s ~ '0\.3\.0 only\.')),
          NULL, 'every function docs/sql-api.md documents is in schema relaybus (but those of 0.3.0 only)');
SELECT is((SELECT array_agg(name ORDER BY name) FROM (SELECT name FROM rb_api GROUP BY name HAVING count(*) > 1) o),
          NULL, 'each function of the API has one signature (no overloads the docs do not show)');

DROP OWNED BY rbtest_p26_admin;
DROP ROLE rbtest_p26_admin;
DROP OWNED BY rbtest_p26_worker;
DROP ROLE rbtest_p26_worker;

SELECT * FROM finish();
