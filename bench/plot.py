#!/usr/bin/env python3
"""Turns pmhash-bench JSON into paper-style figures (PNG).

  plot.py results/quick.json --out results/quick.png

Draws what the JSON holds: throughput per workload (bars per scheme and variant), flushes per
operation, tail latency, and — when present — probe distance and load factor over inserts
(lfsweep) and recovery time against keys.
"""
import argparse
import json
import math
import sys
from collections import OrderedDict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def label(r):
    s = r["scheme"] if r.get("variant") != "off" else r["scheme"] + " (persist off)"
    if r.get("label"):
        s += " " + r["label"]
    if r.get("format") == "variable":
        s += " var"
    return s + " T=%d" % r.get("threads", 1)


def bars(ax, rows, metric, title, ylabel, log=False):
    workloads = list(OrderedDict.fromkeys(r["workload"] for r in rows))
    series = list(OrderedDict.fromkeys(label(r) for r in rows))
    width = 0.8 / max(1, len(series))
    for i, s in enumerate(series):
        ys = []
        for w in workloads:
            v = [r.get(metric) for r in rows if r["workload"] == w and label(r) == s]
            ys.append(v[0] if v and v[0] is not None else 0)
        ax.bar([x + i * width for x in range(len(workloads))], ys, width, label=s)
    ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(workloads))])
    ax.set_xticklabels(workloads, rotation=20)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.legend(fontsize=6)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    with open(a.json) as f:
        data = json.load(f)
    rows = data["rows"]
    phases = [r for r in rows if "mops" in r and not r["workload"].startswith("lfsweep") and
              r["workload"] != "limit"]
    sweep = [r for r in rows if r["workload"] == "lfsweep-negread"]
    sweep_pos = [r for r in rows if r["workload"] == "lfsweep-read"]
    recov = [r for r in rows if "recovery_ms" in r]
    panels = [p for p in ("tput", "flush", "lat", "cdf", "sweep", "lf", "recov")
              if (p in ("tput", "flush", "lat", "cdf") and phases)
              or (p in ("sweep", "lf") and sweep) or (p == "recov" and recov)]
    if not panels:
        print("plot.py: nothing to plot", file=sys.stderr)
        return 1
    cols = 2
    rws = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rws, cols, figsize=(7 * cols, 4.2 * rws), squeeze=False)
    for ax, p in zip([ax for row in axes for ax in row], panels):
        if p == "tput":
            bars(ax, phases, "mops", "Throughput (median)", "Mops/s")
        elif p == "flush":
            bars(ax, [r for r in phases if r.get("variant") == "pm"], "flushes_per_op",
                 "Cache-line flushes per operation", "flushes/op")
        elif p == "lat":
            # p99: the highest percentile every phase has enough samples for (p99.99 needs
            # 10^6, more than most suite phases give).
            bars(ax, [r for r in phases if r.get("variant") == "pm"], "p99_ns",
                 "p99 latency (sampled)", "ns", log=True)
        elif p == "cdf":
            pcts = [("p50_ns", 50), ("p90_ns", 90), ("p99_ns", 99), ("p999_ns", 99.9),
                    ("p9999_ns", 99.99)]
            for r in phases:
                if r.get("variant") != "pm" or r["workload"] == "load":
                    continue
                # A percentile the point has too few samples for is absent (docs/bench.md).
                ys = [r.get(k) for k, _ in pcts]
                n = ys.index(None) if None in ys else len(ys)
                if n < 2:
                    continue
                ax.plot(range(n), ys[:n], marker=".", label=r["workload"] + " " + label(r))
            ax.set_xticks(range(len(pcts)))
            ax.set_xticklabels(["p%g" % q for _, q in pcts])
            ax.set_yscale("log")
            ax.set_ylabel("ns")
            ax.set_title("Latency percentiles (sampled)")
            ax.legend(fontsize=5)
        elif p == "sweep":
            for lab in OrderedDict.fromkeys(r.get("label", "") for r in sweep):
                xs = [r["load_factor"] for r in sweep if r.get("label", "") == lab]
                neg = [r.get("d.negative_probes", 0) / max(1, r.get("d.negative_reads", 1))
                       for r in sweep if r.get("label", "") == lab]
                pos = [r.get("d.positive_probes", 0) / max(1, r.get("d.positive_reads", 1))
                       for r in sweep_pos if r.get("label", "") == lab]
                if not any(neg):  # the scheme has no probe counters (PMEH): nothing to plot
                    continue
                ax.plot(xs, neg, marker="o", label=lab + " negative")
                ax.plot(xs[:len(pos)], pos, marker="x", linestyle="--", label=lab + " positive")
            ax.set_xlabel("load factor")
            ax.set_ylabel("buckets probed per read")
            ax.set_title("Probe distance vs load factor")
            ax.legend(fontsize=6)
        elif p == "lf":
            for lab in OrderedDict.fromkeys(r.get("label", "") for r in sweep):
                xs = [r["size"] for r in sweep if r.get("label", "") == lab]
                ys = [r["load_factor"] for r in sweep if r.get("label", "") == lab]
                ax.plot(xs, ys, marker=".", label=lab)
            ax.set_xlabel("keys inserted")
            ax.set_ylabel("load factor")
            ax.set_title("Load factor over inserts")
            ax.legend(fontsize=6)
        elif p == "recov":
            for kind in ("recover-clean", "recover-crash"):
                for metric, style in (("recovery_ms", "-"), ("ready_ms", ":")):
                    pts = sorted((r["size"], r.get(metric, 0)) for r in recov
                                 if r["workload"] == kind)
                    if pts:
                        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o",
                                linestyle=style, label="%s %s" % (kind, metric[:-3]))
            ax.set_xscale("log")
            ax.set_xlabel("keys")
            ax.set_ylabel("ms")
            ax.set_title("Reopen / recovery time")
            ax.legend(fontsize=6)
    for ax in [ax for row in axes for ax in row][len(panels):]:
        ax.axis("off")
    fig.suptitle("pmhash-bench %s — %s" % (data.get("suite") or "", data["machine"]["cpu"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print("wrote " + a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
