#!/usr/bin/python3
"""The checkpoint's peer level timed: two seerd under mpirun on this machine
(the copy goes to node 1 over libfabric, [net] provider; TCP before
2026-11-28), a state dict of --mib MiB saved through node 0, the drain
capped at 1 MiB/s so that the PFS copy does not compete.
Prints the trainer's stall (save), and when "local" and "peer" were reached
after save returned, and the copy's log line. A benchmark: prints numbers,
never fails on a timing.

    /usr/bin/python3 scripts/bench_checkpoint_peer.py [--mib 256]
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")

from seertest import MpiDaemons, cleanup, tmpdir  # noqa: E402
import test_checkpoint as T  # noqa: E402
import seer.checkpoint as sc  # noqa: E402
import torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    a = ap.parse_args()
    tmp = tmpdir("seer-ckb-")
    cl = None
    try:
        root, _ = T.dataset(tmp)
        pfs = os.path.join(tmp, "pfs")
        os.makedirs(pfs)
        s = T.settings(tmp, root, **{"checkpoint.drain_rate": "1MiB", "checkpoint.peers": 1,
                                     "daemon.stop_grace_s": 1})
        s["cache.nvme_dir"] = os.path.join(tmp, "nvme-%n")
        cl = MpiDaemons(tmp, 2, s)
        obj = {"w": torch.randn(a.mib << 18)}
        t0 = time.time()
        h = sc.save(obj, os.path.join(pfs, "big.pt"), socket=cl.socket(0), job_id=T.JOB)
        t1 = time.time()
        h.wait("local", timeout=600)
        t2 = time.time()
        h.wait("peer", timeout=600)
        t3 = time.time()
        print("size %.0f MiB: save %.2f s; local +%.2f s, peer +%.2f s after save returned" %
              (h.size / 2**20, t1 - t0, t2 - t1, t3 - t1))
        for line in cl.log().splitlines():
            if "copied to node" in line:
                print(line)
    finally:
        if cl:
            cl.stop()
        cleanup(tmp)


if __name__ == "__main__":
    main()
