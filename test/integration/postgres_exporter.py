"""Checks docs/postgres_exporter.yml against a live cluster: every query runs and returns
exactly the columns its metrics list declares, in order, LABEL columns as text and
GAUGE/COUNTER columns as numbers; then the counters' handler_worker_errors moves for an
in-database handler that raises, and without the preload counters() raises 55000.
  postgres_exporter.py CONNINFO PHASE    (PHASE: queries | nopreload)"""
import sys
import time

import psycopg
import yaml

NUMERIC = {"int2", "int4", "int8", "float4", "float8", "numeric"}


def check_queries(conn):
    with open("docs/postgres_exporter.yml") as f:
        spec = yaml.safe_load(f)
    assert spec, "docs/postgres_exporter.yml is empty"
    for prefix, entry in spec.items():
        assert entry.get("master") is True, f"{prefix}: master: true expected"
        declared = [(name, col["usage"]) for m in entry["metrics"] for name, col in m.items()]
        with conn.cursor() as cur:
            cur.execute(entry["query"])
            rows = cur.fetchall()
            columns = [(d.name, conn.adapters.types.get(d.type_code).name) for d in cur.description]
        assert [c for c, _ in columns] == [n for n, _ in declared], \
            f"{prefix}: query returns {columns}, the YAML declares {declared}"
        for (name, usage), (_, type_name) in zip(declared, columns):
            assert usage in ("LABEL", "GAUGE", "COUNTER"), f"{prefix}.{name}: usage {usage}"
            if usage == "LABEL":
                assert type_name in ("text", "name", "varchar"), f"{prefix}.{name}: {type_name}"
            else:
                assert type_name in NUMERIC, f"{prefix}.{name}: {usage} of type {type_name}"
        assert rows, f"{prefix}: no rows"
        for row in rows:
            for (name, usage), value in zip(declared, row):
                assert value is not None, f"{prefix}.{name} is NULL in {row}"
        print(f"ok - {prefix}: {len(rows)} row(s), columns as declared")


def counter(conn, name):
    return conn.execute("SELECT value FROM relaybus.counters() WHERE name = %s", (name,)).fetchone()[0]


def main():
    conninfo, phase = sys.argv[1], sys.argv[2]
    with psycopg.connect(conninfo, autocommit=True) as conn:
        if phase == "nopreload":
            try:
                conn.execute("SELECT * FROM relaybus.counters()")
                raise AssertionError("counters() worked without the preload")
            except psycopg.errors.ObjectNotInPrerequisiteState as e:
                assert "shared_preload_libraries" in (e.diag.message_hint or ""), e.diag.message_hint
            print("ok - without the preload, counters() raises 55000 with a hint")
            assert conn.execute("SELECT count(*) FROM relaybus.metrics()").fetchone()[0] >= 1
            print("ok - without the preload, metrics() still works")
            return
        conn.execute("CREATE TABLE IF NOT EXISTS public.seen (id text)")
        conn.execute("""CREATE OR REPLACE FUNCTION public.exp_raises(event jsonb) RETURNS void
                        LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'exporter test'; END $$""")
        conn.execute("SELECT relaybus.subscribe('exp_sql', ARRAY['exp.sql'], max_attempts => 1,"
                     " sql_function => 'public.exp_raises(jsonb)'::regprocedure)")
        conn.execute("SELECT relaybus.subscribe('exp_ext', ARRAY['exp.ext'])")
        conn.execute("SELECT relaybus.publish('exp.ext', '{}')")
        conn.execute("ANALYZE relaybus.deliveries")
        before = counter(conn, "handler_worker_errors")
        conn.execute("SELECT relaybus.publish('exp.sql', '{}')")
        for _ in range(200):
            if counter(conn, "handler_worker_errors") > before:
                break
            time.sleep(0.05)
        assert counter(conn, "handler_worker_errors") == before + 1, "handler_worker_errors did not move by 1"
        print("ok - an in-database handler that raises moves handler_worker_errors by 1")
        errors = conn.execute("SELECT value FROM relaybus.handler_counters()"
                              " WHERE handler = 'exp_sql' AND name = 'handler_worker_errors'").fetchone()
        assert errors == (1,), f"handler_counters: exp_sql's handler_worker_errors is {errors}, not 1"
        print("ok - and the handler's own handler_worker_errors, in handler_counters()")
        # An event of a type nobody is subscribed to: a row for relaybus_unrouted.
        conn.execute("SET relaybus.unrouted_publish = ignore")
        conn.execute("SELECT relaybus.publish('exp.nobody', '{}')")
        check_queries(conn)


if __name__ == "__main__":
    main()
