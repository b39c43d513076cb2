#!/usr/bin/python3
"""Single publish against the floor's statement, paired call by call: each event is
published once through relaybus.publish and once through the floor's statement
(bench/peers/floor.py), each on its own connection, alternating, and every call is timed
from the client. Both see the same moment of the machine, so their ratio holds still where
whole runs one after the other (the harness's rounds) moved by 10% and more. psycopg
autocommit, as the harness's "relaybus 0.2.0 loop" and floor runners publish.

  bench/ab/publish_paired.py --conn CONNINFO [--events N] [--tag T] [--contract]

--contract times a third statement, on a third connection, in the same rotation: the
floor's with what publish's contract adds to its writes (floor.PUBLISH_ONE_CONTRACT: a
repeated id absorbed by ON CONFLICT, the event id returned), so the report can say how
much of the gap that contract is.

The database needs the extension; the run empties relaybus's tables first and subscribes
the harness's handler. Prints the medians and mean of each and their ratio (floor /
relaybus: 1.00 is as fast as the floor). Used for issue 12's single-publish experiments
(docs/performance.md); to compare two builds, run it after each, round by round.
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "peers"))
import floor  # noqa: E402
import relaybus_loop  # noqa: E402
import runner  # noqa: E402
import psycopg  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conn", required=True)
    ap.add_argument("--events", type=int, default=6000)
    ap.add_argument("--tag", default="run")
    ap.add_argument("--contract", action="store_true")
    o = ap.parse_args()
    with psycopg.connect(o.conn, autocommit=True) as rb, psycopg.connect(o.conn, autocommit=True) as fl, \
            psycopg.connect(o.conn, autocommit=True) as fc:
        relaybus_loop.RelaybusLoop().reset(fl)
        for t in ("events", "deliveries", "key_counters"):
            fl.execute(f"VACUUM relaybus.{t}")
        took_rb, took_fl, took_fc = [], [], []
        keys = max(1, o.events // 4)  # as the harness's events: every even one keyed
        for i in range(o.events):
            key = f"k{i % keys}" if i % 2 == 0 else None
            payload = json.dumps({"n": i})
            t0 = time.perf_counter()
            rb.execute("SELECT relaybus.publish(%s, %s::jsonb, %s, %s)",
                       (relaybus_loop.TYPE, payload, key, f"{o.tag}-r-{i}"))
            t1 = time.perf_counter()
            fl.execute(floor.PUBLISH_ONE, dict(id=f"{o.tag}-f-{i}", type=relaybus_loop.TYPE, key=key,
                                               payload=payload, handler=runner.HANDLER))
            t2 = time.perf_counter()
            took_rb.append(t1 - t0)
            took_fl.append(t2 - t1)
            if o.contract:
                # Not fetched, as publish's result is not (nor by the harness's runner).
                fc.execute(floor.PUBLISH_ONE_CONTRACT, dict(id=f"{o.tag}-c-{i}", type=relaybus_loop.TYPE, key=key,
                                                            payload=payload, handler=runner.HANDLER))
                took_fc.append(time.perf_counter() - t2)
    m_rb, m_fl = statistics.median(took_rb), statistics.median(took_fl)
    line = (f"{o.tag}: relaybus median {m_rb * 1e6:.1f} us, mean {sum(took_rb) / o.events * 1e6:.1f}; "
            f"floor median {m_fl * 1e6:.1f} us, mean {sum(took_fl) / o.events * 1e6:.1f}; "
            f"floor/relaybus {m_fl / m_rb:.3f} (medians), {sum(took_fl) / sum(took_rb):.3f} (means)")
    if o.contract:
        m_fc = statistics.median(took_fc)
        line += (f"; floor with publish's contract median {m_fc * 1e6:.1f} us, its ratio to relaybus "
                 f"{m_fc / m_rb:.3f} (medians), {sum(took_fc) / sum(took_rb):.3f} (means)")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
