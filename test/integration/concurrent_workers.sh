#!/usr/bin/env bash
# Concurrent workers with crashes, against the running test cluster ($PGHOST/$PGPORT).
#
# 4 workers drain 2,000 keyed events (40 keys) for two handlers. Each delivery is handled in
# its own transaction that records a side effect and completes the delivery (effectively-
# once). Two extra workers claim a batch and then kill their own backend: their lanes must
# be taken over and their deliveries run by the others. At the end:
#   - every (event, handler) has exactly one side effect: nothing lost, nothing twice;
#   - per (handler, key) the side effects are in publish order;
#   - no delivery is left and none is dead.
set -euo pipefail
db=relaybus_it_workers
psql() { command psql -qX -v ON_ERROR_STOP=1 "$@"; }

psql -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql -d $db <<'SQL'
CREATE EXTENSION relaybus;
SELECT relaybus.subscribe('ledger', ARRAY['tx']);
SELECT relaybus.subscribe('mailer', ARRAY['tx']);
CREATE TABLE effects (id bigserial PRIMARY KEY, event_id text, handler text, key text, n int,
                      worker text);
-- Published in order within one transaction per key round, so n is the commit order per key.
SELECT count(*) FROM (
  SELECT relaybus.publish('tx', jsonb_build_object('n', i / 40), key => 'k' || (i % 40))
    FROM generate_series(0, 1999) i ORDER BY i) x;

-- A worker: claim a batch, then handle each delivery in its own transaction.
CREATE PROCEDURE work(w text) LANGUAGE plpgsql AS $$
DECLARE
  tokens text[]; ids text[]; handlers text[]; keys text[]; ns int[];
  idle int := 0;
BEGIN
  LOOP
    SELECT array_agg(lease_token), array_agg(event_id), array_agg(handler), array_agg(key),
           array_agg((payload->>'n')::int)
      INTO tokens, ids, handlers, keys, ns
      FROM relaybus.claim(w, 20, '1 second');
    COMMIT;
    IF tokens IS NULL THEN
      -- Nothing unfinished left (pending, in flight, or dead), through the API: 0.3.0
      -- keeps finished delivery rows.
      EXIT WHEN NOT EXISTS (SELECT 1 FROM relaybus.list_deliveries(max_rows => 1));
      idle := idle + 1;
      EXIT WHEN idle > 400;  -- 20 s without work: give up, the checks will say why
      PERFORM pg_sleep(0.05);
      CONTINUE;
    END IF;
    idle := 0;
    FOR i IN 1 .. cardinality(tokens) LOOP
      INSERT INTO effects (event_id, handler, key, n, worker)
        VALUES (ids[i], handlers[i], keys[i], ns[i], w);
      IF relaybus.complete(tokens[i]) THEN
        COMMIT;
      ELSE
        ROLLBACK;  -- lease lost: the side effect must not stay
      END IF;
    END LOOP;
  END LOOP;
END
$$;

-- A worker that dies holding a batch (what it held is recorded, to prove it held some).
CREATE TABLE crashed (worker text, held int);
CREATE PROCEDURE crash(w text) LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO crashed SELECT w, count(*) FROM relaybus.claim(w, 30, '1 second');
  COMMIT;
  PERFORM pg_terminate_backend(pg_backend_pid());
END
$$;
SQL

pids=()
for w in crash-1 crash-2; do
  (command psql -qX -d $db -c "CALL crash('$w')" >/dev/null 2>&1 || true) &
done
wait
for w in w1 w2 w3 w4; do
  psql -d $db -c "CALL work('$w')" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
[ $status = 0 ] || { echo "a worker failed"; exit 1; }

result=$(psql -At -F ' ' -d $db <<'SQL'
SELECT (SELECT count(*) FROM effects),
       (SELECT count(*) FROM (SELECT DISTINCT event_id, handler FROM effects) d),
       (SELECT count(*) FROM relaybus.list_deliveries(max_rows => 100000)),
       (SELECT count(*) FROM relaybus.list_deliveries('dead', max_rows => 100000)),
       (SELECT count(*) FROM (
          SELECT n < lag(n) OVER (PARTITION BY handler, key ORDER BY id) AS backwards
            FROM effects) o WHERE backwards),
       (SELECT count(DISTINCT worker) FROM effects),
       (SELECT coalesce(sum(held), 0) FROM crashed);
SQL
)
read -r effects distinct left dead backwards workers crashed <<<"$result"
echo "side effects $effects (distinct $distinct, expected 4000), left $left, dead $dead," \
     "order violations $backwards, workers that handled $workers," \
     "deliveries held by crashed workers $crashed (expected 60)"
psql -d postgres -c "DROP DATABASE $db"
[ "$effects" = 4000 ] && [ "$distinct" = 4000 ] && [ "$left" = 0 ] && [ "$dead" = 0 ] \
  && [ "$backwards" = 0 ] && [ "$crashed" = 60 ]
