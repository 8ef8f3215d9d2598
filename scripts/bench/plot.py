#!/usr/bin/python3
"""PNG plots of a benchmark run (Debian's python3-matplotlib).

    /usr/bin/python3 scripts/bench/plot.py results/bench-<ts>/summary.json

au_samples.png  per scenario: AU and samples/s per epoch per system (median over
                rounds, bars = min..max)
stalls.png      per scenario: the trainers' wait for a batch, per epoch per system:
                median (marker) and p99 (top of the line), log scale
pfs_bytes.png   per scenario: cumulative bytes read from the PFS after each epoch per
                system, with the optimum D + (D - C)(e - 1)"""

import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import report  # noqa: E402

COLORS = {"seer": "tab:blue", "nopfs": "tab:purple", "files": "tab:gray"}


def color(system):
    return "tab:orange" if system.startswith("torch") else COLORS.get(system, "black")


def per_epoch(runs, key, E, scale=1.0):
    med, lo, hi = [], [], []
    for e in range(E):
        v = [r["epochs"][e][key] * scale for r in runs if len(r["epochs"]) > e]
        med.append(statistics.median(v) if v else float("nan"))
        lo.append(min(v) if v else float("nan"))
        hi.append(max(v) if v else float("nan"))
    return med, lo, hi


def _errbar(ax, xs, m, lo, hi, **kw):
    ax.errorbar(xs, m, yerr=[[a - b for a, b in zip(m, lo)], [b - a for a, b in zip(m, hi)]],
                capsize=3, marker="o", ms=4, lw=1.2, **kw)


def draw(summary, outdir):
    scs = summary["scenarios"]
    n = len(scs)
    out = []

    fig, axs = plt.subplots(n, 2, figsize=(12, 2.9 * n), squeeze=False)
    for i, sc in enumerate(scs):
        E = sc["epochs"]
        xs = list(range(1, E + 1))
        for k, (system, where) in enumerate(report.systems_of(summary, sc)):
            rs = report.runs_of(summary, where, system)
            off = [x + (k - 1.5) * 0.06 for x in xs]
            m, lo, hi = per_epoch(rs, "au", E, 100.0)
            _errbar(axs[i][0], off, m, lo, hi, color=color(system), label=report.label(system))
            m, lo, hi = per_epoch(rs, "samples_per_s", E)
            _errbar(axs[i][1], off, m, lo, hi, color=color(system), label=report.label(system))
        axs[i][0].axhline(95, color="green", ls=":", lw=1)
        axs[i][0].set_ylim(0, 105)
        axs[i][0].set_ylabel("AU %")
        axs[i][0].set_title("%s: accelerator utilisation" % sc["name"], fontsize=10)
        axs[i][1].set_ylabel("samples/s")
        axs[i][1].set_title("%s: samples/s (all trainers)" % sc["name"], fontsize=10)
        for ax in axs[i]:
            ax.set_xticks(xs)
            ax.set_xlabel("epoch")
            ax.grid(alpha=0.3)
        axs[i][1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    p = os.path.join(outdir, "au_samples.png")
    fig.savefig(p, dpi=90)
    plt.close(fig)
    out.append(p)

    fig, axs = plt.subplots(1, n, figsize=(3.6 * n, 3.6), squeeze=False)
    for i, sc in enumerate(scs):
        ax = axs[0][i]
        E = sc["epochs"]
        labels = []
        for k, (system, where) in enumerate(report.systems_of(summary, sc)):
            rs = report.runs_of(summary, where, system)
            p50, _, _ = per_epoch(rs, "stall_median_s", E, 1e3)
            p99, _, _ = per_epoch(rs, "stall_p99_s", E, 1e3)
            for e in range(E):
                x = k * (E + 1) + e
                ax.vlines(x, max(p50[e], 1e-3), max(p99[e], 1e-3), color=color(system), lw=2)
                ax.plot([x], [max(p50[e], 1e-3)], "o", color=color(system), ms=4)
            labels.append((k * (E + 1) + (E - 1) / 2, report.label(system).split(" (")[0]))
        ax.set_yscale("log")
        ax.set_xticks([x for x, _ in labels])
        ax.set_xticklabels([t for _, t in labels], rotation=30, fontsize=7, ha="right")
        ax.set_ylabel("stall per step (ms): median o, p99 top")
        ax.set_title("%s (epochs 1..%d per system)" % (sc["name"], E), fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    p = os.path.join(outdir, "stalls.png")
    fig.savefig(p, dpi=90)
    plt.close(fig)
    out.append(p)

    fig, axs = plt.subplots(1, n, figsize=(3.6 * n, 3.4), squeeze=False)
    for i, sc in enumerate(scs):
        ax = axs[0][i]
        E = sc["epochs"]
        xs = list(range(1, E + 1))
        opt = report.optimum(sc, E)
        cum = [sum(opt[:e + 1]) / 1e6 for e in range(E)]
        ax.plot(xs, cum, "k--", lw=1.5, label="optimum D+(D-C)(e-1)")
        for system, where in report.systems_of(summary, sc):
            rs = [r for r in report.runs_of(summary, where, system) if r.get("pfs_epoch_bytes")]
            if not rs:
                continue
            v = []
            for e in range(E):
                v.append(statistics.median(sum(r["pfs_epoch_bytes"][:e + 1]) / 1e6 for r in rs))
            est = any(r.get("pfs_epoch_estimated") for r in rs)
            ax.plot(xs, v, marker="o", ms=4, color=color(system),
                    label=report.label(system).split(" (")[0] + (" (est.)" if est else ""))
        ax.set_xticks(xs)
        ax.set_xlabel("epoch")
        ax.set_ylabel("PFS MB read, cumulative")
        ax.set_ylim(bottom=0)
        ax.set_title("%s (D=%.0f MB, C=%.0f MB)" % (sc["name"], sc["D"] / 1e6,
                                                    min(sc["D"], sc["aggregate_cache"]) / 1e6),
                     fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    p = os.path.join(outdir, "pfs_bytes.png")
    fig.savefig(p, dpi=90)
    plt.close(fig)
    out.append(p)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: plot.py results/bench-<ts>/summary.json")
    with open(sys.argv[1]) as f:
        s = json.load(f)
    for p in draw(s, os.path.dirname(os.path.abspath(sys.argv[1]))):
        print(p)
