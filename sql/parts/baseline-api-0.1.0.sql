--------------------------------------------------------------------------------
-- 0.1.0 API: the row-lease baseline, in PL/pgSQL and SQL (no C). Same names and
-- signatures as 0.2.0, except that subscribe has no sql_timeout and there is no lane_of.
-- A claim updates the delivery row (status 'processing', attempts + 1, lease owner, token
-- and expiry), extend_lease updates it again, a completion marks it 'completed' and keeps
-- it. The attempt is charged at claim, so fail and takeovers do not charge another one,
-- and release gives it back.
--
-- Lease tokens: 'v0.' || a UUID new at every claim || '.' || char_length(handler) || '.'
-- || handler || event_id. The UUID fences: a token is valid while the delivery row still
-- carries it and is 'processing'.
--
-- Internal helpers start with an underscore; they get no grant (and PUBLIC loses EXECUTE
-- below), only the SECURITY DEFINER functions call them.
--------------------------------------------------------------------------------

-- _check_name(what, value): raises 22023 when value is empty or longer than 1000 bytes
-- (the name rules of 0.2.0). Touches nothing.
CREATE FUNCTION relaybus._check_name(what text, value text) RETURNS void
  LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  IF value = '' THEN
    RAISE EXCEPTION '% must not be empty', what USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF octet_length(value) > 1000 THEN
    RAISE EXCEPTION '% is longer than 1000 bytes', what USING ERRCODE = 'invalid_parameter_value';
  END IF;
END
$fn$;

-- _check_names(what, names, element_what): a text[] argument must be one-dimensional,
-- without NULL elements (22004), each element a valid name. A NULL array passes.
-- Touches nothing.
CREATE FUNCTION relaybus._check_names(what text, names text[], element_what text)
  RETURNS void
  LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  n text;
BEGIN
  IF names IS NULL THEN
    RETURN;
  END IF;
  IF array_ndims(names) > 1 THEN
    RAISE EXCEPTION '% must be a one-dimensional array', what
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF array_position(names, NULL) IS NOT NULL THEN
    RAISE EXCEPTION '% must not contain NULL', what USING ERRCODE = 'null_value_not_allowed';
  END IF;
  FOREACH n IN ARRAY coalesce(names, '{}') LOOP
    PERFORM relaybus._check_name(element_what, n);
  END LOOP;
END
$fn$;

-- _check_lease(lease): more than 0 and at most 1 day (months count 30 days, days 24
-- hours, as interval comparison does). 22004 for NULL, 22023 out of range. Touches nothing.
CREATE FUNCTION relaybus._check_lease(lease interval) RETURNS void
  LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  IF lease IS NULL THEN
    RAISE EXCEPTION 'lease must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF lease <= interval '0' THEN
    RAISE EXCEPTION 'lease must be positive' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF lease > interval '1 day' THEN
    RAISE EXCEPTION 'lease must be at most 1 day' USING ERRCODE = 'invalid_parameter_value';
  END IF;
END
$fn$;

-- _check_worker(worker): 22004 for NULL, 22023 for an invalid name. Touches nothing.
CREATE FUNCTION relaybus._check_worker(worker text) RETURNS void
  LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  IF worker IS NULL THEN
    RAISE EXCEPTION 'worker must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  PERFORM relaybus._check_name('worker', worker);
END
$fn$;

-- _parse_token(token): the (event_id, handler) a lease token names. Strict: 'v0.', a
-- lowercase canonical UUID, '.', the handler's length in characters (no sign, no leading
-- zero), '.', the handler, then a non-empty event id. 22004 for NULL, 22023 when
-- malformed. Touches nothing.
CREATE FUNCTION relaybus._parse_token(token text, OUT event_id text, OUT handler text)
  LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  parts text[];
  handler_length integer;
BEGIN
  IF token IS NULL THEN
    RAISE EXCEPTION 'lease_token must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF left(token, 3) <> 'v0.' THEN
    RAISE EXCEPTION 'malformed lease token: unknown format'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  parts := regexp_match(token,
    '^v0\.([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.(0|[1-9][0-9]{0,8})\.(.*)$');
  IF parts IS NULL THEN
    RAISE EXCEPTION 'malformed lease token: bad lease id or handler length'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  handler_length := parts[2]::integer;
  IF handler_length = 0 THEN
    RAISE EXCEPTION 'malformed lease token: handler is empty'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF handler_length >= char_length(parts[3]) THEN
    RAISE EXCEPTION 'malformed lease token: event id is missing'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  handler := left(parts[3], handler_length);
  event_id := substr(parts[3], handler_length + 1);
END
$fn$;

-- _parse_tokens(tokens): _parse_token for every element, all before anything is written.
-- 22004 for a NULL array or element, 22023 for a multi-dimensional array or a malformed
-- token. Touches nothing.
CREATE FUNCTION relaybus._parse_tokens(tokens text[], OUT event_ids text[], OUT handlers text[])
  LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  t text;
  parsed record;
BEGIN
  IF tokens IS NULL THEN
    RAISE EXCEPTION 'lease_tokens must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF array_ndims(tokens) > 1 THEN
    RAISE EXCEPTION 'lease_tokens must be a one-dimensional array'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF array_position(tokens, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'lease_tokens must not contain NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  event_ids := '{}';
  handlers := '{}';
  FOREACH t IN ARRAY tokens LOOP
    parsed := relaybus._parse_token(t);
    event_ids := event_ids || parsed.event_id;
    handlers := handlers || parsed.handler;
  END LOOP;
END
$fn$;

-- _backoff(attempts, backoff_base, backoff_max): the wait after failed attempt number
-- attempts: backoff_base * 2^(attempts - 1), capped at backoff_max, computed in
-- microseconds from extract(epoch) as 0.2.0 does. Touches nothing.
CREATE FUNCTION relaybus._backoff(attempts integer, backoff_base interval, backoff_max interval)
  RETURNS interval
  LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  base_us numeric := round(extract(epoch FROM backoff_base) * 1000000);
  max_us numeric := round(extract(epoch FROM backoff_max) * 1000000);
  delay_us numeric;
BEGIN
  IF attempts <= 0 OR base_us <= 0 THEN
    RETURN interval '0';
  END IF;
  -- 2^100 microseconds exceeds every interval: the exponent is capped so nothing overflows.
  delay_us := least(max_us, base_us * power(2::numeric, least(attempts - 1, 100)));
  RETURN make_interval(secs => (delay_us / 1000000)::double precision);
END
$fn$;

-- _retention(setting, default_seconds): a retention setting (relaybus.retention_dead or
-- relaybus.retention_completed) as an interval. Unset or empty: the default. A bare number
-- is seconds; a value with a unit ('14d', '2h', '30min', '10s': how SHOW prints a
-- setting in seconds) is read as an interval. Reads the setting only.
CREATE FUNCTION relaybus._retention(setting text, default_seconds integer) RETURNS interval
  LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  value text := btrim(current_setting(setting, true));
BEGIN
  IF value IS NULL OR value = '' THEN
    RETURN make_interval(secs => default_seconds);
  END IF;
  IF value ~ '^[0-9]+$' THEN
    RETURN make_interval(secs => value::double precision);
  END IF;
  -- Days as 24 hours, as 0.2.0 counts the setting in seconds.
  RETURN make_interval(secs => extract(epoch FROM value::interval)::double precision);
END
$fn$;

-- subscribe: registers or updates handler for event_types ('*' = every type) with its
-- retry policy; sql_function(jsonb) marks it an in-database handler (a plain claim skips
-- it; 0.1.0 has no background worker to run it). Returns nothing. Writes subscriptions.
CREATE FUNCTION relaybus.subscribe(
  handler text, event_types text[], max_attempts integer DEFAULT 25,
  backoff_base interval DEFAULT '1 second', backoff_max interval DEFAULT '1 hour',
  sql_function regprocedure DEFAULT NULL) RETURNS void
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
  t text;
  proc record;
BEGIN
  IF subscribe.handler IS NULL THEN
    RAISE EXCEPTION 'handler must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  ELSIF subscribe.event_types IS NULL THEN
    RAISE EXCEPTION 'event_types must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  ELSIF subscribe.max_attempts IS NULL THEN
    RAISE EXCEPTION 'max_attempts must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  ELSIF subscribe.backoff_base IS NULL THEN
    RAISE EXCEPTION 'backoff_base must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  ELSIF subscribe.backoff_max IS NULL THEN
    RAISE EXCEPTION 'backoff_max must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  PERFORM relaybus._check_name('handler', subscribe.handler);
  IF array_ndims(subscribe.event_types) > 1 THEN
    RAISE EXCEPTION 'event_types must be a one-dimensional array'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF array_position(subscribe.event_types, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'event_types must not contain NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF cardinality(subscribe.event_types) = 0 THEN
    RAISE EXCEPTION 'event_types must not be empty' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  FOREACH t IN ARRAY subscribe.event_types LOOP
    PERFORM relaybus._check_name('event type', t);
  END LOOP;
  IF subscribe.max_attempts < 1 THEN
    RAISE EXCEPTION 'max_attempts must be at least 1' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF subscribe.backoff_base < interval '0' THEN
    RAISE EXCEPTION 'backoff_base must not be negative' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF subscribe.backoff_max < subscribe.backoff_base THEN
    RAISE EXCEPTION 'backoff_max must not be less than backoff_base'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF subscribe.sql_function IS NOT NULL THEN
    SELECT p.pronargs = 1 AND p.proargtypes[0] = 'jsonb'::regtype AS takes_jsonb,
           p.prokind = 'f' AND NOT p.proretset AS plain
      INTO proc
      FROM pg_catalog.pg_proc p WHERE p.oid = subscribe.sql_function;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'sql_function does not exist' USING ERRCODE = 'undefined_object';
    END IF;
    IF NOT (proc.takes_jsonb AND proc.plain) THEN
      RAISE EXCEPTION 'sql_function must be a function (not a procedure or set-returning) '
                      'taking exactly one jsonb argument'
        USING ERRCODE = 'undefined_function';
    END IF;
  END IF;
  INSERT INTO relaybus.subscriptions AS s
         (handler, event_types, max_attempts, backoff_base, backoff_max, sql_function)
  VALUES (subscribe.handler, subscribe.event_types, subscribe.max_attempts,
          subscribe.backoff_base, subscribe.backoff_max, subscribe.sql_function)
  ON CONFLICT (handler) DO UPDATE
     SET event_types = excluded.event_types, max_attempts = excluded.max_attempts,
         backoff_base = excluded.backoff_base, backoff_max = excluded.backoff_max,
         sql_function = excluded.sql_function, updated_at = now();
END
$fn$;

-- unsubscribe: removes the handler's subscription; its deliveries stay (a re-subscribe
-- resumes them; requeue and requeue_dead still work on its dead letters). Returns nothing.
-- Writes subscriptions.
CREATE FUNCTION relaybus.unsubscribe(handler text) RETURNS void
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  IF handler IS NULL THEN
    RAISE EXCEPTION 'handler must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  DELETE FROM relaybus.subscriptions s WHERE s.handler = unsubscribe.handler;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'handler "%" is not subscribed', handler USING ERRCODE = 'undefined_object';
  END IF;
END
$fn$;

-- _publish(err_prefix, ...): the body of publish and of each publish_batch element;
-- err_prefix ('' or 'events[i]: ') starts every error message. Inserts the event and one
-- pending delivery per target handler (the given handlers, or the subscribers of type).
-- A repeated event id locks the event row and adds deliveries only for target handlers
-- that have no delivery row of the event (completed rows stay in 0.1.0, so a completed
-- handler is not added again), with the stored event's type and key. Returns the event id.
-- Reads subscriptions; writes events, deliveries, key_counters (keyed events).
CREATE FUNCTION relaybus._publish(
  err_prefix text, event_type text, event_payload jsonb, event_key text, given_id text,
  given_handlers text[], due_at timestamptz, event_headers jsonb) RETURNS text
  LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  new_id text;
  stored_type text;
  stored_key text;
  targets text[];
  missing text;
  seq bigint;
  inserted integer;
BEGIN
  IF event_type IS NULL THEN
    RAISE EXCEPTION '%type must not be NULL', err_prefix USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF event_payload IS NULL THEN
    RAISE EXCEPTION '%payload must not be NULL', err_prefix
      USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF given_handlers IS NOT NULL AND array_ndims(given_handlers) > 1 THEN
    RAISE EXCEPTION '%handlers must be a one-dimensional array', err_prefix
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF array_position(given_handlers, NULL) IS NOT NULL THEN
    RAISE EXCEPTION '%handlers must not contain NULL', err_prefix
      USING ERRCODE = 'null_value_not_allowed';
  END IF;
  PERFORM relaybus._check_name(err_prefix || 'type', event_type);
  IF jsonb_typeof(event_payload) <> 'object' THEN
    RAISE EXCEPTION '%payload must be a JSON object', err_prefix
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF event_headers IS NOT NULL AND jsonb_typeof(event_headers) <> 'object' THEN
    RAISE EXCEPTION '%headers must be a JSON object or NULL', err_prefix
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF event_key IS NOT NULL THEN
    PERFORM relaybus._check_name(err_prefix || 'key', event_key);
  END IF;
  IF given_id IS NOT NULL THEN
    PERFORM relaybus._check_name(err_prefix || 'event_id', given_id);
  END IF;
  PERFORM relaybus._check_names(err_prefix || 'handlers', given_handlers,
                                err_prefix || 'handler name');
  IF given_handlers IS NOT NULL THEN
    SELECT min(h) INTO missing FROM unnest(given_handlers) AS h
     WHERE NOT EXISTS (SELECT 1 FROM relaybus.subscriptions s WHERE s.handler = h);
    IF missing IS NOT NULL THEN
      RAISE EXCEPTION '%handler "%" is not subscribed', err_prefix, missing
        USING ERRCODE = 'undefined_object';
    END IF;
  END IF;

  new_id := coalesce(given_id, gen_random_uuid()::text);
  INSERT INTO relaybus.events (id, type, key, payload, headers)
  VALUES (new_id, event_type, event_key, event_payload, event_headers)
  ON CONFLICT (id) DO NOTHING;
  GET DIAGNOSTICS inserted = ROW_COUNT;

  IF inserted = 1 THEN
    stored_type := event_type;
    stored_key := event_key;
  ELSE
    -- A repeat: the event row lock serializes repeats of one id and keeps purge_expired
    -- (SKIP LOCKED) away from it.
    SELECT e.type, e.key INTO stored_type, stored_key
      FROM relaybus.events e WHERE e.id = new_id FOR UPDATE;
    IF NOT FOUND THEN
      RAISE EXCEPTION '%event "%" was purged while being republished', err_prefix, new_id
        USING ERRCODE = 'serialization_failure';
    END IF;
  END IF;

  SELECT coalesce(array_agg(s.handler ORDER BY s.handler COLLATE "C"), '{}') INTO targets
    FROM relaybus.subscriptions s
   WHERE CASE WHEN given_handlers IS NULL
              THEN stored_type = ANY (s.event_types) OR '*' = ANY (s.event_types)
              ELSE s.handler = ANY (given_handlers) END
     AND (inserted = 1 OR NOT EXISTS (SELECT 1 FROM relaybus.deliveries d
                                       WHERE d.event_id = new_id AND d.handler = s.handler));
  IF cardinality(targets) = 0 THEN
    RETURN new_id;
  END IF;

  IF stored_key IS NOT NULL THEN
    -- The counter row stays locked until commit: a later publisher of the key waits, so
    -- sequence order is commit order.
    INSERT INTO relaybus.key_counters AS c (key, last_sequence) VALUES (stored_key, 1)
    ON CONFLICT (key) DO UPDATE SET last_sequence = c.last_sequence + 1
    RETURNING c.last_sequence INTO seq;
  END IF;
  INSERT INTO relaybus.deliveries (event_id, handler, key, sequence, available_at)
  SELECT new_id, h, stored_key, seq, coalesce(due_at, now()) FROM unnest(targets) AS h;
  RETURN new_id;
END
$fn$;

-- publish: in the caller's transaction, inserts the event and one delivery per handler
-- (the subscribers of type, or handlers). Idempotent by event_id: a repeat adds deliveries
-- only for handlers that have no delivery row of the event. Returns the event id (a UUID
-- when not given). Reads subscriptions; writes events, deliveries, key_counters (keyed
-- events). Locks the key's counter row until commit; on a repeat, the event row.
CREATE FUNCTION relaybus.publish(
  type text, payload jsonb DEFAULT '{}', key text DEFAULT NULL, event_id text DEFAULT NULL,
  handlers text[] DEFAULT NULL, available_at timestamptz DEFAULT NULL,
  headers jsonb DEFAULT NULL) RETURNS text
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT relaybus._publish('', $1, $2, $3, $4, $5, $6, $7)
$fn$;

-- publish_batch: publish for each element of a JSON array of
-- {type, payload, key, id, handlers, available_at, headers}, in order; every element is
-- read and checked before any is published. Errors are prefixed 'events[i]: '. Returns
-- the event ids in input order. Writes events, deliveries, key_counters.
CREATE FUNCTION relaybus.publish_batch(events jsonb) RETURNS SETOF text
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  e jsonb;
  i integer;
  n integer;
  where_ text;
  types text[] := '{}';
  payloads jsonb[] := '{}';
  keys text[] := '{}';
  ids text[] := '{}';
  handler_lists jsonb[] := '{}';
  due text[] := '{}';
  headers_list jsonb[] := '{}';
  handler_list text[];
BEGIN
  IF events IS NULL THEN
    RAISE EXCEPTION 'events must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF jsonb_typeof(events) <> 'array' THEN
    RAISE EXCEPTION 'events must be a JSON array of event objects'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  n := jsonb_array_length(events);
  FOR i IN 0 .. n - 1 LOOP
    e := events -> i;
    where_ := format('events[%s]: ', i);
    IF jsonb_typeof(e) <> 'object' THEN
      RAISE EXCEPTION '%must be a JSON object', where_ USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(jsonb_typeof(e -> 'type'), '') <> 'string' THEN
      RAISE EXCEPTION '%type must be a string', where_ USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(jsonb_typeof(e -> 'key'), 'null') NOT IN ('string', 'null') THEN
      RAISE EXCEPTION '%key must be a string or null', where_
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(jsonb_typeof(e -> 'id'), 'null') NOT IN ('string', 'null') THEN
      RAISE EXCEPTION '%id must be a string or null', where_
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(jsonb_typeof(e -> 'handlers'), 'null') NOT IN ('array', 'null') THEN
      RAISE EXCEPTION '%handlers must be an array of strings or null', where_
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(jsonb_typeof(e -> 'available_at'), 'null') NOT IN ('string', 'null') THEN
      RAISE EXCEPTION '%available_at must be a timestamp string or null', where_
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- An unparsable timestamp raises PostgreSQL's own 22007 here, before anything is written.
    PERFORM (e ->> 'available_at')::timestamptz;
    types := types || (e ->> 'type');
    payloads := payloads || coalesce(e -> 'payload', '{}'::jsonb);  -- JSON null: refused later
    keys := keys || (e ->> 'key');
    ids := ids || (e ->> 'id');
    handler_lists := handler_lists || (e -> 'handlers');
    due := due || (e ->> 'available_at');
    headers_list := headers_list ||
      CASE WHEN jsonb_typeof(e -> 'headers') <> 'null' THEN e -> 'headers' END;
  END LOOP;

  FOR i IN 1 .. n LOOP
    handler_list := NULL;
    IF jsonb_typeof(handler_lists[i]) = 'array' THEN
      -- A non-string element becomes NULL, refused as a NULL handler (22004), as in 0.2.0.
      SELECT coalesce(array_agg(CASE WHEN jsonb_typeof(h) = 'string' THEN h #>> '{}' END
                                ORDER BY o), '{}')
        INTO handler_list
        FROM jsonb_array_elements(handler_lists[i]) WITH ORDINALITY AS x(h, o);
    END IF;
    RETURN NEXT relaybus._publish(format('events[%s]: ', i - 1), types[i], payloads[i],
                                  keys[i], ids[i], handler_list, due[i]::timestamptz,
                                  headers_list[i]);
  END LOOP;
END
$fn$;

-- _take_over(only_handlers): returns deliveries whose lease expired (of only_handlers, or
-- of every handler when NULL) to the queue: 'pending' and due as before (the attempt was
-- charged at claim), or 'dead' when attempts reached the handler's max_attempts (25 when
-- unsubscribed); lease fields cleared, last_error 'lease expired'. At most 1000 per call;
-- rows locked by another transaction (a completion in progress) are skipped. Returns the
-- number of deliveries taken over. Reads subscriptions; writes deliveries.
CREATE FUNCTION relaybus._take_over(only_handlers text[]) RETURNS integer
  LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  n integer;
BEGIN
  WITH expired AS (
    SELECT d.event_id, d.handler, d.attempts >= coalesce(s.max_attempts, 25) AS exhausted
      FROM relaybus.deliveries d
      LEFT JOIN relaybus.subscriptions s ON s.handler = d.handler
     WHERE d.status = 'processing' AND d.lease_expires_at <= now()
       AND (only_handlers IS NULL OR d.handler = ANY (only_handlers))
     ORDER BY d.lease_expires_at
     LIMIT 1000
       FOR UPDATE OF d SKIP LOCKED
  )
  UPDATE relaybus.deliveries d
     SET status = CASE WHEN x.exhausted THEN 'dead' ELSE 'pending' END,
         lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
         last_error = 'lease expired', updated_at = now()
    FROM expired x
   WHERE d.event_id = x.event_id AND d.handler = x.handler;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$fn$;

-- claim: takes over the expired leases of handlers (default: every subscribed handler
-- without sql_function), then leases up to batch_size due pending deliveries to worker,
-- oldest due first, respecting per-key order (a keyed delivery only when no earlier
-- delivery of its handler and key is pending or processing and none is processing). Each
-- claimed row: status 'processing', attempts + 1 (the attempt is charged now), a new token,
-- lease_expires_at = now() + lease. Returns one row per delivery; attempts = attempts
-- charged before this claim. Reads subscriptions, events; writes deliveries.
-- Locks: the claimed deliveries (FOR UPDATE SKIP LOCKED).
CREATE FUNCTION relaybus.claim(
  worker text, batch_size integer DEFAULT 10, lease interval DEFAULT '30 seconds',
  handlers text[] DEFAULT NULL)
  RETURNS TABLE(lease_token text, event_id text, handler text, type text, key text,
                payload jsonb, headers jsonb, attempts integer, published_at timestamptz)
  LANGUAGE plpgsql VOLATILE ROWS 10 SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
  wanted text[];
  missing text;
BEGIN
  IF claim.worker IS NULL THEN
    RAISE EXCEPTION 'worker must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF claim.batch_size IS NULL THEN
    RAISE EXCEPTION 'batch_size must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF claim.lease IS NULL THEN
    RAISE EXCEPTION 'lease must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  PERFORM relaybus._check_name('worker', claim.worker);
  IF claim.batch_size < 1 OR claim.batch_size > 10000 THEN
    RAISE EXCEPTION 'batch_size must be between 1 and 10000, got %', claim.batch_size
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  PERFORM relaybus._check_lease(claim.lease);
  PERFORM relaybus._check_names('handlers', claim.handlers, 'handler name');
  IF claim.handlers IS NULL THEN
    SELECT coalesce(array_agg(s.handler), '{}') INTO wanted
      FROM relaybus.subscriptions s WHERE s.sql_function IS NULL;
  ELSE
    SELECT min(h) INTO missing FROM unnest(claim.handlers) AS h
     WHERE NOT EXISTS (SELECT 1 FROM relaybus.subscriptions s WHERE s.handler = h);
    IF missing IS NOT NULL THEN
      RAISE EXCEPTION 'handler "%" is not subscribed', missing USING ERRCODE = 'undefined_object';
    END IF;
    wanted := claim.handlers;
  END IF;
  IF cardinality(wanted) = 0 THEN
    RETURN;
  END IF;

  PERFORM relaybus._take_over(wanted);

  -- Only the head of a key is eligible, so a batch holds at most one delivery per
  -- (handler, key). SKIP LOCKED: a head another claimer is taking stays pending in this
  -- snapshot and so still blocks the rest of its key.
  RETURN QUERY
  WITH picked AS (
    SELECT d.event_id, d.handler
      FROM relaybus.deliveries d
     WHERE d.handler = ANY (wanted) AND d.status = 'pending' AND d.available_at <= now()
       AND (d.key IS NULL OR NOT EXISTS (
             SELECT 1 FROM relaybus.deliveries p
              WHERE p.handler = d.handler AND p.key = d.key
                AND (p.status = 'processing'
                     OR (p.status = 'pending' AND p.sequence < d.sequence))))
     ORDER BY d.available_at, d.event_id, d.handler
     LIMIT claim.batch_size
       FOR UPDATE OF d SKIP LOCKED
  ), leased AS (
    UPDATE relaybus.deliveries d
       SET status = 'processing', attempts = d.attempts + 1, lease_owner = claim.worker,
           lease_token = 'v0.' || gen_random_uuid()::text || '.' || char_length(d.handler)::text
                         || '.' || d.handler || d.event_id,
           lease_expires_at = now() + claim.lease, updated_at = now()
      FROM picked x
     WHERE d.event_id = x.event_id AND d.handler = x.handler
    RETURNING d.lease_token, d.event_id, d.handler, d.key, d.attempts - 1 AS attempts,
              d.available_at
  )
  SELECT l.lease_token, l.event_id, l.handler, e.type, l.key, e.payload, e.headers,
         l.attempts, e.published_at
    FROM leased l LEFT JOIN relaybus.events e ON e.id = l.event_id
   ORDER BY l.available_at, l.event_id, l.handler;
END
$fn$;

-- extend_lease: sets lease_expires_at = now() + lease on every delivery worker has in
-- processing (also those whose lease expired but were not taken over yet). Returns how
-- many. Writes deliveries.
CREATE FUNCTION relaybus.extend_lease(worker text, lease interval DEFAULT '30 seconds')
  RETURNS integer
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  n integer;
BEGIN
  PERFORM relaybus._check_worker(extend_lease.worker);
  PERFORM relaybus._check_lease(extend_lease.lease);
  UPDATE relaybus.deliveries d SET lease_expires_at = now() + extend_lease.lease
   WHERE d.status = 'processing' AND d.lease_owner = extend_lease.worker;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$fn$;

-- complete_many: marks 'completed' (the row is kept) every delivery whose row still
-- carries its token and is 'processing', in one statement; an expired lease that nobody
-- took over still completes. Every token is parsed first: one malformed token fails the
-- call. Returns how many were completed (a token given twice counts once).
-- Writes deliveries (the row lock makes it effectively-once against a takeover).
CREATE FUNCTION relaybus.complete_many(lease_tokens text[]) RETURNS integer
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  parsed record;
  n integer;
BEGIN
  parsed := relaybus._parse_tokens(lease_tokens);
  UPDATE relaybus.deliveries d
     SET status = 'completed', lease_owner = NULL, lease_token = NULL,
         lease_expires_at = NULL, updated_at = now()
    FROM unnest(parsed.event_ids, parsed.handlers, lease_tokens) AS t(event_id, handler, token)
   WHERE d.event_id = t.event_id AND d.handler = t.handler AND d.lease_token = t.token
     AND d.status = 'processing';
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$fn$;

-- complete: complete_many for one token. Returns true when completed, false when the
-- lease was lost (taken over, or the delivery was claimed again or ended): nothing
-- changed then. Inside the handler's own transaction this is effectively-once: the
-- completion's row lock and a takeover's update are on the same row. Writes deliveries.
CREATE FUNCTION relaybus.complete(lease_token text) RETURNS boolean
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  parsed record;
BEGIN
  parsed := relaybus._parse_token(complete.lease_token);
  UPDATE relaybus.deliveries d
     SET status = 'completed', lease_owner = NULL, lease_token = NULL,
         lease_expires_at = NULL, updated_at = now()
   WHERE d.event_id = parsed.event_id AND d.handler = parsed.handler
     AND d.lease_token = complete.lease_token AND d.status = 'processing';
  RETURN FOUND;
END
$fn$;

-- _end_attempt(token, ending, error, retry_at): the body of fail ('fail'), bury ('bury')
-- and release ('release'). Locks the delivery if its row still carries the token and is
-- 'processing'; fail: 'dead' when attempts (charged at claim) reached max_attempts (25
-- when unsubscribed), else 'pending' due at retry_at or after the backoff; bury: 'dead';
-- release: 'pending', attempts - 1, due time unchanged. Lease fields cleared,
-- last_error = coalesce(error, last_error). Returns 'retry', 'dead', 'released' or 'lost'.
-- Reads subscriptions; writes deliveries.
CREATE FUNCTION relaybus._end_attempt(token text, ending text, error text,
                                      retry_at timestamptz) RETURNS text
  LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  parsed record;
  d record;
  outcome text;
  due timestamptz;
BEGIN
  parsed := relaybus._parse_token(token);
  SELECT x.attempts, coalesce(s.max_attempts, 25) AS max_attempts,
         coalesce(s.backoff_base, interval '1 second') AS backoff_base,
         coalesce(s.backoff_max, interval '1 hour') AS backoff_max
    INTO d
    FROM relaybus.deliveries x
    LEFT JOIN relaybus.subscriptions s ON s.handler = x.handler
   WHERE x.event_id = parsed.event_id AND x.handler = parsed.handler
     AND x.lease_token = _end_attempt.token AND x.status = 'processing'
     FOR UPDATE OF x;
  IF NOT FOUND THEN
    RETURN 'lost';
  END IF;
  IF ending = 'release' THEN
    UPDATE relaybus.deliveries x
       SET status = 'pending', attempts = greatest(x.attempts - 1, 0), lease_owner = NULL,
           lease_token = NULL, lease_expires_at = NULL, updated_at = now()
     WHERE x.event_id = parsed.event_id AND x.handler = parsed.handler;
    RETURN 'released';
  END IF;
  IF ending = 'bury' OR d.attempts >= d.max_attempts THEN
    outcome := 'dead';
  ELSE
    outcome := 'retry';
    due := coalesce(retry_at, now() + relaybus._backoff(d.attempts, d.backoff_base,
                                                        d.backoff_max));
  END IF;
  UPDATE relaybus.deliveries x
     SET status = CASE WHEN outcome = 'dead' THEN 'dead' ELSE 'pending' END,
         available_at = coalesce(due, x.available_at),
         last_error = coalesce(_end_attempt.error, x.last_error),
         lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = now()
   WHERE x.event_id = parsed.event_id AND x.handler = parsed.handler;
  RETURN outcome;
END
$fn$;

-- fail: ends the attempt as failed (it was charged at claim); returns 'retry' (rescheduled
-- after backoff_base * 2^(attempts-1) capped at backoff_max, or at retry_at), 'dead'
-- (attempts exhausted) or 'lost' (lease lost, nothing changed). Reads subscriptions;
-- writes deliveries.
CREATE FUNCTION relaybus.fail(lease_token text, error text DEFAULT NULL,
                              retry_at timestamptz DEFAULT NULL) RETURNS text
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT relaybus._end_attempt($1, 'fail', $2, $3)
$fn$;

-- bury: dead-letters the delivery now (its attempt was charged at claim). false = lease
-- lost. Writes deliveries.
CREATE FUNCTION relaybus.bury(lease_token text, error text DEFAULT NULL) RETURNS boolean
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT relaybus._end_attempt($1, 'bury', $2, NULL) <> 'lost'
$fn$;

-- release: gives the delivery back without charging an attempt (the one charged at claim
-- is taken back); it stays due. false = lease lost. Writes deliveries.
CREATE FUNCTION relaybus.release(lease_token text) RETURNS boolean
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT relaybus._end_attempt($1, 'release', NULL, NULL) <> 'lost'
$fn$;

-- relinquish: 0.1.0 has no lanes, so there is nothing to hand back: validates worker and
-- returns 0 (release the unfinished deliveries instead). Touches nothing.
CREATE FUNCTION relaybus.relinquish(worker text) RETURNS integer
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  PERFORM relaybus._check_worker(relinquish.worker);
  RETURN 0;
END
$fn$;

-- take_over_expired: returns up to 1000 deliveries whose lease expired to pending (or dead
-- when out of attempts), skipping rows locked by a completion in progress. Returns how
-- many deliveries (0.2.0 counts lanes). Reads subscriptions; writes deliveries.
CREATE FUNCTION relaybus.take_over_expired() RETURNS integer
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT relaybus._take_over(NULL)
$fn$;

-- purge_expired: deletes dead deliveries not updated for relaybus.retention_dead (default
-- 14 days), completed deliveries and events without deliveries older than
-- relaybus.retention_completed (default 7 days). Each kind in slices of 10,000: call it
-- until it returns 0. Returns rows deleted. Writes deliveries, events.
CREATE FUNCTION relaybus.purge_expired() RETURNS bigint
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  keep_dead interval := relaybus._retention('relaybus.retention_dead', 14 * 24 * 3600);
  keep_completed interval := relaybus._retention('relaybus.retention_completed', 7 * 24 * 3600);
  n bigint;
  total bigint := 0;
BEGIN
  DELETE FROM relaybus.deliveries d WHERE (d.event_id, d.handler) IN (
    SELECT x.event_id, x.handler FROM relaybus.deliveries x
     WHERE x.status = 'dead' AND x.updated_at < now() - keep_dead
     ORDER BY x.updated_at LIMIT 10000 FOR UPDATE SKIP LOCKED);
  GET DIAGNOSTICS n = ROW_COUNT;
  total := total + n;
  DELETE FROM relaybus.deliveries d WHERE (d.event_id, d.handler) IN (
    SELECT x.event_id, x.handler FROM relaybus.deliveries x
     WHERE x.status = 'completed' AND x.updated_at < now() - keep_completed
     ORDER BY x.updated_at LIMIT 10000 FOR UPDATE SKIP LOCKED);
  GET DIAGNOSTICS n = ROW_COUNT;
  total := total + n;
  -- A repeat publish adding deliveries locks the event first, so it is skipped here.
  DELETE FROM relaybus.events e WHERE e.id IN (
    SELECT x.id FROM relaybus.events x
     WHERE x.published_at < now() - keep_completed
       AND NOT EXISTS (SELECT 1 FROM relaybus.deliveries d WHERE d.event_id = x.id)
     LIMIT 10000 FOR UPDATE SKIP LOCKED);
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN total + n;
END
$fn$;

--------------------------------------------------------------------------------
-- Admin functions.
--------------------------------------------------------------------------------

-- requeue: moves one dead delivery back to pending with a fresh attempt budget, due now.
-- Returns false when (event_id, handler) is not a dead delivery. Writes deliveries.
CREATE FUNCTION relaybus.requeue(event_id text, handler text) RETURNS boolean
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  IF event_id IS NULL OR handler IS NULL THEN
    RAISE EXCEPTION 'event_id and handler must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  UPDATE relaybus.deliveries d
     SET status = 'pending', attempts = 0, available_at = now(), updated_at = now()
   WHERE d.event_id = requeue.event_id AND d.handler = requeue.handler AND d.status = 'dead';
  RETURN FOUND;
END
$fn$;

-- requeue_dead: requeue for every dead delivery of handler (NULL: of every handler).
-- Returns how many. Writes deliveries.
CREATE FUNCTION relaybus.requeue_dead(handler text DEFAULT NULL) RETURNS bigint
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  n bigint;
BEGIN
  IF handler IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM relaybus.subscriptions s WHERE s.handler = requeue_dead.handler)
     AND NOT EXISTS (SELECT 1 FROM relaybus.deliveries d WHERE d.handler = requeue_dead.handler) THEN
    RAISE EXCEPTION 'handler "%" is not subscribed and has no deliveries', handler
      USING ERRCODE = 'undefined_object';
  END IF;
  UPDATE relaybus.deliveries d
     SET status = 'pending', attempts = 0, available_at = now(), updated_at = now()
   WHERE d.status = 'dead' AND (requeue_dead.handler IS NULL OR d.handler = requeue_dead.handler);
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$fn$;

-- statistics: per handler (subscribed, or with deliveries left): pending, processing
-- (status 'processing', expired leases included until taken over), dead, completed
-- (completed rows not yet purged), oldest_pending = creation time of the oldest pending
-- delivery. Reads subscriptions, deliveries.
CREATE FUNCTION relaybus.statistics()
  RETURNS TABLE(handler text, pending bigint, processing bigint, dead bigint, completed bigint,
                oldest_pending timestamptz)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
  WITH counts AS (
    SELECT d.handler,
           count(*) FILTER (WHERE d.status = 'pending') AS pending,
           count(*) FILTER (WHERE d.status = 'processing') AS processing,
           count(*) FILTER (WHERE d.status = 'dead') AS dead,
           count(*) FILTER (WHERE d.status = 'completed') AS completed,
           min(d.created_at) FILTER (WHERE d.status = 'pending') AS oldest
      FROM relaybus.deliveries d GROUP BY d.handler
  ), names AS (
    SELECT s.handler FROM relaybus.subscriptions s
    UNION SELECT c.handler FROM counts c
  )
  SELECT n.handler, coalesce(c.pending, 0), coalesce(c.processing, 0), coalesce(c.dead, 0),
         coalesce(c.completed, 0), c.oldest
    FROM names n LEFT JOIN counts c ON c.handler = n.handler
   ORDER BY n.handler
$fn$;

-- _list_deliveries: the body of list_deliveries (PL/pgSQL rejects an argument named like
-- an output column, so it takes other names). Reads deliveries, events.
CREATE FUNCTION relaybus._list_deliveries(want_status text, want_handler text,
                                          row_limit integer)
  RETURNS TABLE(event_id text, handler text, type text, key text, status text,
                attempts integer, available_at timestamptz, last_error text,
                lease_owner text, created_at timestamptz, updated_at timestamptz)
  LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  IF want_status IS NOT NULL
     AND want_status NOT IN ('pending', 'processing', 'dead', 'completed') THEN
    RAISE EXCEPTION 'unknown status "%"', want_status
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Use pending, processing, dead, completed or NULL.';
  END IF;
  IF row_limit IS NULL OR row_limit < 0 THEN
    RAISE EXCEPTION 'max_rows must be zero or more' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  RETURN QUERY
    SELECT d.event_id, d.handler, e.type, d.key, d.status, d.attempts, d.available_at,
           d.last_error, CASE WHEN d.status = 'processing' THEN d.lease_owner END,
           d.created_at, d.updated_at
      FROM relaybus.deliveries d
      LEFT JOIN relaybus.events e ON e.id = d.event_id
     WHERE CASE WHEN want_status IS NULL THEN d.status <> 'completed'
                ELSE d.status = want_status END
       AND (want_handler IS NULL OR d.handler = want_handler)
     ORDER BY d.created_at DESC, d.event_id, d.handler
     LIMIT row_limit;
END
$fn$;

-- list_deliveries: admin listing, newest first. status: NULL (pending, processing and
-- dead), 'pending', 'processing' (lease_owner names the worker), 'dead' or 'completed'.
-- A scan: filter by status or handler on a large table. Reads deliveries, events.
CREATE FUNCTION relaybus.list_deliveries(status text DEFAULT NULL, handler text DEFAULT NULL,
                                         max_rows integer DEFAULT 100)
  RETURNS TABLE(event_id text, handler text, type text, key text, status text,
                attempts integer, available_at timestamptz, last_error text,
                lease_owner text, created_at timestamptz, updated_at timestamptz)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT * FROM relaybus._list_deliveries($1, $2, $3)
$fn$;

--------------------------------------------------------------------------------
-- Privileges: nothing for PUBLIC; each role gets EXECUTE on what its job needs. The
-- internal helpers (leading underscore) get no grant.
--------------------------------------------------------------------------------
REVOKE ALL ON SCHEMA relaybus FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA relaybus FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA relaybus FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA relaybus FROM PUBLIC;
GRANT USAGE ON SCHEMA relaybus TO relaybus_publisher, relaybus_worker, relaybus_admin;

GRANT EXECUTE ON FUNCTION
  relaybus.publish(text, jsonb, text, text, text[], timestamptz, jsonb),
  relaybus.publish_batch(jsonb)
  TO relaybus_publisher;

GRANT EXECUTE ON FUNCTION
  relaybus.claim(text, integer, interval, text[]),
  relaybus.extend_lease(text, interval),
  relaybus.complete(text),
  relaybus.complete_many(text[]),
  relaybus.fail(text, text, timestamptz),
  relaybus.bury(text, text),
  relaybus.release(text),
  relaybus.relinquish(text)
  TO relaybus_worker;

GRANT EXECUTE ON FUNCTION
  relaybus.subscribe(text, text[], integer, interval, interval, regprocedure),
  relaybus.unsubscribe(text),
  relaybus.requeue(text, text),
  relaybus.requeue_dead(text),
  relaybus.take_over_expired(),
  relaybus.purge_expired(),
  relaybus.statistics(),
  relaybus.list_deliveries(text, text, integer)
  TO relaybus_admin;
-- An admin can also publish and work, and read the tables to investigate.
GRANT relaybus_publisher, relaybus_worker TO relaybus_admin;
GRANT SELECT ON ALL TABLES IN SCHEMA relaybus TO relaybus_admin;
