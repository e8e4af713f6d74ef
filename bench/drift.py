#!/usr/bin/env python3
"""Between-run drift: the same suite run twice, row by row.

usage: bench/drift.py FIRST.json SECOND.json

A row is one configuration (scheme, variant, format, workload, distributions, threads,
sizes, delay). For every configuration with a throughput in both runs it prints the ratio
of the second run's median to the first's (5th, 50th and 95th percentile, over all rows
and per format) and how many of the first run's medians fall inside the second run's
min-max range. The limit row (one measurement per run) is left out.
"""
import json
import statistics
import sys

IDENTITY = ("scheme", "variant", "format", "workload", "dist", "key_dist", "mode", "threads",
            "keys", "key_size", "value_size", "delay_ns")


def rows(path):
    out = {}
    for r in json.load(open(path))["rows"]:
        if r.get("workload") == "limit" or not r.get("mops"):
            continue
        key = tuple(r.get(k) for k in IDENTITY)
        if key in out:
            sys.exit(f"{path}: two rows for {key}")
        out[key] = r
    return out


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def summary(label, pairs):
    ratios = [b["mops"] / a["mops"] for a, b in pairs]
    inside = sum(b["mops_min"] <= a["mops"] <= b["mops_max"] for a, b in pairs)
    print(f"{label}: {len(pairs)} rows, second/first median ratio 5% {pct(ratios, 5):.2f}, "
          f"50% {statistics.median(ratios):.2f}, 95% {pct(ratios, 95):.2f}; "
          f"{inside} first-run medians inside the second run's range")


def main():
    first, second = rows(sys.argv[1]), rows(sys.argv[2])
    pairs = [(first[k], second[k]) for k in first if k in second]
    summary("all", pairs)
    for fmt in sorted({a["format"] for a, _ in pairs}):
        summary(f"format {fmt}", [(a, b) for a, b in pairs if a["format"] == fmt])


if __name__ == "__main__":
    main()
