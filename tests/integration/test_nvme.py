"""The NVMe tier on one node: a dataset larger than the RAM cache but within
RAM + NVMe is read from the PFS only in the first epoch; the tier's file is
gone from the directory; a corrupted on-disk copy is detected by its
checksum and re-read, never delivered; a tier that does not fit (ENOSPC) is
disabled with one warning and the job still delivers exact data; so is a
tier whose disk fails mid-job (EIO, injected) and whose directory is
removed.

The tests that act on the tier mid-job hold every trainer at batch 1:0 (the
first epoch's copies are written, the later epochs not yet read) until the
fault is in place: on a busy machine the job cannot outrun them."""

import os
import shutil
import subprocess

from seertest import (BIN, LONG, ROOT, Daemon, Fail, Gate, catalog, check, cleanup, finish, log,
                      make_classes, read_log, run_tests, seer, start_trainer, tmpdir,
                      verify_exactly_once, verify_rank, wait_for)


def dataset(tmp, seed=3):
    root = os.path.join(tmp, "data")
    make_classes(root, ["a", "b", "c", "d"], 40, 8000, 24000, seed=seed)
    return root, catalog(root)


def settings(root, nvme_dir, **kw):
    s = {"dataset.path": root, "job.seed": 1, "job.epochs": 3, "job.batch_size": 8,
         "cache.ram": "1MiB", "cache.nvme_dir": nvme_dir, "cache.nvme": "8MiB",
         "cache.staging": "4MiB", "prefetch.io_threads": 4, "prefetch.lookahead": 4}
    s.update(kw)
    return s


def nvme_written(d):
    """Wait until every planned NVMe copy is written; returns that status."""
    def done():
        st = d.status()
        c = st["cache"]
        return st if c["nvme_loaded_samples"] >= c["nvme_planned_samples"] > 0 else None
    return wait_for(done, LONG, "the NVMe copies to be written", step=0.02)


def run(tmp, s, world=2, compute="1"):
    with Daemon(tmp, s) as d:
        logs = [os.path.join(tmp, "n%d.log" % r) for r in range(world)]
        procs = [start_trainer("c" if r % 2 == 0 else "py", r, world, d.sock, logs[r],
                               ["--compute-ms", compute]) for r in range(world)]
        for rc, _, err in finish(procs):
            check(rc == 0, "trainer failed: %s\n%s" % (err, d.log()))
        check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
    return d, [read_log(p) for p in logs]


def test_ram_plus_nvme_holds_the_dataset():
    for where in ("disk", "tmpfs"):
        tmp = tmpdir("seer-nv-")
        try:
            root, cat = dataset(tmp)
            D = sum(c[2] for c in cat)
            check(D > 2 * 1024 * 1024, "dataset must exceed the RAM cache")
            base = "/dev/shm" if where == "tmpfs" else tmp
            nvme = os.path.join(base, "seer-nvme-%d" % os.getpid())
            d, logs = run(tmp, settings(root, nvme))
            sampler = seer.Sampler(len(cat), 1, 2, 8)
            for r in range(2):
                verify_rank(cat, sampler, r, logs[r], 3)
            verify_exactly_once(cat, logs, 3, 2, 8, drop_last=False)
            st = d.stats()
            pfs = [e["pfs_bytes"] for e in st["epochs"]]
            nv = [e["nvme_samples"] for e in st["epochs"]]
            direct = "(O_DIRECT," in d.log()
            log("%s: PFS bytes per epoch %s (dataset %d), NVMe reads per epoch %s, O_DIRECT %s" %
                (where, pfs, D, nv, direct))
            check(st["cache"]["nvme_enabled"], "NVMe tier not enabled:\n" + d.log())
            check(pfs[0] == D and pfs[1] == 0 and pfs[2] == 0,
                  "PFS bytes per epoch %s, expected [%d, 0, 0]" % (pfs, D))
            check(nv[1] > 0 and nv[2] > 0, "no NVMe reads after the first epoch")
            check(os.listdir(nvme) == [], "NVMe files left behind: %s" % os.listdir(nvme))
            if where == "disk":
                check(direct, "ext4 supports O_DIRECT, seerd did not use it:\n" + d.log())
            os.rmdir(nvme)
        finally:
            cleanup(tmp)


def nvme_fd_path(pid):
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if ".seer-" in target and target.endswith("(deleted)"):
            return "/proc/%d/fd/%s" % (pid, fd)
    return None


def test_corrupt_nvme_copy_is_never_delivered():
    tmp = tmpdir("seer-nv-")
    try:
        root, cat = dataset(tmp, seed=4)
        nvme = os.path.join(tmp, "nvme")
        s = settings(root, nvme, **{"job.epochs": 3})
        world = 2
        gate, at = Gate(tmp), (1, 0)
        with Daemon(tmp, s) as d:
            logs = [os.path.join(tmp, "c%d.log" % r) for r in range(world)]
            procs = [start_trainer("c", r, world, d.sock, logs[r],
                                   ["--compute-ms", "12"] + gate.args(at))
                     for r in range(world)]
            # once epoch 0 wrote the NVMe copies (the trainers hold 1:0, so epochs
            # 1 and 2 are still to be read), scribble over all of them
            gate.wait(range(world), at, procs)
            st = nvme_written(d)
            path = nvme_fd_path(d.proc.pid)
            check(path is not None, "the daemon's NVMe file is not open")
            size = st["cache"]["nvme_capacity"]
            with open(path, "r+b") as f:
                for off in range(0, size, 4096):
                    f.seek(off)
                    f.write(b"\xde\xad\xbe\xef" * 16)
            log("overwrote the start of every 4 KiB block of the NVMe copy (%d B)" % size)
            gate.go(at)
            for rc, _, err in finish(procs):
                check(rc == 0, "trainer failed: " + err)
            check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
        st = d.stats()
        bad = sum(e["nvme_corrupt"] for e in st["epochs"])
        log("checksum failures detected and re-read from the PFS: %d" % bad)
        check(bad > 0, "no corrupted NVMe copy was detected")
        sampler = seer.Sampler(len(cat), 1, world, 8)
        all_logs = [read_log(p) for p in logs]
        for r in range(world):
            verify_rank(cat, sampler, r, all_logs[r], 3)
    finally:
        cleanup(tmp)


def test_full_nvme_dir():
    tmp = tmpdir("seer-nv-")
    mnt = os.path.join(tmp, "small")
    os.makedirs(mnt)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt],
                             capture_output=True).returncode == 0
    try:
        if not mounted:
            raise Fail("cannot mount a 1 MiB tmpfs (root needed)")
        root, cat = dataset(tmp, seed=5)
        d, logs = run(tmp, settings(root, mnt))
        out = d.log()
        warnings = [l for l in out.splitlines() if "NVMe tier disabled" in l]
        log(warnings[0].split("WARN")[-1].strip() if warnings else "(no warning)")
        check(len(warnings) == 1, "expected one 'NVMe tier disabled' warning:\n" + out)
        check("no room" in warnings[0] and mnt in warnings[0],
              "the warning must name the directory and the lack of room")
        sampler = seer.Sampler(len(cat), 1, 2, 8)
        for r in range(2):
            verify_rank(cat, sampler, r, logs[r], 3)
        check(not d.stats()["cache"]["nvme_enabled"], "tier still enabled")
    finally:
        if mounted:
            subprocess.run(["umount", mnt])
        cleanup(tmp)

def test_nvme_fails_mid_job():
    """After epoch 0 wrote the NVMe copies, the directory is removed and every
    read and write of the tier's file fails with EIO (nvme_eio.c, an
    LD_PRELOAD shim): one warning, the tier is left out, every batch exact."""
    if os.path.basename(os.path.dirname(BIN)) in ("asan", "tsan"):
        log("skipped in sanitizer builds (the LD_PRELOAD shim would precede their runtime)")
        return
    tmp = tmpdir("seer-nv-")
    try:
        shim = os.path.join(tmp, "nvme_eio.so")
        cc = subprocess.run(["cc", "-shared", "-fPIC", "-o", shim,
                             os.path.join(ROOT, "tests", "integration", "nvme_eio.c"), "-ldl"],
                            capture_output=True, text=True)
        check(cc.returncode == 0, "building the shim: " + cc.stderr)
        root, cat = dataset(tmp, seed=6)
        nvme = os.path.join(tmp, "nvme")
        trigger = os.path.join(tmp, "fail-now")
        s = settings(root, nvme, **{"job.epochs": 4})
        world = 2
        env = {"LD_PRELOAD": shim, "SEER_EIO_DIR": nvme, "SEER_EIO_TRIGGER": trigger}
        gate, at = Gate(tmp), (1, 0)
        with Daemon(tmp, s, env=env) as d:
            logs = [os.path.join(tmp, "f%d.log" % r) for r in range(world)]
            procs = [start_trainer("c" if r == 0 else "py", r, world, d.sock, logs[r],
                                   ["--compute-ms", "12"] + gate.args(at))
                     for r in range(world)]
            # the disk fails while the trainers hold 1:0: epochs 1 to 3 come after
            gate.wait(range(world), at, procs)
            st = nvme_written(d)
            before = sum(e["nvme_samples"] for e in st["epochs"])
            shutil.rmtree(nvme)
            open(trigger, "w").close()
            log("after epoch %d: NVMe directory removed, its file fails with EIO" %
                st["trainers"][0]["epoch"])
            gate.go(at)
            for rc, _, err in finish(procs):
                check(rc == 0, "trainer failed: %s\n%s" % (err, d.log()))
            check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
        out = d.log()
        warnings = [ln for ln in out.splitlines() if "NVMe" in ln and "WARN" in ln]
        check(len(warnings) == 1 and "NVMe tier disabled" in warnings[0] and
              "Input/output error" in warnings[0],
              "expected one 'NVMe tier disabled (... Input/output error)' warning:\n" + out)
        log(warnings[0].split("WARN")[-1].strip())
        st = d.stats()
        check(not st["cache"]["nvme_enabled"], "the tier is still enabled")
        late = [e["nvme_samples"] for e in st["epochs"][-2:]]
        check(late == [0, 0], "NVMe reads in the last epochs after the failure: %s" % late)
        sampler = seer.Sampler(len(cat), 1, world, 8)
        for r in range(world):
            verify_rank(cat, sampler, r, read_log(logs[r]), 4)
        log("%d samples served from NVMe before the failure, none after; 4 epochs exact" % before)
    finally:
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_ram_plus_nvme_holds_the_dataset, test_corrupt_nvme_copy_is_never_delivered,
               test_full_nvme_dir, test_nvme_fails_mid_job])
