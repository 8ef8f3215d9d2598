"""Dataset formats end to end: files written by numpy, h5py and an independent
TFRecord writer, in DLIO's layouts, served by seerd. The test process is one
trainer (Python: every numpy view's dtype, shape, bytes and label compared
with what numpy/h5py read), a C trainer is the other (bytes checked against
the same expectation). A corrupted record fails exactly its batch with a
message naming the file (on_corrupt = fail) or is substituted by the next
valid sample and counted (on_corrupt = skip)."""

import os
import struct
import subprocess
import threading
import zlib

import h5py
import numpy as np

from seertest import (BIN, LONG, Daemon, check, cleanup, log, read_log, run_tests, seer, tmpdir)

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


if __name__ == "__main__":
    run_tests([test_every_format, test_corrupt_record_fail_and_skip,
               test_corrupt_file_at_catalog_time])
