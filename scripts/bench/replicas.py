#!/usr/bin/python3
"""Replicas on three daemons here (issue 16's closing figures): network bytes
per epoch with cache.replicas off and on, and each node's forecast against
what the job did.

    /usr/bin/python3 scripts/bench/replicas.py [--samples 3000] [--epochs 6]
        [--compute-ms 4] [--pfs-bw 40MB/s] [--json out.json] [--keep DIR]

Three seerd under mpirun (tests/integration/test_multi_node.Cluster), six
seer-trainers (block placement, batch 8, every byte read), a dataset of
random files of 4-16 KB read through the PFS emulator (bin/seer-pfsemu at
--pfs-bw; no emulator: the local disk). Four jobs with the same seed: cache
per node = D/2 and = 1.2 D, each with replicas off and on. The trainers hold
the job's last batch until the script has every node's `seerctl forecast`
(with the rates the daemon measured over the job); the per-epoch forecasts
the daemons made as each epoch began are in their stats files (--keep DIR
keeps them, for scripts/plot_stats.py). Prints numbers; never fails on
timing (it fails only when a job fails or delivers a wrong byte)."""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))

from seertest import (BIN, LONG, ROOT, Gate, catalog, check, cleanup, finish,  # noqa: E402
                      make_classes, read_log, seer, start_trainer, tmpdir, verify_exactly_once,
                      verify_rank)
from test_multi_node import NODES, WORLD, Cluster, placement  # noqa: E402

BATCH, SEED = 8, 3


def mib(x):
    return "%.2f" % (x / 1048576.0)


def ctl(cl, node, cmd):
    out = subprocess.run([os.path.join(BIN, "seerctl"), "--socket", cl.socket(node), "--json",
                          cmd], capture_output=True, text=True, timeout=LONG)
    check(out.returncode == 0, "seerctl %s on node %d: %s" % (cmd, node, out.stderr))
    return json.loads(out.stdout)


def run(tmp, name, root, cat, ram, replicas, a):
    s = {"dataset.path": root, "job.seed": SEED, "job.epochs": a.epochs,
         "job.batch_size": BATCH, "cache.ram": ram, "cache.staging": "8MiB",
         "cache.replicas": replicas, "prefetch.io_threads": 4, "prefetch.lookahead": 4,
         "net.peer_timeout_ms": 60000}
    sampler = seer.Sampler(len(cat), SEED, WORLD, BATCH)
    last = (a.epochs - 1, sampler.batches_per_epoch - 1)
    cl = Cluster(tmp, s, name=name)
    gate = Gate(tmp, name + "-sync")
    try:
        nodes = placement("block")
        logs = [os.path.join(tmp, "%s-r%d.log" % (name, r)) for r in range(WORLD)]
        procs = [start_trainer("c", r, WORLD, cl.socket(nodes[r]), logs[r],
                               ["--compute-ms", str(a.compute_ms)] + gate.args(last))
                 for r in range(WORLD)]
        gate.wait(range(WORLD), last, procs, timeout=600)
        fcs = [ctl(cl, k, "forecast") for k in range(NODES)]
        gate.go(last)
        for r, (rc, _, err) in enumerate(finish(procs, timeout=600)):
            check(rc == 0, "%s: trainer %d failed: %s" % (name, r, err))
        check(cl.wait() == 0, "%s: daemons failed:\n%s" % (name, cl.log()))
    finally:
        cl.kill()
    all_logs = [read_log(p) for p in logs]
    for r in range(WORLD):
        verify_rank(cat, sampler, r, all_logs[r], a.epochs)
    verify_exactly_once(cat, all_logs, a.epochs, WORLD, BATCH, drop_last=False)
    stats = [cl.node_stats(k) for k in range(NODES)]
    return stats, fcs


def per_epoch(stats, key, epochs):
    out = [0] * epochs
    for st in stats:
        for e in st["epochs"]:
            out[e["epoch"]] += e[key]
    return out


def report_bytes(name, stats, epochs, D):
    peer = per_epoch(stats, "peer_bytes", epochs)
    pfs = per_epoch(stats, "pfs_bytes", epochs)
    fill = per_epoch(stats, "replica_fill_bytes", epochs)
    secs = [max(e["seconds"] for st in stats for e in st["epochs"] if e["epoch"] == i)
            for i in range(epochs)]
    print("%-12s network MiB per epoch (3 nodes) %s  of which fills %s" %
          (name, " ".join(mib(x) for x in peer), " ".join(mib(x) for x in fill)))
    print("%-12s PFS/D per epoch %s   epoch s %s" %
          ("", " ".join("%.3f" % (x / D) for x in pfs), " ".join("%.2f" % x for x in secs)))
    return {"peer": peer, "pfs": pfs, "fill": fill, "seconds": secs}


def report_forecast(name, stats, fcs):
    """Node 0: the forecast made as each epoch began (stats file) and the one
    taken at the end (seerctl forecast), against the actual."""
    st, fc = stats[0], fcs[0]
    r = fc["rates"]
    print("\n%s, node 0: rates measured: compute %.2f ms/step, PFS %.1f MB/s aggregate, "
          "network %.1f MB/s, NVMe %s" % (name, r["compute_s"] * 1e3, r["pfs_bytes_per_s"] / 1e6,
                                          r["net_bytes_per_s"] / 1e6,
                                          "-" if not r["nvme_bytes_per_s"] else
                                          "%.1f MB/s" % (r["nvme_bytes_per_s"] / 1e6)))
    print("  %-5s | %-28s | %-28s | %-22s" % ("epoch", "forecast as it began", "forecast at the end",
                                              "actual"))
    print("  %-5s | %8s %8s %9s | %8s %8s %9s | %8s %8s %9s" % ("", "s", "bound", "net+PFS MiB",
                                                            "s", "bound", "net+PFS MiB", "s", "",
                                                            "net+PFS MiB"))
    rows = []
    ends = {e["epoch"]: e for e in fc["epochs"]}
    for e in st["epochs"]:
        f, g = e.get("forecast") or {}, ends.get(e["epoch"], {})
        fb = f.get("peer_bytes", 0) + f.get("pfs_bytes", 0)
        gb = g.get("peer_bytes", 0) + g.get("fill_bytes", 0) + g.get("pfs_bytes", 0)
        ab = e["peer_bytes"] + e["pfs_bytes"]
        fs = "%8.3f" % f["seconds"] if f.get("seconds") is not None else "%8s" % "-"
        print("  %-5d | %s %8s %9s | %8.3f %8s %9s | %8.3f %8s %9s" % (
            e["epoch"], fs, f.get("bound", "-"), mib(fb), g["seconds"], g["bound"], mib(gb),
            e["seconds"], "", mib(ab)))
        rows.append({"epoch": e["epoch"], "began": f, "end": g, "actual_seconds": e["seconds"],
                     "actual_net_pfs": ab})
    tot_f = sum(g["peer_bytes"] + g["fill_bytes"] + g["pfs_bytes"] for g in fc["epochs"])
    tot_a = sum(e["peer_bytes"] + e["pfs_bytes"] for e in st["epochs"])
    print("  job: network + PFS %s MiB forecast at the end, %s MiB actual; time %.2f s forecast, "
          "%.2f s actual (epochs' sum)" % (mib(tot_f), mib(tot_a), fc["seconds"],
                                         sum(e["seconds"] for e in st["epochs"])))
    print("  capacity search with these rates: %s" % fc["seer_plan"])
    return {"rates": r, "rows": rows, "seer_plan": fc["seer_plan"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=3000)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--compute-ms", type=float, default=4)
    ap.add_argument("--pfs-bw", default="40MB/s")
    ap.add_argument("--json")
    ap.add_argument("--keep", help="copy the stats files here")
    a = ap.parse_args()
    tmp = tmpdir("seer-replbench-")
    mnt = None
    out = {}
    try:
        src = os.path.join(tmp, "data")
        per = max(1, a.samples // 30)
        make_classes(src, ["c%02d" % i for i in range(30)], per, 4000, 16000, seed=5)
        cat = catalog(src)
        D = sum(c[2] for c in cat)
        root = src
        emu = os.path.join(BIN, "seer-pfsemu")
        if os.path.exists(emu) and os.path.exists("/dev/fuse") and a.pfs_bw != "0":
            mnt = os.path.join(tmp, "pfs")
            r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-mount.sh"), src,
                                mnt, "--bandwidth", a.pfs_bw], capture_output=True, text=True)
            check(r.returncode == 0, "pfsemu mount: %s %s" % (r.stdout, r.stderr))
            root = mnt
        print("dataset %d samples, %s MiB; 3 nodes x 2 trainers, batch %d, %d epochs, compute %g "
              "ms/step, PFS %s" % (len(cat), mib(D), BATCH, a.epochs, a.compute_ms,
                                   a.pfs_bw if mnt else "local disk"))
        for label, ram in (("D/2", D // 2), ("1.2 D", int(D * 1.2))):
            for repl in ("off", "on"):
                name = "%s-%s" % ("half" if label == "D/2" else "all", repl)
                stats, fcs = run(tmp, name, root, cat, ram, repl, a)
                out[name] = {"bytes": report_bytes("%s %s" % (label, repl), stats, a.epochs, D)}
                out[name]["forecast"] = report_forecast(name, stats, fcs) if repl == "on" or \
                    label == "D/2" else None
                print()
                if a.keep:
                    os.makedirs(a.keep, exist_ok=True)
                    for k, st in enumerate(stats):
                        with open(os.path.join(a.keep, "%s-stats-%d.json" % (name, k)), "w") as f:
                            json.dump(st, f)
        for label in ("half", "all"):
            off, on = out[label + "-off"]["bytes"], out[label + "-on"]["bytes"]
            o, n = sum(off["peer"][1:]), sum(on["peer"][1:])
            print("%s: network after the first epoch %s MiB with replicas, %s MiB without "
                  "(%.1f%% less); PFS bytes %s" %
                  (label, mib(n), mib(o), 100.0 * (1 - n / o) if o else 0.0,
                   "equal" if off["pfs"] == on["pfs"] else "DIFFER"))
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"dataset": D, "samples": len(cat), "runs": out}, f, indent=1)
    finally:
        if mnt:
            subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-umount.sh"), mnt],
                           capture_output=True)
        cleanup(tmp)


if __name__ == "__main__":
    main()
