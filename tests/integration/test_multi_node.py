"""Several nodes: three seerd under mpirun share one cache over libfabric.

Six trainers in block and cyclic placement; a dataset about three times one
node's RAM cache but smaller than the three caches together. Asserts every
epoch delivers every sample exactly once with the files' bytes, that from
the second epoch on nothing is read from the PFS (the daemons' counters and,
independently, the PFS emulator's count of bytes read through its mount when
available), and that a peer stopped with SIGSTOP makes the others fall back
to the PFS with correct data.

Nothing here races the job: the SIGSTOP lands while every trainer holds a
batch of epoch 1 (seertest.Gate), and the job cannot end before the test says
so; a peer is only given up for dead after a deadline no loaded machine
reaches where the test asserts that nothing was read from the PFS."""

import json
import os
import signal
import subprocess

from seertest import (BIN, ROOT, Gate, MpiDaemons, catalog, check, cleanup, finish, log,
                      make_classes, read_log, run_tests, seer, start_trainer, tmpdir,
                      verify_exactly_once, verify_rank)

NODES = 3
WORLD = 6


class Cluster(MpiDaemons):
    """NODES seerd processes under one mpirun (seertest.MpiDaemons)."""

    def __init__(self, tmp, settings, name="job"):
        super().__init__(tmp, NODES, settings, name=name)


def placement(kind):
    if kind == "block":
        return [r * NODES // WORLD for r in range(WORLD)]
    return [r % NODES for r in range(WORLD)]


def pfsemu_available():
    return (os.path.exists(os.path.join(BIN, "seer-pfsemu")) and os.path.exists("/dev/fuse") and
            os.path.exists(os.path.join(ROOT, "scripts", "pfsemu-mount.sh")))


def mount_pfs(src, mnt, *opts):
    os.makedirs(mnt, exist_ok=True)
    out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-mount.sh"), src, mnt] +
                         list(opts), capture_output=True, text=True, timeout=60)
    check(out.returncode == 0, "pfsemu mount failed: %s %s" % (out.stdout, out.stderr))


def umount_pfs(mnt):
    subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-umount.sh"), mnt],
                   capture_output=True, text=True, timeout=60)


def pfs_stats(mnt):
    with open(os.path.join(mnt, ".pfsemu", "stats")) as f:
        return json.load(f)


def run_placement(kind):
    tmp = tmpdir("seer-mn-")
    mnt = None
    try:
        src = os.path.join(tmp, "data")
        make_classes(src, ["c%02d" % i for i in range(12)], 23, 4000, 16000, seed=11)
        cat = catalog(src)
        D = sum(c[2] for c in cat)
        ram = 1 << 20
        check(2.5 * ram < D < NODES * ram * 0.95, "dataset %d B must be ~3x one node's RAM" % D)
        root = src
        if pfsemu_available():
            mnt = os.path.join(tmp, "pfs")
            mount_pfs(src, mnt, "--latency-ms", "0")
            root = mnt
        # a peer answering late on a loaded machine must not be taken for a dead
        # one (its samples would then come from the PFS): a generous timeout
        s = {"dataset.path": root, "job.seed": 5, "job.epochs": 3, "job.batch_size": 4,
             "cache.ram": "1MiB", "cache.staging": "2MiB", "prefetch.io_threads": 4,
             "prefetch.lookahead": 4, "net.peer_timeout_ms": 60000}
        cl = Cluster(tmp, s)
        try:
            nodes = placement(kind)
            logs = [os.path.join(tmp, "r%d.log" % r) for r in range(WORLD)]
            procs = [start_trainer("c" if r % 2 == 0 else "py", r, WORLD, cl.socket(nodes[r]),
                                   logs[r], ["--compute-ms", "1"]) for r in range(WORLD)]
            for r, (rc, _, err) in enumerate(finish(procs)):
                check(rc == 0, "trainer %d failed: %s\n%s" % (r, err, cl.log()))
            rc = cl.wait()
            check(rc == 0, "mpirun seerd exited %d:\n%s" % (rc, cl.log()))
        finally:
            cl.kill()
        sampler = seer.Sampler(len(cat), 5, WORLD, 4)
        all_logs = [read_log(p) for p in logs]
        for r in range(WORLD):
            verify_rank(cat, sampler, r, all_logs[r], 3)
        verify_exactly_once(cat, all_logs, 3, WORLD, 4, drop_last=False)
        pfs_by_epoch = [0, 0, 0]
        peer = [0, 0, 0]
        for k in range(NODES):
            st = cl.node_stats(k)
            for e in st["epochs"]:
                pfs_by_epoch[e["epoch"]] += e["pfs_bytes"]
                peer[e["epoch"]] += e["peer_bytes"]
        log("%s: PFS bytes per epoch %s (dataset %d), peer bytes per epoch %s" %
            (kind, pfs_by_epoch, D, peer))
        check(pfs_by_epoch[0] == D, "epoch 0 read %d B from the PFS, the dataset is %d B" %
              (pfs_by_epoch[0], D))
        check(pfs_by_epoch[1] == 0 and pfs_by_epoch[2] == 0,
              "PFS bytes after the first epoch: %s" % pfs_by_epoch[1:])
        check(peer[1] > 0, "no peer transfers in epoch 1")
        if mnt:
            ps = pfs_stats(mnt)
            total = ps["totals"]["bytes"] if "totals" in ps else ps["bytes"]
            log("%s: PFS emulator counted %d B read through the mount" % (kind, total))
            check(total == D, "the PFS emulator saw %d B read, the dataset is %d B (each "
                  "sample must be read once per job)" % (total, D))
    finally:
        if mnt:
            umount_pfs(mnt)
        cleanup(tmp)


def test_block_placement():
    run_placement("block")


def test_cyclic_placement():
    run_placement("cyclic")


def test_sigstop_peer():
    tmp = tmpdir("seer-mn-")
    try:
        src = os.path.join(tmp, "data")
        make_classes(src, ["c%02d" % i for i in range(12)], 23, 4000, 16000, seed=12)
        cat = catalog(src)
        s = {"dataset.path": src, "job.seed": 9, "job.epochs": 3, "job.batch_size": 4,
             "cache.ram": "1MiB", "cache.staging": "2MiB", "prefetch.io_threads": 4,
             "prefetch.lookahead": 2, "net.peer_timeout_ms": 300}
        sampler = seer.Sampler(len(cat), 9, WORLD, 4)
        cl = Cluster(tmp, s)
        gate, mid, last = Gate(tmp), (1, 3), (2, sampler.batches_per_epoch - 1)
        stopped = None
        try:
            nodes = placement("block")
            logs = [os.path.join(tmp, "r%d.log" % r) for r in range(WORLD)]
            # 60 ms a step: an epoch lasts longer than the status polls that
            # look for it, also under ASan on a busy machine
            procs = [start_trainer("c", r, WORLD, cl.socket(nodes[r]), logs[r],
                                   ["--compute-ms", "15"] + gate.args(mid, last))
                     for r in range(WORLD)]
            # the first epoch filled the caches; node 2 stops while every trainer
            # holds its batch 1:3
            gate.wait(range(WORLD), mid, procs)
            stopped = cl.status(2)["pid"]
            os.kill(stopped, signal.SIGSTOP)
            log("node 2 (pid %d) stopped with SIGSTOP in epoch 1" % stopped)
            # the trainers of nodes 0 and 1 take every batch without it; they hold
            # the last one, so their daemons cannot finish (and give up on node 2)
            # before it is back
            others = [r for r in range(WORLD) if nodes[r] != 2]
            mine = [r for r in range(WORLD) if nodes[r] == 2]
            for r in others:
                gate.go(mid, r)
            gate.wait(others, last, [procs[r] for r in others], timeout=300)
            st0 = [cl.status(k) for k in (0, 1)]
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
        fallbacks = sum(e["peer_fallbacks"] for st in st0 for e in st["epochs"])
        log("peer fetches that fell back to the PFS while node 2 was stopped: %d" % fallbacks)
        check(fallbacks > 0, "no fallback to the PFS while a peer was stopped")
        all_logs = [read_log(p) for p in logs]
        for r in range(WORLD):
            verify_rank(cat, sampler, r, all_logs[r], 3)
        verify_exactly_once(cat, all_logs, 3, WORLD, 4, drop_last=False)
    finally:
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_block_placement, test_cyclic_placement, test_sigstop_peer])
