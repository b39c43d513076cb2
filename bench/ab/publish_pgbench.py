#!/usr/bin/python3
"""Single publish in the server, without a Python client: pgbench runs `relaybus.publish`,
the floor's statement (bench/peers/floor.py's PUBLISH_ONE) and, with --idempotent, the
floor's statement with `ON CONFLICT (id) DO NOTHING` on the event (what publish's
repeatable ids cost), as scripts of one pgbench run with equal weights, so every script
sees the same moments of the machine. pgbench reports each script's mean latency; the
ratios are of those. One client, `-M prepared`; half the events, at random, are keyed (one
of 5,000 keys), as half the harness's are.

  bench/ab/publish_pgbench.py --conn CONNINFO [--rounds N] [--seconds S] [--idempotent]

CONNINFO as libpq takes it ("host=/tmp/x port=5432 dbname=bench user=postgres"). The
database needs the extension; the run empties relaybus's tables first and subscribes the
harness's handler (as publish_paired.py does). Prints one line a round. Used for issue
12's single-publish profile (docs/performance.md).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "peers"))
import floor  # noqa: E402
import relaybus_loop  # noqa: E402
import runner  # noqa: E402
import psycopg  # noqa: E402

HEADER = "\\set n random(1, 9000000000000000000)\n\\set keyed random(0, 1)\n\\set k random(1, 5000)\n"
KEY = "(CASE WHEN :keyed = 1 THEN 'k' || :k END)"


def event_id(prefix):
    # Unique per call in practice: one of 9e18 numbers (the floor's plain INSERT would fail
    # on a repeat), and the same expression for every script.
    return f"('{prefix}-' || :n)"


def relaybus_script():
    return HEADER + (f"SELECT relaybus.publish('{relaybus_loop.TYPE}', '{{\"n\": 1}}'::jsonb, "
                     f"{KEY}, {event_id('r')});\n")


def floor_script(prefix, idempotent):
    # The floor's own text, its named parameters replaced by pgbench expressions.
    sql = (floor.PUBLISH_ONE_IDEMPOTENT if idempotent else floor.PUBLISH_ONE).strip()
    values = {"key": KEY, "type": f"'{relaybus_loop.TYPE}'", "payload": "'{\"n\": 1}'",
              "handler": f"'{runner.HANDLER}'", "id": event_id(prefix)}
    sql = re.sub(r"%\((\w+)\)s", lambda m: values[m.group(1)], sql)
    return HEADER + " ".join(sql.split()) + ";\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conn", required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=int, default=6)
    ap.add_argument("--idempotent", action="store_true")
    o = ap.parse_args()
    with psycopg.connect(o.conn, autocommit=True) as conn:
        relaybus_loop.RelaybusLoop().reset(conn)
        for t in ("events", "deliveries", "key_counters"):
            conn.execute(f"VACUUM relaybus.{t}")
    names = ["relaybus", "floor"] + (["floor+on conflict"] if o.idempotent else [])
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for name, text in zip(names, [relaybus_script(), floor_script("f", False),
                                      floor_script("i", True)]):
            path = os.path.join(tmp, f"{len(files) // 2}.sql")
            with open(path, "w") as f:
                f.write(text)
            files += ["-f", f"{path}@1"]
        for r in range(o.rounds):
            run = subprocess.run(["pgbench", "-n", "-M", "prepared", "-T", str(o.seconds), *files,
                                  o.conn], capture_output=True, text=True)
            if run.returncode != 0:
                sys.exit(f"publish_pgbench: pgbench failed:\n{run.stderr}")
            out = run.stdout
            # One "latency average" for the whole run, then one per script.
            us = [float(x) * 1000 for x in re.findall(r"latency average = ([\d.]+) ms", out)][1:]
            if len(us) != len(names):
                sys.exit(f"publish_pgbench: unexpected pgbench output:\n{out}")
            line = ", ".join(f"{n} {v:.0f} us" for n, v in zip(names, us))
            line += f"; floor/relaybus {us[1] / us[0]:.3f}"
            if o.idempotent:
                line += f", floor+on conflict/relaybus {us[2] / us[0]:.3f}, floor/floor+on conflict {us[1] / us[2]:.3f}"
            print(f"round {r + 1}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
