"""A dataset regenerated in place between two jobs (issue 32, item 4).

DLIO's generator, and many a preprocessing script, writes a dataset again
under the same names: each file truncated and rewritten, the directories
untouched (their mtimes unchanged). The second seerd must not trust its
cached catalog for those files: it stats every file at start, scans again
the ones whose size, mtime or ctime changed, and serves the new samples
exactly, without dataset.rebuild_catalog.

  image_folder  class directories of raw files (the files format): some
                files rewritten with other bytes of the same size, some with
                another size, the rest untouched; the second job's bytes and
                labels equal the new files, the log names how many changed
  samples_per_file  DLIO's HDF5 (records (n, 16, 12), labels) and npz (x of
                shape (16, 12, n), y) and indexed_binary files rewritten with
                another samples-per-file count (32 -> 64, as a DLIO run with
                another num_samples_per_file): the second job delivers every
                new sample, bytes and label, and only those
  check_status  the check of a cached catalog behind the PFS emulator (20 ms
                per metadata operation, 4 at once: ~12 s): `seerctl status` says
                "checking the cached catalog, N of M files stat'ed" (N
                growing); SIGTERM stops it promptly, exit 0

Every tree is aged an hour before the first job, as a dataset written long
before it (else the racy-mtime rule rescans it anyway and the test proves
nothing). The tests wait for states, never for sleeps.
"""

import os
import re
import signal
import subprocess
import time

import h5py
import numpy as np

from seertest import (BIN, LONG, Daemon, check, cleanup, log, make_classes, run_tests, seer,
                      tmpdir, wait_for)

RNG = np.random.default_rng(32)


def age(root):
    """Every directory and file of root written an hour ago."""
    past = time.time() - 3600
    for d, _, files in os.walk(root):
        for f in files:
            os.utime(os.path.join(d, f), (past, past))
        os.utime(d, (past, past))


def run_job(work, settings, name, exp):
    """One seerd job, one epoch read by one Python trainer; every sample's
    bytes and label checked against exp[id] = (array, label). Returns seerd's log."""
    with Daemon(work, settings, name=name) as d:
        seen = set()
        try:
            with seer.Loader(socket=d.sock, rank=0, world_size=1) as ld:
                for b in ld:
                    for sid, x, y in zip(b.ids.tolist(), b.samples, b.labels.tolist()):
                        check(sid < len(exp), "%s: sample id %d, the dataset has %d" %
                              (name, sid, len(exp)))
                        want, wl = exp[sid]
                        check(x.tobytes() == want.tobytes(),
                              "%s: sample %d: bytes differ from the file's" % (name, sid))
                        check(y == wl, "%s: sample %d: label %d, the file says %d" %
                              (name, sid, y, wl))
                        seen.add(sid)
        except seer.SeerError as ex:
            raise AssertionError("%s: the job failed: %s\n%s" % (name, ex, d.log()))
        check(d.wait(60) == 0, "%s: seerd failed:\n%s" % (name, d.log()))
        check(seen == set(range(len(exp))), "%s: %d of %d samples delivered" %
              (name, len(seen), len(exp)))
        return d.log()


# ---- image folder ----------------------------------------------------------------------

def write_file(path, data):
    with open(path, "wb") as f:  # truncated and rewritten in place, as DLIO does
        f.write(data)


def image_folder_expect(root):
    """(bytes as uint8, class label) per file in catalog order (paths sorted)."""
    classes = sorted(os.listdir(root))
    paths = sorted(os.path.relpath(os.path.join(d, f), root)
                   for d, _, fs in os.walk(root) for f in fs)
    return [(np.frombuffer(open(os.path.join(root, p), "rb").read(), dtype=np.uint8),
             classes.index(p.split("/")[0])) for p in paths], paths


def test_image_folder_rewritten():
    tmp = tmpdir("seer-rewrite-")
    try:
        root = os.path.join(tmp, "data")
        for c in ("cat", "dog", "emu"):
            os.makedirs(os.path.join(root, c))
            for i in range(6):
                write_file(os.path.join(root, c, "%02d.jpg" % i),
                           RNG.bytes(int(RNG.integers(200, 3000))))
        age(root)
        s = {"dataset.path": root, "dataset.format": "files", "job.epochs": 1,
             "job.batch_size": 4, "daemon.state_dir": os.path.join(tmp, "state")}
        exp, paths = image_folder_expect(root)
        first = run_job(tmp, s, "first", exp)
        check("scanned in" in first, "first job: the catalog was not scanned:\n" + first)
        # rewrite in place: 3 files with other bytes of the same size, 3 with
        # another size; the directories keep their mtimes (no name changed)
        same = ["cat/01.jpg", "dog/03.jpg", "emu/05.jpg"]
        other = ["cat/04.jpg", "dog/00.jpg", "emu/02.jpg"]
        dmt = {c: os.stat(os.path.join(root, c)).st_mtime_ns for c in ("cat", "dog", "emu")}
        for p in same:
            n = os.path.getsize(os.path.join(root, p))
            old = open(os.path.join(root, p), "rb").read()
            new = RNG.bytes(n)
            check(new != old, "the rewrite must change the bytes")
            write_file(os.path.join(root, p), new)
        for p in other:
            n = os.path.getsize(os.path.join(root, p))
            write_file(os.path.join(root, p), RNG.bytes(n + 1 + int(RNG.integers(0, 900))))
        for c, m in dmt.items():
            check(os.stat(os.path.join(root, c)).st_mtime_ns == m,
                  "a rewrite in place must not touch directory %s" % c)
        exp2, paths2 = image_folder_expect(root)
        check(paths2 == paths, "same names")
        second = run_job(tmp, s, "second", exp2)
        m = re.search(r"catalog: (\d+) of (\d+) files changed since the catalog was saved", second)
        check(m and m.group(1) == "6" and m.group(2) == "18",
              "second job: the log must say 6 of 18 files changed:\n" + second)
        check("loaded from" not in second, "second job: the stale catalog was used")
        log("image folder: 3 files rewritten with the same size, 3 with another; the second "
            "job delivered the 18 new samples exactly: %s" %
            re.search(r"catalog: 6 of 18 files changed[^\n]*", second).group(0)[:200])
    finally:
        cleanup(tmp)


# ---- samples per file -----------------------------------------------------------------

def write_hdf5(root, files, n):
    exp = []
    for i in range(files):
        rec = RNG.integers(0, 255, size=(n, 16, 12), dtype=np.uint8)
        lab = RNG.integers(0, 1000, size=n).astype(np.int64)
        with h5py.File(os.path.join(root, "img_%d_of_%d.h5" % (i + 1, files)), "w") as h:
            h.create_dataset("records", data=rec)
            h.create_dataset("labels", data=lab)
        exp += [(rec[k], int(lab[k])) for k in range(n)]
    return exp


def write_npz(root, files, n):
    exp = []
    for i in range(files):
        x = RNG.integers(0, 255, size=(16, 12, n), dtype=np.uint8)
        y = RNG.integers(0, 1000, size=n)
        # np.savez opens the name and truncates it: a rewrite in place
        np.savez(os.path.join(root, "img_%d_of_%d.npz" % (i + 1, files)), x=x, y=y)
        exp += [(np.ascontiguousarray(x[:, :, k]), int(y[k])) for k in range(n)]
    return exp


def write_indexed(root, files, n):
    exp = []
    for i in range(files):
        ps = [RNG.bytes(int(RNG.integers(20, 300))) for _ in range(n)]
        base = os.path.join(root, "img_%d_of_%d.indexed_binary" % (i + 1, files))
        offs, blob = [], b""
        for p in ps:
            offs.append(len(blob))
            blob += p
        write_file(base, blob)
        write_file(base + ".off.idx", np.array(offs, dtype="<u8").tobytes())
        write_file(base + ".sz.idx", np.array([len(p) for p in ps], dtype="<u8").tobytes())
        exp += [(np.frombuffer(p, dtype=np.uint8), -1) for p in ps]
    return exp


def test_samples_per_file_rewritten():
    tmp = tmpdir("seer-rewrite-")
    try:
        for fmt, write in (("hdf5", write_hdf5), ("npz", write_npz), ("indexed", write_indexed)):
            work = os.path.join(tmp, fmt)
            root = os.path.join(work, "train")
            os.makedirs(root)
            exp = write(root, 3, 32)
            age(work)
            s = {"dataset.path": root, "dataset.format": fmt, "job.epochs": 1,
                 "job.batch_size": 8, "daemon.state_dir": os.path.join(work, "state")}
            first = run_job(work, s, "first", exp)
            check("96 samples" in first, "%s first job: 96 samples expected:\n%s" % (fmt, first))
            # DLIO run again with num_samples_per_file 64: the same names rewritten
            exp2 = write(root, 3, 64)
            second = run_job(work, s, "second", exp2)
            check("192 samples" in second and "loaded from" not in second,
                  "%s second job: the catalog must be rescanned to 192 samples:\n%s" %
                  (fmt, second))
            check(re.search(r"catalog: 3 of 3 files changed", second),
                  "%s second job: the log must say 3 of 3 files changed:\n%s" % (fmt, second))
            log("%-7s 3 files of 32 samples rewritten with 64: the second job delivered the "
                "192 new samples exactly" % fmt)
    finally:
        cleanup(tmp)


# ---- the check seen from outside ---------------------------------------------------------

CHECKING = re.compile(r"checking the cached catalog, (\d+) of (\d+) files stat'ed")


def checking(sock, least):
    out = subprocess.run([os.path.join(BIN, "seerctl"), "--socket", sock, "status"],
                         capture_output=True, text=True, timeout=LONG)
    m = CHECKING.search(out.stdout)
    return m if out.returncode == 0 and m and int(m.group(1)) >= least else None


def test_check_status_and_sigterm():
    import test_multi_node as mn
    check(mn.pfsemu_available(), "this test needs bin/seer-pfsemu and /dev/fuse")
    tmp = tmpdir("seer-rewrite-")
    mnt = os.path.join(tmp, "pfs")
    mounted = False
    try:
        src = os.path.join(tmp, "data")
        make_classes(src, ["a", "b", "c", "d"], 300, 50, 400, seed=3)
        age(src)
        s = {"dataset.path": mnt, "job.epochs": 1, "job.batch_size": 4,
             "daemon.state_dir": os.path.join(tmp, "state")}
        # the catalog cached through a fast mount, then checked through a slow one
        mn.mount_pfs(src, mnt)
        mounted = True
        args = [os.path.join(BIN, "seerd"), "--check"]
        for k, v in s.items():
            args += ["--set", "%s=%s" % (k, v)]
        out = subprocess.run(args, capture_output=True, text=True, timeout=LONG)
        check(out.returncode == 0 and "scanned in" in out.stderr, "seerd --check: " + out.stderr)
        mn.umount_pfs(mnt)
        mounted = False
        mn.mount_pfs(src, mnt, "--meta-latency-ms", "20", "--meta-inflight", "4",
                     "--attr-timeout", "0")
        mounted = True
        d = Daemon(tmp, s, wait=False)
        try:
            m1 = wait_for(lambda: checking(d.sock, 1), LONG, "status showing the check")
            m2 = wait_for(lambda: checking(d.sock, int(m1.group(1)) + 1), LONG,
                          "the check to progress")
            check(int(m2.group(2)) == 1200, "status says %s of a 1200-file dataset" % m2.group(0))
            log("seerctl status during the check: '%s', then '%s'" % (m1.group(0), m2.group(0)))
            t0 = time.time()
            d.proc.send_signal(signal.SIGTERM)
            rc = d.wait(LONG)
            took = time.time() - t0
        finally:
            d.stop()
        dlog = d.log()
        check(rc == 0, "seerd exited %s after SIGTERM during the check:\n%s" % (rc, dlog))
        check("check of the cached catalog's files was stopped" in dlog and
              "stopped during start-up" in dlog, "no stop lines:\n" + dlog)
        check("scanned in" not in dlog, "the stop started a rescan:\n" + dlog)
        check(not os.path.exists(d.sock), "socket left behind after the stop")
        check(took < 10, "SIGTERM took %.1f s to stop the check" % took)
        log("SIGTERM during the check: exit 0 in %.2f s" % took)
    finally:
        if mounted:
            mn.umount_pfs(mnt)
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_image_folder_rewritten, test_samples_per_file_rewritten,
               test_check_status_and_sigterm])
