#!/usr/bin/env python3
"""End-to-end latency of one mixed run from its files (PREFIX.publisher-*.tsv: commit times,
PREFIX.dispatcher-*.tsv: handled times, as bench/peers/runner.py and relaybus-bench write
them): p50, p90, p99 and max, of every event and of those committed after --warmup-s
(a worker's first seconds acquire its lanes)."""
import argparse
import glob


def latencies(prefix, warmup_s):
    commit = {}
    for f in glob.glob(prefix + ".publisher-*.tsv"):
        for line in open(f):
            r = line.rstrip("\n").split("\t")
            if r[0] == "E":
                commit[r[1]] = int(r[4])
    t0 = min(commit.values())
    every, warm = [], []
    for f in glob.glob(prefix + ".dispatcher-*.tsv"):
        for line in open(f):
            r = line.rstrip("\n").split("\t")
            if r[0] in commit:
                ms = (int(r[4]) - commit[r[0]]) / 1000
                every.append(ms)
                if commit[r[0]] - t0 >= warmup_s * 1e6:
                    warm.append(ms)
    return len(commit), every, warm


def summary(values):
    values = sorted(values)
    q = lambda p: values[min(len(values) - 1, int(p * len(values)))]  # noqa: E731
    return f"p50 {q(.5):.2f} p90 {q(.9):.2f} p99 {q(.99):.2f} max {values[-1]:.1f} ms"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("prefix")
    ap.add_argument("--warmup-s", type=float, default=2)
    o = ap.parse_args()
    published, every, warm = latencies(o.prefix, o.warmup_s)
    print(f"{published} published, {len(every)} handled; all: {summary(every)}; "
          f"after {o.warmup_s:g} s: {summary(warm)}")


if __name__ == "__main__":
    main()
