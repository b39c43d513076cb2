"""The checks of test/integration/prometheus.sh: a workload in the test database, then the
exporter's scrape, Prometheus's rules and the dashboard's queries, and promtool's unit
tests of the rules. Prints TAP-like ok / not ok lines; exits 1 if any check failed."""
import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import psycopg
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failed = 0
CLAIM = "relaybus.claim('w1', %s, '10 minutes', ARRAY[%s], 'h1')"


def check(ok, what):
    global failed
    print(("ok - " if ok else "not ok - ") + what, flush=True)
    if not ok:
        failed += 1


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def wait_for(url, seconds=30):
    deadline = time.monotonic() + seconds
    while True:
        try:
            return get(url)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def query(prometheus, expr):
    body = json.loads(get(f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def workload(conn):
    """Handlers with something in every gauge and counter the dashboard shows: mailer has
    pending, due and in-flight deliveries and a worker; idle is paused; poison dead-letters
    (one attempt), while Prometheus scrapes (more_work). The worker passes a holder: its
    lanes outlive each connection."""
    with psycopg.connect(conn, autocommit=True) as c:
        c.execute("SELECT relaybus.subscribe('mailer', ARRAY['order.placed'])")
        c.execute("SELECT relaybus.subscribe('poison', ARRAY['bad.thing'], max_attempts => 1)")
        c.execute("SELECT relaybus.subscribe('idle', ARRAY['nothing.yet'])")
        c.execute("SELECT relaybus.pause('idle')")
        c.execute("SELECT relaybus.publish('order.placed', jsonb_build_object('n', i)) FROM generate_series(1, 50) i")
        c.execute("SELECT relaybus.publish('nothing.yet', '{}')")
        c.execute("SELECT relaybus.publish('no.such.type', '{}')")  # unrouted
        c.execute(f"SELECT relaybus.complete(lease_token) FROM {CLAIM}", (20, "mailer"))
        # Left in flight under a live lease: in_flight, lanes_held and workers.
        c.execute(f"SELECT count(*) FROM {CLAIM}", (5, "mailer"))


def more_work(conn):
    """A completion and a dead letter, for the counters to move between two scrapes."""
    with psycopg.connect(conn, autocommit=True) as c:
        c.execute("SELECT relaybus.publish('order.placed', '{}')")
        c.execute(f"SELECT relaybus.complete(lease_token) FROM {CLAIM}", (1, "mailer"))
        c.execute("SELECT relaybus.publish('bad.thing', '{}')")
        c.execute(f"SELECT relaybus.fail(lease_token, 'boom') FROM {CLAIM}", (10, "poison"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conn", required=True)
    ap.add_argument("--exporter", required=True)
    ap.add_argument("--prometheus", required=True)
    a = ap.parse_args()

    workload(a.conn)
    scrape = wait_for(f"{a.exporter}/metrics")
    spec = yaml.safe_load(open(os.path.join(ROOT, "docs", "postgres_exporter.yml")))
    declared = [f"{prefix}_{name}" for prefix, q in spec.items() for m in q["metrics"]
                for name, d in m.items() if d["usage"] != "LABEL"]
    missing = [m for m in declared if not re.search(rf'^{m}{{[^}}]*datname="rb_prom"', scrape, re.M)]
    check(not missing, f"the exporter's scrape has each of the {len(declared)} metrics of docs/postgres_exporter.yml"
          f" for the test database{': missing ' + ', '.join(missing) if missing else ''}")
    check(not re.search(r"^pg_exporter_user_queries_load_error\S* 1", scrape, re.M)
          and re.search(r"^pg_up 1", scrape, re.M) is not None,
          "the exporter is connected and loaded the queries file without an error")

    # Prometheus: scraped for a few seconds, counters moving in between.
    wait_for(f"{a.prometheus}/-/ready", 60)
    deadline = time.monotonic() + 60
    while not query(a.prometheus, 'count_over_time(relaybus_counters_completed{datname="rb_prom"}[1m]) >= 5'):
        if time.monotonic() > deadline:
            check(False, "Prometheus scraped the exporter five times within a minute")
            break
        more_work(a.conn)
        time.sleep(0.5)
    more_work(a.conn)

    rules = json.loads(get(f"{a.prometheus}/api/v1/rules"))["data"]["groups"]
    loaded = [r for g in rules for r in g["rules"]]
    spec_rules = [r["alert"] for g in yaml.safe_load(open(os.path.join(ROOT, "docs", "prometheus-rules.yml")))["groups"]
                  for r in g["rules"]]
    check(sorted(r["name"] for r in loaded) == sorted(spec_rules),
          f"Prometheus loaded the {len(spec_rules)} rules of docs/prometheus-rules.yml")
    time.sleep(2)  # one more evaluation after the scrapes
    rules = json.loads(get(f"{a.prometheus}/api/v1/rules"))["data"]["groups"]
    bad = [f"{r['name']}: {r.get('lastError')}" for g in rules for r in g["rules"] if r.get("health") != "ok"]
    check(not bad, "every rule evaluates without an error" + (f": {bad}" if bad else ""))
    firing = {x["labels"]["alertname"] for x in json.loads(get(f"{a.prometheus}/api/v1/alerts"))["data"]["alerts"]
              if x["state"] == "firing"}
    check("RelaybusDeadLetters" in firing,
          f"RelaybusDeadLetters fires on the real counters (poison's dead letters); firing: {sorted(firing)}")

    # The dashboard: its variables, then every panel's queries, with the variables set as
    # Grafana sets them ($handler All: .*; $__rate_interval: four scrape intervals at least).
    dash = json.load(open(os.path.join(ROOT, "docs", "grafana-dashboard.json")))
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    for name in ("datname", "handler"):
        q = variables[name]["query"]["query"].replace("$datname", "rb_prom")
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", q)
        values = json.loads(get(f"{a.prometheus}/api/v1/label/{m.group(2)}/values?"
                                + urllib.parse.urlencode({"match[]": m.group(1)})))["data"]
        want = {"rb_prom"} if name == "datname" else {"mailer", "poison", "idle"}
        check(want <= set(values), f"the dashboard's ${name} lists {sorted(want)} (got {values})")
    exprs = [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]
    for title, expr in exprs:
        e = expr.replace("$datname", "rb_prom").replace("$handler", ".*").replace("$__rate_interval", "30s")
        result = query(a.prometheus, e)
        check(result and all(r["metric"].get("datname") == "rb_prom" for r in result),
              f"panel {title!r}: {expr} returns the test database's series ({len(result)})")
    with psycopg.connect(a.conn, autocommit=True) as c:
        dead_now = c.execute("SELECT count(*) FROM relaybus.list_deliveries('dead', 'poison')").fetchone()[0]
    dead = query(a.prometheus, 'relaybus_handler_dead{datname="rb_prom",handler="poison"}')
    paused = query(a.prometheus, 'relaybus_handler_paused{datname="rb_prom",handler="idle"}')
    flying = query(a.prometheus, 'relaybus_handler_in_flight{datname="rb_prom",handler="mailer"}')
    got = [r[0]["value"][1] if r else None for r in (dead, paused, flying)]
    check(dead_now > 0 and got == [str(dead_now), "1", "5"],
          f"the gauges say what the database holds: poison's {dead_now} dead letters, idle paused,"
          f" 5 of mailer in flight (got {got})")

    out = subprocess.run(["promtool", "test", "rules", os.path.join(ROOT, "test", "integration",
                                                                    "prometheus_rules_test.yml")],
                         capture_output=True, text=True)
    check(out.returncode == 0, "promtool test rules: every alert fires where it should and nowhere else"
          + ("" if out.returncode == 0 else "\n" + out.stdout + out.stderr))
    print(f"prometheus: {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
