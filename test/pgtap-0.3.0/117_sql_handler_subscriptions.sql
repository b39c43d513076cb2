-- Port of test/pgtap/17_sql_handler_subscriptions.sql to relaybus 0.3.0: subscribe is the
-- same C function in both versions and stores into the same subscriptions table, so every
-- assertion carries over unchanged. (No in-database handler worker runs here: the
-- subscriptions are checked, not run. subscribe's NOTICE that no worker serves this
-- database, relaybus.database being 'postgres' on the suite's cluster, is expected.)
--
-- In-database handler subscriptions: the function contract, the timeout bounds, and the
-- privilege rule. The workers run sql_function as its owner, so only a role with that
-- owner's privileges may subscribe it; without the check an admin could have a
-- superuser's function run as superuser.
SELECT rb_reset();
SELECT plan(10);

CREATE FUNCTION public.rb17_handler(e jsonb) RETURNS void LANGUAGE sql AS 'SELECT';
CREATE FUNCTION public.rb17_two(a jsonb, b jsonb) RETURNS void LANGUAGE sql AS 'SELECT';

SELECT lives_ok($$SELECT relaybus.subscribe('h17', ARRAY['t'], sql_function => 'public.rb17_handler(jsonb)', sql_timeout => '5 s')$$,
                'a superuser subscribes its own jsonb function with a timeout');
SELECT is((SELECT sql_timeout FROM relaybus.subscriptions WHERE handler = 'h17'), '5 s'::interval,
          'the timeout is stored');
SELECT throws_ok($$SELECT relaybus.subscribe('h17b', ARRAY['t'], sql_function => 'public.rb17_two(jsonb, jsonb)')$$,
                 '42883', NULL, 'a function of two arguments is refused (42883)');
SELECT throws_ok($$SELECT relaybus.subscribe('h17b', ARRAY['t'], sql_function => 'public.rb17_handler(jsonb)', sql_timeout => '0')$$,
                 '22023', NULL, 'a zero timeout is refused (22023)');
SELECT throws_ok($$SELECT relaybus.subscribe('h17b', ARRAY['t'], sql_function => 'public.rb17_handler(jsonb)', sql_timeout => '2 hours')$$,
                 '22023', NULL, 'a timeout over an hour is refused (22023)');
SELECT throws_ok($$SELECT relaybus.subscribe('h17b', ARRAY['t'], sql_timeout => '5 s')$$,
                 '22023', NULL, 'a timeout without sql_function is refused (22023)');

-- An admin that does not hold the superuser's privileges.
CREATE ROLE rbtest_p17_admin LOGIN;
SELECT FROM relaybus.grant_rights('rbtest_p17_admin', 'admin');
SET ROLE rbtest_p17_admin;
SELECT throws_ok($$SELECT relaybus.subscribe('h17c', ARRAY['t'], sql_function => 'public.rb17_handler(jsonb)')$$,
                 '42501', NULL, 'an admin may not subscribe a function owned by a role whose privileges it lacks (42501)');
RESET ROLE;
CREATE FUNCTION public.rb17_own(e jsonb) RETURNS void LANGUAGE sql AS 'SELECT';
ALTER FUNCTION public.rb17_own(jsonb) OWNER TO rbtest_p17_admin;
SET ROLE rbtest_p17_admin;
SELECT lives_ok($$SELECT relaybus.subscribe('h17d', ARRAY['t'], sql_function => 'public.rb17_own(jsonb)')$$,
                'the same admin may subscribe a function it owns');
-- The rule is checked against the role actually calling subscribe (issue 9, finding 3): here
-- the admin's SECURITY DEFINER function, even when a superuser calls it. Checked against the
-- session's role, the superuser, it would pass.
RESET ROLE;
CREATE FUNCTION public.rb17_wrapper() RETURNS void LANGUAGE sql SECURITY DEFINER
  SET search_path = pg_catalog
  AS $$SELECT relaybus.subscribe('h17c', ARRAY['t'], sql_function => 'public.rb17_handler(jsonb)')$$;
ALTER FUNCTION public.rb17_wrapper() OWNER TO rbtest_p17_admin;
SELECT throws_ok($$SELECT public.rb17_wrapper()$$, '42501', NULL,
                 'called through the admin''s SECURITY DEFINER function by a superuser, it is checked as the admin (42501)');
SELECT is((SELECT count(*)::int FROM relaybus.subscriptions WHERE handler IN ('h17b', 'h17c')), 0,
          'nothing was written by the refused calls');

SELECT rb_reset();
DROP FUNCTION public.rb17_own(jsonb);
DROP FUNCTION public.rb17_handler(jsonb);
DROP FUNCTION public.rb17_two(jsonb, jsonb);
DROP OWNED BY rbtest_p17_admin;
DROP OWNED BY rbtest_p17_admin;
DROP ROLE rbtest_p17_admin;
SELECT * FROM finish();
