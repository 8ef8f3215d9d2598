#!/usr/bin/python3
"""The PyTorch DataLoader as a seer-bench trainer (one process per trainer).

    RANK=r WORLD_SIZE=W MASTER_ADDR=127.0.0.1 MASTER_PORT=p \\
    /usr/bin/python3 scripts/bench/torch_loader.py --data MNT/train --format files \\
        --batch 64 --epochs 3 --seed 1 --compute-ms 100 --num-workers 2 \\
        --prefetch-factor 2 --json out.json [--pfs-stats MNT/.pfsemu/stats]

Per step, as tools/seer-bench.c: take a batch from the DataLoader, touch every
byte of it, sleep the compute time, then a barrier across the trainers
(torch.distributed, gloo backend: what DDP's allreduce would impose). Rank 0
writes the per-epoch metrics in seer-bench's --json shape:
{"source","world","compute_ms","epochs":[{"epoch","wall_s","samples","bytes",
"samples_per_s","mb_per_s","au","stall_median_s","stall_p99_s","compute_s"}],"sink"}
and, beside it (<json>.extra.json), what seer-bench cannot report: the loader
settings, every epoch's absolute start/end (CLOCK_MONOTONIC), what the PFS
emulator counted during each epoch (--pfs-stats, read at the epoch boundaries:
pfs_bytes, pfs_reads, pfs_rpcs, pfs_rpc_bytes, pfs_busy_s), and all stalls.

The loader is the stock one: torch.utils.data.DataLoader over a map-style
Dataset, DistributedSampler(shuffle=True, seed, drop_last) with set_epoch(e),
num_workers worker processes (fork), prefetch_factor, persistent_workers. The
Dataset reads every sample through the file system as a careful user would on a
PFS: an image file with one open+read; a one-sample npz or HDF5 file read whole
in one go and parsed in memory (np.load on a BytesIO; h5py's "core" driver),
which sends the fewest requests and no byte twice; a record of a packed file
with one pread located by an index built once (TFRecord: the DALI index;
indexed binary: its .off.idx/.sz.idx; HDF5 with many rows: the contiguous
dataset's offset); an npz with many samples in DLIO's layout (samples
interleaved along the last axis, so no single read holds one) read whole with
one pread and kept decoded in a per-worker LRU (NpzDS). A collate function
packs a batch's samples into one uint8 tensor in shared memory (as
default_collate does for equal shapes) so a batch crosses the worker queue once.

Epoch clock: from just before iter(loader) (epoch 0 includes starting the
workers; persistent workers are reused afterwards) to the barrier after the
last step. Rank and world size: RANK/WORLD_SIZE, else OMPI_COMM_WORLD_RANK/
SIZE, else SLURM_PROCID/NTASKS."""

import argparse
import io
import json
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, get_worker_info
from torch.utils.data.distributed import DistributedSampler


def _env_int(*names, default=None):
    for n in names:
        if os.environ.get(n) not in (None, ""):
            return int(os.environ[n])
    return default


def list_files(root, exts=None, skip_idx=False):
    """Regular files under root, sorted bytewise by relative path (seer's catalog order)."""
    rels = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        for f in files:
            if f.startswith(".") or (skip_idx and f.endswith(".idx")):
                continue
            if exts and not any(f.endswith(e) for e in exts):
                continue
            rels.append(os.path.relpath(os.path.join(d, f), root))
    rels.sort(key=lambda p: p.encode())
    return rels


# ---- datasets: index built once (rank 0, then broadcast), read in the workers ----

class Base(Dataset):
    def __init__(self, root, index):
        self.root = root
        self.index = index          # list of per-sample tuples
        self.fds = {}               # per worker (after fork): open files kept

    def __len__(self):
        return len(self.index)


class FilesDS(Base):
    """ImageNet-style root/<class>/<file>: a sample is the whole file."""

    @staticmethod
    def build(root):
        return [(p,) for p in list_files(root)]

    def __getitem__(self, i):
        with open(os.path.join(self.root, self.index[i][0]), "rb") as f:
            return np.frombuffer(f.read(), dtype=np.uint8)


class NpzDS(Base):
    """DLIO npz: x is (d1, d2, n), sample k is x[..., k].

    One sample per file: the whole file in one read, parsed in memory (np.load
    on a BytesIO; np.load(path) itself reads through a 1 MiB buffer that
    zipfile's seeks discard, 1.5x the bytes through the emulator).

    Several samples per file, in DLIO's layout: a sample is spread over the
    whole member with a stride of n elements, so no single read can fetch it.
    The careful loader reads the member's bytes with one pread (offset and
    size found in the zip directory at index time), transposes it once to
    sample-major order and keeps it in a per-worker LRU of decoded files
    bounded in bytes (NPZ_CACHE_BYTES, 256 MiB: the size of seer's per-reader
    decoded-member cache), so every file is read at most once per worker while
    it stays cached. This is what DLIO's own npz reader does per file (np.load,
    then samples from memory)."""

    NPZ_CACHE_BYTES = 256 << 20

    @staticmethod
    def build(root):
        import zipfile
        fmt = np.lib.format
        out = []
        for p in list_files(root, exts=(".npz",)):
            # the sample count is the last dimension of x: read the npy header only
            # (unbuffered: a buffered file would read 1 MiB per seek of zipfile)
            with open(os.path.join(root, p), "rb", buffering=0) as raw, \
                    zipfile.ZipFile(raw) as zf:
                info = zf.getinfo("x.npy")
                with zf.open(info) as m:
                    ver = fmt.read_magic(m)
                    rd = fmt.read_array_header_1_0 if ver == (1, 0) else \
                        fmt.read_array_header_2_0
                    shape, fortran, dtype = rd(m)
                    hdr = m.tell()
                # the member's data: after its local header (name and extra lengths)
                raw.seek(info.header_offset + 26)
                nlen, xlen = struct.unpack("<HH", raw.read(4))
                data = info.header_offset + 30 + nlen + xlen + hdr
            n = shape[-1]
            stored = info.compress_type == zipfile.ZIP_STORED and not fortran
            for k in range(n):
                out.append((p, k, n, data if stored else -1, shape, dtype.str))
        return out

    def __init__(self, root, index):
        super().__init__(root, index)
        from collections import OrderedDict
        self.lru = OrderedDict()     # path -> (n, sample bytes) sample-major uint8 array
        self.lru_bytes = 0

    def _decoded(self, p, n, data, shape, dtype):
        a = self.lru.get(p)
        if a is not None:
            self.lru.move_to_end(p)
            return a
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dt.itemsize
        if data >= 0:
            fd = self.fds.get(p)
            if fd is None:
                fd = self.fds[p] = os.open(os.path.join(self.root, p), os.O_RDONLY)
            b = os.pread(fd, nbytes, data)
            if len(b) != nbytes:
                raise IOError("%s: short read of x.npy" % p)
            x = np.frombuffer(b, dtype=dt).reshape(shape)
        else:  # deflated or Fortran-ordered member: let numpy decode the file
            with open(os.path.join(self.root, p), "rb") as f:
                with np.load(io.BytesIO(f.read())) as z:
                    x = z["x"]
        a = np.ascontiguousarray(np.moveaxis(x, -1, 0)).reshape(n, -1).view(np.uint8)
        while self.lru and self.lru_bytes + a.nbytes > self.NPZ_CACHE_BYTES:
            _, old = self.lru.popitem(last=False)
            self.lru_bytes -= old.nbytes
        if a.nbytes <= self.NPZ_CACHE_BYTES:
            self.lru[p] = a
            self.lru_bytes += a.nbytes
        return a

    def __getitem__(self, i):
        p, k, n, data, shape, dtype = self.index[i]
        if n == 1:
            with open(os.path.join(self.root, p), "rb") as f:
                buf = io.BytesIO(f.read())
            with np.load(buf) as z:
                x = z["x"]
            return np.ascontiguousarray(x[..., k]).reshape(-1).view(np.uint8)
        return self._decoded(p, n, data, shape, dtype)[k]


class H5DS(Base):
    """HDF5 'records' (n, d1, d2): sample k is row k.

    One sample per file: the file read in one go (driver "core"), not in the 11
    small requests h5py's default driver sends through a PFS. Several samples
    per file in a contiguous dataset: one pread of the row, located by the
    dataset's offset in the file (h5py's get_offset, read once at index time).
    Chunked datasets: h5py, files kept open per worker."""

    @staticmethod
    def build(root):
        import h5py
        out = []
        for p in list_files(root, exts=(".h5", ".hdf5", ".hdf", ".he5")):
            with h5py.File(os.path.join(root, p), "r") as f:
                ds = f["records"]
                n = ds.shape[0]
                base = ds.id.get_offset()
                row = ds.dtype.itemsize * int(np.prod(ds.shape[1:]))
            off = -1 if base is None else base
            out.extend((p, k, n, off, row) for k in range(n))
        return out

    def __getitem__(self, i):
        import h5py
        p, k, n, off, row = self.index[i]
        if n == 1:
            with h5py.File(os.path.join(self.root, p), "r", driver="core",
                           backing_store=False) as f:
                return f["records"][k].reshape(-1).view(np.uint8)
        if off >= 0:
            fd = self.fds.get(p)
            if fd is None:
                fd = self.fds[p] = os.open(os.path.join(self.root, p), os.O_RDONLY)
            b = os.pread(fd, row, off + k * row)
            if len(b) != row:
                raise IOError("%s: short read of row %d" % (p, k))
            return np.frombuffer(b, dtype=np.uint8)
        f = self.fds.get(p)
        if f is None:
            if len(self.fds) >= 16:
                for v in self.fds.values():
                    v.close()
                self.fds.clear()
            f = self.fds[p] = h5py.File(os.path.join(self.root, p), "r")
        return f["records"][k].reshape(-1).view(np.uint8)


class TfrDS(Base):
    """TFRecord: a sample is a record's payload, read with one pread (offset and
    size from DALI's index <data>/index/<split>/<file>.idx, else a header scan)."""

    @staticmethod
    def build(root):
        out = []
        split = os.path.basename(os.path.normpath(root))
        idx_dir = os.path.join(os.path.dirname(os.path.normpath(root)), "index", split)
        for p in list_files(root, skip_idx=True):
            ip = os.path.join(idx_dir, p + ".idx")
            recs = []
            if os.path.exists(ip):
                with open(ip) as f:
                    for line in f:
                        off, size = line.split()
                        recs.append((int(off) + 12, int(size) - 16))
            else:
                with open(os.path.join(root, p), "rb") as f:
                    pos = 0
                    while True:
                        h = f.read(12)
                        if len(h) < 12:
                            break
                        (n,) = struct.unpack("<Q", h[:8])
                        recs.append((pos + 12, n))
                        pos += 16 + n
                        f.seek(pos)
            out.extend((p, off, n) for off, n in recs)
        return out

    def __getitem__(self, i):
        p, off, n = self.index[i]
        fd = self.fds.get(p)
        if fd is None:
            fd = self.fds[p] = os.open(os.path.join(self.root, p), os.O_RDONLY)
        b = os.pread(fd, n, off)
        if len(b) != n:
            raise IOError("%s: short read at %d" % (p, off))
        return np.frombuffer(b, dtype=np.uint8)


class IdxDS(TfrDS):
    """DLIO's indexed binary: <file>.off.idx and <file>.sz.idx (little-endian u64
    offset and size of every sample); a sample is one pread."""

    @staticmethod
    def build(root):
        out = []
        for p in list_files(root, skip_idx=True):
            offs = np.fromfile(os.path.join(root, p + ".off.idx"), dtype="<u8")
            sizes = np.fromfile(os.path.join(root, p + ".sz.idx"), dtype="<u8")
            out.extend((p, int(o), int(n)) for o, n in zip(offs, sizes))
        return out


FORMATS = {"files": FilesDS, "npz": NpzDS, "hdf5": H5DS, "tfrecord": TfrDS,
           "indexed": IdxDS}


def collate(samples):
    """One uint8 tensor holding the batch's samples back to back (in shared memory
    when built in a worker, like default_collate), plus their lengths."""
    lens = [int(s.size) for s in samples]
    total = sum(lens)
    t = torch.empty(0, dtype=torch.uint8)
    if get_worker_info() is not None:
        out = t.new(t.storage()._new_shared(total))
    else:
        out = torch.empty(total, dtype=torch.uint8)
    np.concatenate(samples, out=out.numpy())
    return out, torch.tensor(lens, dtype=torch.int64)


def touch(t):
    """XOR every byte in (8-byte words, then the tail), as seer-bench's touch()."""
    a = t.numpy()
    n8 = a.size // 8 * 8
    x = int(np.bitwise_xor.reduce(a[:n8].view(np.uint64))) if n8 else 0
    for k, b in enumerate(a[n8:].tolist()):
        x ^= b << (8 * k)
    return x


PFS_KEYS = ("bytes", "reads", "rpcs", "rpc_bytes", "busy_s")


def read_pfs(path):
    """The emulator's counters that are attributed to epochs (None: unknown)."""
    if not path:
        return None
    try:
        with open(path) as f:
            t = json.load(f)["totals"]
        return {k: t.get(k, t["reads"] if k == "rpcs" else t["bytes"]) for k in PFS_KEYS}
    # (stats format 1 has no rpcs/rpc_bytes: there every read request was one)
    except (OSError, ValueError, KeyError):
        return None


_T0 = time.monotonic()


def _dbg(msg):
    if os.environ.get("SEER_BENCH_DEBUG"):
        print("[%.3f] %s" % (time.monotonic() - _T0, msg), file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--format", default="files", choices=sorted(FORMATS))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--drop-last", action="store_true")
    ap.add_argument("--compute-ms", type=float, default=0.0)
    ap.add_argument("--compute-sd-ms", type=float, default=0.0)
    ap.add_argument("--num-workers", type=int, default=2)
    ap.add_argument("--prefetch-factor", type=int, default=2)
    ap.add_argument("--no-persistent-workers", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--pfs-stats", help="PFS emulator stats file, read at epoch boundaries")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--spawn", type=int, metavar="W",
                    help="start W trainers on this machine (fork after importing torch once) "
                    "instead of taking rank and world size from the environment")
    a = ap.parse_args()

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    if a.spawn:
        return spawn(a)
    rank = _env_int("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", default=0)
    world = _env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", default=1)
    return trainer(a, rank, world)


def spawn(a):
    """Fork a.spawn trainers (torch is imported once, here) and wait for them; a
    SIGTERM/SIGINT to this process is passed on to them."""
    import signal
    kids = []
    for r in range(a.spawn):
        pid = os.fork()
        if pid == 0:
            rc = 1
            try:
                rc = trainer(a, r, a.spawn)
            except BaseException:
                import traceback
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(rc)
        kids.append(pid)

    def fwd(sig, _frame):
        for k in kids:
            try:
                os.kill(k, sig)
            except ProcessLookupError:
                pass
    signal.signal(signal.SIGTERM, fwd)
    signal.signal(signal.SIGINT, fwd)
    rc = 0
    for k in kids:
        _, st = os.waitpid(k, 0)
        code = os.waitstatus_to_exitcode(st)
        if code != 0:
            rc = 1
            if a.spawn > 1:
                fwd(signal.SIGTERM, None)   # one trainer failed: the barrier would hang
    return rc


def trainer(a, rank, world):
    torch.set_num_threads(1)
    _dbg("rank %d: imported" % rank)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    _dbg("rank %d: process group up" % rank)

    cls = FORMATS[a.format]
    index = [cls.build(a.data) if rank == 0 else None]
    dist.broadcast_object_list(index, src=0)
    ds = cls(a.data, index[0])
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=a.seed,
                                 drop_last=a.drop_last)
    nw = a.num_workers
    kw = dict(prefetch_factor=a.prefetch_factor,
              persistent_workers=not a.no_persistent_workers) if nw > 0 else {}
    loader = DataLoader(ds, batch_size=a.batch, sampler=sampler, num_workers=nw,
                        collate_fn=collate, pin_memory=False, drop_last=False, **kw)
    _dbg("rank %d: index of %d samples" % (rank, len(ds)))
    rng = np.random.default_rng(rank + 1)
    eps = []
    pfs = []
    sink = 0
    dist.barrier()
    pfs.append(read_pfs(a.pfs_stats) if rank == 0 else None)
    for e in range(a.epochs):
        sampler.set_epoch(e)
        ep = dict(t0=time.monotonic(), compute=0.0, samples=0, bytes=0, stalls=[])
        it = iter(loader)
        while True:
            tw = time.monotonic()
            try:
                data, lens = next(it)
            except StopIteration:
                break
            ep["stalls"].append(time.monotonic() - tw)
            sink ^= touch(data)
            ep["bytes"] += int(data.numel())
            ep["samples"] += int(lens.numel())
            cs = a.compute_ms
            if a.compute_sd_ms > 0:
                cs = max(0.0, cs + a.compute_sd_ms * rng.standard_normal())
            cs /= 1000.0
            if cs > 0:
                time.sleep(cs)
            ep["compute"] += cs
            del data, lens
            dist.barrier()
        ep["t1"] = time.monotonic()
        eps.append(ep)
        pfs.append(read_pfs(a.pfs_stats) if rank == 0 else None)

    _dbg("rank %d: epochs done" % rank)
    # stop the persistent workers now (not at interpreter exit)
    it = None
    if getattr(loader, "_iterator", None) is not None:
        loader._iterator._shutdown_workers()
        loader._iterator = None
    # gather every rank's numbers (after the run: nothing is timed any more)
    mine = [dict(t0=x["t0"], t1=x["t1"], compute=x["compute"], samples=x["samples"],
                 bytes=x["bytes"], stalls=x["stalls"]) for x in eps]
    allr = [None] * world
    dist.all_gather_object(allr, [mine, sink])
    if rank == 0:
        out_eps, extra_eps = [], []
        tot_sink = 0
        for r in allr:
            tot_sink ^= r[1]
        if not a.quiet:
            print("%-6s %6s %10s %10s %9s %7s %11s %11s" % (
                "source", "epoch", "wall_s", "samples/s", "MB/s", "AU_%", "stall_med_ms",
                "stall_p99_ms"))
        for e in range(a.epochs):
            rs = [r[0][e] for r in allr]
            t0 = min(x["t0"] for x in rs)
            t1 = max(x["t1"] for x in rs)
            comp = sum(x["compute"] for x in rs)
            S = sum(x["samples"] for x in rs)
            B = sum(x["bytes"] for x in rs)
            st = sorted(s for x in rs for s in x["stalls"])
            n = len(st)
            med = st[n // 2] if n else 0.0
            p99 = st[min(n - 1, -(-99 * n // 100) - 1)] if n else 0.0
            wall = t1 - t0
            au = comp / world / wall
            if not a.quiet:
                print("%-6s %6d %10.3f %10.0f %9.1f %7.1f %11.3f %11.3f" % (
                    "torch", e, wall, S / wall, B / wall / 1e6, au * 100, med * 1e3, p99 * 1e3))
            out_eps.append(dict(epoch=e, wall_s=round(wall, 6), samples=S, bytes=B,
                                samples_per_s=round(S / wall, 3), mb_per_s=round(B / wall / 1e6, 3),
                                au=round(au, 5), stall_median_s=round(med, 6),
                                stall_p99_s=round(p99, 6), compute_s=round(comp / world, 6)))
            known = pfs[e + 1] is not None and pfs[e] is not None
            x = dict(epoch=e, t0=t0, t1=t1, stalls=[round(s, 6) for s in st])
            for k in PFS_KEYS:
                x["pfs_" + k] = pfs[e + 1][k] - pfs[e][k] if known else None
            extra_eps.append(x)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(dict(source="torch", world=world, compute_ms=a.compute_ms,
                               epochs=out_eps, sink=tot_sink), f)
            with open(a.json + ".extra.json", "w") as f:
                json.dump(dict(num_workers=nw, prefetch_factor=a.prefetch_factor,
                               persistent_workers=not a.no_persistent_workers,
                               format=a.format, batch=a.batch, seed=a.seed, epochs=extra_eps),
                          f)
    dist.barrier()
    dist.destroy_process_group()
    _dbg("rank %d: done" % rank)
    return 0


if __name__ == "__main__":
    sys.exit(main())
