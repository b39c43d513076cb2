-- Guarantees: 0.3.0 against hostile roles. Nothing of 0.3.0 (its new table exceptions, its
-- helpers unfinished and finish_position included) is granted to PUBLIC; every SECURITY
-- DEFINER function, and every helper, pins search_path; only an admin reads the tables, no
-- right writes, locks, alters or adds a trigger to them, and none reaches relaybus_internal.
-- The deliveries a transaction staged are written at its commit as publish's owner, under
-- search_path pg_catalog, pg_temp, whoever the current role is by then (SET ROLE after
-- publishing, a role without any relaybus right publishing through a publisher's SECURITY
-- DEFINER function, in a backend that never committed a publish before), and nothing a
-- caller plants (operators, functions and temporary tables ahead of pg_catalog, planner
-- costs that make an index look dearer than a full scan) runs inside that write or turns it
-- into a scan of the table while the lane locks are held. A commit that fails leaves
-- nothing, and nothing it staged reaches a later commit. Forged r3 tokens (other epochs,
-- positions, claims and handlers, numbers at and past their bounds, a length counted in
-- characters) change nothing; hostile names (quotes, dots, backslashes, bidirectional and
-- zero-width characters, 1000 bytes) work end to end, 1001 bytes are refused with 22023 and
-- nothing written. The update from 0.2.1 (admins' SELECT, a non-superuser, a planted schema)
-- is test/integration/security_030.sh.
--
-- Roles made here are named relaybus_sec030_* and dropped at the end. Remote sessions
-- (dblink) log in as those roles, each a fresh backend, so that the first commit of a backend
-- (where the statement that writes staged deliveries is prepared) happens under the hostile
-- conditions.
SELECT rb_reset();
SELECT plan(86);

SET client_min_messages = warning;
DO $$ DECLARE r text; BEGIN
  FOREACH r IN ARRAY ARRAY['relaybus_sec030_pub', 'relaybus_sec030_wrk', 'relaybus_sec030_adm',
                           'relaybus_sec030_none', 'relaybus_sec030_app'] LOOP
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN
      EXECUTE format('DROP OWNED BY %I', r);
      EXECUTE format('DROP ROLE %I', r);
    END IF;
  END LOOP;
END $$;
DROP TABLE IF EXISTS public.rb_sec030_seen;
DROP FUNCTION IF EXISTS public.rb_sec030_seen() CASCADE;
DROP FUNCTION IF EXISTS public.rb_sec030_republish() CASCADE;
RESET client_min_messages;
CREATE ROLE relaybus_sec030_pub LOGIN;
CREATE ROLE relaybus_sec030_wrk LOGIN;
CREATE ROLE relaybus_sec030_adm LOGIN;
CREATE ROLE relaybus_sec030_none LOGIN;
CREATE ROLE relaybus_sec030_app LOGIN;
SELECT is(relaybus.grant_rights('relaybus_sec030_pub', 'publisher'), '{publisher}', 'a publisher');
SELECT is(relaybus.grant_rights('relaybus_sec030_wrk', 'worker'), '{worker}', 'a worker');
SELECT is(relaybus.grant_rights('relaybus_sec030_adm', 'admin'), '{admin,publisher,worker}', 'an admin');
-- The publisher may act as the role without rights (SET ROLE after publishing).
GRANT relaybus_sec030_none TO relaybus_sec030_pub;

CREATE TEMP VIEW rb_functions AS
  SELECT p.oid, p.proname, p.oid::regprocedure::text AS signature, p.prosecdef, p.proconfig, p.proacl,
         p.pronamespace = 'relaybus_internal'::regnamespace AS internal
    FROM pg_proc p
   WHERE p.pronamespace IN ('relaybus'::regnamespace, 'relaybus_internal'::regnamespace);
CREATE TEMP VIEW rb_tables AS
  SELECT c.oid, c.relname, c.relacl FROM pg_class c
   WHERE c.relnamespace IN ('relaybus'::regnamespace, 'relaybus_internal'::regnamespace)
     AND c.relkind IN ('r', 'p', 'v', 'm', 'S');
CREATE TEMP TABLE rb_roles (r name PRIMARY KEY);
INSERT INTO rb_roles VALUES ('relaybus_sec030_pub'), ('relaybus_sec030_wrk'), ('relaybus_sec030_adm'),
                            ('relaybus_sec030_none'), ('relaybus_sec030_app');

-- A remote session logged in as role: a backend of its own.
CREATE FUNCTION pg_temp.connect_as(name text, role text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF name = ANY (coalesce(dblink_get_connections(), '{}')) THEN
    PERFORM dblink_disconnect(name);
  END IF;
  PERFORM dblink_connect(name, format('dbname=%s host=%s port=%s user=%s', current_database(),
    current_setting('unix_socket_directories'), current_setting('port'), role));
END
$$;
-- The SQLSTATE of what statement raises ('ok' if nothing), run on connection conn.
CREATE FUNCTION pg_temp.remote_state(conn text, statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  state text;
BEGIN
  PERFORM dblink_exec(conn, statement);
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  -- dblink reports the remote error's SQLSTATE as its own.
  GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE;
  -- A statement of an explicit transaction failed: end it (a WARNING when there is none).
  PERFORM dblink_exec(conn, 'ROLLBACK');
  RETURN state;
END
$$;
-- A lane's positions must be exactly 1..n: the (handler, lane)s where they are not.
CREATE FUNCTION pg_temp.holes() RETURNS text[] LANGUAGE sql AS $$
  SELECT coalesce(array_agg(handler || '/' || lane ORDER BY handler, lane), '{}') FROM (
    SELECT handler, lane FROM relaybus.deliveries GROUP BY 1, 2 HAVING count(*) <> max(position)) x
$$;
-- Sequential and index scans of relaybus.deliveries while sql runs on connection conn.
CREATE FUNCTION pg_temp.scans_during(conn text, sql text) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
  seq0 bigint; idx0 bigint; seq1 bigint; idx1 bigint;
BEGIN
  PERFORM pg_stat_clear_snapshot();
  SELECT coalesce(seq_scan, 0), coalesce(idx_scan, 0) INTO seq0, idx0
    FROM pg_stat_user_tables WHERE relid = 'relaybus.deliveries'::regclass;
  PERFORM dblink_exec(conn, sql);
  PERFORM * FROM dblink(conn, 'SELECT pg_stat_force_next_flush()') AS t(x text);
  PERFORM pg_stat_clear_snapshot();
  SELECT coalesce(seq_scan, 0), coalesce(idx_scan, 0) INTO seq1, idx1
    FROM pg_stat_user_tables WHERE relid = 'relaybus.deliveries'::regclass;
  RETURN ARRAY[seq1 - seq0, idx1 - idx0];
END
$$;

SELECT relaybus.subscribe('sec', ARRAY['sec.t']);

--------------------------------------------------------------------------------
-- PUBLIC, and what each right reaches
--------------------------------------------------------------------------------
SELECT is((SELECT array_agg(signature ORDER BY signature) FROM rb_functions
            WHERE proacl IS NULL OR EXISTS (SELECT FROM aclexplode(proacl) a WHERE a.grantee = 0)),
          NULL, 'no function of relaybus or relaybus_internal has a default ACL or an entry for PUBLIC');
SELECT is((SELECT array_agg(signature ORDER BY signature) FROM rb_functions
            WHERE signature IN ('relaybus_internal.unfinished(text)',
                                'relaybus_internal.finish_position(text,smallint,bigint)')),
          ARRAY['relaybus_internal.finish_position(text,smallint,bigint)', 'relaybus_internal.unfinished(text)'],
          '(0.3.0''s helpers unfinished and finish_position are among them)');
SELECT is((SELECT array_agg(relname ORDER BY relname) FROM rb_tables
            WHERE relacl IS NULL OR EXISTS (SELECT FROM aclexplode(relacl) a WHERE a.grantee = 0)),
          NULL, 'no relaybus table (exceptions included) has a default ACL or an entry for PUBLIC');
SELECT is((SELECT array_agg(nspname || ' ' || a.privilege_type ORDER BY nspname) FROM pg_namespace n, aclexplode(n.nspacl) a
            WHERE n.nspname IN ('relaybus', 'relaybus_internal') AND a.grantee = 0), NULL,
          'PUBLIC has no privilege on schema relaybus or relaybus_internal');
SELECT is((SELECT array_agg(r ORDER BY r) FROM rb_roles
            WHERE has_schema_privilege(r, 'relaybus_internal', 'USAGE')
               OR has_schema_privilege(r, 'relaybus_internal', 'CREATE')
               OR has_schema_privilege(r, 'relaybus', 'CREATE')),
          NULL, 'no right reaches schema relaybus_internal, nor CREATE in schema relaybus');
SELECT is((SELECT array_agg(r || ' ' || f.signature ORDER BY r, f.signature) FROM rb_roles, rb_functions f
            WHERE f.internal AND has_function_privilege(r, f.oid, 'EXECUTE')),
          NULL, 'no right may execute a helper of relaybus_internal');
SELECT is((SELECT array_agg(r || ' ' || t.relname ORDER BY r, t.relname) FROM rb_roles, rb_tables t
            WHERE has_table_privilege(r, t.oid, 'SELECT')),
          ARRAY['relaybus_sec030_adm completions', 'relaybus_sec030_adm deliveries', 'relaybus_sec030_adm events',
                'relaybus_sec030_adm events_from_021', 'relaybus_sec030_adm exceptions',
                'relaybus_sec030_adm lane_progress', 'relaybus_sec030_adm lane_state', 'relaybus_sec030_adm lanes',
                'relaybus_sec030_adm purge_horizons', 'relaybus_sec030_adm subscriptions'],
          'only the admin reads the tables, every one of them (exceptions, lane_progress, purge_horizons, '
          'events_from_021 and the view lane_state included)');
SELECT is((SELECT array_agg(r || ' ' || p || ' ' || t.relname ORDER BY r, p, t.relname)
             FROM rb_roles, rb_tables t,
                  unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) p
            WHERE has_table_privilege(r, t.oid, p)),
          NULL, 'no right may insert, update, delete, truncate, reference or add a trigger to any table');
SELECT is((SELECT array_agg(signature ORDER BY signature) FROM rb_functions
            WHERE (prosecdef OR internal)
              AND NOT EXISTS (SELECT FROM unnest(proconfig) c
                               WHERE regexp_replace(c, '\s', '', 'g') = 'search_path=pg_catalog,pg_temp')),
          NULL, 'every SECURITY DEFINER function and every helper pins search_path to pg_catalog, pg_temp');
SELECT is((SELECT array_agg(signature ORDER BY signature) FROM rb_functions
            WHERE NOT prosecdef AND NOT internal),
          ARRAY['relaybus.completion_latency()', 'relaybus.counters()', 'relaybus.handler_counters()',
                'relaybus.lane_of(text)', 'relaybus.reset_counters()',
                'relaybus.subscribe(text,text[],integer,interval,interval,regprocedure,interval)',
                'relaybus.unrouted_counters()'],
          'the API functions that are not SECURITY DEFINER: six touch no table, subscribe takes its rights in C');

-- Each role tries the tables and helpers directly: 42501 every time.
CREATE TEMP TABLE attempts (n serial, statement text);
INSERT INTO attempts (statement) VALUES
  ('SELECT * FROM relaybus_internal.unfinished(NULL)'),
  ($$SELECT relaybus_internal.finish_position('sec', 0::smallint, 1)$$),
  ($$SELECT relaybus_internal.lane_changed('sec', 0::smallint)$$),
  ($$SELECT relaybus_internal.retire_unsubscribed(now())$$),
  ($$SELECT * FROM relaybus_internal.list_deliveries_impl(NULL, NULL, 10)$$),
  ($$SELECT relaybus_internal.create_lanes('x')$$),
  ($$INSERT INTO relaybus.exceptions (handler, lane, position, event_id, available_at, created_at)
      VALUES ('sec', 0, 1, 'x', now(), now())$$),
  ($$INSERT INTO relaybus.deliveries VALUES ('sec', 0, 1, 'x', NULL, now(), now())$$),
  ('UPDATE relaybus.lanes SET epoch = epoch + 1'),
  ($$INSERT INTO relaybus.lane_progress (handler, lane, seq, acked_upto, done, in_flight, retrying)
      VALUES ('sec', 0, 1000, 0, '{}', '{}', '{}')$$),
  ('DELETE FROM relaybus.lane_progress'),
  ('DELETE FROM relaybus.exceptions'),
  ('TRUNCATE relaybus.deliveries'),
  ('SELECT 1 FROM relaybus.lanes FOR KEY SHARE'),
  ('SELECT 1 FROM relaybus.lane_progress FOR KEY SHARE'),
  ('SELECT 1 FROM relaybus.events FOR UPDATE'),
  ('LOCK TABLE relaybus.lanes IN SHARE MODE'),
  ('LOCK TABLE relaybus.lane_progress IN SHARE MODE'),
  -- A SHARE lock on deliveries would hold up every publishing commit's write.
  ('LOCK TABLE relaybus.deliveries IN SHARE MODE'),
  ('CREATE TRIGGER t BEFORE INSERT ON relaybus.deliveries FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()'),
  ('CREATE RULE r AS ON INSERT TO relaybus.exceptions DO INSTEAD NOTHING'),
  ('CREATE POLICY p ON relaybus.exceptions USING (false)'),
  ('ALTER TABLE relaybus.exceptions ENABLE ROW LEVEL SECURITY'),
  ('ALTER TABLE relaybus.lanes SET (fillfactor = 100)'),
  ('CREATE INDEX ON relaybus.deliveries (key)'),
  -- A horizon set too high, or an update's time, would hold back or widen what the purge does.
  ($$INSERT INTO relaybus.purge_horizons VALUES ('sec', 0, 1000000)$$),
  ($$INSERT INTO relaybus.events_from_021 VALUES (now())$$);
CREATE FUNCTION pg_temp.refused_as(role name) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
  a record;
  state text;
  not_refused text[] := '{}';
BEGIN
  FOR a IN SELECT * FROM attempts ORDER BY n LOOP
    BEGIN
      EXECUTE format('SET LOCAL ROLE %I', role);
      EXECUTE a.statement;
      -- Not refused: roll it back all the same.
      RAISE SQLSTATE 'RBOK0';
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE;
    END;
    RESET ROLE;
    IF state <> '42501' THEN
      not_refused := not_refused || (a.n || ': ' || CASE state WHEN 'RBOK0' THEN 'not refused' ELSE state END);
    END IF;
  END LOOP;
  RETURN not_refused;
END
$$;
SELECT is(pg_temp.refused_as(r), '{}',
          r || ': every direct use of a table (insert, update, delete, truncate, row and table locks, '
            || 'trigger, rule, policy, ALTER, index) and of the helpers is refused with 42501')
  FROM rb_roles ORDER BY r;
SELECT is((SELECT array_agg(tgname::text) FROM pg_trigger WHERE tgrelid = ANY (ARRAY(SELECT oid FROM rb_tables))
            AND tgname NOT IN ('subscriptions_changed', 'subscriptions_truncated', 'lanes_changed')), NULL,
          'and no trigger other than relaybus''s own is on its tables');

SET ROLE relaybus_sec030_adm;
SELECT lives_ok($$SELECT count(*) FROM relaybus.exceptions$$, 'the admin reads exceptions, to investigate');
RESET ROLE;
SET ROLE relaybus_sec030_pub;
SELECT throws_ok($$SELECT relaybus.complete('r3.0.1.1.0.3.sec')$$, '42501', NULL, 'the publisher cannot complete');
SELECT throws_ok($$SELECT relaybus.relinquish('w')$$, '42501', NULL, 'nor relinquish');
SELECT throws_ok($$SELECT relaybus.cancel('x', 'sec')$$, '42501', NULL, 'nor cancel');
SELECT throws_ok($$SELECT * FROM relaybus.statistics()$$, '42501', NULL, 'nor read statistics()');
RESET ROLE;
SET ROLE relaybus_sec030_wrk;
SELECT throws_ok($$SELECT relaybus.publish('sec.t')$$, '42501', NULL, 'the worker cannot publish');
SELECT throws_ok($$SELECT * FROM relaybus.list_deliveries()$$, '42501', NULL, 'nor list the deliveries');
SELECT throws_ok($$SELECT relaybus.relinquish('relaybus-sql-0')$$, '42501', NULL,
                 'nor relinquish the lanes of an in-database handler worker');
RESET ROLE;
SET ROLE relaybus_sec030_none;
SELECT throws_ok($$SELECT relaybus.publish('sec.t')$$, '42501', NULL, 'a role without rights cannot publish');
SELECT throws_ok($$SELECT relaybus.complete('r3.0.1.1.0.3.sec')$$, '42501', NULL, 'nor complete');
RESET ROLE;

--------------------------------------------------------------------------------
-- The write at commit: as whom, under which search_path, with what the caller planted.
--------------------------------------------------------------------------------
-- What a trigger on relaybus.deliveries sees while the staged rows are inserted (relaybus
-- puts none there; a superuser puts this one for the test).
CREATE TABLE public.rb_sec030_seen (event_id text, current_role_name name, session_role_name name,
                                    path text, seqscan text);
CREATE FUNCTION public.rb_sec030_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.rb_sec030_seen
  VALUES (NEW.event_id, current_user, session_user, current_setting('search_path'),
          current_setting('enable_seqscan'));
  RETURN NEW;
END
$$;
CREATE TRIGGER rb_sec030_seen BEFORE INSERT ON relaybus.deliveries
  FOR EACH ROW EXECUTE FUNCTION public.rb_sec030_seen();
SELECT (SELECT extowner::regrole::text FROM pg_extension WHERE extname = 'relaybus') AS owner \gset

-- A publisher's SECURITY DEFINER function, called by a role that has no relaybus right.
CREATE SCHEMA relaybus_sec030_app AUTHORIZATION relaybus_sec030_pub;
SET ROLE relaybus_sec030_pub;
CREATE FUNCTION relaybus_sec030_app.publish_order(id text) RETURNS text LANGUAGE sql SECURITY DEFINER
  SET search_path = pg_catalog AS $$ SELECT relaybus.publish('sec.t', '{}', NULL, id) $$;
REVOKE ALL ON FUNCTION relaybus_sec030_app.publish_order(text) FROM PUBLIC;
GRANT USAGE ON SCHEMA relaybus_sec030_app TO relaybus_sec030_app;
GRANT EXECUTE ON FUNCTION relaybus_sec030_app.publish_order(text) TO relaybus_sec030_app;
RESET ROLE;

SELECT pg_temp.connect_as('app', 'relaybus_sec030_app');
SELECT is(pg_temp.remote_state('app', $$DO $d$BEGIN PERFORM relaybus_sec030_app.publish_order('app-1'); END $d$ $$), 'ok',
          'a role without any relaybus right publishes through a publisher''s SECURITY DEFINER function, '
          || 'and its first commit in a fresh backend succeeds');
SELECT is(pg_temp.remote_state('app', $$DO $d$BEGIN PERFORM relaybus_sec030_app.publish_order('app-2'); END $d$ $$), 'ok',
          'and so does its next one');
SELECT is((SELECT array_agg(event_id || ' ' || position ORDER BY event_id) FROM relaybus.deliveries
            WHERE event_id LIKE 'app-%'), ARRAY['app-1 1', 'app-2 1'],
          'both deliveries are written, each at its lane''s first position');
SELECT is((SELECT array_agg(DISTINCT current_role_name || ' ' || session_role_name || ' ' || path || ' ' || seqscan)
             FROM public.rb_sec030_seen WHERE event_id LIKE 'app-%'),
          ARRAY[:'owner' || ' relaybus_sec030_app pg_catalog, pg_temp off'],
          'they were inserted as publish''s owner, under search_path pg_catalog, pg_temp and the delivery '
          || 'path''s planner settings, for the session of the role without rights');
SELECT dblink_disconnect('app');

-- SET ROLE after publishing, in a fresh backend: the commit writes as publish's owner all the same.
SELECT pg_temp.connect_as('pub', 'relaybus_sec030_pub');
SELECT is(pg_temp.remote_state('pub', $$BEGIN;
  DO $d$BEGIN PERFORM relaybus.publish('sec.t', '{}', 'kr', 'role-1'); END $d$;
  SET ROLE relaybus_sec030_none;
  COMMIT$$), 'ok', 'a publisher publishes, SET ROLE to a role without rights, and commits');
SELECT is((SELECT current_role_name || ' ' || session_role_name FROM public.rb_sec030_seen WHERE event_id = 'role-1'),
          :'owner' || ' relaybus_sec030_pub', 'the delivery was written as publish''s owner, not as the role set');
SELECT is(pg_temp.remote_state('pub', $$BEGIN;
  SET ROLE relaybus_sec030_none;
  DO $d$BEGIN PERFORM relaybus.publish('sec.t', '{}', NULL, 'role-2'); END $d$;
  COMMIT$$), '42501', 'the role set cannot publish itself');
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id = 'role-2'), 0, 'and nothing of it is there');
SELECT dblink_disconnect('pub');

-- A publisher plants operators, functions and temporary tables ahead of pg_catalog, and
-- planner costs that make any index dearer than a disabled full scan, before the first
-- commit of its backend; then publishes to 40 lanes in one transaction and to one more.
-- Against a deep table, such a plan held every lane the commit touched while it scanned the
-- table once per delivery (14 s for 256 events against 1M deliveries): every other
-- publisher of those lanes waited.
SELECT pg_temp.connect_as('evil', 'relaybus_sec030_pub');
SELECT dblink_exec('evil', $e$
  CREATE TABLE relaybus_sec030_app.calls (what text, by_role name);
  CREATE FUNCTION relaybus_sec030_app.text_eq(text, text) RETURNS boolean LANGUAGE plpgsql AS $$
    BEGIN INSERT INTO relaybus_sec030_app.calls VALUES ('=(text,text)', current_user);
          RETURN $1 OPERATOR(pg_catalog.=) $2; END $$;
  CREATE OPERATOR relaybus_sec030_app.= (LEFTARG = text, RIGHTARG = text, FUNCTION = relaybus_sec030_app.text_eq);
  CREATE FUNCTION relaybus_sec030_app.int2_eq(smallint, smallint) RETURNS boolean LANGUAGE plpgsql AS $$
    BEGIN INSERT INTO relaybus_sec030_app.calls VALUES ('=(int2,int2)', current_user);
          RETURN $1 OPERATOR(pg_catalog.=) $2; END $$;
  CREATE OPERATOR relaybus_sec030_app.= (LEFTARG = smallint, RIGHTARG = smallint, FUNCTION = relaybus_sec030_app.int2_eq);
  CREATE FUNCTION relaybus_sec030_app.plus(bigint, integer) RETURNS bigint LANGUAGE plpgsql AS $$
    BEGIN INSERT INTO relaybus_sec030_app.calls VALUES ('+(int8,int4)', current_user);
          RETURN $1 OPERATOR(pg_catalog.+) $2; END $$;
  CREATE OPERATOR relaybus_sec030_app.+ (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = relaybus_sec030_app.plus);
  CREATE FUNCTION relaybus_sec030_app.now() RETURNS timestamptz LANGUAGE plpgsql AS $$
    BEGIN INSERT INTO relaybus_sec030_app.calls VALUES ('now()', current_user); RETURN pg_catalog.now(); END $$;
  CREATE FUNCTION relaybus_sec030_app.unnest(text[]) RETURNS SETOF text LANGUAGE plpgsql AS $$
    BEGIN INSERT INTO relaybus_sec030_app.calls VALUES ('unnest(text[])', current_user);
          RETURN QUERY SELECT pg_catalog.unnest($1); END $$;
  CREATE FUNCTION relaybus_sec030_app.coalesce(bigint, integer) RETURNS bigint LANGUAGE plpgsql AS $$
    BEGIN INSERT INTO relaybus_sec030_app.calls VALUES ('coalesce', current_user); RETURN $1; END $$;
  CREATE TEMP TABLE deliveries (handler text, lane smallint, position bigint, event_id text, key text,
                                available_at timestamptz, created_at timestamptz);
  CREATE TEMP TABLE lanes (LIKE deliveries);
  CREATE TEMP TABLE exceptions (LIKE deliveries);
  CREATE TEMP TABLE events (LIKE deliveries);
  SET search_path = pg_temp, relaybus_sec030_app, pg_catalog;
  SET random_page_cost = 1e12;
  SET cpu_index_tuple_cost = 1e12;
  SET enable_indexscan = off;
  SET enable_indexonlyscan = off;
  SET enable_sort = off
$e$);
-- Enough committed deliveries that a scan of the table is a scan.
SELECT count(relaybus.publish('sec.t', '{}', NULL, 'bulk-' || g)) FROM generate_series(1, 2000) g;
SELECT is((SELECT s[1] FROM pg_temp.scans_during('evil',
            $$BEGIN; DO $d$BEGIN PERFORM relaybus.publish('sec.t', '{}', 'evil-k' || g, 'evil-' || g)
                                   FROM generate_series(1, 40) g; END $d$; COMMIT$$) s), 0::bigint,
          'the first commit of the hostile backend reads no lane''s last position by a sequential scan');
SELECT is((SELECT s[1] FROM pg_temp.scans_during('evil', $$DO $d$BEGIN PERFORM relaybus.publish('sec.t', '{}', 'evil-k1', 'evil-41'); END $d$ $$) s),
          0::bigint, 'nor does its next one');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries WHERE event_id LIKE 'evil-%'), 41,
          'its 41 deliveries are in relaybus.deliveries');
SELECT is(pg_temp.holes(), '{}', 'every lane''s positions are still 1..n');
SELECT is((SELECT d41.position > d1.position AND d41.position = (SELECT max(position) FROM relaybus.deliveries d
                                                                      WHERE d.handler = d41.handler AND d.lane = d41.lane)
             FROM relaybus.deliveries d1, relaybus.deliveries d41
            WHERE d1.event_id = 'evil-1' AND d41.event_id = 'evil-41'), true,
          'a key''s next delivery, committed later, takes its lane''s last position');
SELECT is((SELECT array_agg(what || ' as ' || by_role) FROM
             dblink('evil', 'SELECT what, by_role FROM relaybus_sec030_app.calls') AS t(what text, by_role name)),
          NULL, 'none of the planted operators and functions ran');
SELECT is((SELECT n FROM dblink('evil', 'SELECT (SELECT count(*) FROM pg_temp.deliveries) + (SELECT count(*) FROM pg_temp.events)
                                             + (SELECT count(*) FROM pg_temp.lanes) + (SELECT count(*) FROM pg_temp.exceptions)')
             AS t(n bigint)), 0::bigint, 'the temporary tables named like relaybus''s got nothing');
SELECT is((SELECT array_agg(DISTINCT path || ' ' || seqscan) FROM public.rb_sec030_seen WHERE event_id LIKE 'evil-%'),
          ARRAY['pg_catalog, pg_temp off'], 'the write ran under the pinned search_path, not the planted one');
SELECT dblink_disconnect('evil');

--------------------------------------------------------------------------------
-- A commit that fails at the write leaves nothing, and nothing of it reaches a later commit.
--------------------------------------------------------------------------------
SELECT pg_temp.connect_as('pub', 'relaybus_sec030_pub');
SELECT is(pg_temp.remote_state('pub', $$BEGIN;
  DO $d$BEGIN PERFORM relaybus.publish('sec.t', '{}', NULL, 'ro-1'); END $d$;
  SET LOCAL transaction_read_only = on;
  COMMIT$$), '25006', 'a transaction made read-only after publishing fails at commit (25006)');
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id = 'ro-1'), 0, 'its event is gone');
SELECT is(pg_temp.remote_state('pub', $$DO $d$BEGIN PERFORM relaybus.publish('sec.t', '{}', NULL, 'ro-2'); END $d$ $$), 'ok',
          'the same backend''s next publish commits');
SELECT is((SELECT array_agg(event_id ORDER BY event_id) FROM relaybus.deliveries WHERE event_id LIKE 'ro-%'),
          ARRAY['ro-2'], 'with its own delivery only: the failed commit''s staged row went with it');
SELECT is(pg_temp.remote_state('pub', $$BEGIN;
  DO $d$BEGIN PERFORM relaybus.publish('sec.t', '{}', NULL, 'to-1'); END $d$;
  SELECT 1 / 0;
  COMMIT$$), '22012', 'a transaction that fails after publishing (22012)');
SELECT is(pg_temp.remote_state('pub', $$DO $d$BEGIN PERFORM relaybus.publish('sec.t', '{}', NULL, 'to-2'); END $d$ $$), 'ok',
          'is followed by a publish that commits');
SELECT is((SELECT array_agg(event_id ORDER BY event_id) FROM relaybus.deliveries WHERE event_id LIKE 'to-%'),
          ARRAY['to-2'], 'and the aborted one''s staged row never appears');
SELECT dblink_disconnect('pub');

-- Publishes that run only at commit, before the write: a deferred constraint trigger of the
-- publisher's table, and a WITH HOLD cursor. Their deliveries are written with the rest.
SET ROLE relaybus_sec030_pub;
CREATE TABLE relaybus_sec030_app.orders (id int);
CREATE FUNCTION relaybus_sec030_app.publish_order_trigger() RETURNS trigger LANGUAGE plpgsql
  SET search_path = pg_catalog AS $$
BEGIN
  PERFORM relaybus.publish('sec.t', '{}', NULL, 'deferred-' || NEW.id);
  RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER publish_order AFTER INSERT ON relaybus_sec030_app.orders
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION relaybus_sec030_app.publish_order_trigger();
RESET ROLE;
SELECT pg_temp.connect_as('pub', 'relaybus_sec030_pub');
SELECT is(pg_temp.remote_state('pub', $$BEGIN;
  INSERT INTO relaybus_sec030_app.orders VALUES (1), (2);
  DECLARE c CURSOR WITH HOLD FOR SELECT relaybus.publish('sec.t', '{}', NULL, 'held-' || g) FROM generate_series(1, 2) g;
  COMMIT$$), 'ok', 'a commit that runs a deferred trigger and a held cursor, both publishing');
SELECT is((SELECT array_agg(e.id || ' ' || (d.position IS NOT NULL) ORDER BY e.id)
             FROM relaybus.events e LEFT JOIN relaybus.deliveries d ON d.event_id = e.id
            WHERE e.id LIKE 'deferred-%' OR e.id LIKE 'held-%'),
          ARRAY['deferred-1 true', 'deferred-2 true', 'held-1 true', 'held-2 true'],
          'every event published at commit has its delivery: none is committed without one');
SELECT dblink_disconnect('pub');

-- The lane locks live in a lock space of their own: a hostile session holding every advisory
-- lock a role can take on the same numbers stalls no publisher.
SELECT pg_temp.connect_as('lock', 'relaybus_sec030_none');
SELECT relaybus.lane_of('lock-1') AS lock_lane \gset
SELECT dblink_exec('lock', format('DO $d$BEGIN PERFORM pg_advisory_lock(%s, %s), pg_advisory_lock((%s::bigint << 32) | %s),
                                          pg_advisory_lock(%s), pg_advisory_lock(0, %s); END $d$',
                                  'relaybus.deliveries'::regclass::oid, :lock_lane,
                                  'relaybus.deliveries'::regclass::oid, :lock_lane, :lock_lane, :lock_lane));
SELECT pg_temp.connect_as('victim', 'relaybus_sec030_pub');
SELECT is(pg_temp.remote_state('victim', $$SET lock_timeout = '2s'; DO $d$BEGIN PERFORM relaybus.publish('sec.t', '{}', NULL, 'lock-1'); END $d$ $$),
          'ok', 'a publish commits while another session holds advisory locks on its table and lane numbers');
SELECT is((SELECT lane FROM relaybus.deliveries WHERE event_id = 'lock-1'), :lock_lane::smallint, '(in that lane)');
SELECT dblink_disconnect('victim');
SELECT dblink_disconnect('lock');

-- A trigger on relaybus.deliveries that publishes (only relaybus's owner can put one there):
-- its event would be committed without deliveries, its rows staged after their lanes were
-- written. The commit is refused whole instead (0A000).
CREATE FUNCTION public.rb_sec030_republish() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.event_id = 'loop-1' THEN
    PERFORM relaybus.publish('sec.t', '{}', NULL, 'loop-2');
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER rb_sec030_republish AFTER INSERT ON relaybus.deliveries
  FOR EACH ROW EXECUTE FUNCTION public.rb_sec030_republish();
SELECT rb_connect('su');
SELECT is(pg_temp.remote_state('su', $$DO $d$BEGIN PERFORM relaybus.publish('sec.t', '{}', NULL, 'loop-1'); END $d$ $$),
          '0A000', 'a publish from a trigger that the write at commit fires fails that commit (0A000)');
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id LIKE 'loop-%')
          + (SELECT count(*)::int FROM relaybus.deliveries WHERE event_id LIKE 'loop-%'), 0,
          'and neither event nor delivery is committed');
SELECT dblink_disconnect('su');
DROP TRIGGER rb_sec030_republish ON relaybus.deliveries;
DROP FUNCTION public.rb_sec030_republish();
DROP TRIGGER rb_sec030_seen ON relaybus.deliveries;
DROP FUNCTION public.rb_sec030_seen();

--------------------------------------------------------------------------------
-- Forged tokens
--------------------------------------------------------------------------------
-- A handler named with dots, quotes, a backslash, bidirectional and zero-width characters
-- and an astral one; its lane 7 held under epoch 5 with positions 1 and 2 in flight.
SELECT E'sec.o\'"\\.\u202e\u200d\u00e9\U0001F984' AS odd \gset
SELECT relaybus.subscribe(:'odd', ARRAY['sec.odd']);
SELECT relaybus.subscribe('sec.other', ARRAY['sec.odd']);
CREATE FUNCTION pg_temp.put(h text, l int, n int) RETURNS void LANGUAGE sql AS $$
  INSERT INTO relaybus.events (id, type, payload, handlers)
  SELECT format('%s/%s/%s', h, l, p), 'sec.odd', '{}', ARRAY[h] FROM generate_series(1, n) p
  ON CONFLICT DO NOTHING;
  INSERT INTO relaybus.deliveries (handler, lane, position, event_id, key, available_at, created_at)
  SELECT h, l, p, format('%s/%s/%s', h, l, p), NULL, now() - interval '1 minute', now() - interval '1 minute'
    FROM generate_series(1, n) p;
$$;
-- The lane's lease row, and its progress as the lane's next lane_progress row.
CREATE FUNCTION pg_temp.hold(h text, l int, ep bigint, flight bigint[]) RETURNS void LANGUAGE sql AS $$
  UPDATE relaybus.lanes
     SET lease_owner = 'w-sec', lease_expires_at = now() + interval '1 hour', holder = 'hx',
         epoch = ep
   WHERE handler = h AND lane = l;
  INSERT INTO relaybus.lane_progress (handler, lane, seq, acked_upto, done, in_flight, retrying)
  SELECT s.handler, s.lane, s.progress_seq + 1, 0, '{}', flight, '{}'
    FROM relaybus.lane_state s WHERE s.handler = h AND s.lane = l;
$$;
CREATE FUNCTION pg_temp.tok(h text, l int, ep bigint, p bigint, c int DEFAULT 0) RETURNS text LANGUAGE sql AS $$
  SELECT format('r3.%s.%s.%s.%s.%s.%s', l, ep, p, c, octet_length(h), h)
$$;
-- Every lane and exception row of the two handlers, with its version: the lease row's
-- (xmin, ctid) and the lane's newest progress seq.
CREATE FUNCTION pg_temp.snapshot() RETURNS text LANGUAGE sql AS $$
  SELECT coalesce(string_agg(x, ';' ORDER BY x), '') FROM (
    SELECT format('%s/%s %s %s %s %s %s %s seq %s', l.handler, l.lane, l.xmin, l.ctid, l.epoch, s.acked_upto,
                  s.done, s.in_flight, s.progress_seq) x
      FROM relaybus.lanes l JOIN relaybus.lane_state s USING (handler, lane)
     WHERE l.handler IN ('sec.other', current_setting('rb.odd'))
    UNION ALL
    SELECT format('x %s/%s/%s %s', handler, lane, position, status) FROM relaybus.exceptions) y
$$;
SELECT FROM set_config('rb.odd', :'odd', false);
SELECT pg_temp.put(:'odd', 7, 3);
SELECT pg_temp.hold(:'odd', 7, 5, '{1,2}');
SELECT pg_temp.put('sec.other', 7, 1);
SELECT pg_temp.hold('sec.other', 7, 9, '{1}');
SELECT pg_temp.snapshot() AS before_forgery \gset
SELECT l.xmin::text || l.ctid::text || ' seq ' || s.progress_seq AS other_version
  FROM relaybus.lanes l JOIN relaybus.lane_state s USING (handler, lane)
 WHERE l.handler = 'sec.other' AND l.lane = 7 \gset

SET ROLE relaybus_sec030_wrk;
SELECT is(ARRAY[relaybus.complete(pg_temp.tok(:'odd', 7, 4, 1)), relaybus.complete(pg_temp.tok(:'odd', 7, 6, 1)),
                relaybus.complete(pg_temp.tok(:'odd', 7, 9223372036854775807, 1)),
                relaybus.complete(pg_temp.tok(:'odd', 7, 0, 1))],
          ARRAY[false, false, false, false], 'tokens of other epochs (4, 6, 2^63-1, 0) complete nothing');
SELECT is(ARRAY[relaybus.complete(pg_temp.tok(:'odd', 7, 5, 3)), relaybus.complete(pg_temp.tok(:'odd', 7, 5, 9223372036854775807)),
                relaybus.complete(pg_temp.tok(:'odd', 7, 5, 1, 1)), relaybus.complete(pg_temp.tok(:'odd', 7, 5, 1, 2147483647)),
                relaybus.complete(pg_temp.tok(:'odd', 8, 5, 1))],
          ARRAY[false, false, false, false, false],
          'a position not in flight, position 2^63-1, claims 1 and 2^31-1 on a window pick, another lane: nothing');
SELECT is(ARRAY[relaybus.complete(pg_temp.tok('sec.other', 7, 5, 1)), relaybus.complete(pg_temp.tok('sec.o', 7, 5, 1)),
                relaybus.complete(pg_temp.tok('no-such-handler', 7, 5, 1))],
          ARRAY[false, false, false],
          'the right lane, epoch and position under another handler''s name, a prefix of the name, or no handler: nothing');
SELECT is(relaybus.complete_many(ARRAY[pg_temp.tok(:'odd', 7, 4, 1), pg_temp.tok(:'odd', 7, 5, 3), pg_temp.tok('sec.other', 7, 5, 1),
                                       pg_temp.tok(:'odd', 7, 5, 2, 1)]), 0, 'complete_many of forged tokens: 0');
SELECT is(ARRAY[relaybus.fail(pg_temp.tok(:'odd', 7, 4, 1), 'x'), relaybus.fail(pg_temp.tok(:'odd', 7, 5, 1, 1), 'x'),
                relaybus.fail(pg_temp.tok('sec.other', 7, 5, 1), 'x', now() + interval '1 minute')],
          ARRAY['lost', 'lost', 'lost'], 'fail of forged tokens: lost');
SELECT is(ARRAY[relaybus.bury(pg_temp.tok(:'odd', 7, 6, 2)), relaybus.release(pg_temp.tok(:'odd', 7, 5, 3)),
                relaybus.release(pg_temp.tok('sec.other', 7, 5, 1))],
          ARRAY[false, false, false], 'bury and release of forged tokens: false');
RESET ROLE;
SELECT is(pg_temp.snapshot(), :'before_forgery',
          'no lane of either handler has a new lease row version or progress row, and no exception row was written');

-- The SQLSTATEs complete, complete_many, fail, bury and release raise for a token.
CREATE FUNCTION pg_temp.token_states(token text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  call text;
  state text;
  states text[] := '{}';
BEGIN
  FOREACH call IN ARRAY ARRAY['SELECT relaybus.complete($1)', 'SELECT relaybus.complete_many(ARRAY[$1])',
                              'SELECT relaybus.fail($1)', 'SELECT relaybus.bury($1)', 'SELECT relaybus.release($1)'] LOOP
    BEGIN
      EXECUTE call USING token;
      state := 'ok';
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE;
    END;
    states := states || state;
  END LOOP;
  RETURN array_to_string(ARRAY(SELECT DISTINCT x FROM unnest(states) x ORDER BY 1), ',');
END
$$;
CREATE TEMP TABLE malformed (token text);
INSERT INTO malformed VALUES
  ('r3.256.5.1.0.1.x'), ('r3.-1.5.1.0.1.x'), ('r3.7.9223372036854775808.1.0.1.x'),
  ('r3.7.5.9223372036854775808.0.1.x'), ('r3.7.5.1.2147483648.1.x'), ('r3.7.5.1.-1.1.x'),
  ('r3.7.5.0.0.1.x'), ('r3.7.05.1.0.1.x'), ('r3.7.+5.1.0.1.x'), ('r3.7. 5.1.0.1.x'),
  ('r3.7.5.1.0.0.'), ('r3.7.5.1.0.18446744073709551617.x'), ('r3.7.5.1.0.2.x'), ('r3.7.5.1.0.1.xy'),
  ('r3.7.5.1.0'), ('R3.7.5.1.0.1.x'), ('r1.7.5.0.1.xe'), (''), ('r3.7.5.1.0.1.x' || E'\u00e9'),
  (format('r3.7.5.1.0.%s.%s', char_length(current_setting('rb.odd')), current_setting('rb.odd')));
GRANT SELECT ON malformed TO relaybus_sec030_wrk;
SET ROLE relaybus_sec030_wrk;
SELECT is((SELECT array_agg(token || ': ' || pg_temp.token_states(token) ORDER BY token) FROM malformed
            WHERE pg_temp.token_states(token) <> '22023'),
          NULL, 'every malformed token (bounds, signs, zeros, spaces, lengths, a length in characters, '
                || 'another format) is 22023 for complete, complete_many, fail, bury and release');
RESET ROLE;
SELECT is(pg_temp.snapshot(), :'before_forgery', 'and wrote nothing');

SET ROLE relaybus_sec030_wrk;
SELECT throws_ok(format('SELECT relaybus.complete_many(ARRAY[%L, %L])', pg_temp.tok(:'odd', 7, 5, 1),
                        format('r3.7.5.2.0.%s.%s', char_length(:'odd'), :'odd')), '22023', NULL,
                 'a batch with the right token and one whose length counts characters is 22023');
SELECT ok(relaybus.complete(pg_temp.tok(:'odd', 7, 5, 1)), 'the true token of the odd handler (length in bytes) completes');
SELECT ok(NOT relaybus.complete(pg_temp.tok(:'odd', 7, 5, 1)), 'once');
SELECT is(relaybus.fail(pg_temp.tok(:'odd', 7, 5, 2), E'it\'s "odd" \\ \u202e'), 'retry', 'and the other one fails into a retry');
RESET ROLE;
SELECT is((SELECT format('%s %s %s', status, attempts, last_error) FROM relaybus.exceptions WHERE handler = :'odd'),
          E'pending 1 it\'s "odd" \\ \u202e', 'its exception row keeps the odd error text as given');
SELECT is((SELECT format('%s %s', acked_upto, in_flight) FROM relaybus.lane_state WHERE handler = :'odd' AND lane = 7), '2 {}',
          'and the odd handler''s lane moved past both');
SELECT is((SELECT l.xmin::text || l.ctid::text || ' seq ' || s.progress_seq
             FROM relaybus.lanes l JOIN relaybus.lane_state s USING (handler, lane)
            WHERE l.handler = 'sec.other' AND l.lane = 7), :'other_version',
          'while the other handler''s lane of the same number is untouched (lease row and progress)');

--------------------------------------------------------------------------------
-- Hostile names, keys and event ids: up to 1000 bytes work end to end; 1001 bytes are 22023,
-- and nothing is written.
--------------------------------------------------------------------------------
SELECT repeat(E'\u00e9', 500) AS h1000, repeat('k', 999) || '.' AS k1000, repeat('"', 1000) AS e1000 \gset
SELECT lives_ok(format('SELECT relaybus.subscribe(%L, ARRAY[%L])', :'h1000', 'sec.long'),
                'a handler name of 1000 bytes (500 two-byte characters) subscribes');
SELECT lives_ok(format('SELECT relaybus.publish(%L, %L, %L, %L)', 'sec.long', '{"a": 1}', :'k1000', :'e1000'),
                'a key and an event id of 1000 bytes publish to it, and commit');
SELECT is((SELECT format('%s %s %s', (lane = relaybus.lane_of(:'k1000'))::text, position, octet_length(event_id))
             FROM relaybus.deliveries WHERE handler = :'h1000'), 'true 1 1000',
          'the delivery is in its key''s lane, at position 1, with the whole event id');
SELECT ok(relaybus.complete(pg_temp.tok(:'h1000', relaybus.lane_of(:'k1000'), 0, 1)) IS NOT NULL,
          'a token naming the 1000-byte handler parses (its length field is 1000)');
SELECT (SELECT count(*) FROM relaybus.events) AS events_before, (SELECT count(*) FROM relaybus.deliveries) AS deliveries_before \gset
SELECT throws_ok(format('SELECT relaybus.subscribe(%L, ARRAY[%L])', :'h1000' || 'x', 'sec.long'), '22023', NULL,
                 'a handler name of 1001 bytes: 22023');
SELECT throws_ok(format('SELECT relaybus.publish(%L, %L, %L)', 'sec.long', '{}', :'k1000' || 'x'), '22023', NULL,
                 'a key of 1001 bytes: 22023');
SELECT throws_ok(format('SELECT relaybus.publish(%L, %L, NULL, %L)', 'sec.long', '{}', :'e1000' || 'x'), '22023', NULL,
                 'an event id of 1001 bytes: 22023');
SELECT throws_ok(format('SELECT relaybus.publish(%L, %L)', repeat('t', 1001), '{}'), '22023', NULL,
                 'a type of 1001 bytes: 22023');
SELECT throws_ok(format('SELECT relaybus.publish(%L, %L, handlers => ARRAY[%L])', 'sec.long', '{}', :'h1000' || 'x'), '22023', NULL,
                 'a handler name of 1001 bytes in handlers: 22023');
SELECT throws_ok(format('SELECT relaybus.publish_batch(%L)', jsonb_build_array(jsonb_build_object('type', 'sec.long', 'id', 'ok-1'),
                                                                               jsonb_build_object('type', 'sec.long', 'key', :'k1000' || 'x'))),
                 '22023', NULL, 'publish_batch with a key of 1001 bytes in its second event: 22023');
SELECT is(ARRAY[(SELECT count(*) FROM relaybus.events), (SELECT count(*) FROM relaybus.deliveries),
                (SELECT count(*) FROM relaybus.subscriptions WHERE octet_length(handler) > 1000)],
          ARRAY[:events_before, :deliveries_before, 0]::bigint[],
          'none of them wrote an event, a delivery or a subscription (the batch''s first event neither)');

--------------------------------------------------------------------------------
SET client_min_messages = warning;
DROP TABLE public.rb_sec030_seen;
DROP OWNED BY relaybus_sec030_pub, relaybus_sec030_wrk, relaybus_sec030_adm, relaybus_sec030_none,
              relaybus_sec030_app;
DROP ROLE relaybus_sec030_pub, relaybus_sec030_wrk, relaybus_sec030_adm, relaybus_sec030_none,
          relaybus_sec030_app;
RESET client_min_messages;
SELECT is((SELECT count(*)::int FROM pg_roles WHERE rolname IN ('relaybus_sec030_pub', 'relaybus_sec030_wrk',
            'relaybus_sec030_adm', 'relaybus_sec030_none', 'relaybus_sec030_app')), 0, 'the roles made here are gone');

SELECT * FROM finish();
