#!/usr/bin/python3
"""torch.distributed.checkpoint through seerd vs FileSystemWriter (torch >= 2).

    scripts/bench_dcp.py [--gib 4] [--tensors 64] [--device cpu|cuda]
                         [--reps 2] [--dir PFS_DIR] [--nvme NVME_DIR]

Starts a seerd of its own (a tiny dataset, job id bench-dcp; NVMe tier at
--nvme, default a folder under the work folder), a one-rank gloo process
group, and a state dict of --gib GiB of float32 tensors (--tensors of them,
on --device). Then, --reps times each, to checkpoint folders under --dir (the
"PFS"; default a temporary folder):
  dcp.save        FileSystemWriter (fsyncs its files) vs seer.checkpoint.StorageWriter
  dcp.async_save  the same writers; "stall" is the time until async_save returns
and prints per way: the stall (the caller's blocking time) and the time until
durable: FileSystemWriter's files are fsync'd when save (or the async
future) returns; seer's once writer.wait("pfs") returns. Then dcp.load of
the last checkpoint of each way: FileSystemReader, and seer's StorageReader
from seerd's copy and (with no seerd: socket pointing nowhere) from the PFS
files, each checked tensor by tensor against the saved state. Prints
numbers; exits 1 only on a wrong byte (2: refused, torch < 2).
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
os.environ.setdefault("SEER_LIB", os.path.join(ROOT, "lib", "libseer.so.0"))

import torch  # noqa: E402

if int(torch.__version__.split(".")[0]) < 2:
    sys.stderr.write("bench_dcp.py needs torch >= 2 (torch.distributed.checkpoint: dcp.save, "
                     "dcp.async_save, dcp.load); this is torch %s\n" % torch.__version__)
    sys.exit(2)

import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
import seer.checkpoint as sc  # noqa: E402
from seertest import Daemon, make_classes  # noqa: E402


def median(v):
    return sorted(v)[len(v) // 2]


def model(a):
    n = int(a.gib * (1 << 30)) // 4 // a.tensors
    g = torch.Generator(device=a.device).manual_seed(1)
    sd = {"layer%03d.weight" % i: torch.randn(n, generator=g, device=a.device)
          for i in range(a.tensors)}
    sd["step"] = torch.tensor(100)
    return sd


def wrong(sd, out):
    """Names of the tensors that differ."""
    return [k for k, v in sd.items() if not torch.equal(out[k].to(v.device), v)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=4.0)
    ap.add_argument("--tensors", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--nvme", default=None)
    a = ap.parse_args()
    if not hasattr(dcp, "async_save") or not hasattr(dcp, "save"):
        sys.stderr.write("bench_dcp.py needs dcp.save and dcp.async_save (torch >= 2.3); this "
                         "is torch %s\n" % torch.__version__)
        return 2
    work = tempfile.mkdtemp(prefix="seer-bench-dcp-")
    pfs = a.dir or os.path.join(work, "pfs")
    os.makedirs(pfs, exist_ok=True)
    nvme = a.nvme or os.path.join(work, "nvme")
    data = os.path.join(work, "data")
    make_classes(data, ["a"], 8, 100, 200)
    mib = int(a.gib * 1024) + 64
    s = {"dataset.path": data, "job.id": "bench-dcp", "cache.nvme_dir": nvme,
         "checkpoint.memory": "%dMiB" % (2 * mib + 64),
         "checkpoint.nvme": "%dMiB" % (3 * mib + 64), "daemon.stop_grace_s": 600}
    dist.init_process_group("gloo", init_method="file://" + os.path.join(work, "pg"), rank=0,
                            world_size=1)
    sd = model(a)
    size = sum(v.numel() * v.element_size() for v in sd.values())
    rows, last, bad = {}, {}, []
    try:
        with Daemon(work, s) as d:
            kw = {"socket": d.sock, "job_id": "bench-dcp"}
            for r in range(a.reps):
                for how in ("save", "async_save"):
                    for way in ("FileSystemWriter", "seer"):
                        cid = os.path.join(pfs, "%s_%s_%d" % (way, how, r))
                        w = (dcp.FileSystemWriter(cid) if way == "FileSystemWriter"
                             else sc.StorageWriter(**kw))
                        t0 = time.perf_counter()
                        if how == "save":
                            dcp.save(sd, checkpoint_id=cid, storage_writer=w)
                            t1 = time.perf_counter()
                        else:
                            fut = dcp.async_save(sd, checkpoint_id=cid, storage_writer=w)
                            t1 = time.perf_counter()
                            fut.result()
                        t2 = time.perf_counter()
                        if way == "seer":
                            w.wait("pfs")
                        t3 = time.perf_counter()
                        rows.setdefault((how, way), []).append((t1 - t0, t2 - t0, t3 - t0))
                        last[way] = cid
            loads = {}
            for way, cid, rd in (("FileSystemReader", last["FileSystemWriter"],
                                  lambda: dcp.FileSystemReader(last["FileSystemWriter"])),
                                 ("seer (seerd's copy)", last["seer"],
                                  lambda: sc.StorageReader(**kw)),
                                 ("seer (PFS, no seerd)", last["seer"],
                                  lambda: sc.StorageReader(socket=os.path.join(work, "none"),
                                                           job_id="bench-dcp"))):
                out = {k: torch.zeros_like(v) for k, v in sd.items()}
                reader = rd()
                t0 = time.perf_counter()
                dcp.load(out, checkpoint_id=cid, storage_reader=reader)
                t = time.perf_counter() - t0
                diff = wrong(sd, out)
                bad += ["%s: %s" % (way, k) for k in diff]
                loads[way] = (t, getattr(reader, "levels", None), diff)
                del out
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        shutil.rmtree(work, ignore_errors=True)
        if a.dir:
            for f in os.listdir(pfs):
                if f.startswith(("FileSystemWriter_", "seer_")):
                    shutil.rmtree(os.path.join(pfs, f), ignore_errors=True)
    gib = size / (1 << 30)
    print("state %.2f GiB in %d tensors on %s, %d reps, torch %s, PFS %s, NVMe %s, load %s" %
          (gib, a.tensors + 1, a.device, a.reps, torch.__version__, a.dir or "(tmp folder)",
           nvme, open("/proc/loadavg").read().split()[:3]))
    print("%-11s %-17s %12s %12s %12s" % ("call", "writer", "stall s", "returned s",
                                           "durable s"))
    for (how, way), v in rows.items():
        stall, ret, dur = (median([x[i] for x in v]) for i in range(3))
        print("%-11s %-17s %12.3f %12.3f %12.3f   (stall %s)" %
              (how, way, stall, ret, dur, " ".join("%.3f" % x[0] for x in v)))
    for how in ("save", "async_save"):
        f, s_ = median([x[0] for x in rows[(how, "FileSystemWriter")]]), \
            median([x[0] for x in rows[(how, "seer")]])
        print("%s stall: FileSystemWriter / seer = %.2fx" % (how, f / max(s_, 1e-9)))
    for way, (t, levels, diff) in loads.items():
        print("dcp.load %-22s %8.3f s  %s  %s" % (way, t, "equal" if not diff else
                                                "%d TENSORS DIFFER" % len(diff),
                                                levels or ""))
    if bad:
        print("WRONG BYTES: " + ", ".join(bad))
        return 1
    print("every tensor equal after dcp.load with each reader")
    return 0


if __name__ == "__main__":
    sys.exit(main())
