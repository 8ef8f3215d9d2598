#!/usr/bin/python3
"""The benchmark report: markdown table, the issue's bars, plots.

    /usr/bin/python3 scripts/bench/report.py results/bench-<ts>/summary.json
        re-renders results/bench-<ts>.md and the plots from a run's summary.

Aggregation: per scenario and system, the cold epoch is epoch 1 (index 0) of every
round; the warm epochs are epochs 2..E of every round. Each cell is the median over
those epochs, with [min-max] in brackets. The DataLoader row is its best
configuration (highest warm median samples/s in round 1, the only configuration
run in later rounds); every configuration tried is listed below the table."""

import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

LABEL = {"seer": "seer", "nopfs": "seer nopfs-like", "files": "threaded files",
         "seer-plain": "seer, coalescing off"}

BARS = dict(au=0.95, warm_ratio=3.0, cold_ratio=1.0, pfs_opt=0.02, epoch_bound=0.10,
            packed_ratio=5.0, packed_seq=2.0, packed_bytes=1.05)


def label(system):
    if system.startswith("torch:"):
        w, p = system.split(":")[1].split("x")
        return "DataLoader (workers %s, prefetch %s)" % (w, p)
    return LABEL.get(system, system)


def med(v):
    return statistics.median(v) if v else float("nan")


def rng(v, fmt):
    if not v:
        return "-"
    if len(v) == 1:
        return fmt % v[0]
    return (fmt + " [" + fmt + "-" + fmt + "]") % (med(v), min(v), max(v))


def runs_of(summary, scen, system):
    return [r for r in summary["runs"] if r["scenario"] == scen and r["system"] == system
            and r["ok"]]


def collect(runs, key, warm):
    out = []
    for r in runs:
        eps = r["epochs"][1:] if warm else r["epochs"][:1]
        out += [e[key] for e in eps]
    return out


def scenario(summary, name):
    return next((sc for sc in summary["scenarios"] if sc["name"] == name), {})


def best_torch(summary, scen):
    """The best DataLoader configuration of round 1: by the warm epochs, by the
    cold one for packed scenarios or when only one epoch ran."""
    cands = [c for c in summary["torch_configs"] if runs_of(summary, scen, c)]
    if not cands:
        return None
    r1 = lambda c: [r for r in runs_of(summary, scen, c) if r["round"] == 1] or \
        runs_of(summary, scen, c)
    warm = not scenario(summary, scen).get("packed") and \
        any(len(r["epochs"]) > 1 for c in cands for r in r1(c))
    return max(cands, key=lambda c: med(collect(r1(c), "samples_per_s", warm)))


def systems_of(summary, sc):
    base = sc["shares"] or sc["name"]
    out = []
    t = best_torch(summary, base)
    if t:
        out.append((t, base))
    for s in ("nopfs", "seer-plain", "seer"):
        if runs_of(summary, sc["name"], s):
            out.append((s, sc["name"]))
    if runs_of(summary, base, "files"):
        out.append(("files", base))
    return out


def optimum(sc, epochs):
    D = sc["D"]
    C = min(D, sc["aggregate_cache"])
    return [D] + [D - C] * (epochs - 1)


def table(summary):
    L = ["| scenario | system | epoch 1 (cold) samples/s | epochs 2+ samples/s | "
         "AU epoch 1 | AU epochs 2+ | stall p50 / p99 epochs 2+ (ms) | PFS bytes / D in the "
         "epochs (optimum) | PFS bytes / D, run total |",
         "|---|---|---|---|---|---|---|---|---|"]
    for sc in summary["scenarios"]:
        opt = sum(optimum(sc, sc["epochs"])) / sc["D"]
        for system, where in systems_of(summary, sc):
            rs = runs_of(summary, where, system)
            shared = " (runs of %s)" % where if where != sc["name"] else ""
            pfs = [r["pfs"]["bytes"] / sc["D"] for r in rs if r.get("pfs")]
            pep = [sum(r["pfs_epoch_bytes"]) / sc["D"] for r in rs if r.get("pfs_epoch_bytes")]
            p50 = collect(rs, "stall_median_s", True)
            p99 = collect(rs, "stall_p99_s", True)
            L.append("| %s | %s%s | %s | %s | %s | %s | %s / %s | %s (%.2f) | %s |" % (
                sc["name"], label(system), shared,
                rng(collect(rs, "samples_per_s", False), "%.0f"),
                rng(collect(rs, "samples_per_s", True), "%.0f"),
                rng([100 * x for x in collect(rs, "au", False)], "%.1f%%"),
                rng([100 * x for x in collect(rs, "au", True)], "%.1f%%"),
                "%.2f" % (1e3 * med(p50)) if p50 else "-",
                "%.1f" % (1e3 * med(p99)) if p99 else "-",
                rng(pep, "%.2f"), opt, rng(pfs, "%.2f")))
    return "\n".join(L)


def bars(summary):
    """[(bar, scenario, measured text, met: True/False/None)]"""
    out = []
    for sc in summary["scenarios"]:
        name = sc["name"]
        if sc.get("packed"):
            continue   # packed_bars()
        if sc["ram_frac"] >= 1.0:
            s = runs_of(summary, name, "seer")
            t = best_torch(summary, name)
            tr = runs_of(summary, name, t) if t else []
            au = collect(s, "au", True)
            if au:
                out.append(("epochs 2+, in cache: seer AU >= 95%", name,
                            "median %.1f%% (min %.1f%%, %d epochs)" % (
                                100 * med(au), 100 * min(au), len(au)),
                            med(au) >= BARS["au"]))
            sw, tw = collect(s, "samples_per_s", True), collect(tr, "samples_per_s", True)
            if sw and tw:
                r = med(sw) / med(tw)
                out.append(("epochs 2+, in cache: seer >= 3x DataLoader samples/s", name,
                            "%.2fx (%.0f vs %.0f samples/s; worst seer / best DataLoader "
                            "epoch: %.2fx)" % (r, med(sw), med(tw), min(sw) / max(tw)),
                            r >= BARS["warm_ratio"]))
            sc_, tc = collect(s, "samples_per_s", False), collect(tr, "samples_per_s", False)
            if sc_ and tc:
                r = med(sc_) / med(tc)
                out.append(("epoch 1 (cold): seer >= 1.0x DataLoader samples/s", name,
                            "%.2fx (%.0f vs %.0f samples/s; range of per-round ratios "
                            "%.2f-%.2f)" % (r, med(sc_), med(tc),
                                            min(sc_) / max(tc), max(sc_) / min(tc)),
                            r >= BARS["cold_ratio"]))
        else:
            s = runs_of(summary, name, "seer")
            if not s:
                continue
            E = sc["epochs"]
            opt = optimum(sc, E)
            tot = [r["pfs"]["bytes"] for r in s if r.get("pfs")]
            dev = [t / sum(opt) - 1 for t in tot]
            out.append(("larger than cache: PFS bytes within 2% of D + (D-C)(E-1)", name,
                        "%s of the optimum %.1f MB (per round: %s)" % (
                            "%+.2f%%" % (100 * med(dev)), sum(opt) / 1e6,
                            ", ".join("%+.2f%%" % (100 * x) for x in dev)),
                        all(abs(x) <= BARS["pfs_opt"] for x in dev)))
            n = runs_of(summary, name, "nopfs")
            if n:
                nt = [r["pfs"]["bytes"] for r in n if r.get("pfs")]
                out.append(("larger than cache: fewer PFS bytes than the NoPFS-like mode", name,
                            "seer %.1f MB vs nopfs %.1f MB (medians)" % (med(tot) / 1e6,
                                                                         med(nt) / 1e6),
                            med(tot) < med(nt)))
            else:
                pl = sc.get("plan", {}).get("result")
                sim = None
                if pl:
                    for p in pl.get("policies", []):
                        if p.get("name") == "nopfs":
                            sim = p["total"]["pfs"]
                out.append(("larger than cache: fewer PFS bytes than the NoPFS-like mode", name,
                            "not measured (mode absent in this seerd); seer %.1f MB vs "
                            "seer-plan's simulated NoPFS %s" % (
                                med(tot) / 1e6, "%.1f MB" % (sim / 1e6) if sim else "n/a"),
                            None))
            worst, detail = 0.0, []
            for r in s:
                for e, ep in enumerate(r["epochs"]):
                    lb = epoch_bound(sc, r, e)
                    q = ep["wall_s"] / lb - 1
                    worst = max(worst, q)
                    detail.append("r%d e%d %.2f/%.2f s" % (r["round"], e + 1, ep["wall_s"], lb))
            out.append(("larger than cache: every epoch within 10% of max(compute, PFS bytes / "
                        "bandwidth)", name, "worst %+.1f%% (wall/bound: %s)" % (
                            100 * worst, "; ".join(detail)), worst <= BARS["epoch_bound"]))
    return out


def seq_runs(summary, name):
    return [r["seq"] for r in runs_of(summary, name, "seq") if r.get("seq")]


def cold(runs, key):
    """Epoch 1 of every run: the emulator's count `key` (per-epoch attribution)."""
    return [r["pfs_epoch"][key][0] for r in runs if r.get("pfs_epoch")]


def packed_rows(summary, sc):
    """(label, runs) of the DataLoader's best configuration and seer."""
    out = []
    t = best_torch(summary, sc["name"])
    if t:
        out.append((label(t), runs_of(summary, sc["name"], t)))
    p = runs_of(summary, sc["name"], "seer-plain")
    if p:
        out.append((label("seer-plain"), p))
    s = runs_of(summary, sc["name"], "seer")
    if s:
        out.append(("seer", s))
    return out


def dataloader_rate(runs):
    """The DataLoader's samples/s to compare a cold epoch with: it reads the whole
    dataset from the PFS in every epoch, and its epoch 1 also starts its
    workers, so the better of epoch 1 and the median of epochs 2+ (when run)."""
    c, w = collect(runs, "samples_per_s", False), collect(runs, "samples_per_s", True)
    return max(med(c) if c else 0.0, med(w) if w else 0.0)


def packed_table(summary):
    """Every packed scenario's cold epoch against the sequential read of its files."""
    L = ["| scenario | system | cold epoch samples/s | cold epoch wall s | wall / sequential "
         "read | PFS busy in the epoch | PFS requests in the epoch: reads (RPCs) | PFS bytes "
         "in the epoch / D | epochs 2+ samples/s | cold samples/s vs the DataLoader |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for sc in summary["scenarios"]:
        if not sc.get("packed"):
            continue
        q = seq_runs(summary, sc["name"])
        seq_wall = med([x["wall_s"] for x in q])
        rows = packed_rows(summary, sc)
        base = dataloader_rate(rows[0][1]) if rows and rows[0][0].startswith("DataLoader") \
            else float("nan")
        if q:
            L.append("| %s (%s, %d samples, %.1f MB) | sequential read (`cat` of the %d files) "
                     "| - | %s | 1 | %s s | %s (%s) | %s | - |" % (
                         sc["name"], sc["fmt"], sc["nsamples"], sc["D"] / 1e6, q[0]["files"],
                         rng([x["wall_s"] for x in q], "%.3f"),
                         rng([x["busy_s"] for x in q], "%.3f"),
                         rng([x["reads"] for x in q], "%d"), rng([x["rpcs"] for x in q], "%d"),
                         rng([x["bytes"] / sc["D"] for x in q], "%.2f")) + " - |")
        for name, rs in rows:
            sps = collect(rs, "samples_per_s", False)
            wall = collect(rs, "wall_s", False)
            busy = cold(rs, "busy_s") if all("busy_s" in r.get("pfs_epoch", {}) for r in rs) \
                else []
            L.append("| %s | %s | %s | %s | %s | %s | %s (%s) | %s | %s | %s |" % (
                sc["name"], name, rng(sps, "%.0f"), rng(wall, "%.2f"),
                rng([w / seq_wall for w in wall], "%.1f") if q else "-",
                ("%s s (%.0f%%)" % (rng(busy, "%.2f"), 100 * med(busy) / med(wall))) if busy
                else "-",
                rng(cold(rs, "reads"), "%d"), rng(cold(rs, "rpcs"), "%d"),
                rng([b / sc["D"] for b in cold(rs, "bytes")], "%.2f"),
                rng(collect(rs, "samples_per_s", True), "%.0f"),
                "%.2fx" % (med(sps) / base) if name.startswith("seer") and base == base and sps
                else "reference: %.0f" % base if base == base else "-"))
    return "\n".join(L)


def packed_bars(summary):
    out = []
    for sc in summary["scenarios"]:
        if not sc.get("packed"):
            continue
        name = sc["name"]
        s = runs_of(summary, name, "seer")
        t = best_torch(summary, name)
        tr = runs_of(summary, name, t) if t else []
        sc_, tc = collect(s, "samples_per_s", False), dataloader_rate(tr)
        if sc_ and tc:
            r = med(sc_) / tc
            out.append(("lustre-like PFS, epoch 1 (cold): seer >= 5x DataLoader samples/s "
                        "(its better of epoch 1 and epochs 2+)", name,
                        "%.2fx (%.0f vs %.0f samples/s)" % (r, med(sc_), tc),
                        r >= BARS["packed_ratio"]))
        pep = [sum(r["pfs_epoch_bytes"]) / sc["D"] for r in s if r.get("pfs_epoch_bytes")]
        tot = [r["pfs"]["bytes"] / sc["D"] for r in s if r.get("pfs")]
        if pep and sc["ram_frac"] >= 1.0:
            out.append(("lustre-like PFS: PFS bytes <= 1.05 D per job (aggregate cache holds "
                        "the dataset; the emulator's count while the epochs ran)", name,
                        "%.3f D (run total with start-up, the catalog scan included: %.2f D)"
                        % (max(pep), med(tot) if tot else float("nan")),
                        max(pep) <= BARS["packed_bytes"]))
        q = seq_runs(summary, name)
        w = collect(s, "wall_s", False)
        if q and w:
            r = med(w) / med([x["wall_s"] for x in q])
            out.append(("lustre-like PFS, epoch 1 (cold): seer wall within 2x of the "
                        "sequential read of the files", name,
                        "%.1fx (%.2f s vs %.3f s)" % (r, med(w), med([x["wall_s"] for x in q])),
                        r <= BARS["packed_seq"]))
    return out


def epoch_bound(sc, r, e):
    """max(compute time, PFS bytes read during the epoch / PFS bandwidth)."""
    return max(sc["compute_epoch_s"], r["pfs_epoch_bytes"][e] / sc["pfs"]["bandwidth"])


def big_detail(summary):
    L = []
    for sc in summary["scenarios"]:
        if sc["ram_frac"] >= 1.0:
            continue
        E = sc["epochs"]
        opt = optimum(sc, E)
        L.append("\n### %s: per epoch (D = %.1f MB, aggregate cache C = %.1f MB, PFS %.0f MB/s, "
                 "compute %.2f s per epoch)\n" % (sc["name"], sc["D"] / 1e6,
                                                  sc["aggregate_cache"] / 1e6,
                                                  sc["pfs"]["bandwidth"] / 1e6,
                                                  sc["compute_epoch_s"]))
        L.append("PFS MB: read while the epoch ran (emulator counter sampled every 20 ms); "
                 "in brackets as seerd counts them (reads completed while the node was in the "
                 "epoch) and the optimum's per-epoch bytes (D, then D - C). Lower bound = "
                 "max(compute, PFS MB / bandwidth).\n")
        L.append("| system | round | epoch | PFS MB (seerd; optimum) | peer MB | lower bound s | "
                 "wall s | wall / bound | wall / optimum's bound |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        for system in ("seer", "nopfs"):
            for r in runs_of(summary, sc["name"], system):
                tw = tb = tob = 0.0
                for e, ep in enumerate(r["epochs"]):
                    pb = r["pfs_epoch_bytes"][e]
                    pd = (r.get("pfs_epoch_bytes_daemon") or [float("nan")] * E)[e]
                    lb = epoch_bound(sc, r, e)
                    ob = max(sc["compute_epoch_s"], opt[e] / sc["pfs"]["bandwidth"])
                    peer = r.get("peer_epoch_bytes", [0] * E)[e]
                    tw, tb, tob = tw + ep["wall_s"], tb + lb, tob + ob
                    L.append("| %s | %d | %d | %.1f (%.1f; %.1f) | %.1f | %.2f | %.2f | %.2f | "
                             "%.2f |" % (label(system), r["round"], e + 1, pb / 1e6, pd / 1e6,
                                         opt[e] / 1e6, peer / 1e6, lb, ep["wall_s"],
                                         ep["wall_s"] / lb, ep["wall_s"] / ob))
                L.append("| %s | %d | job | %.1f (before epoch 1: %.1f) | | %.2f | %.2f | %.2f | "
                         "%.2f |" % (label(system), r["round"], sum(r["pfs_epoch_bytes"]) / 1e6,
                                     r.get("pfs_before_epoch1", 0) / 1e6, tb, tw, tw / tb,
                                     tw / tob))
        pl = sc.get("plan")
        if pl:
            L.append("\nseer-plan (same job, sizes averaged): `%s`\n" % pl["cmd"])
            if "result" in pl:
                L.append("| policy (seer-plan model) | PFS MB | x optimum | peer MB |")
                L.append("|---|---|---|---|")
                for p in pl["result"].get("policies", []):
                    t = p["total"]
                    L.append("| %s | %.1f | %s | %s |" % (
                        p["name"], t["pfs"] / 1e6, "%.4f" % t["ratio_to_optimum"]
                        if "ratio_to_optimum" in t else "1", "%.1f" % (t["peer"] / 1e6)
                        if "peer" in t else "-"))
    return "\n".join(L)


def torch_tuning(summary):
    L = ["| scenario | DataLoader configuration | rounds | epoch 1 samples/s | epochs 2+ "
         "samples/s | AU epochs 2+ |", "|---|---|---|---|---|---|"]
    for sc in summary["scenarios"]:
        for c in summary["torch_configs"]:
            rs = runs_of(summary, sc["name"], c)
            if not rs:
                continue
            L.append("| %s | %s%s | %d | %s | %s | %s |" % (
                sc["name"], label(c), " (best)" if c == best_torch(summary, sc["name"]) else "",
                len(rs), rng(collect(rs, "samples_per_s", False), "%.0f"),
                rng(collect(rs, "samples_per_s", True), "%.0f"),
                rng([100 * x for x in collect(rs, "au", True)], "%.1f%%")))
    return "\n".join(L)


def settings(summary):
    L = ["| scenario | format | samples (D) | batch / trainer | trainers (nodes x per node) | "
         "compute / step | steps / epoch | epochs | PFS: bandwidth, latency, metadata latency, "
         "in flight | reading D once | seer: RAM / node (aggregate / D), staging, io_threads, "
         "lookahead |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for sc in summary["scenarios"]:
        p = sc["pfs"]
        a = summary["args"]
        L.append("| %s | %s | %d (%.1f MB) | %d | %d (%d x %d) | %g ms | %d | %d | %s%.0f MB/s, "
                 "%g ms, %g ms, %d%s | %.2f s | %.1f MiB (%.2f), %d MiB, %d, %d |" % (
                     sc["name"], sc["fmt"], sc["nsamples"], sc["D"] / 1e6, sc["batch"], sc["world"],
                     sc["nodes"], sc["tpn"], sc["compute_ms"], sc["steps_per_epoch"], sc["epochs"],
                     "preset %s: " % p["preset"] if p.get("preset") else "",
                     p["bandwidth"] / 1e6, p["latency_ms"], p["meta_latency_ms"],
                     p.get("ost_inflight") or p["max_inflight"],
                     " per OST, readahead" if p.get("readahead") else "",
                     sc["pfs_read_s"], sc["ram_per_node"] / 2**20,
                     sc["aggregate_cache"] / sc["D"], sc["staging"] // 2**20,
                     a.get("io_threads") or sc["io_threads"],
                     a.get("lookahead") or sc["lookahead"]))
    return "\n".join(L)


def dlio_table(summary):
    sys.path.insert(0, HERE)
    import workloads
    L = ["| workload | DLIO config | DLIO: format, files x samples/file, sample bytes (sd), "
         "batch, read threads, compute/step | here: format, samples, mean sample bytes, batch, "
         "compute/step |", "|---|---|---|---|"]
    seen = set()
    for sc in summary["scenarios"]:
        d = workloads.DLIO.get(sc["dataset"])
        if not d or sc["dataset"] in seen:
            continue
        seen.add(sc["dataset"])
        L.append("| %s | %s | %s, %d x %d, %d (%d), %d, %d, %g s | %s, %d, %.0f, %d, %g ms |" % (
            sc["dataset"], d["config"], d["format"], d["files"], d["samples_per_file"],
            d["record_bytes"], d["record_sd"], d["batch"], d["read_threads"], d["compute_s"],
            sc["fmt"], sc["nsamples"], sc["D"] / sc["nsamples"], sc["batch"], sc["compute_ms"]))
    return "\n".join(L)


def noise(summary):
    L = ["| run | wall s | CPU busy (of %d cores) | ours | emulator | other processes (cores) | "
         "load avg start / end |" % (summary["machine"].get("cpus") or 0),
         "|---|---|---|---|---|---|---|"]
    for r in summary["runs"]:
        c = r.get("cpu") or {}
        L.append("| r%d %s %s%s | %.1f | %.0f%% | %.1f s | %.1f s | %.2f | %.1f / %.1f |" % (
            r["round"], r["scenario"], r["system"], "" if r["ok"] else " (FAILED)",
            c.get("wall_s", 0), 100 * c.get("util", 0), c.get("ours_cpu_s", 0),
            c.get("emulator_cpu_s", 0), c.get("foreign_cores", 0), c.get("loadavg_start", 0),
            c.get("loadavg_end", 0)))
    return "\n".join(L)


def write(summary, outdir, mdpath, plots=True):
    m = summary["machine"]
    figs = []
    if plots:
        try:
            import plot
            figs = plot.draw(summary, outdir)
        except Exception as e:  # plots are a convenience: the report still gets written
            print("plots failed: %s" % e, file=sys.stderr)
    verdicts = bars(summary) + packed_bars(summary)
    L = ["# seer benchmark %s" % summary["timestamp"], "",
         "Command: `%s` (%d round%s, %.0f s in all)." % (
             summary["command"], summary["rounds"], "" if summary["rounds"] == 1 else "s",
             summary.get("elapsed_s", 0)),
         "",
         "Machine: %s, %s cores, %s GiB RAM, %s, kernel %s, Debian %s; torch %s; %s. Load "
         "average at start %s, at end %s." % (
             m.get("cpu", "?"), m.get("cpus"), m.get("mem_gib"), m.get("virt") or "bare metal",
             m.get("kernel"), m.get("debian", "?"), m.get("torch", "?"), m.get("mpirun", "?"),
             "/".join("%.1f" % x for x in m.get("loadavg_start", [])),
             "/".join("%.1f" % x for x in m.get("loadavg_end", []))),
         "",
         "Huge pages for seerd's arenas ([cache] huge_pages = auto): %s." % m.get(
             "huge_pages", "not recorded"),
         ""]
    for n in summary.get("notes", []):
        L += ["**Note:** " + n, ""]
    L += ["## Results", "",
          "Median over every round's epochs, [min-max]; epoch 1 is cold (empty caches), "
          "epochs 2+ are warm. samples/s and AU (= compute time / wall time) are of the "
          "whole job (all trainers). PFS bytes, over the dataset size D, are the PFS "
          "emulator's count of bytes read through the mount: *in the epochs* = read while "
          "the epochs ran (counter sampled every 20 ms against each epoch's start and end; "
          "for the threaded files baseline, whose epoch times are not exported, the run "
          "total less its trainers' catalog scans), *run total* = everything the run read, "
          "start-up included (the files baseline's trainers each scan the catalog through "
          "the PFS: for TFRecord that reads every byte). The optimum is D + (D - C)(E - 1).",
          "",
          table(summary), ""]
    if any(sc.get("packed") for sc in summary["scenarios"]):
        L += ["## Packed formats on the lustre-like PFS: the cold epoch", "",
              "The emulator's lustre preset (docs/pfsemu.md): 8 read RPCs in flight, 2 ms "
              "each, 2 GB/s, 4 MiB RPCs, readahead for sequential readers. The sequential "
              "read is `cat` of the dataset's files through the same mount (one process): the "
              "physical bound of an epoch that reads every byte once; *PFS busy* is the "
              "emulator's own time for it (without the client's process start-up). Requests "
              "and bytes are what the emulator counted while the epoch ran: read requests as "
              "the client sent them and the RPCs they became; *PFS busy* in the epoch is the "
              "time the emulator had a request in flight (near the wall time: the epoch was "
              "PFS-bound; far below: the client was the bottleneck). The DataLoader is its best "
              "configuration by the cold epoch; it reads each record with one pread located "
              "by an index (npz in DLIO's layout: the member once per worker, kept decoded). "
              "It reads the whole dataset from the PFS in every epoch, and its epoch 1 also "
              "starts its workers: seer's cold epoch is compared with the better of its epoch "
              "1 and its epochs 2+. Compute time aside: the trainers of these scenarios do not "
              "compute, so wall time and samples/s are the loaders' own. *seer, coalescing off* "
              "is seer with `prefetch.coalesce = off` (one PFS read per sample, as before "
              "issue 13).",
              "", packed_table(summary), ""]
    L += ["## The bars", "",
          "| bar | scenario | measured | met |", "|---|---|---|---|"]
    for b, s, txt, ok in verdicts:
        L.append("| %s | %s | %s | %s |" % (b, s, txt,
                                            "n/a" if ok is None else ("yes" if ok else "**no**")))
    L += ["", "## Settings", "", settings(summary), "", dlio_table(summary), "",
          "DataLoader configurations tried (num_workers x prefetch_factor, persistent workers, "
          "per trainer): %s; threaded files baseline: %d threads, %d batches prefetched per "
          "trainer; seer: net.peer_timeout_ms %s, libfabric provider %s." % (
              ", ".join(c.split(":")[1] for c in summary["torch_configs"]),
              summary["args"]["files_threads"], summary["args"]["files_prefetch"],
              summary["args"]["peer_timeout_ms"] or "2000 (default)",
              summary["args"]["provider"] or "tcp;ofi_rxm"),
          "", "### DataLoader tuning", "", torch_tuning(summary), "",
          "## Larger than the aggregate cache", big_detail(summary), ""]
    if figs:
        L += ["## Plots", ""] + ["![%s](%s)" % (os.path.basename(f),
                                                os.path.relpath(f, os.path.dirname(mdpath)))
                                 for f in figs] + [""]
    L += ["## Machine load during each run", "",
          "CPU seconds from /proc/stat over the run; *ours* = the processes this suite "
          "started, *emulator* = seer-pfsemu; *other processes* = the rest, in cores.", "",
          noise(summary), ""]
    failed = [r for r in summary["runs"] if not r["ok"]]
    if failed:
        L += ["## Failed runs", ""] + ["- r%d %s %s: %s (%s)" % (
            r["round"], r["scenario"], r["system"], r.get("error"), r["dir"]) for r in failed]
    text = "\n".join(L) + "\n"
    with open(mdpath, "w") as f:
        f.write(text)
    print(table(summary))
    print()
    if any(sc.get("packed") for sc in summary["scenarios"]):
        print(packed_table(summary))
        print()
    for b, s, txt, ok in verdicts:
        print("%-4s %s [%s]: %s" % ("n/a" if ok is None else ("MET" if ok else "MISS"), b, s, txt))
    return mdpath


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: report.py results/bench-<ts>/summary.json")
    with open(sys.argv[1]) as f:
        s = json.load(f)
    outdir = os.path.dirname(os.path.abspath(sys.argv[1]))
    write(s, outdir, outdir + ".md")
