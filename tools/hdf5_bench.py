#!/usr/bin/python3
"""DLIO's gzip HDF5 through seerd against one h5py thread: epoch-0 PFS bytes
and epoch times (issue 32).

    /usr/bin/python3 tools/hdf5_bench.py OUT [--files 32] [--per-file 64] [--dims 256x256]
        [--format-memory 136MiB 32MiB ...] [--epochs 2]

Writes (once) DLIO's hdf5 layout with compression: gzip as h5py chunks it
(tests/data/gen_formats.py --only hdf5_dlio: records (n, d, d) uint8 in
h5py's chunks, (8, 64, 64) for 64 x 256 x 256), then for each format memory
runs seerd (bin/, one trainer of this process, shuffled; cache.ram 0 by
default, so that every epoch reads the PFS and only the format memory can
avoid rereads; with --cache-ram 256MiB the RAM cache holds the dataset and
coalesced reads take each band of chunks whole) and prints per epoch the PFS bytes seerd's stats
file reports (pfs_bytes) against the dataset's bytes, and the epoch's time;
then one h5py thread reading the same number of samples in a shuffled order
with every file open, with h5py's default chunk cache (1 MiB) and with one
holding a file's chunks, its time and the bytes it read (/proc/self/io).
Samples are checked against h5py's (crc32 of every delivered sample). The
page cache is warm for both (no drop): the figures compare CPU and
amplification, not a cold PFS. A benchmark: it prints numbers and never
fails on a timing.
"""

import argparse
import glob
import os
import subprocess
import sys
import time
import zlib

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
os.environ.setdefault("BIN", os.path.join(HERE, "..", "bin"))
os.environ.setdefault("LIB", os.path.join(HERE, "..", "lib"))
from seertest import Daemon, seer  # noqa: E402


def rchar():
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar"):
                return int(line.split()[1])
    return 0


def h5py_epoch(files, rdcc):
    t0, r0 = time.time(), rchar()
    hs = [h5py.File(f, "r", rdcc_nbytes=rdcc, rdcc_nslots=100003) for f in files]
    ds = [h["records"] for h in hs]
    order = [(i, k) for i in range(len(ds)) for k in range(ds[i].shape[0])]
    np.random.default_rng(1).shuffle(order)
    for i, k in order:
        ds[i][k]
    dt, rd = time.time() - t0, rchar() - r0
    for h in hs:
        h.close()
    return dt, rd, len(order)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--files", type=int, default=32)
    ap.add_argument("--per-file", type=int, default=64)
    ap.add_argument("--dims", default="256x256")
    ap.add_argument("--format-memory", nargs="+", default=["136MiB", "32MiB"])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--cache-ram", nargs="+", default=["0"],
                    help="cache.ram settings to run each format memory with")
    a = ap.parse_args()
    subprocess.run([sys.executable, os.path.join(HERE, "..", "tests", "data", "gen_formats.py"),
                    "--bench", a.out, "--samples", str(a.files * a.per_file), "--per-file",
                    str(a.per_file), "--dims", a.dims, "--only", "hdf5_dlio"], check=True)
    root = os.path.join(a.out, "hdf5_dlio", "train")
    files = sorted(glob.glob(os.path.join(root, "*.hdf5")))
    size = sum(os.path.getsize(f) for f in files)
    want = {}
    sid = 0
    for f in files:
        with h5py.File(f, "r") as h:
            for x in h["records"]:
                want[sid] = zlib.crc32(x.tobytes())
                sid += 1
    print("dataset: %d files, %d samples, %.1f MiB on disk; load %s" %
          (len(files), sid, size / 2**20, open("/proc/loadavg").read().split()[0]))
    for fm, ram in [(f, r) for r in a.cache_ram for f in a.format_memory]:
        work = os.path.join(a.out, "run-%s-%s" % (fm, ram))
        os.makedirs(work, exist_ok=True)
        s = {"dataset.path": root, "dataset.format": "hdf5", "job.epochs": a.epochs,
             "job.batch_size": 32, "cache.ram": ram, "prefetch.format_memory": fm,
             "daemon.state_dir": os.path.join(work, "state")}
        with Daemon(work, s) as d:
            times, bad = [], 0
            with seer.Loader(socket=d.sock, rank=0, world_size=1) as ld:
                for _ in range(ld.epochs):
                    t0 = time.time()
                    for b in ld:
                        for i, x in zip(b.ids.tolist(), b.samples):
                            bad += zlib.crc32(x.tobytes()) != want[i]
                    times.append(time.time() - t0)
            d.wait(60)
            st = d.stats()
        for e, t in zip(st["epochs"], times):
            print("seerd format_memory %-7s cache.ram %-7s epoch %d: PFS %7.1f MiB (%.3fx the "
                  "dataset), %.2f s%s" % (fm, ram, e.get("epoch", 0), e["pfs_bytes"] / 2**20,
                                          e["pfs_bytes"] / size, t,
                     ", %d samples differ" % bad if bad else ""))
    for rdcc in (1 << 20, 8 << 20):
        dt, rd, n = h5py_epoch(files, rdcc)
        print("h5py 1 thread, chunk cache %4d KiB: %d samples in %.2f s, read %.1f MiB (%.3fx)" %
              (rdcc >> 10, n, dt, rd / 2**20, rd / size))


if __name__ == "__main__":
    main()
