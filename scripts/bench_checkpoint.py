#!/usr/bin/python3
"""Trainer blocking time of seer.checkpoint.save vs torch.save, same path.

    scripts/bench_checkpoint.py [--mib 512] [--reps 3] [--dir DIR] [--nvme DIR]
                                [--drain-rate BYTES_PER_S] [--pfsemu RATE]

Starts a seerd of its own (a tiny dataset, job id bench-ckpt), with its
NVMe tier at --nvme (default: a folder under --dir), and saves a state dict
of --mib MiB of float32 tensors to --dir (the "PFS": a local folder unless
you point it at a mount, e.g. scripts/pfsemu-mount.sh's) --reps times each
way (--pfsemu RATE: the "PFS" is seer-pfsemu in write mode over a folder,
--write-bandwidth RATE, and its count of bytes written is printed):
  torch.save        torch.save(obj, path) (page cache; no fsync, as torch does)
  torch.save+fsync  the same, then fsync: durable like seer's "pfs" level
  seer save         seer.checkpoint.save(obj, path): the trainer's stall
  seer local/pfs    from save's return until wait("local") / wait("pfs")
and times load: seer.checkpoint.load (from seerd's NVMe copy) vs torch.load
of the PFS file. Prints numbers; never fails on a timing.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
os.environ.setdefault("SEER_LIB", os.path.join(ROOT, "lib", "libseer.so.0"))

import torch  # noqa: E402
import seer.checkpoint as sc  # noqa: E402
from seertest import Daemon, make_classes  # noqa: E402


def fsync_path(p):
    fd = os.open(p, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--nvme", default=None)
    ap.add_argument("--drain-rate", default="0")
    ap.add_argument("--pfsemu", default=None, metavar="RATE")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="seer-bench-ckpt-")
    pfs = a.dir or os.path.join(work, "pfs")
    os.makedirs(pfs, exist_ok=True)
    emu_mnt = None
    if a.pfsemu:
        emu_mnt = os.path.join(work, "pfs-mnt")
        os.makedirs(emu_mnt)
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-mount.sh"), pfs, emu_mnt,
                        "--write-bandwidth", a.pfsemu], check=True, capture_output=True)
        pfs = emu_mnt
    nvme = a.nvme or os.path.join(work, "nvme")
    data = os.path.join(work, "data")
    make_classes(data, ["a"], 8, 100, 200)
    n = a.mib * (1 << 20) // 4
    obj = {"layer%d" % i: torch.randn(n // 8) for i in range(8)}
    obj["step"] = 1
    s = {"dataset.path": data, "job.id": "bench-ckpt", "cache.nvme_dir": nvme,
         "checkpoint.memory": "%dMiB" % (2 * a.mib + 64),
         "checkpoint.nvme": "%dMiB" % ((a.reps + 2) * a.mib + 64),
         "checkpoint.drain_rate": a.drain_rate, "daemon.stop_grace_s": 600}
    rows = {"torch.save": [], "torch.save+fsync": [], "seer save": [], "seer local": [],
            "seer pfs": []}
    try:
        with Daemon(work, s) as d:
            kw = {"socket": d.sock, "job_id": "bench-ckpt"}
            for r in range(a.reps):
                p = os.path.join(pfs, "torch_%d.pt" % r)
                t0 = time.perf_counter()
                torch.save(obj, p)
                t1 = time.perf_counter()
                fsync_path(p)
                t2 = time.perf_counter()
                rows["torch.save"].append(t1 - t0)
                rows["torch.save+fsync"].append(t2 - t0)
                p = os.path.join(pfs, "seer_%d.pt" % r)
                t0 = time.perf_counter()
                h = sc.save(obj, p, **kw)
                t1 = time.perf_counter()
                h.wait("local")
                t2 = time.perf_counter()
                h.wait("pfs")
                t3 = time.perf_counter()
                rows["seer save"].append(t1 - t0)
                rows["seer local"].append(t2 - t1)
                rows["seer pfs"].append(t3 - t1)
                h.close()
            last = os.path.join(pfs, "seer_%d.pt" % (a.reps - 1))
            t0 = time.perf_counter()
            sc.load(last, **kw)
            t_nvme = time.perf_counter() - t0
            where = sc.where(last, **kw)
            subprocess.run(["sync"])
            t0 = time.perf_counter()
            torch.load(last)
            t_pfs = time.perf_counter() - t0
            written = None
            if emu_mnt:
                import json
                with open(os.path.join(emu_mnt, ".pfsemu", "stats")) as f:
                    written = json.load(f)["totals"]["write"]["bytes"]
                seer_bytes = a.reps * os.path.getsize(last)
    finally:
        if emu_mnt:
            subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-umount.sh"), emu_mnt],
                           capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    size = a.mib
    print("state %d MiB, %d reps, PFS %s%s, NVMe %s, drain cap %s, load %s" %
          (size, a.reps, "seer-pfsemu --write-bandwidth %s over " % a.pfsemu if a.pfsemu else "",
           a.dir or "(tmp folder)", nvme, a.drain_rate,
           open("/proc/loadavg").read().split()[:3]))
    for k, v in rows.items():
        print("%-18s median %7.3f s  (%s)  %s" % (k, sorted(v)[len(v) // 2],
                                                  " ".join("%.3f" % x for x in v),
                                                  "%.0f MiB/s" % (size / max(sorted(v)[len(v) // 2], 1e-9))))
    ts, ss = sorted(rows["torch.save"])[a.reps // 2], sorted(rows["seer save"])[a.reps // 2]
    tf = sorted(rows["torch.save+fsync"])[a.reps // 2]
    print("blocking: torch.save / seer save = %.2fx; torch.save+fsync / seer save = %.2fx" %
          (ts / ss, tf / ss))
    print("load: seer.checkpoint.load (%s) %.3f s, torch.load of the PFS file %.3f s" %
          (where, t_nvme, t_pfs))
    if written is not None:
        print("pfsemu (--write-bandwidth %s): bytes written %d = torch.save's %d + seer's %d "
              "(%s)" % (a.pfsemu, written, written - seer_bytes, seer_bytes,
                        "torch + seer bytes" if written == 2 * seer_bytes else "differs"))


if __name__ == "__main__":
    main()
