-- Loaded once into the 0.3.0 pgTAP database by scripts/run-tests (the default version; named,
-- so that the suite keeps testing 0.3.0 when a later one becomes the default).
CREATE EXTENSION pgtap;
CREATE EXTENSION relaybus VERSION '0.3.0';
CREATE EXTENSION dblink;
-- Which rows a transaction has locked (test/pgtap-0.3.0/135_claim_clock_and_locks.sql).
CREATE EXTENSION pgrowlocks;

-- Every suite starts from an empty bus: suites commit through dblink, so a rollback alone
-- would not isolate them.
CREATE FUNCTION public.rb_reset() RETURNS void LANGUAGE sql AS $$
  TRUNCATE relaybus.events, relaybus.deliveries, relaybus.lanes, relaybus.lane_progress,
           relaybus.exceptions, relaybus.completions, relaybus.subscriptions,
           relaybus.purge_horizons, relaybus.events_from_021;
$$;

-- A second connection to the same database, for tests of two concurrent transactions.
CREATE FUNCTION public.rb_connect(name text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF name = ANY (coalesce(dblink_get_connections(), '{}')) THEN
    PERFORM dblink_disconnect(name);
  END IF;
  PERFORM dblink_connect(name, format('dbname=%s host=%s port=%s user=%s',
    current_database(), current_setting('unix_socket_directories'),
    current_setting('port'), current_user));
END
$$;

-- True once backend pid waits for a lock (polls up to about 5 s): for tests that make one
-- connection wait for another's transaction.
CREATE FUNCTION public.rb_waits_for_lock(pid int) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..250 LOOP
    PERFORM pg_stat_clear_snapshot();
    IF EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = rb_waits_for_lock.pid
                AND a.wait_event_type = 'Lock') THEN
      RETURN true;
    END IF;
    PERFORM pg_sleep(0.02);
  END LOOP;
  RETURN false;
END
$$;

-- True once backend pid has ended (polls up to about 5 s): for tests of a connection that
-- closed or crashed.
CREATE FUNCTION public.rb_wait_backend_gone(pid int) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1 .. 500 LOOP
    PERFORM pg_stat_clear_snapshot();
    IF NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = rb_wait_backend_gone.pid) THEN
      RETURN true;
    END IF;
    PERFORM pg_sleep(0.01);
  END LOOP;
  RETURN false;
END
$$;
