"""Dataset formats end to end: files written by numpy, h5py and an independent
TFRecord writer, in DLIO's layouts, served by seerd. The test process is one
trainer (Python: every numpy view's dtype, shape, bytes and label compared
with what numpy/h5py read), a C trainer is the other (bytes checked against
the same expectation). A corrupted record fails exactly its batch with a
message naming the file (on_corrupt = fail) or is substituted by the next
valid sample and counted (on_corrupt = skip). Resident memory of seerd stays
within cache.ram + cache.staging + 64 MiB on multi-sample npz, chunked and
contiguous HDF5 and TFRecord datasets, coalesced reads on, caches smaller and
larger than the dataset (VmHWM from /proc, read while the trainer holds the
job open), and
the PFS bytes seerd reports are the bytes the PFS emulator served (every
format, the decoded-member cache on and off)."""

import json
import os
import struct
import subprocess
import threading
import time
import zlib

import h5py
import numpy as np

from seertest import (BIN, LONG, ROOT, Daemon, check, cleanup, log, read_log, run_tests, seer,
                      tmpdir)

RNG = np.random.default_rng(5)


def crc32c(data):
    crc = 0xffffffff
    table = crc32c.table
    for b in data:
        crc = table[(crc ^ b) & 0xff] ^ (crc >> 8)
    return crc ^ 0xffffffff


crc32c.table = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ (0x82f63b78 if _c & 1 else 0)
    crc32c.table.append(_c)


def masked(c):
    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff


def write_tfrecord(path, payloads):
    with open(path, "wb") as f:
        for p in payloads:
            h = struct.pack("<Q", len(p))
            f.write(h + struct.pack("<I", masked(crc32c(h))) + p +
                    struct.pack("<I", masked(crc32c(p))))


def make(tmp, fmt):
    """Write a dataset; return (dir, settings, expected [(array, label)] in catalog order)."""
    root = os.path.join(tmp, fmt, "train")
    os.makedirs(root)
    exp = []
    if fmt == "npz":  # DLIO: x (d1, d2, n) uint8, y (n,); sample k is x[:, :, k]
        for i, n in enumerate([1, 4, 3, 1]):
            x = RNG.integers(0, 255, size=(24, 20, n), dtype=np.uint8)
            y = RNG.integers(0, 1000, size=n)
            f = np.savez_compressed if i % 2 else np.savez
            f(os.path.join(root, "img_%d_of_4.npz" % (i + 1)), x=x, y=y)
            exp += [(np.ascontiguousarray(x[:, :, k]), int(y[k])) for k in range(n)]
        return root, {}, exp
    if fmt == "hdf5":  # DLIO: records (n, d1, d2) uint8 and labels int64
        for i, (n, chunked) in enumerate([(3, False), (5, True), (2, False)]):
            rec = RNG.integers(0, 255, size=(n, 16, 12), dtype=np.uint8)
            lab = RNG.integers(0, 50, size=n).astype(np.int64)
            with h5py.File(os.path.join(root, "img_%d_of_3.h5" % (i + 1)), "w") as h:
                if chunked:
                    h.create_dataset("records", data=rec, chunks=(1, 16, 12), compression="gzip")
                else:
                    h.create_dataset("records", data=rec)
                h.create_dataset("labels", data=lab)
            with h5py.File(os.path.join(root, "img_%d_of_3.h5" % (i + 1)), "r") as h:
                exp += [(h["records"][k], int(h["labels"][k])) for k in range(n)]
        return root, {}, exp
    if fmt == "npy":  # samples along the first axis, float32
        for i, n in enumerate([4, 2]):
            a = RNG.standard_normal((n, 5, 6)).astype(np.float32)
            np.save(os.path.join(root, "part_%d.npy" % i), a)
            exp += [(np.load(os.path.join(root, "part_%d.npy" % i))[k], -1) for k in range(n)]
        return root, {"dataset.npz_sample_axis": "first"}, exp
    if fmt == "tfrecord":  # BERT-like: many small serialized records per file
        for i in range(3):
            ps = [RNG.bytes(int(RNG.integers(100, 2500))) for _ in range(7)]
            write_tfrecord(os.path.join(root, "img_%d_of_3.tfrecord" % (i + 1)), ps)
            exp += [(np.frombuffer(p, dtype=np.uint8), -1) for p in ps]
        return root, {}, exp
    if fmt == "indexed":  # DLIO indexed_binary: data + .off.idx + .sz.idx (u64 each)
        for i in range(2):
            ps = [RNG.bytes(int(RNG.integers(50, 4000))) for _ in range(6)]
            base = os.path.join(root, "img_%d_of_2.indexed_binary" % (i + 1))
            offs, blob = [], b""
            for p in ps:
                offs.append(len(blob))
                blob += p
            open(base, "wb").write(blob)
            np.array(offs, dtype="<u8").tofile(base + ".off.idx")
            np.array([len(p) for p in ps], dtype="<u8").tofile(base + ".sz.idx")
            exp += [(np.frombuffer(p, dtype=np.uint8), -1) for p in ps]
        return root, {}, exp
    raise ValueError(fmt)


def py_trainer(sock, exp, out, rank=1, world=2):
    """Rank `rank` in this process: check every sample against exp."""
    try:
        checked = 0
        with seer.Loader(socket=sock, rank=rank, world_size=world) as ld:
            for _ in range(ld.epochs):
                for b in ld:
                    for sid, x, y in zip(b.ids.tolist(), b.samples, b.labels.tolist()):
                        want, wl = exp[sid]
                        check(x.dtype == want.dtype and x.shape == want.shape,
                              "sample %d: %s %s delivered, %s %s written" %
                              (sid, x.dtype, x.shape, want.dtype, want.shape))
                        check(np.array_equal(x, want), "sample %d: bytes differ" % sid)
                        check(y == wl, "sample %d: label %d, written %d" % (sid, y, wl))
                        check(not x.flags.writeable, "views must be read-only")
                        checked += 1
        out.append(checked)
    except Exception as ex:  # reported by the main thread
        out.append(ex)


def c_expect_ok(logpath, exp):
    lg = read_log(logpath)
    for key, rows in lg.items():
        check(not isinstance(rows, str), "C trainer: batch %s failed: %s" % (key, rows))
        for (_, sid, label, length, crc) in rows:
            want, wl = exp[sid]
            raw = want.tobytes()
            check(length == len(raw) and crc == zlib.crc32(raw) and label == wl,
                  "C trainer: sample %d differs from what the writer wrote" % sid)
    return sum(len(v) for v in lg.values())


def test_every_format():
    tmp = tmpdir("seer-fmt-")
    try:
        for fmt in ("npz", "hdf5", "npy", "tfrecord", "indexed"):
            root, extra, exp = make(tmp, fmt)
            s = {"dataset.path": root, "dataset.format": fmt, "job.epochs": 2,
                 "job.batch_size": 3, "cache.ram": "8KiB", "cache.staging": "4MiB"}
            s.update(extra)
            with Daemon(os.path.join(tmp, fmt), s) as d:
                out = []
                th = threading.Thread(target=py_trainer, args=(d.sock, exp, out))
                th.start()
                clog = os.path.join(tmp, fmt, "c.log")
                c = subprocess.run([os.path.join(BIN, "seer-trainer"), "--rank", "0", "--world",
                                    "2", "--socket", d.sock, "--log", clog, "--quiet"],
                                   capture_output=True, text=True, timeout=300)
                th.join(300)
                check(not th.is_alive(), "%s: the Python trainer did not finish" % fmt)
                check(c.returncode == 0, "%s: C trainer failed: %s\n%s" % (fmt, c.stderr, d.log()))
                if isinstance(out[0], Exception):
                    raise out[0]
                n_c = c_expect_ok(clog, exp)
                check(d.wait(LONG) == 0, "%s: seerd failed" % fmt)
            log("%-8s %2d samples: Python checked %d views (dtype, shape, bytes, label), C %d" %
                (fmt, len(exp), out[0], n_c))
    finally:
        cleanup(tmp)


def corrupt_tfrecord(tmp):
    root, _, exp = make(tmp, "tfrecord")
    path = os.path.join(root, "img_2_of_3.tfrecord")
    data = bytearray(open(path, "rb").read())
    # flip one byte inside the first record's payload: its payload CRC fails
    data[12 + 5] ^= 0xff
    open(path, "wb").write(bytes(data))
    return root, exp, 7, path  # catalog id of that record: after file 1's 7


def test_corrupt_record_fail_and_skip():
    tmp = tmpdir("seer-fmt-")
    try:
        root, exp, bad, path = corrupt_tfrecord(tmp)
        base = {"dataset.path": root, "dataset.format": "tfrecord", "job.epochs": 1,
                "job.batch_size": 3, "job.shuffle": "false", "cache.ram": "0"}
        with Daemon(tmp, base, name="fail") as d:
            clog = os.path.join(tmp, "fail-trainer.log")
            c = subprocess.run([os.path.join(BIN, "seer-trainer"), "--rank", "0", "--world", "1",
                                "--socket", d.sock, "--log", clog], capture_output=True,
                               text=True, timeout=LONG)
        lg = read_log(clog)
        failed = {k: v for k, v in lg.items() if isinstance(v, str)}
        check(c.returncode != 0 and list(failed) == [(0, bad // 3)],
              "exactly the batch holding sample %d must fail: %s" % (bad, list(failed)))
        msg = failed[(0, bad // 3)]
        check(os.path.basename(path) in msg and "CRC" in msg and str(bad) in msg,
              "the error must name the file, the sample and the CRC: %s" % msg)
        log("on_corrupt = fail: batch %s failed: %s" % ((0, bad // 3), msg[:120]))
        # the Python API raises with the same reason
        with Daemon(tmp, base, name="failpy") as d:
            try:
                with seer.Loader(socket=d.sock, rank=0, world_size=1) as ld:
                    for _ in ld:
                        pass
                raise AssertionError("no exception for the corrupt record")
            except seer.SeerError as ex:
                check(os.path.basename(path) in str(ex), "Python error: %s" % ex)
        # skip: every batch arrives, the corrupt record replaced by the next one
        s = dict(base, **{"dataset.on_corrupt": "skip"})
        with Daemon(tmp, s, name="skip") as d:
            clog = os.path.join(tmp, "skip-trainer.log")
            c = subprocess.run([os.path.join(BIN, "seer-trainer"), "--rank", "0", "--world", "1",
                                "--socket", d.sock, "--log", clog], capture_output=True,
                               text=True, timeout=LONG)
            check(c.returncode == 0, "skip: trainer failed: " + c.stderr)
            check(d.wait(LONG) == 0, "skip: seerd failed")
        lg = read_log(clog)
        ids = [x[1] for k in sorted(lg) for x in sorted(lg[k])]
        check(bad not in ids and ids.count(bad + 1) == 2 and len(ids) == len(exp),
              "skip: sample %d must be replaced by %d: %s" % (bad, bad + 1, ids))
        check(c_expect_ok(clog, exp) == len(exp), "skip: bytes")
        st = d.stats()
        check(sum(e["skipped"] for e in st["epochs"]) == 1, "skip not counted")
        log("on_corrupt = skip: sample %d substituted by %d, counted once" % (bad, bad + 1))
    finally:
        cleanup(tmp)


def test_corrupt_file_at_catalog_time():
    tmp = tmpdir("seer-fmt-")
    try:
        root, _, _ = make(tmp, "npz")
        victim = os.path.join(root, "img_2_of_4.npz")
        data = open(victim, "rb").read()
        open(victim, "wb").write(data[: len(data) // 2])
        out = subprocess.run([os.path.join(BIN, "seerd"), "--set", "dataset.path=" + root,
                              "--set", "dataset.format=npz", "--set",
                              "daemon.state_dir=" + os.path.join(tmp, "st")],
                             capture_output=True, text=True, timeout=LONG)
        check(out.returncode != 0 and "img_2_of_4.npz" in out.stderr,
              "a truncated npz must stop seerd naming it: %s" % out.stderr)
        log("truncated npz: %s" % out.stderr.strip().splitlines()[-1][-150:])
    finally:
        cleanup(tmp)


# ---- memory and bytes ------------------------------------------------------------------

MIB = 1 << 20


def vm_hwm(pid):
    """Peak resident set of a process, bytes, with the huge pages it maps
    (an arena in huge pages, [cache] huge_pages, is not in VmHWM; it lives
    from start to exit, so its current size is its peak)."""
    hwm = huge = None
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) * 1024
            elif line.startswith("HugetlbPages:"):
                huge = int(line.split()[1]) * 1024
    if hwm is None:
        raise AssertionError("no VmHWM for pid %d" % pid)
    return hwm + (huge or 0)


def make_big(tmp, kind, files=70, n=128, d=64):
    """DLIO-like multi-sample files, 64x64 uint8 samples: 'npz' (x of shape
    (d, d, n), np.savez), 'npz_deflate' (np.savez_compressed), 'hdf5_gzip'
    (records (n, d, d), one gzip chunk per sample), 'hdf5' (contiguous),
    'tfrecord' (a record per sample). Returns (root, expected arrays in
    catalog order)."""
    root = os.path.join(tmp, kind, "train")
    os.makedirs(root)
    rng = np.random.default_rng(7)
    exp = []
    for i in range(files):
        x = rng.integers(0, 255, size=(d, d, n), dtype=np.uint8)
        name = os.path.join(root, "img_%03d_of_%d" % (i, files))
        if kind in ("hdf5_gzip", "hdf5"):
            rec = np.ascontiguousarray(np.moveaxis(x, 2, 0))
            kw = dict(chunks=(1, d, d), compression="gzip") if kind == "hdf5_gzip" else {}
            with h5py.File(name + ".h5", "w") as h:
                h.create_dataset("records", data=rec, **kw)
                h.create_dataset("labels", data=np.arange(n))
            exp += [rec[k] for k in range(n)]
        elif kind == "tfrecord":
            recs = [np.ascontiguousarray(x[:, :, k]).reshape(-1) for k in range(n)]
            write_tfrecord(name + ".tfrecord", [r.tobytes() for r in recs])
            exp += recs
        else:
            save = np.savez_compressed if kind == "npz_deflate" else np.savez
            save(name + ".npz", x=x, y=np.arange(n))
            exp += [np.ascontiguousarray(x[:, :, k]) for k in range(n)]
    return root, exp


def test_memory_bounded_multi_sample():
    """seerd's peak RSS <= cache.ram + cache.staging + 64 MiB with the default
    io_threads (16), format memory (32 MiB) and coalesced reads (on: extents
    of up to 8 MiB, 16 MiB of them at once), on ~37 MB multi-sample datasets:
    samples that must be decoded (interleaved npz, compressed npz, chunked
    gzip HDF5) and samples cut from extents (contiguous HDF5, TFRecord, the
    npz ones), with a cache smaller than the dataset and one holding it (every
    file then read by extents); every delivered sample checked."""
    asan = os.environ.get("V", "release") != "release"
    tmp = tmpdir("seer-fmt-")
    try:
        for kind, epochs, ram in (("npz", 2, 8 * MIB), ("npz_deflate", 1, 8 * MIB),
                                  ("hdf5_gzip", 1, 8 * MIB), ("hdf5", 1, 8 * MIB),
                                  ("tfrecord", 1, 8 * MIB), ("npz", 1, 48 * MIB),
                                  ("hdf5", 1, 48 * MIB), ("tfrecord", 1, 48 * MIB)):
            root, exp = make_big(tmp, kind)
            staging = 4 * MIB
            fmt = {"hdf5_gzip": "hdf5", "npz_deflate": "npz"}.get(kind, kind)
            s = {"dataset.path": root, "dataset.format": fmt,
                 "job.epochs": epochs, "job.batch_size": 64, "cache.ram": ram,
                 "cache.staging": "4MiB"}
            with Daemon(os.path.join(tmp, kind), s) as d:
                checked = 0
                with seer.Loader(socket=d.sock, rank=0, world_size=1) as ld:
                    for _ in range(ld.epochs):
                        for b in ld:
                            for sid, x in zip(b.ids.tolist(), b.samples):
                                check(np.array_equal(x, exp[sid]),
                                      "%s: sample %d differs" % (kind, sid))
                                checked += 1
                    hwm = vm_hwm(d.proc.pid)  # the job is still open: seerd is alive
                check(d.wait(60) == 0, "%s: seerd failed:\n%s" % (kind, d.log()))
                st = d.stats()
                pfs = sum(e["pfs_bytes"] for e in st["epochs"])
                co = st["coalescing"]
            bound = ram + staging + 64 * MIB
            size = sum(os.path.getsize(os.path.join(root, f)) for f in os.listdir(root))
            log("%-11s cache %2d MiB: %5d samples checked, dataset %.1f MB, PFS read %.1f MB over "
                "%d epochs (%d extents, extent memory peak %.1f MiB); seerd VmHWM %.1f MiB "
                "(bound %.0f MiB%s)" %
                (kind, ram // MIB, checked, size / 1e6, pfs / 1e6, epochs, co["extents"],
                 co["memory_peak"] / MIB, hwm / MIB, bound / MIB,
                 ", not enforced under sanitizers" if asan else ""))
            check(co["on"] and (co["extents"] > 0 or kind == "hdf5_gzip"),
                  "%s: coalescing must be on and used" % kind)
            check(checked == epochs * len(exp), "%s: %d samples delivered" % (kind, checked))
            check(asan or hwm <= bound, "%s: seerd reached %.1f MiB resident, bound %.0f MiB" %
                  (kind, hwm / MIB, bound / MIB))
            cleanup(os.path.join(tmp, kind))
    finally:
        cleanup(tmp)


def pfsemu_available():
    return (os.path.exists(os.path.join(BIN, "seer-pfsemu")) and os.path.exists("/dev/fuse") and
            os.path.exists(os.path.join(ROOT, "scripts", "pfsemu-mount.sh")))


def emu_bytes(mnt):
    with open(os.path.join(mnt, ".pfsemu", "stats")) as f:
        return json.load(f)["totals"]["bytes"]


def age_tree(root):
    """Directory mtimes an hour old: the catalog cache is trusted (racy-mtime rule)."""
    past = time.time() - 3600
    for d, _, _ in os.walk(root):
        os.utime(d, (past, past))


def test_pfs_bytes_are_bytes_read():
    """The PFS bytes seerd reports equal the bytes the PFS emulator served to
    it (seer-pfsemu's count of bytes returned), per format: npz stored and
    compressed through the decoded-member cache and without it, TFRecord
    (headers and CRCs are read too), chunked HDF5 (read by the HDF5 library),
    indexed. The catalog is built first (seerd --check) and the emulator's
    counters reset, so the job's reads are all it counts."""
    check(pfsemu_available(), "this test needs bin/seer-pfsemu and /dev/fuse")
    tmp = tmpdir("seer-fmt-")
    cases = [("npz", {}), ("npz", {"prefetch.format_memory": "1KiB"}), ("tfrecord", {}),
             ("hdf5", {}), ("indexed", {})]
    try:
        for i, (fmt, extra) in enumerate(cases):
            work = os.path.join(tmp, "case%d" % i)
            os.makedirs(work)
            root, more, exp = make(work, fmt)
            age_tree(os.path.join(work, fmt))
            mnt = os.path.join(work, "pfs")
            os.makedirs(mnt)
            os.environ["PFSEMU_LOG"] = os.path.join(work, "pfsemu.log")
            out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-mount.sh"),
                                  os.path.join(work, fmt), mnt], capture_output=True, text=True,
                                 timeout=60)
            check(out.returncode == 0, "pfsemu mount failed: %s %s" % (out.stdout, out.stderr))
            try:
                s = {"dataset.path": os.path.join(mnt, "train"), "dataset.format": fmt,
                     "job.epochs": 2, "job.batch_size": 3, "cache.ram": "0",
                     "cache.staging": "4MiB", "daemon.state_dir": os.path.join(work, "state")}
                s.update(more)
                s.update(extra)
                args = [os.path.join(BIN, "seerd"), "--check"]
                for k, v in s.items():
                    args += ["--set", "%s=%s" % (k, v)]
                c = subprocess.run(args, capture_output=True, text=True, timeout=60)
                check(c.returncode == 0, "seerd --check: %s" % c.stderr)
                with open(os.path.join(mnt, ".pfsemu", "reset")) as f:
                    check(f.read().strip() == "ok", "pfsemu reset")
                with Daemon(work, s) as d:
                    clog = os.path.join(work, "c.log")
                    t = subprocess.run([os.path.join(BIN, "seer-trainer"), "--rank", "0",
                                        "--world", "1", "--socket", d.sock, "--log", clog,
                                        "--quiet"], capture_output=True, text=True, timeout=120)
                    check(t.returncode == 0, "%s: trainer failed: %s\n%s" % (fmt, t.stderr, d.log()))
                    check(d.wait(30) == 0, "%s: seerd failed" % fmt)
                    check("loaded from" in d.log(), "%s: the catalog was scanned again" % fmt)
                    st = d.stats()
                n = c_expect_ok(clog, exp)
                reported = sum(e["pfs_bytes"] for e in st["epochs"])
                served = emu_bytes(mnt)
                log("%-8s %-30s %3d samples: seerd reports %7d PFS bytes, the emulator served %7d" %
                    (fmt, json.dumps(extra), n, reported, served))
                check(n == 2 * len(exp), "%s: %d samples delivered" % (fmt, n))
                check(reported == served, "%s %s: seerd reports %d PFS bytes, the emulator served %d"
                      % (fmt, extra, reported, served))
            finally:
                subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-umount.sh"), mnt],
                               capture_output=True, text=True, timeout=60)
    finally:
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_every_format, test_corrupt_record_fail_and_skip,
               test_corrupt_file_at_catalog_time, test_memory_bounded_multi_sample,
               test_pfs_bytes_are_bytes_read])
