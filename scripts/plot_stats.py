#!/usr/bin/python3
"""Draw seerd statistics files ([daemon] stats_file, JSON) as one PNG.

    /usr/bin/python3 scripts/plot_stats.py stats-0.json [stats-1.json ...] -o stats.png

Panels: delivered samples/s per step (from the per-step completion times),
the trainers' wait (stall) per step, bytes per epoch by source (RAM cache,
local NVMe, peers, PFS; several files, one per node, are summed), and each
node's forecast against the actual per epoch (the forecast seerd made as the
epoch began, with the rates measured until then: time per epoch, and bytes
from peers and the PFS). Uses Debian's python3-matplotlib (run with
/usr/bin/python3)."""

import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(paths):
    docs = []
    for p in paths:
        with open(p) as f:
            docs.append(json.load(f))
    return docs


def plot_forecast(ax, docs):
    """Forecast against actual per epoch and node: seconds (lines, left axis)
    and network + PFS MB (markers, right axis)."""
    mb = ax.twinx()
    any_fc = False
    for d in docs:
        eps = [e for e in d.get("epochs", []) if e.get("forecast")]
        if not eps:
            continue
        any_fc = True
        node = d.get("node", 0)
        xs = [e["epoch"] for e in eps]
        fs = [e["forecast"]["seconds"] for e in eps]
        acts = [e["seconds"] if e.get("seconds", -1) >= 0 else None for e in eps]
        line, = ax.plot(xs, [f if f is not None else float("nan") for f in fs], "--",
                        label="node %d forecast (s)" % node)
        ax.plot(xs, [a if a is not None else float("nan") for a in acts], "-",
                color=line.get_color(), label="node %d actual (s)" % node)
        mb.plot(xs, [(e["forecast"]["peer_bytes"] + e["forecast"]["pfs_bytes"]) / 1e6
                     for e in eps], "x", color=line.get_color())
        mb.plot(xs, [(e["peer_bytes"] + e["pfs_bytes"]) / 1e6 for e in eps], "o",
                color=line.get_color(), fillstyle="none")
    if not any_fc:
        ax.text(0.5, 0.5, "no forecast in these statistics", ha="center",
                transform=ax.transAxes)
    ax.set_xlabel("epoch")
    ax.set_ylabel("seconds")
    mb.set_ylabel("MB from peers + PFS (x forecast, o actual)")
    ax.set_title("forecast (as each epoch began) against actual, per node")
    ax.grid(alpha=0.3)
    if any_fc:
        ax.legend(fontsize=8)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stats", nargs="+")
    ap.add_argument("-o", "--output", default="seer-stats.png")
    a = ap.parse_args()
    docs = load(a.stats)
    if not docs:
        sys.exit("no statistics")
    bs = docs[0].get("dataset", {}).get("samples", 0)
    fig, (ax1, ax2, ax3, ax4) = plt.subplots(4, 1, figsize=(10, 13))
    for d in docs:
        steps = d.get("steps", [])
        if len(steps) < 2:
            continue
        batch = d.get("trainers", [{}])
        ntr = max(1, sum(1 for t in batch if t.get("batches", 0)))
        per_batch = (sum(t.get("samples", 0) for t in batch) /
                     max(1, sum(t.get("batches", 0) for t in batch)))
        xs, rate, stall = [], [], []
        for (g0, t0, _), (g1, t1, s1) in zip(steps, steps[1:]):
            if t1 > t0:
                xs.append(g1)
                rate.append((g1 - g0) * per_batch * ntr / (t1 - t0))
                stall.append(s1 / ntr * 1e3)
        label = "node %d" % d.get("node", 0)
        ax1.plot(xs, rate, lw=0.8, label=label)
        ax2.plot(xs, stall, lw=0.8, label=label)
    ax1.set_ylabel("samples/s")
    ax1.set_title("delivery rate per step (node's trainers together)")
    ax2.set_ylabel("ms per trainer")
    ax2.set_title("time trainers waited for their batch, per step")
    ax2.set_xlabel("global step (epoch x steps per epoch + step)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        if len(docs) > 1:
            ax.legend()
    # bytes by source per epoch, summed over nodes
    kinds = [("ram_bytes", "RAM cache"), ("nvme_bytes", "NVMe"), ("peer_bytes", "peers"),
             ("pfs_bytes", "PFS")]
    nep = max(len(d.get("epochs", [])) for d in docs)
    bottom = [0.0] * nep
    for key, name in kinds:
        vals = [0.0] * nep
        for d in docs:
            for e in d.get("epochs", []):
                vals[e["epoch"]] += e.get(key, 0) / 1e6
        ax3.bar(range(nep), vals, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax3.set_xlabel("epoch")
    ax3.set_ylabel("MB")
    ax3.set_title("bytes by source per epoch (dataset: %d samples)" % bs)
    ax3.legend()
    ax3.grid(alpha=0.3, axis="y")
    plot_forecast(ax4, docs)
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)
    print("wrote %s" % a.output)


if __name__ == "__main__":
    main()
