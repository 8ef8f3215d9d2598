"""Replicas on three daemons (issue 16): spare RAM holds copies of the samples
each node rereads, filled in the background from their owners.

Three seerd under mpirun (test_multi_node.Cluster), six trainers in block
placement, every delivered byte checked against the files:
- room for the whole dataset on every node: once the fills are done no byte
  crosses the network again (every epoch after the first reads 0 peer bytes),
  and the PFS is read once per sample;
- room for half the dataset per node: against the same job with
  cache.replicas = off the network bytes after the first epoch fall (by more
  than a quarter), and those of every epoch from the third on in the
  forecasts, the PFS bytes do not change, and each node's bytes over the job
  are those its forecast (seerctl forecast, src/plan/forecast_node.c) predicts,
  replicas on and off;
- a node that stops answering (SIGSTOP) while the others fill replicas from
  it: their fills and reads fall back to the PFS, and every delivered sample
  is still exact.

Nothing races the job: the first two tests hold every trainer at the last
batch of epoch 0 (seertest.Gate) until every daemon says its replicas are
loaded, so "after the fills" is a state the test waits for, not a time; the
third holds the trainers while the node is stopped, as test_sigstop_peer
does."""

import json
import os
import signal
import subprocess

from seertest import (BIN, LONG, Fail, Gate, catalog, check, cleanup, finish, log, make_classes, read_log,
                      run_tests, seer, start_trainer, tmpdir, verify_exactly_once, verify_rank,
                      wait_for)
from test_multi_node import NODES, WORLD, Cluster, placement

EPOCHS = 5
BATCH = 4
SEED = 7


def dataset(tmp, seed):
    src = os.path.join(tmp, "data")
    make_classes(src, ["c%02d" % i for i in range(12)], 23, 4000, 16000, seed=seed)
    cat = catalog(src)
    return src, cat, sum(c[2] for c in cat)


def settings(src, ram, replicas, extra=None):
    s = {"dataset.path": src, "job.seed": SEED, "job.epochs": EPOCHS, "job.batch_size": BATCH,
         "cache.ram": ram, "cache.staging": "2MiB", "cache.replicas": replicas,
         "prefetch.io_threads": 4, "prefetch.lookahead": 4, "net.peer_timeout_ms": 60000}
    s.update(extra or {})
    return s


def replicas_loaded(cl):
    """True once every daemon has loaded every replica it planned."""
    for k in range(NODES):
        r = cl.status(k)["cache"]["replicas"]
        if r["loaded_samples"] < r["samples"]:
            return False
    return True


def forecast(cl, node):
    out = subprocess.run([os.path.join(BIN, "seerctl"), "--socket", cl.socket(node), "--json",
                          "forecast"], capture_output=True, text=True, timeout=LONG)
    check(out.returncode == 0, "seerctl forecast on node %d: %s" % (node, out.stderr))
    return json.loads(out.stdout)


def run_job(tmp, name, s, cat, compute_ms=1):
    """One job on NODES daemons, its trainers held at the last batch of epoch
    0 until every replica is loaded and at the job's last batch. Returns (the
    per-node stats files, every node's status at the first hold, every
    node's status and forecast at the last)."""
    sampler = seer.Sampler(len(cat), SEED, WORLD, BATCH)
    cl = Cluster(tmp, s, name=name)
    gate = Gate(tmp, name + "-sync")
    last0 = (0, sampler.batches_per_epoch - 1)
    last = (EPOCHS - 1, sampler.batches_per_epoch - 1)
    try:
        nodes = placement("block")
        logs = [os.path.join(tmp, "%s-r%d.log" % (name, r)) for r in range(WORLD)]
        extra = ["--compute-ms", str(compute_ms)] + gate.args(last0, last)
        procs = [start_trainer("c", r, WORLD, cl.socket(nodes[r]), logs[r], extra)
                 for r in range(WORLD)]
        gate.wait(range(WORLD), last0, procs)
        # the fills run while every trainer holds epoch 0's last batch
        try:
            wait_for(lambda: replicas_loaded(cl), 120, "every node's replicas to be loaded",
                     step=0.05)
        except Fail as x:
            raise Fail("%s\n%s" % (x, cl.log()))
        held = [cl.status(k) for k in range(NODES)]
        gate.go(last0)
        # every batch of the job read: the forecast with the rates measured
        gate.wait(range(WORLD), last, procs, timeout=300)
        final = [(cl.status(k), forecast(cl, k)) for k in range(NODES)]
        gate.go(last)
        for r, (rc, _, err) in enumerate(finish(procs, timeout=300)):
            check(rc == 0, "%s: trainer %d failed: %s\n%s" % (name, r, err, cl.log()))
        check(cl.wait() == 0, "%s: daemons failed:\n%s" % (name, cl.log()))
    finally:
        cl.kill()
    all_logs = [read_log(p) for p in logs]
    for r in range(WORLD):
        verify_rank(cat, sampler, r, all_logs[r], EPOCHS)
    verify_exactly_once(cat, all_logs, EPOCHS, WORLD, BATCH, drop_last=False)
    check_forecast(name, final)
    stats = [cl.node_stats(k) for k in range(NODES)]
    for k, st in enumerate(stats):
        # the stats file: every epoch with the forecast made as it began
        missing = [e["epoch"] for e in st["epochs"] if not e.get("forecast")]
        check(not missing, "node %d: epochs %s have no forecast in the stats file" % (k, missing))
    return stats, held, [fc for _, fc in final]


def check_forecast(name, final):
    """Each node's forecast (seerctl forecast, with the rates it measured)
    against what the job did on that node: over the job, the bytes it
    received from peers (replica fills included) and read from the PFS are
    exactly those forecast; per epoch both are shown."""
    for k, (st, fc) in enumerate(final):
        check(fc["ready"], "node %d: no forecast: %s" % (k, fc.get("why")))
        eps = fc["epochs"]
        check([e["epoch"] for e in eps] == list(range(EPOCHS)), "node %d: forecast epochs %s" %
              (k, [e["epoch"] for e in eps]))
        act = {e["epoch"]: e for e in st["epochs"]}
        rows = []
        for e in eps:
            a = act[e["epoch"]]
            rows.append("%d: peers %d+%d/%d, PFS %d/%d, %.3f s %s/%s s" % (
                e["epoch"], e["peer_bytes"], e["fill_bytes"], a["peer_bytes"], e["pfs_bytes"],
                a["pfs_bytes"], e["seconds"], e["bound"],
                "%.3f" % a["seconds"] if a["seconds"] >= 0 else "running"))
        log("%s node %d forecast/actual per epoch: %s" % (name, k, "; ".join(rows)))
        f_net = sum(e["peer_bytes"] + e["fill_bytes"] for e in eps)
        f_pfs = sum(e["pfs_bytes"] for e in eps)
        a_net = sum(a["peer_bytes"] for a in act.values())
        a_pfs = sum(a["pfs_bytes"] for a in act.values())
        check(f_net == a_net, "%s node %d: %d B from peers forecast, %d B received" %
              (name, k, f_net, a_net))
        check(f_pfs == a_pfs, "%s node %d: %d B from the PFS forecast, %d B read" %
              (name, k, f_pfs, a_pfs))
        check(fc["rates"]["steps"] > 0 and fc["rates"]["compute_s"] > 0,
              "node %d: no compute time measured: %s" % (k, fc["rates"]))


def per_epoch(stats, key):
    out = [0] * EPOCHS
    for st in stats:
        for e in st["epochs"]:
            out[e["epoch"]] += e[key]
    return out


def room_for_all(nvme):
    tmp = tmpdir("seer-repl-")
    try:
        src, cat, D = dataset(tmp, 21)
        if nvme:
            # a little RAM, NVMe for the dataset: replicas go to NVMe through
            # bounce slots and are read back checked
            s = settings(src, "256KiB", "on", {"cache.nvme_dir": os.path.join(tmp, "nvme"),
                                               "cache.nvme": "4MiB"})
        else:
            s = settings(src, "4MiB", "on")
        stats, held, _ = run_job(tmp, "all", s, cat)
        check(D < (4 << 20), "the dataset (%d B) must fit one node's cache" % D)
        for k, st in enumerate(held):
            r = st["cache"]["replicas"]
            log("node %d: %d replicas (%d B; %d in RAM, %d on NVMe), %d filled" %
                (k, r["samples"], r["bytes"], r["ram_samples"], r["nvme_samples"],
                 r["filled_samples"]))
            check(r["enabled"] and r["samples"] > 0, "node %d planned no replica" % k)
            check(not nvme or r["nvme_samples"] > r["ram_samples"],
                  "node %d: its replicas should be mostly on NVMe: %s" % (k, r))
        pfs, peer = per_epoch(stats, "pfs_bytes"), per_epoch(stats, "peer_bytes")
        repl = per_epoch(stats, "replica_bytes")
        log("PFS bytes per epoch %s (dataset %d), peer bytes per epoch %s, served from replicas "
            "%s" % (pfs, D, peer, repl))
        check(pfs == [D] + [0] * (EPOCHS - 1), "PFS bytes per epoch %s: the dataset once" % pfs)
        check(peer[1:] == [0] * (EPOCHS - 1),
              "peer bytes after the first epoch with every replica loaded: %s" % peer)
        check(all(x > 0 for x in repl[1:]), "epochs not served from replicas: %s" % repl)
        if nvme:
            nv = per_epoch(stats, "nvme_bytes")
            check(all(x > 0 for x in nv[1:]), "no NVMe reads after the first epoch: %s" % nv)
            check(sum(e["nvme_corrupt"] for st in stats for e in st["epochs"]) == 0,
                  "an NVMe copy failed its checksum")
    finally:
        cleanup(tmp)


def test_room_for_all():
    room_for_all(nvme=False)


def test_room_for_all_on_nvme():
    room_for_all(nvme=True)


def test_half_the_dataset_per_node():
    tmp = tmpdir("seer-repl-")
    try:
        src, cat, D = dataset(tmp, 22)
        ram = D // 2
        runs, fcs = {}, {}
        for mode in ("off", "on"):
            stats, held, fcs[mode] = run_job(tmp, mode, settings(src, ram, mode), cat)
            r = held[0]["cache"]["replicas"]
            check(r["enabled"] == (mode == "on"), "replicas %s: enabled says %s" % (mode, r))
            runs[mode] = stats
            log("replicas %s: PFS bytes per epoch %s, peer bytes per epoch %s, replica fills "
                "%s" % (mode, per_epoch(stats, "pfs_bytes"), per_epoch(stats, "peer_bytes"),
                        per_epoch(stats, "replica_fill_bytes")))
        off_pfs, on_pfs = per_epoch(runs["off"], "pfs_bytes"), per_epoch(runs["on"], "pfs_bytes")
        check(off_pfs == on_pfs == [D] + [0] * (EPOCHS - 1),
              "PFS bytes per epoch: off %s, on %s (the dataset once, either way)" %
              (off_pfs, on_pfs))
        off, on = per_epoch(runs["off"], "peer_bytes"), per_epoch(runs["on"], "peer_bytes")
        check(per_epoch(runs["off"], "replica_fill_bytes") == [0] * EPOCHS,
              "replicas off filled replicas")
        # over the job, what the daemons counted (a read counts in the epoch
        # it completed in: per epoch that moves with the lookahead, so per
        # epoch the comparison is made on the forecasts, which each node's
        # totals were just checked against, byte for byte)
        cut = 1 - sum(on[1:]) / sum(off[1:])
        log("network bytes after the first epoch: %d with replicas, %d without (%.1f%% less)" %
            (sum(on[1:]), sum(off[1:]), 100.0 * cut))
        check(cut > 0.25, "replicas cut the network bytes after the first epoch by %.1f%% "
              "only" % (100 * cut))
        fc = {m: [sum(f["epochs"][e]["peer_bytes"] + f["epochs"][e]["fill_bytes"]
                      for f in fcs[m]) for e in range(EPOCHS)] for m in fcs}
        log("forecast network bytes per epoch: %s with replicas, %s without" %
            (fc["on"], fc["off"]))
        for e in range(2, EPOCHS):
            check(fc["on"][e] < fc["off"][e], "epoch %d: %d network bytes forecast with "
                  "replicas, %d without" % (e, fc["on"][e], fc["off"][e]))
    finally:
        cleanup(tmp)


def test_peer_stops_while_filling():
    """Node 2 stops answering (SIGSTOP) while the others still fill replicas
    from it (capped at 50 KB/s, so the fills outlast the first epoch by far):
    their fills and reads of its samples go to the PFS, every byte exact."""
    tmp = tmpdir("seer-repl-")
    try:
        src, cat, D = dataset(tmp, 23)
        s = settings(src, "4MiB", "on", {"cache.replica_fill_rate": "50KB",
                                         "net.peer_timeout_ms": 300, "prefetch.lookahead": 2})
        sampler = seer.Sampler(len(cat), SEED, WORLD, BATCH)
        cl = Cluster(tmp, s, name="stop")
        gate, mid, last = Gate(tmp), (1, 3), (EPOCHS - 1, sampler.batches_per_epoch - 1)
        stopped = None
        try:
            nodes = placement("block")
            logs = [os.path.join(tmp, "r%d.log" % r) for r in range(WORLD)]
            procs = [start_trainer("c", r, WORLD, cl.socket(nodes[r]), logs[r],
                                   ["--compute-ms", "15"] + gate.args(mid, last))
                     for r in range(WORLD)]
            gate.wait(range(WORLD), mid, procs)
            before = [cl.status(k)["cache"]["replicas"] for k in (0, 1)]
            for k, r in enumerate(before):
                log("node %d at 1:3: %d of %d replicas loaded" % (k, r["loaded_samples"],
                                                                  r["samples"]))
                check(r["loaded_samples"] < r["samples"],
                      "node %d: every replica loaded before the stop (the fill cap did not "
                      "hold them back): nothing to test" % k)
            stopped = cl.status(2)["pid"]
            os.kill(stopped, signal.SIGSTOP)
            log("node 2 (pid %d) stopped with SIGSTOP in epoch 1" % stopped)
            others = [r for r in range(WORLD) if nodes[r] != 2]
            mine = [r for r in range(WORLD) if nodes[r] == 2]
            for r in others:
                gate.go(mid, r)
            gate.wait(others, last, [procs[r] for r in others], timeout=300)
            after = [cl.status(k) for k in (0, 1)]
            os.kill(stopped, signal.SIGCONT)
            stopped = None
            for r in mine:
                gate.go(mid, r)
            gate.wait(mine, last, [procs[r] for r in mine], timeout=300)
            gate.go(last)
            for r, (rc, _, err) in enumerate(finish(procs, timeout=300)):
                check(rc == 0, "rank %d (node %d) failed: %s" % (r, nodes[r], err))
            check(cl.wait() == 0, "daemons failed:\n" + cl.log())
        finally:
            if stopped:
                os.kill(stopped, signal.SIGCONT)
            cl.kill()
        fallbacks = sum(e["peer_fallbacks"] for st in after for e in st["epochs"])
        pfs_fills = sum(st["cache"]["replicas"]["filled_from_pfs_bytes"] for st in after)
        pfs_late = sum(e["pfs_bytes"] for st in after for e in st["epochs"] if e["epoch"] > 0)
        log("nodes 0-1 while node 2 was stopped: %d peer fetches fell back to the PFS, %d B of "
            "replica fills and %d B in all read from the PFS after epoch 0" %
            (fallbacks, pfs_fills, pfs_late))
        check(pfs_fills > 0, "no replica was filled from the PFS while its owner was stopped")
        check(pfs_late > 0, "nothing read from the PFS while a peer was stopped")
        all_logs = [read_log(p) for p in logs]
        for r in range(WORLD):
            verify_rank(cat, sampler, r, all_logs[r], EPOCHS)
        verify_exactly_once(cat, all_logs, EPOCHS, WORLD, BATCH, drop_last=False)
    finally:
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_room_for_all, test_room_for_all_on_nvme, test_half_the_dataset_per_node, test_peer_stops_while_filling])
