-- Port of test/pgtap/31_hint_quoting.sql to relaybus 0.3.0: the hints of publish,
-- publish_batch and claim for a handler that is not subscribed come from 0.3.0's entry
-- points (relaybus_*_positions) and must quote as 0.2.1's do; every assertion carries over
-- unchanged.
--
-- Guarantees (issue 32, finding 4): a hint that suggests SQL quotes the name it pastes in as
-- PostgreSQL's quote_literal does, so that running what it suggests names that handler and
-- runs nothing else. For handler names with a quote, a backslash, both, and a statement
-- after a closing quote: the hint of publish, publish_batch and claim for a handler that
-- is not subscribed is exactly the quoted form, and the literal in it reads back as the
-- name. (The CLI's hints: test/integration/cli.sh; the NOTICE of subscribe quoting
-- relaybus.database: test/integration/several_databases.sh.)
SELECT rb_reset();
SELECT plan(28);

-- The SQLSTATE and hint of the error a statement raises.
CREATE FUNCTION pg_temp.hint_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  state text;
  hint text;
BEGIN
  EXECUTE statement;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, hint = PG_EXCEPTION_HINT;
  RETURN state || ': ' || hint;
END
$$;

-- The value of the literal a subscribe hint suggests, evaluated as SQL.
CREATE FUNCTION pg_temp.literal_in(hint text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  value text;
BEGIN
  EXECUTE 'SELECT ' || substring(hint FROM '^42704: Subscribe it first with relaybus\.subscribe\((.*), \.\.\.\)\.$')
     INTO value;
  RETURN value;
EXCEPTION WHEN OTHERS THEN
  RETURN 'not one literal: ' || SQLERRM;
END
$$;

CREATE TEMP TABLE hostile (name text PRIMARY KEY);
INSERT INTO hostile VALUES
  ($n$y'); DROP TABLE accounts; --$n$),
  ($n$back\slash$n$),
  ($n$it's \'); DROP TABLE accounts; --$n$),
  ($n$\$n$),
  ($n$"quoted" ''twice''$n$),
  ($n$Grüße'ü$n$),
  ($n$E'x'$n$);

SELECT relaybus.subscribe('quoting', ARRAY['q.t']);

-- For every name: the three hints, exactly, and the literal in one of them read back.
SELECT is(pg_temp.hint_of(format('SELECT relaybus.publish(%L, %L, handlers => ARRAY[%L])',
                                 'q.t', '{}', name)),
          '42704: Subscribe it first with relaybus.subscribe(' || quote_literal(name) || ', ...).',
          format('publish to %s: the hint quotes it as quote_literal', name))
  FROM hostile ORDER BY name;

SELECT is(pg_temp.hint_of(format('SELECT relaybus.publish_batch(%L)',
                                 jsonb_build_array(jsonb_build_object('type', 'q.t', 'handlers',
                                                                      jsonb_build_array(name))))),
          '42704: Subscribe it first with relaybus.subscribe(' || quote_literal(name) || ', ...).',
          format('publish_batch to %s: the hint quotes it as quote_literal', name))
  FROM hostile ORDER BY name;

SELECT is(pg_temp.hint_of(format('SELECT * FROM relaybus.claim(%L, 1, %L, ARRAY[%L])',
                                 'w', '30 seconds', name)),
          '42704: Subscribe it first with relaybus.subscribe(' || quote_literal(name) || ', ...).',
          format('claim for %s: the hint quotes it as quote_literal', name))
  FROM hostile ORDER BY name;

SELECT is(pg_temp.literal_in(pg_temp.hint_of(format('SELECT * FROM relaybus.claim(%L, 1, %L, ARRAY[%L])',
                                                    'w', '30 seconds', name))),
          name, format('the literal in the hint for %s reads back as that name', name))
  FROM hostile ORDER BY name;

SELECT * FROM finish();
SELECT rb_reset();
