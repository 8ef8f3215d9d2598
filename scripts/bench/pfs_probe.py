#!/usr/bin/python3
"""Probe an emulated PFS with the two access patterns that bound a packed
dataset's cold epoch: the files read sequentially (`cat`, the physical bound)
and every record read once at random with one pread each (what a loader that
reads one sample per request gets).

    /usr/bin/python3 scripts/bench/pfs_probe.py DATA_ROOT [--format tfrecord]
        [--threads 16] [--seed 1] [--rounds 3] [--json out.json] -- EMULATOR_OPTIONS...

    e.g. the measurement of the cold-epoch issue, then the lustre preset:
    /usr/bin/python3 scripts/bench/pfs_probe.py data/bench/bert -- \\
        --bandwidth 2GB/s --latency-ms 2 --meta-latency-ms 1 --max-inflight 8
    /usr/bin/python3 scripts/bench/pfs_probe.py data/bench/bert -- --preset lustre

DATA_ROOT is a dataset directory as the benchmark generates it (DATA_ROOT/train
holds the data files; tfrecord indexes in DATA_ROOT/index/train). It is mounted
through bin/seer-pfsemu at a temporary mount point for the probe. The random
pass uses --threads threads taking records from one shuffled list (os.pread,
each thread with its own open files), enough to keep any in-flight bound busy.
Each pass starts from reset counters and reports wall time, the emulator's
busy time (its schedule, without the client's own process start-up), MB/s and
the emulator's counts (requests, RPCs, bytes, in-flight high-water). Prints
numbers; never fails on timing.

Also imported by run.py: list_data_files(), record_index(), sequential_read()."""

import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def list_data_files(train):
    """Data files under train (relative paths, sorted bytewise as seer's catalog),
    index files (*.idx) left out."""
    out = []
    for d, dirs, files in os.walk(train):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        for f in files:
            if not f.startswith(".") and not f.endswith(".idx"):
                out.append(os.path.relpath(os.path.join(d, f), train))
    out.sort(key=lambda p: p.encode())
    return out


def record_index(root, fmt):
    """[(relative file, offset, length)] of every record whose bytes are one
    contiguous extent: tfrecord payloads (DALI index), indexed-binary samples,
    rows of contiguous HDF5 'records'. Read from the source directory (not
    through the emulator)."""
    train = os.path.join(root, "train")
    recs = []
    for p in list_data_files(train):
        path = os.path.join(train, p)
        if fmt == "tfrecord":
            with open(os.path.join(root, "index", "train", p + ".idx")) as f:
                for line in f:
                    off, size = (int(x) for x in line.split())
                    recs.append((p, off + 12, size - 16))
        elif fmt == "indexed":
            offs = _u64s(path + ".off.idx")
            sizes = _u64s(path + ".sz.idx")
            recs += [(p, o, s) for o, s in zip(offs, sizes)]
        elif fmt == "hdf5":
            import h5py
            with h5py.File(path, "r") as f:
                ds = f["records"]
                base = ds.id.get_offset()
                if base is None:
                    raise ValueError("%s: 'records' is not contiguous" % path)
                row = ds.dtype.itemsize * int(__import__("numpy").prod(ds.shape[1:]))
                recs += [(p, base + k * row, row) for k in range(ds.shape[0])]
        else:
            raise ValueError("record_index: format %s has no contiguous records" % fmt)
    return recs


def _u64s(path):
    with open(path, "rb") as f:
        b = f.read()
    return list(struct.unpack("<%dQ" % (len(b) // 8), b))


def stats(mnt):
    with open(os.path.join(mnt, ".pfsemu", "stats")) as f:
        return json.load(f)


def reset(mnt):
    with open(os.path.join(mnt, ".pfsemu", "reset")) as f:
        f.read()


def counts(st):
    """The counters a pass is judged by; read_inflight_max is the most read RPCs
    in flight in one OST queue (the mount's count when there are no OST queues,
    as in format 1)."""
    t = st["totals"]
    osts = [q["max_inflight_seen"] for q in st.get("queues", []) if q["name"].startswith("ost")]
    return dict(reads=t["reads"], bytes=t["bytes"], rpcs=t.get("rpcs", t["reads"]),
                rpc_bytes=t.get("rpc_bytes", t["bytes"]), meta_ops=t.get("meta_ops"),
                max_inflight_seen=t["max_inflight_seen"],
                read_inflight_max=max(osts) if osts else t["max_inflight_seen"],
                busy_s=t["busy_s"])


def sequential_read(mnt, train_rel="train"):
    """`cat` of every data file under MNT/train_rel, in catalog order, one
    process: wall seconds and the emulator's counts for it."""
    train = os.path.join(mnt, train_rel)
    files = [os.path.join(train, p) for p in list_data_files(train)]
    reset(mnt)
    t0 = time.monotonic()
    subprocess.run(["cat"] + files, stdout=subprocess.DEVNULL, check=True)
    wall = time.monotonic() - t0
    c = counts(stats(mnt))
    return dict(wall_s=wall, files=len(files), **c)


def random_preads(mnt, recs, threads, seed):
    """Every record once, in a shuffled order, one os.pread each, by `threads`
    threads: wall seconds and the emulator's counts."""
    order = list(recs)
    random.Random(seed).shuffle(order)
    nxt = [0]
    lock = threading.Lock()
    errors = []

    def worker():
        fds = {}
        try:
            while True:
                with lock:
                    i = nxt[0]
                    nxt[0] += 1
                if i >= len(order):
                    return
                p, off, n = order[i]
                fd = fds.get(p)
                if fd is None:
                    fd = fds[p] = os.open(os.path.join(mnt, "train", p), os.O_RDONLY)
                if len(os.pread(fd, n, off)) != n:
                    raise IOError("short read of %s at %d" % (p, off))
        except Exception as e:  # reported after the join
            errors.append(e)
        finally:
            for fd in fds.values():
                os.close(fd)

    reset(mnt)
    th = [threading.Thread(target=worker) for _ in range(threads)]
    t0 = time.monotonic()
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.monotonic() - t0
    if errors:
        raise errors[0]
    return dict(wall_s=wall, records=len(order), **counts(stats(mnt)))


def mount(src, mnt, opts, log):
    env = dict(os.environ, PFSEMU_LOG=log,
               PFSEMU=os.environ.get("PFSEMU", os.path.join(ROOT, "bin", "seer-pfsemu")))
    out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-mount.sh"), src, mnt]
                         + opts, capture_output=True, text=True, env=env, timeout=60)
    if out.returncode != 0:
        sys.exit("pfs_probe: mount failed: %s%s" % (out.stdout, out.stderr))


def umount(mnt):
    subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-umount.sh"), mnt],
                   capture_output=True, timeout=60)


def main():
    argv = sys.argv[1:]
    emu_opts = []
    if "--" in argv:
        k = argv.index("--")
        argv, emu_opts = argv[:k], argv[k + 1:]
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root")
    ap.add_argument("--format", default="tfrecord", choices=["tfrecord", "indexed", "hdf5"])
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    recs = record_index(a.root, a.format)
    D = sum(r[2] for r in recs)
    tmp = tempfile.mkdtemp(prefix="pfs-probe-")
    mnt = os.path.join(tmp, "mnt")
    mount(os.path.abspath(a.root), mnt, emu_opts, os.path.join(tmp, "pfsemu.log"))
    res = dict(root=a.root, emulator=emu_opts, records=len(recs), record_bytes=D,
               threads=a.threads, seq=[], rand=[])
    try:
        res["config"] = stats(mnt)["config"]
        for r in range(a.rounds):
            s = sequential_read(mnt)
            q = random_preads(mnt, recs, a.threads, a.seed + r)
            res["seq"].append(s)
            res["rand"].append(q)
            print("round %d: cat %d files %.3f s (PFS busy %.3f s; %.0f MB/s, %d reads, %d RPCs, "
                  "%d meta ops) | %d random preads x %d threads %.3f s (PFS busy %.3f s; %.0f "
                  "reads/s, %.1f MB/s, %d RPCs, <= %d read RPCs in flight)" % (
                      r + 1, s["files"], s["wall_s"], s["busy_s"], s["bytes"] / s["wall_s"] / 1e6,
                      s["reads"], s["rpcs"], s["meta_ops"] or 0, q["records"], a.threads,
                      q["wall_s"], q["busy_s"], q["records"] / q["wall_s"],
                      q["bytes"] / q["wall_s"] / 1e6, q["rpcs"], q["read_inflight_max"]),
                  flush=True)
    finally:
        umount(mnt)
        shutil.rmtree(tmp, ignore_errors=True)
    med = lambda v: sorted(v)[len(v) // 2]
    ts, tr = med([x["wall_s"] for x in res["seq"]]), med([x["wall_s"] for x in res["rand"]])
    bs = med([x["busy_s"] for x in res["seq"]])
    print("median: cat %.3f s (PFS busy %.3f s), random preads %.3f s (%.1f MB/s of records): "
          "%.1fx the sequential time" % (ts, bs, tr, D / tr / 1e6, tr / ts))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
