#!/usr/bin/env python3
"""Checkpoints through seerd (issue 31, docs/checkpoint.md): real daemons,
real files. seer.checkpoint.save's bytes at the PFS path are torch.save's
(and torch.load gives the same object back), the levels are reached in
order, a seerd SIGKILLed after "local" finishes the drain when restarted, a
failing PFS (EIO, ENOSPC) leaves no file at the path and says why, full
checkpoint memory is refused naming the key, SIGTERM names what is where,
and a trainer's batches stay exact while checkpoints drain beside it.

Every wait is for a state (the checkpoint's level, a log line, a file),
never for a sleep."""

import ctypes
import errno
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from seertest import (BIN, LONG, ROOT, Daemon, Fail, Gate, catalog, check, cleanup, finish, log,
                      SANITIZER, make_classes, read_log, run_tests, start_trainer, tmpdir, verify_rank,
                      wait_for)

from test_multi_node import mount_pfs, pfs_stats, pfsemu_available, umount_pfs  # noqa: E402
import seer  # noqa: E402
import torch  # noqa: E402
import seer.checkpoint as sc  # noqa: E402

JOB = "ckpt-test"


def dataset(tmp):
    root = os.path.join(tmp, "data")
    make_classes(root, ["a", "b", "c"], 24, 2000, 8000, seed=5)
    return root, catalog(root)


def settings(tmp, root, nvme=True, **kw):
    s = {"dataset.path": root, "job.id": JOB, "job.seed": 1, "job.epochs": 2,
         "job.batch_size": 8, "cache.ram": "1MiB", "cache.staging": "4MiB",
         "prefetch.io_threads": 2, "daemon.stop_grace_s": 5}
    if nvme:
        s["cache.nvme_dir"] = os.path.join(tmp, "nvme")
    s.update(kw)
    return s


def state(n_floats, seed):
    g = torch.Generator().manual_seed(seed)
    return {"model": {"w": torch.randn(n_floats, generator=g), "b": torch.arange(17)},
            "optim": {"step": seed, "lr": 0.1}, "note": "seer %d" % seed}


def torch_bytes(obj):
    b = io.BytesIO()
    torch.save(obj, b)
    return b.getvalue()


def same(a, b):
    check(torch.equal(a["model"]["w"], b["model"]["w"]) and
          torch.equal(a["model"]["b"], b["model"]["b"]) and
          a["optim"] == b["optim"] and a["note"] == b["note"], "loaded object differs")


def ctl_checkpoints(d):
    out = subprocess.run([os.path.join(BIN, "seerctl"), "--socket", d.sock, "--json",
                          "checkpoints"], capture_output=True, text=True, timeout=LONG)
    check(out.returncode == 0, "seerctl checkpoints: %s" % out.stderr)
    return json.loads(out.stdout)


def no_partial(pfs):
    """Nothing but complete checkpoints in the PFS directory: no temporary."""
    left = [f for f in os.listdir(pfs) if f.startswith(".") and f.endswith(".tmp")]
    check(not left, "temporary files left in %s: %s" % (pfs, left))


def peer_done(h):
    """wait("peer") until it returns: a try that failed on a loaded machine
    (its message says seerd tries again) is followed by the retry."""
    def done():
        try:
            h.wait("peer", timeout=LONG)
            return True
        except seer.SeerError as ex:
            if "tries again" not in str(ex):
                raise
            return None
    wait_for(done, LONG, "wait('peer') to return", step=0.05)


def peer_fails(h, reason):
    """The SeerError of wait("peer") whose message holds `reason`: a try
    that timed out on a loaded machine comes before the one that says it."""
    def failed():
        try:
            h.wait("peer", timeout=LONG)
        except seer.SeerError as ex:
            return ex if reason in str(ex) else None
        raise Fail("wait('peer') returned; expected it to fail with %r" % reason)
    return wait_for(failed, LONG, "wait('peer') to fail with %r" % reason, step=0.05)


def test_save_wait_load_bytes():
    """The levels in order, the bytes torch.save writes to a file object, the
    object back from NVMe, seerctl's listing, retention keep-last-K."""
    tmp = tmpdir("seer-ck-")
    try:
        root, _ = dataset(tmp)
        pfs = os.path.join(tmp, "pfs")
        os.makedirs(pfs)
        with Daemon(tmp, settings(tmp, root, **{"checkpoint.keep": 1})) as d:
            objs, hs = [], []
            for i in range(3):
                obj = state(200000 + i, i)
                h = sc.save(obj, os.path.join(pfs, "ckpt_%d.pt" % i), socket=d.sock,
                            job_id=JOB)
                objs.append(obj)
                hs.append(h)
            for i, h in enumerate(hs):
                h.wait("local", timeout=LONG)
                h.wait("pfs", timeout=LONG)
                with open(h.path, "rb") as f:
                    got = f.read()
                check(got == torch_bytes(objs[i]), "%s: bytes differ from torch.save's" %
                      h.path)
                check(h.size == len(got), "size %d, file %d" % (h.size, len(got)))
                same(torch.load(h.path), objs[i])
                st = os.stat(h.path)
                check(st.st_mode & 0o777 == 0o600, "%s mode %o" % (h.path, st.st_mode & 0o777))
            # keep = 1: the two older NVMe copies are pruned once drained
            st = wait_for(lambda: [h.state()["local"] for h in hs] == ["pruned", "pruned", "done"]
                          or None, LONG, "retention to keep the newest NVMe copy")
            check(sc.where(hs[2].path, socket=d.sock, job_id=JOB) == "local",
                  "the newest checkpoint is read from NVMe")
            check(sc.where(hs[0].path, socket=d.sock, job_id=JOB) == "pfs",
                  "a pruned checkpoint is read from the PFS")
            same(sc.load(hs[2].path, socket=d.sock, job_id=JOB), objs[2])
            same(sc.load(hs[0].path, socket=d.sock, job_id=JOB), objs[0])
            j = ctl_checkpoints(d)
            rows = {c["path"]: c for c in j["checkpoints"]}
            check(rows[hs[2].path]["bytes"] == hs[2].size and
                  rows[hs[2].path]["levels"]["pfs"] == "done" and
                  rows[hs[2].path]["levels"]["local"] == "done", "seerctl row: %s" %
                  rows[hs[2].path])
            check(j["memory_used"] == 0, "memory released after the NVMe copies: %s" % j)
            txt = subprocess.run([os.path.join(BIN, "seerctl"), "--socket", d.sock, "checkpoints"],
                                 capture_output=True, text=True, timeout=LONG).stdout
            row = [ln for ln in txt.splitlines() if ln.endswith(hs[2].path)]
            check(row and row[0].split()[3:7] == ["done", "done", "off", "done"],
                  "seerctl checkpoints for people:\n" + txt)
            no_partial(pfs)
            # C handles are tokens: a closed one is -EBADF, a forged one -EINVAL
            lib, tok = sc._lib(), hs[0]._h
            hs[0].close()
            check(lib.seer_ckpt_wait(tok, 3, 0) == -errno.EBADF, "closed handle not -EBADF")
            check(lib.seer_ckpt_wait(ctypes.c_void_p(0x12345), 3, 0) == -errno.EINVAL,
                  "forged handle not -EINVAL")
            log("3 checkpoints of ~%d KiB: bytes equal to torch.save's; seerctl %s" %
                (hs[0].size // 1024, {k: j[k] for k in ("nvme_used", "drain_rate")}))
    finally:
        cleanup(tmp)


def test_without_nvme():
    """No nvme_dir: the log says so, "local" is off, the drain goes from
    memory to the path with the same bytes."""
    tmp = tmpdir("seer-ck-")
    try:
        root, _ = dataset(tmp)
        pfs = os.path.join(tmp, "pfs")
        os.makedirs(pfs)
        with Daemon(tmp, settings(tmp, root, nvme=False)) as d:
            check("they wait in memory and go straight to the PFS" in d.log(),
                  "the log says where checkpoints go:\n" + d.log())
            obj = state(50000, 7)
            h = sc.save(obj, os.path.join(pfs, "m.pt"), socket=d.sock, job_id=JOB)
            try:
                h.wait("local", timeout=LONG)
                raise Fail("wait('local') without an NVMe tier returned")
            except seer.SeerError as ex:
                check("no NVMe" in str(ex), "wait('local') says why: %s" % ex)
            h.wait("pfs", timeout=LONG)
            check(open(h.path, "rb").read() == torch_bytes(obj), "bytes differ")
            check(h.state()["local"] == "off", "local: %s" % h.state())
            try:
                sc.save(obj, os.path.join(tmp, "no-such-dir", "x.pt"), socket=d.sock, job_id=JOB)
                raise Fail("a save into a missing directory returned")
            except seer.SeerError as ex:
                check("does not exist" in str(ex), "refused at once: %s" % ex)
            same(sc.load(h.path, socket=d.sock, job_id=JOB), obj)
            # a whole module is no container of tensors: sized by a counting pass
            torch.manual_seed(0)
            mod = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU())
            h = sc.save(mod, os.path.join(pfs, "mod.pt"), socket=d.sock, job_id=JOB)
            h.wait("pfs", timeout=LONG)
            check(open(h.path, "rb").read() == torch_bytes(mod), "module bytes differ")
            back = sc.load(h.path, socket=d.sock, job_id=JOB)
            check(torch.equal(back[0].weight, mod[0].weight), "module weights differ")
    finally:
        cleanup(tmp)


def test_sigkill_after_local_then_restart():
    """seerd killed (SIGKILL) while a capped drain runs, after "local": no
    file at the path; the next seerd finds the NVMe copy and drains it; the
    trainer's handle waits across the restart."""
    tmp = tmpdir("seer-ck-")
    try:
        root, _ = dataset(tmp)
        pfs = os.path.join(tmp, "pfs")
        os.makedirs(pfs)
        obj = state(400000, 3)  # 1.6 MB: 100 s at the cap below
        s = settings(tmp, root, **{"checkpoint.drain_rate": "16KiB",
                                   "daemon.socket": os.path.join(tmp, "seerd.sock")})
        d = Daemon(tmp, s)
        try:
            h = sc.save(obj, os.path.join(pfs, "k.pt"), socket=d.sock, job_id=JOB)
            h.wait("local", timeout=LONG)
            wait_for(lambda: h.state()["drained"] > 0 or None, LONG, "the drain to start")
            d.stop(signal.SIGKILL)
        finally:
            d.stop()
        check(not os.path.exists(h.path), "a partial file at the path after SIGKILL")
        s["checkpoint.drain_rate"] = "0"
        with Daemon(tmp, s, name="seerd2") as d2:  # on the same socket
            h.wait("pfs", timeout=LONG)
            check("found on NVMe" in d2.log(), "restart finds the copy:\n" + d2.log())
            check(open(h.path, "rb").read() == torch_bytes(obj), "bytes differ after restart")
            same(sc.load(h.path, socket=d2.sock, job_id=JOB), obj)
            no_partial(pfs)
    finally:
        cleanup(tmp)


def eio_shim(tmp):
    shim = os.path.join(tmp, "nvme_eio.so")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", shim,
                    os.path.join(ROOT, "tests", "integration", "nvme_eio.c"), "-ldl"], check=True)
    return shim


def tiny_tmpfs(tmp):
    """A 1 MiB tmpfs for ENOSPC, or None without the privilege to mount."""
    mnt = os.path.join(tmp, "full")
    os.makedirs(mnt)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt],
                       capture_output=True)
    return mnt if r.returncode == 0 else None


def eio_part(d, pfs, triggers, name, seed, what):
    """A checkpoint saved while the files `triggers` exist (the shim fails
    its PFS writes, or their write-back): wait("pfs") raises naming EIO, no
    file at the path, seerctl says why, the NVMe copy serves load; once the
    triggers are gone (the PFS heals) the retry (every 10 s) drains it."""
    for t in triggers:
        open(t, "w").close()
    obj = state(100000, seed)
    h = sc.save(obj, os.path.join(pfs, name), socket=d.sock, job_id=JOB)
    h.wait("local", timeout=LONG)
    try:
        h.wait("pfs", timeout=LONG)
        raise Fail("wait('pfs') returned though %s" % what)
    except seer.SeerError as ex:
        check("Input/output error" in str(ex) and "stays on NVMe" in str(ex),
              "wait('pfs') says why: %s" % ex)
    check(not os.path.exists(h.path), "a file at the path after %s" % what)
    no_partial(pfs)
    row = [c for c in ctl_checkpoints(d)["checkpoints"] if c["path"] == h.path][0]
    check(row["levels"]["pfs"] == "failed" and "Input/output" in row["why"],
          "seerctl says why: %s" % row)
    check(sc.where(h.path, socket=d.sock, job_id=JOB) == "local", "read from NVMe")
    same(sc.load(h.path, socket=d.sock, job_id=JOB), obj)
    for t in triggers:
        os.unlink(t)
    wait_for(lambda: h.state()["pfs"] == "done" or None, LONG, "the retried drain")
    check(open(h.path, "rb").read() == torch_bytes(obj), "bytes after the retry")


def test_pfs_fails_eio_enospc():
    """EIO on every write to the PFS directory (a preloaded shim), EIO on
    their write-back only, then a full file system (a 1 MiB tmpfs):
    wait("pfs") raises with the reason, seerctl
    says it, no file (partial or temporary) at the path, the copy stays on
    NVMe and goes to the PFS once it works again."""
    tmp = tmpdir("seer-ck-")
    mnt = None
    try:
        root, _ = dataset(tmp)
        pfs = os.path.join(tmp, "pfs")
        os.makedirs(pfs)
        trigger = os.path.join(tmp, "eio-now")
        env = {}
        if SANITIZER:  # the shim would precede the sanitizer's runtime
            log("EIO part skipped in sanitizer builds (LD_PRELOAD shim)")
        else:
            env = {"LD_PRELOAD": eio_shim(tmp), "SEER_EIO_DIR": pfs, "SEER_EIO_TRIGGER": trigger,
                   "SEER_EIO_WRITEBACK": os.path.join(tmp, "eio-writeback")}
        mnt = tiny_tmpfs(tmp)
        with Daemon(tmp, settings(tmp, root), env=env) as d:
            if env:
                eio_part(d, pfs, [trigger], "e.pt", 11, "the PFS fails its writes")
                # the writes succeed, their write-back fails: the kernel
                # reports it once, to the drain's per-piece sync_file_range
                # (the fsync after it says 0); the drain must not rename a
                # file missing a piece into place
                eio_part(d, pfs, [trigger, env["SEER_EIO_WRITEBACK"]], "w.pt", 13,
                         "the write-back failed")
            if mnt:
                big = state(400000, 12)  # 1.6 MB into 1 MiB
                h2 = sc.save(big, os.path.join(mnt, "f.pt"), socket=d.sock, job_id=JOB)
                h2.wait("local", timeout=LONG)
                try:
                    h2.wait("pfs", timeout=LONG)
                    raise Fail("wait('pfs') returned on a full file system")
                except seer.SeerError as ex:
                    check("No space left on device" in str(ex), "ENOSPC named: %s" % ex)
                check(os.listdir(mnt) == [], "left on the full FS: %s" % os.listdir(mnt))
                same(sc.load(h2.path, socket=d.sock, job_id=JOB), big)
            else:
                log("ENOSPC part not run: no privilege to mount a tmpfs")
    finally:
        if mnt:
            subprocess.run(["umount", mnt])
        cleanup(tmp)


def test_memory_full():
    """[checkpoint] memory full (no NVMe, a drain held back by its cap): the
    next save waits its timeout, then names the key; one larger than the
    whole budget is refused at once. SIGTERM: the log names what is lost."""
    tmp = tmpdir("seer-ck-")
    try:
        root, _ = dataset(tmp)
        pfs = os.path.join(tmp, "pfs")
        os.makedirs(pfs)
        s = settings(tmp, root, nvme=False, **{"checkpoint.memory": "1MiB",
                                              "checkpoint.drain_rate": "4KiB",
                                              "daemon.stop_grace_s": 1})
        with Daemon(tmp, s) as d:
            first = state(150000, 1)
            h = sc.save(first, os.path.join(pfs, "a.pt"), socket=d.sock,
                        job_id=JOB)  # 600 KB of 1 MiB, draining at 4 KiB/s
            # only in seerd's memory (handed out for an upper bound of its size)
            check(sc.where(h.path, socket=d.sock, job_id=JOB) == "memory", "read from memory")
            same(sc.load(h.path, socket=d.sock, job_id=JOB), first)
            try:
                sc.save(state(150000, 2), os.path.join(pfs, "b.pt"), socket=d.sock, job_id=JOB,
                        timeout=0.3)
                raise Fail("a save beyond [checkpoint] memory returned")
            except seer.SeerError as ex:
                check("checkpoint memory full" in str(ex) and "checkpoint.memory" in str(ex),
                      "says what to raise: %s" % ex)
            try:
                sc.save(state(400000, 3), os.path.join(pfs, "c.pt"), socket=d.sock, job_id=JOB)
                raise Fail("a save larger than [checkpoint] memory returned")
            except seer.SeerError as ex:
                check("larger than [checkpoint] memory" in str(ex), "refused at once: %s" % ex)
            check(h.state()["pfs"] == "pending", "the first still drains: %s" % h.state())
            d.stop()
            check("LOST at exit" in d.log() and h.path in d.log(),
                  "SIGTERM names the checkpoint only in memory:\n" + d.log())
        check(not os.path.exists(h.path), "a partial file at the path")
        no_partial(pfs)
    finally:
        cleanup(tmp)


def test_sigterm_names_nvme_copy():
    """SIGTERM with a drain that cannot finish within stop_grace_s: seerd
    exits anyway and the log names the NVMe copy the next seerd drains; one
    that can finish within it does, before seerd exits."""
    tmp = tmpdir("seer-ck-")
    try:
        root, _ = dataset(tmp)
        pfs = os.path.join(tmp, "pfs")
        os.makedirs(pfs)
        s = settings(tmp, root, **{"checkpoint.drain_rate": "8KiB", "daemon.stop_grace_s": 1})
        with Daemon(tmp, s) as d:
            h = sc.save(state(100000, 5), os.path.join(pfs, "t.pt"), socket=d.sock, job_id=JOB)
            h.wait("local", timeout=LONG)
            d.stop()
            lg = d.log()
            check("is not on the PFS yet" in lg or "was being drained at exit" in lg,
                  "the log names what is where:\n" + lg)
            check(os.path.join(tmp, "nvme", "seer-ckpt-" + JOB) in lg, "names the NVMe copy")
        check(not os.path.exists(h.path), "a partial file at the path")
        # within the grace: SIGTERM waits for the drain, the file is complete
        s = settings(tmp, root, **{"checkpoint.drain_rate": "256KiB",
                                   "daemon.stop_grace_s": 15})
        with Daemon(tmp, s, name="seerd2") as d:
            obj = state(400000, 6)  # 1.6 MB: about 6 s at the cap
            h = sc.save(obj, os.path.join(pfs, "g.pt"), socket=d.sock, job_id=JOB)
            h.wait("local", timeout=LONG)
            check(h.state()["pfs"] == "pending", "the drain runs at the SIGTERM")
            d.stop()
            check(d.proc.returncode == 0, "seerd exit %s:\n%s" % (d.proc.returncode, d.log()))
            check("not on the PFS yet" not in d.log(), "drained within the grace:\n" + d.log())
        check(open(os.path.join(pfs, "g.pt"), "rb").read() == torch_bytes(obj),
              "the drain finished after SIGTERM")
        no_partial(pfs)
    finally:
        cleanup(tmp)


def test_training_exact_beside_checkpoints():
    """A trainer reads its batches while checkpoints are saved and drained on
    the same node: every batch exact, every checkpoint's bytes torch.save's."""
    tmp = tmpdir("seer-ck-")
    try:
        root, cat = dataset(tmp)
        pfs = os.path.join(tmp, "pfs")
        os.makedirs(pfs)
        s = settings(tmp, root, **{"job.world_size": 1})
        with Daemon(tmp, s) as d:
            logf = os.path.join(tmp, "t0.log")
            gate = Gate(tmp)
            p = start_trainer("c", 0, 1, d.sock, logf, ["--compute-ms", "2"] +
                              gate.args((1, 0)), env={"SEER_JOB_ID": JOB})
            hs = []
            for i in range(4):
                obj = state(100000, 20 + i)
                hs.append((sc.save(obj, os.path.join(pfs, "s%d.pt" % i), socket=d.sock,
                                   job_id=JOB), obj))
            # the job cannot end (and seerd with it) before the drains are done
            gate.wait([0], (1, 0), [p])
            for h, obj in hs:
                h.wait("pfs", timeout=LONG)
                check(open(h.path, "rb").read() == torch_bytes(obj), "bytes of %s" % h.path)
            gate.go((1, 0))
            for rc, _, err in finish([p]):
                check(rc == 0, "trainer failed: %s\n%s" % (err, d.log()))
            check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
        verify_rank(cat, seer.Sampler(len(cat), 1, 1, 8), 0, read_log(logf), 2)
    finally:
        cleanup(tmp)


def test_drain_full_rate_when_the_plan_reads_no_pfs():
    """The drain's pace follows seerd's own PFS reads (docs/checkpoint.md):
    while epoch 0 still has PFS reads ahead of the trainer, seerd's outlook
    says "plan" (a drain fills the gaps between them); once every sample is in RAM or on
    NVMe (epoch 1 on), the plan reads no PFS and a checkpoint saved then is
    drained at full rate: all its bytes in mode "full", though the trainer's
    NVMe reads run beside it (before the outlook, queued NVMe reads made the
    drain yield). The trainer's batches stay exact."""
    tmp = tmpdir("seer-ck-")
    try:
        root, cat = dataset(tmp)
        pfs = os.path.join(tmp, "pfs")
        os.makedirs(pfs)
        s = settings(tmp, root, **{"job.world_size": 1, "job.epochs": 3, "cache.ram": "100KiB",
                                   "cache.nvme": "4MiB", "prefetch.lookahead": 2,
                                   "checkpoint.drain_rate": "8MiB",
                                   "checkpoint.drain_window_s": 600})
        with Daemon(tmp, s) as d:
            logf = os.path.join(tmp, "t0.log")
            gate = Gate(tmp)
            p = start_trainer("c", 0, 1, d.sock, logf, ["--compute-ms", "1"] +
                              gate.args((0, 2), (1, 0), (2, 0)), env={"SEER_JOB_ID": JOB})
            gate.wait([0], (0, 2), [p])
            # cold: the rest of epoch 0 is read from the PFS (the outlook is
            # published on seerd's 1 s tick)
            o = wait_for(lambda: (lambda x: x if x["soon_reads"] > 0 and x["queued"] == 0
                                  else None)(ctl_checkpoints(d)["pfs_outlook"]), LONG,
                         "the plan's PFS reads ahead, none queued")
            check(o["mode"] == "plan" and o["soon_bytes"] > 0, "cold epoch outlook: %s" % o)
            gate.go((0, 2))
            gate.wait([0], (1, 0), [p])
            # warm: every sample is in RAM or on NVMe, the plan reads no PFS
            o = wait_for(lambda: (lambda x: x if x["mode"] == "full" else None)(
                ctl_checkpoints(d)["pfs_outlook"]), LONG, "an outlook without PFS reads")
            check(o["soon_reads"] == 0 and o["soon_bytes"] == 0 and o["queued"] == 0,
                  "warm epoch outlook: %s" % o)
            obj = state(1 << 20, 7)
            h = sc.save(obj, os.path.join(pfs, "warm.pt"), socket=d.sock, job_id=JOB)
            gate.go((1, 0))  # epoch 1 read from RAM and NVMe beside the drain
            h.wait("pfs", timeout=LONG)
            gate.wait([0], (2, 0), [p])  # the job (and seerd) goes on until the checks
            want = torch_bytes(obj)
            check(open(h.path, "rb").read() == want, "bytes of %s" % h.path)
            ck = [c for c in ctl_checkpoints(d)["checkpoints"] if c["path"] == h.path]
            check(len(ck) == 1, "seerctl lists %s once: %s" % (h.path, ck))
            check(ck[0]["drain_modes"] == {"full": len(want), "plan": 0, "yield": 0},
                  "the warm drain's bytes by pace: %s" % ck[0]["drain_modes"])
            gate.go((2, 0))
            for rc, _, err in finish([p]):
                check(rc == 0, "trainer failed: %s\n%s" % (err, d.log()))
            check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
        verify_rank(cat, seer.Sampler(len(cat), 1, 1, 8), 0, read_log(logf), 3)
    finally:
        cleanup(tmp)


def test_pfsemu_write_mode():
    """The PFS emulator mounted read-write (--write-bandwidth, faults) as the
    checkpoints' PFS: the bytes written through it are the checkpoint's, one
    rename, the file complete at the path; --write-fault-rate on one path is
    EIO, --write-capacity is ENOSPC; neither leaves a file at the path."""
    if not pfsemu_available():
        log("skipped: needs bin/seer-pfsemu and /dev/fuse")
        return
    tmp = tmpdir("seer-ck-")
    mnt = os.path.join(tmp, "mnt")
    mounted = False
    try:
        root, _ = dataset(tmp)
        src = os.path.join(tmp, "pfs-src")
        os.makedirs(src)
        mount_pfs(src, mnt, "--write-bandwidth", "8MB/s", "--write-latency-ms", "1",
                  "--write-fault-rate", "1", "--fault-path", "eio", "--write-capacity", "3MiB")
        mounted = True
        with Daemon(tmp, settings(tmp, root)) as d:
            obj = state(400000, 31)  # 1.6 MB: 0.2 s at 8 MB/s
            t0 = time.time()
            h = sc.save(obj, os.path.join(mnt, "ok.pt"), socket=d.sock, job_id=JOB)
            blocked = time.time() - t0
            h.wait("pfs", timeout=LONG)
            drained = time.time() - t0
            check(open(os.path.join(src, "ok.pt"), "rb").read() == torch_bytes(obj),
                  "bytes on the emulated PFS")
            w = pfs_stats(mnt)["totals"]["write"]
            check(w["bytes"] == h.size and w["renames"] == 1 and w["fsyncs"] >= 1,
                  "PFS bytes written = the checkpoint's: %s vs %d" % (w, h.size))
            log("1.6 MB at 8 MB/s: save blocked %.3f s, on the PFS after %.3f s" %
                (blocked, drained))
            h2 = sc.save(state(50000, 32), os.path.join(mnt, "eio.pt"), socket=d.sock,
                         job_id=JOB)
            try:
                h2.wait("pfs", timeout=LONG)
                raise Fail("wait('pfs') returned through EIO faults")
            except seer.SeerError as ex:
                check("Input/output error" in str(ex), "EIO named: %s" % ex)
            h3 = sc.save(state(400000, 33), os.path.join(mnt, "full.pt"), socket=d.sock,
                         job_id=JOB)
            try:
                h3.wait("pfs", timeout=LONG)
                raise Fail("wait('pfs') returned beyond --write-capacity")
            except seer.SeerError as ex:
                check("No space left on device" in str(ex), "ENOSPC named: %s" % ex)
            w = pfs_stats(mnt)["totals"]["write"]
            check(w["eio"] >= 1 and w["enospc"] >= 1, "faults counted: %s" % w)
            check(sorted(os.listdir(src)) == ["ok.pt"], "only complete files: %s" %
                  os.listdir(src))
            same(sc.load(h3.path, socket=d.sock, job_id=JOB), state(400000, 33))
    finally:
        if mounted:
            umount_pfs(mnt)
        cleanup(tmp)


def test_save_during_startup():
    """A save while seerd still scans its catalog (the start-up thread closes
    checkpoint connections unanswered) waits for it to serve, then succeeds."""
    tmp = tmpdir("seer-ck-")
    # in memory: creating 20000 files on this VM's disk takes half a minute
    root = tempfile.mkdtemp(prefix="seer-ck-data-", dir="/dev/shm")
    try:
        for c in range(40):  # 20000 tiny files: a scan that takes a moment
            os.makedirs(os.path.join(root, "c%d" % c))
            for i in range(500):
                with open(os.path.join(root, "c%d" % c, "f%d.bin" % i), "wb") as f:
                    f.write(b"%d %d" % (c, i))
        pfs = os.path.join(tmp, "pfs")
        os.makedirs(pfs)
        d = Daemon(tmp, {"dataset.path": root, "job.id": JOB}, wait=False)
        try:
            wait_for(lambda: os.path.exists(d.sock) or None, LONG, "the start-up socket")
            starting = "serving job" not in d.log()
            obj = state(1000, 41)
            h = sc.save(obj, os.path.join(pfs, "early.pt"), socket=d.sock, job_id=JOB)
            h.wait("pfs", timeout=LONG)
            check(open(h.path, "rb").read() == torch_bytes(obj), "bytes differ")
            log("save began %s seerd served" % ("before" if starting else "after (not tested)"))
        finally:
            d.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
        cleanup(tmp)


def test_peer_copy_two_nodes():
    """Two seerd under mpirun, [checkpoint] peers = 1: a checkpoint saved on
    node 0 is held by node 1 (its bytes equal torch.save's, checksum checked
    there) when wait("peer") returns; node 1 stopped: wait("peer") fails
    naming it while "local" is reached, and the cut-off copy is not kept;
    node 0 stopped (lost) with its drain never done: a load through node 1's
    socket reads node 0's checkpoint from node 1's copy."""
    from seertest import MpiDaemons
    tmp = tmpdir("seer-ck-")
    cl = None
    try:
        root, _ = dataset(tmp)
        pfs = os.path.join(tmp, "pfs")
        os.makedirs(pfs)
        s = settings(tmp, root, **{"checkpoint.drain_rate": "4KiB", "checkpoint.peers": 1,
                                   "daemon.stop_grace_s": 1})
        s["cache.nvme_dir"] = os.path.join(tmp, "nvme-%n")
        cl = MpiDaemons(tmp, 2, s)
        s0, s1 = cl.socket(0), cl.socket(1)
        obj = state(400000, 7)  # 1.6 MB: 400 s at the drain cap, so never on the PFS here
        h = sc.save(obj, os.path.join(pfs, "a.pt"), socket=s0, job_id=JOB)
        h.wait("local", timeout=LONG)
        peer_done(h)
        held = [os.path.join(dp, f) for dp, _, fs in os.walk(os.path.join(tmp, "nvme-1"))
                for f in fs if f.endswith(".data") and "/peer-0" in dp]
        check(len(held) == 1, "node 1 holds one copy of node 0's checkpoint: %s" % held)
        with open(held[0], "rb") as f:
            check(f.read() == torch_bytes(obj), "node 1's copy differs from torch.save's bytes")
        j0 = ctl_checkpoints(type("D", (), {"sock": s0}))
        j1 = ctl_checkpoints(type("D", (), {"sock": s1}))
        row = [c for c in j0["checkpoints"] if c["path"] == h.path][0]
        check(row["levels"]["peer"] == "done" and row["levels"]["pfs"] == "pending" and
              j0["peer"] == 1, "node 0's seerctl: %s" % j0)
        check([(x["origin"], x["path"], x["bytes"]) for x in j1["held"]] ==
              [(0, h.path, h.size)], "node 1's seerctl held: %s" % j1["held"])
        txt = subprocess.run([os.path.join(BIN, "seerctl"), "--socket", s0, "checkpoints"],
                             capture_output=True, text=True, timeout=LONG).stdout
        r = [ln for ln in txt.splitlines() if ln.endswith(h.path)]
        check(r and r[0].split()[3:7] == ["done", "done", "done", "pending"],
              "seerctl checkpoints for people:\n" + txt)

        # node 1 does not answer: "peer" fails with the reason, "local" goes on
        p1 = cl.pid(1)
        os.kill(p1, signal.SIGSTOP)
        try:
            hb = sc.save(state(400000, 8), os.path.join(pfs, "b.pt"), socket=s0, job_id=JOB)
            hb.wait("local", timeout=LONG)
            try:
                hb.wait("peer", timeout=LONG)
                raise Fail("wait('peer') returned with node 1 stopped")
            except seer.SeerError as ex:
                check("node 1" in str(ex), "the reason names node 1: %s" % ex)
                log("wait('peer') with node 1 stopped: %s" % ex)
        finally:
            os.kill(p1, signal.SIGCONT)
        check(hb.state()["local"] == "done" and hb.state()["pfs"] == "pending",
              "local and pfs go on: %s" % hb.state())
        # node 1 reads what was queued for it once it runs again: what it keeps
        # is complete (checksum checked), never a part (loopback buffers can
        # hold the whole copy, so here it may be complete)
        objb = state(400000, 8)
        line = lambda: [ln for ln in cl.log().splitlines() if "seerd[1]" in ln and "b.pt" in ln
                        and ("held" in ln or "not kept" in ln)]
        wait_for(lambda: line() or None, LONG, "node 1 to read the copy it was sent")
        j1 = ctl_checkpoints(type("D", (), {"sock": s1}))
        for x in j1["held"]:
            if x["path"] == hb.path:
                check(x["bytes"] == hb.size, "node 1 holds a partial copy: %s" % x)
                f = [os.path.join(dp, n) for dp, _, fs in os.walk(os.path.join(tmp, "nvme-1"))
                     for n in fs if n == x["id"] + ".data"]
                check(len(f) == 1 and open(f[0], "rb").read() == torch_bytes(objb),
                      "node 1's late copy differs")
        log("node 1 after SIGCONT: %s" % line()[0].split("INFO  ")[-1].split("WARN  ")[-1])

        # node 0 lost (stopped): node 1 reads node 0's checkpoint from its copy
        check(not os.path.exists(h.path), "a.pt reached the PFS: the test needs it absent")
        p0 = cl.pid(0)
        os.kill(p0, signal.SIGSTOP)
        try:
            check(sc.where(h.path, socket=s1, job_id=JOB) == "peer", "node 1 reads its peer copy")
            same(sc.load(h.path, socket=s1, job_id=JOB), obj)
        finally:
            os.kill(p0, signal.SIGCONT)
        # node 1's next seerd finds the copy it held on NVMe
        cl.stop()
        cl = MpiDaemons(tmp, 2, s, name="job2")
        check("copy of node 0's checkpoint %s found on NVMe" % h.path in cl.log(),
              "node 1's restart finds its held copy:\n" + cl.log())
        check(sc.where(h.path, socket=cl.socket(1), job_id=JOB) == "peer",
              "node 1 reads its peer copy after its restart")
        same(sc.load(h.path, socket=cl.socket(1), job_id=JOB), obj)
        log("1.6 MB checkpoint: node 1's copy equals torch.save's bytes; loaded through "
            "node 1 with node 0 stopped, and after both restarted")
    finally:
        if cl:
            cl.stop()
        cleanup(tmp)


def test_peer_refuses_no_room():
    """The peer has no room ([checkpoint] nvme shared by a node's own copies
    and those it holds): wait("peer") fails with the peer's reason, nothing
    is held there, and the checkpoint still reaches the PFS."""
    from seertest import MpiDaemons
    tmp = tmpdir("seer-ck-")
    cl = None
    try:
        root, _ = dataset(tmp)
        pfs = os.path.join(tmp, "pfs")
        os.makedirs(pfs)
        s = settings(tmp, root, **{"checkpoint.nvme": "2MiB", "checkpoint.peers": 1,
                                   "daemon.stop_grace_s": 1})
        s["cache.nvme_dir"] = os.path.join(tmp, "nvme-%n")
        cl = MpiDaemons(tmp, 2, s)
        s0, s1 = cl.socket(0), cl.socket(1)
        # node 1's own 1.6 MB copy fills most of its 2 MiB (kept: keep = 2)
        h1 = sc.save(state(400000, 1), os.path.join(pfs, "n1.pt"), socket=s1, job_id=JOB)
        h1.wait("local", timeout=LONG)
        h1.wait("pfs", timeout=LONG)
        obj = state(400000, 2)
        h = sc.save(obj, os.path.join(pfs, "n0.pt"), socket=s0, job_id=JOB)
        ex = peer_fails(h, "no room on node 1's NVMe")
        log("wait('peer'), no room on the peer: %s" % ex)
        h.wait("pfs", timeout=LONG)
        check(open(h.path, "rb").read() == torch_bytes(obj), "the PFS copy differs")
        j1 = ctl_checkpoints(type("D", (), {"sock": s1}))
        check(j1["held"] == [] and j1["held_nvme"] == 0, "node 1 holds a copy: %s" % j1)
        check(not [f for dp, _, fs in os.walk(os.path.join(tmp, "nvme-1")) for f in fs
                   if "/peer-0" in dp and not f.startswith(".")],
              "files left in node 1's peer folder")
        cl.stop()
        cl = None
        # node 1 held nothing: its receiver id and the empty peer folder went
        left = [os.path.join(dp, f) for dp, ds, fs in os.walk(os.path.join(tmp, "nvme-1"))
                for f in fs + ds if f.startswith("peer-")]
        check(not left, "node 1 holds nothing, yet left %s" % left)
    finally:
        if cl:
            cl.stop()
        cleanup(tmp)


def held_copies(tmp, node, origin):
    """The .data files node `node` holds for `origin` on NVMe."""
    return [os.path.join(dp, f) for dp, _, fs in os.walk(os.path.join(tmp, "nvme-%d" % node))
            for f in fs if f.endswith(".data") and dp.endswith("/peer-%d" % origin)]


def own_record(tmp, node, h):
    """The text of node `node`'s NVMe record of checkpoint h."""
    f = [os.path.join(dp, n) for dp, _, fs in os.walk(os.path.join(tmp, "nvme-%d" % node))
         for n in fs if n.endswith(".meta") and "/peer-" not in dp]
    for m in f:
        txt = open(m).read()
        if ("path %s\n" % h.path) in txt:
            return txt
    raise Fail("node %d has no record of %s: %s" % (node, h.path, f))


def test_peer_retry_after_peer_returns():
    """Node 1's seerd stopped (SIGSTOP: it does not answer): the copy of a
    checkpoint saved on node 0 fails, wait("peer") says why and that seerd
    tries again; node 1 runs again: a retry completes, wait("peer") returns,
    node 1 holds one copy with the bytes of torch.save, and node 0's NVMe
    record says node 1 confirmed it."""
    from seertest import MpiDaemons
    tmp = tmpdir("seer-ck-")
    cl = None
    try:
        root, _ = dataset(tmp)
        pfs = os.path.join(tmp, "pfs")
        os.makedirs(pfs)
        s = settings(tmp, root, **{"checkpoint.drain_rate": "4KiB", "checkpoint.peers": 1,
                                   "daemon.stop_grace_s": 1})
        s["cache.nvme_dir"] = os.path.join(tmp, "nvme-%n")
        cl = MpiDaemons(tmp, 2, s)
        s0 = cl.socket(0)
        p1 = cl.pid(1)
        obj = state(400000, 11)
        os.kill(p1, signal.SIGSTOP)
        try:
            h = sc.save(obj, os.path.join(pfs, "r.pt"), socket=s0, job_id=JOB)
            h.wait("local", timeout=LONG)
            wait_for(lambda: h.state()["peer"] == "failed" or None, LONG,
                     "the copy to the stopped node 1 to fail")
            try:
                h.wait("peer", timeout=LONG)
                raise Fail("wait('peer') returned with node 1 stopped")
            except seer.SeerError as ex:
                check("node 1" in str(ex) and "tries again" in str(ex),
                      "the reason names node 1 and the retry: %s" % ex)
                log("wait('peer') while node 1 is stopped: %s" % ex)
        finally:
            os.kill(p1, signal.SIGCONT)
        wait_for(lambda: h.state()["peer"] == "done" or None, LONG,
                 "a retry to reach node 1 once it runs again")
        peer_done(h)
        held = held_copies(tmp, 1, 0)
        check(len(held) == 1, "node 1 holds one copy of node 0's checkpoint: %s" % held)
        check(open(held[0], "rb").read() == torch_bytes(obj),
              "node 1's copy differs from torch.save's bytes")
        j1 = ctl_checkpoints(type("D", (), {"sock": cl.socket(1)}))
        check([(x["origin"], x["path"], x["bytes"]) for x in j1["held"]] == [(0, h.path, h.size)],
              "node 1's seerctl held: %s" % j1["held"])
        check("\npeer 1\n" in own_record(tmp, 0, h), "node 0's record of the confirmed copy:\n" +
              own_record(tmp, 0, h))
        check(h.state()["local"] == "done" and not os.path.exists(h.path), "levels: %s" % h.state())
        log("copy retried after node 1 ran again: %s" %
            [ln.split("INFO  ")[-1] for ln in cl.log().splitlines()
             if "seerd[0]" in ln and "copied to node 1" in ln][-1:])
    finally:
        if cl:
            cl.stop()
        cleanup(tmp)


def test_peer_resend_after_sigkill():
    """Node 0's seerd SIGKILLed after "local" and before "peer" (node 1
    stopped, so it never confirmed): both restarted, node 0 finds the NVMe
    copy whose record has no confirmation and sends it again; wait("peer")
    on the trainer's handle returns, node 1 holds the bytes of torch.save."""
    from seertest import MpiDaemons
    tmp = tmpdir("seer-ck-")
    cl = None
    try:
        root, _ = dataset(tmp)
        pfs = os.path.join(tmp, "pfs")
        os.makedirs(pfs)
        s = settings(tmp, root, **{"checkpoint.drain_rate": "4KiB", "checkpoint.peers": 1,
                                   "daemon.stop_grace_s": 1})
        s["cache.nvme_dir"] = os.path.join(tmp, "nvme-%n")
        cl = MpiDaemons(tmp, 2, s)
        p0, p1 = cl.pid(0), cl.pid(1)
        obj = state(400000, 12)
        os.kill(p1, signal.SIGSTOP)
        h = sc.save(obj, os.path.join(pfs, "k.pt"), socket=cl.socket(0), job_id=JOB)
        h.wait("local", timeout=LONG)
        check(h.state()["peer"] in ("pending", "failed"), "peer before the kill: %s" % h.state())
        check("\npeer " not in own_record(tmp, 0, h), "a confirmation recorded before the peer "
              "answered:\n" + own_record(tmp, 0, h))
        os.kill(p0, signal.SIGKILL)
        os.kill(p1, signal.SIGKILL)  # stopped: it never read what node 0 sent
        cl.stop()
        check(not held_copies(tmp, 1, 0), "node 1 kept a copy: %s" % held_copies(tmp, 1, 0))
        cl = MpiDaemons(tmp, 2, s)  # the same sockets: the handle asks the new seerd
        peer_done(h)
        check("not confirmed by it: sending them again" in cl.log(),
              "node 0 sends its recovered copy again:\n" + cl.log())
        held = held_copies(tmp, 1, 0)
        check(len(held) == 1 and open(held[0], "rb").read() == torch_bytes(obj),
              "node 1's copy after the re-send: %s" % held)
        check("\npeer 1\n" in own_record(tmp, 0, h), "node 0's record after the re-send:\n" +
              own_record(tmp, 0, h))
        log("recovered copy sent again after SIGKILL: node 1 holds %d bytes equal to "
            "torch.save's" % os.path.getsize(held[0]))
    finally:
        if cl:
            cl.stop()
        cleanup(tmp)


def fail_three_times(cl, pfs, name, keep, seed):
    """Two nodes, node 1 stopped (SIGSTOP) while checkpoint A (saved on node
    0 at pfs/name) fails its copy 3 times (its backoff is then 4 s), then
    run again. Returns (A's handle, A's id)."""
    s0, p1 = cl.socket(0), cl.pid(1)
    os.kill(p1, signal.SIGSTOP)
    try:
        a = sc.save(state(400000, seed), os.path.join(pfs, name), socket=s0, job_id=JOB)
        a.wait("local", timeout=LONG)

        def failed3():
            for c in ctl_checkpoints(type("D", (), {"sock": s0}))["checkpoints"]:
                if c["path"] == a.path and "(3 failed)" in c.get("peer_why", ""):
                    return c["id"]
            return None
        aid = wait_for(failed3, LONG, "A's copy to fail 3 times", step=0.05)
    finally:
        os.kill(p1, signal.SIGCONT)
    return a, aid


def test_peer_held_newest_by_id():
    """keep = 1: checkpoint A's copy fails (node 1 stopped) and waits out its
    backoff while the newer B is copied; A's retry then arrives last. Node 1
    keeps the newest by id, B (not A, the last to arrive), and serves B's
    bytes (review of issue 31, finding 1a)."""
    from seertest import MpiDaemons
    tmp = tmpdir("seer-ck-")
    cl = None
    try:
        root, _ = dataset(tmp)
        pfs = os.path.join(tmp, "pfs")
        os.makedirs(pfs)
        s = settings(tmp, root, **{"checkpoint.drain_rate": "4KiB", "checkpoint.peers": 1,
                                   "checkpoint.keep": 1, "daemon.stop_grace_s": 1})
        s["cache.nvme_dir"] = os.path.join(tmp, "nvme-%n")
        cl = MpiDaemons(tmp, 2, s)
        a, aid = fail_three_times(cl, pfs, "a.pt", 1, 21)
        objb = state(400000, 22)
        b = sc.save(objb, os.path.join(pfs, "b.pt"), socket=cl.socket(0), job_id=JOB)
        b.wait("local", timeout=LONG)
        peer_done(b)
        # A is another path: its retry is sent, node 1 keeps it only while it is newest
        wait_for(lambda: a.state()["peer"] == "done" or None, LONG, "A's copy on its retry")
        j1 = ctl_checkpoints(type("D", (), {"sock": cl.socket(1)}))
        held = [(x["path"], x["id"]) for x in j1["held"]]
        check([p for p, _ in held] == [b.path] and held[0][1] > aid,
              "node 1 should hold only B (the higher id), holds %s (A is %s)" % (held, aid))
        files = held_copies(tmp, 1, 0)
        check(len(files) == 1 and open(files[0], "rb").read() == torch_bytes(objb),
              "node 1's NVMe copy is not B's bytes: %s" % files)
        log("keep 1, A's retry after B: node 1 holds %s" % held)
    finally:
        if cl:
            cl.stop()
        cleanup(tmp)


def test_peer_same_path_serves_newest():
    """keep = 2, A then B saved to the same path, A's copy failing while B is
    copied: A is not sent again once node 1 confirmed B (its why and the log
    say so), and a load through node 1 returns B's object (finding 1b)."""
    from seertest import MpiDaemons
    tmp = tmpdir("seer-ck-")
    cl = None
    try:
        root, _ = dataset(tmp)
        pfs = os.path.join(tmp, "pfs")
        os.makedirs(pfs)
        s = settings(tmp, root, **{"checkpoint.drain_rate": "4KiB", "checkpoint.peers": 1,
                                   "checkpoint.keep": 2, "daemon.stop_grace_s": 1})
        s["cache.nvme_dir"] = os.path.join(tmp, "nvme-%n")
        cl = MpiDaemons(tmp, 2, s)
        a, aid = fail_three_times(cl, pfs, "x.pt", 2, 31)
        objb = state(400000, 32)
        b = sc.save(objb, a.path, socket=cl.socket(0), job_id=JOB)
        b.wait("local", timeout=LONG)
        peer_done(b)

        def a_settled():
            for c in ctl_checkpoints(type("D", (), {"sock": cl.socket(0)}))["checkpoints"]:
                if c["id"] == aid and c["levels"]["peer"] == "done":
                    return "copied"
                if c["id"] == aid and "not sent again" in c.get("peer_why", ""):
                    return c["peer_why"]
            return None
        why = wait_for(a_settled, LONG, "A's copy to be sent or given up", step=0.05)
        got = sc.load(a.path, socket=cl.socket(1), job_id=JOB)
        check(got["note"] == objb["note"], "a load through node 1 returns %r, B is %r" %
              (got["note"], objb["note"]))
        same(got, objb)
        check("newer checkpoint of %s" % a.path in why, "A's why: %s" % why)
        check("is not sent again" in cl.log(), "the log says A is not sent again")
        log("same path, A failed then B copied: A %s; node 1 serves B" % why)
    finally:
        if cl:
            cl.stop()
        cleanup(tmp)


def test_peer_replaced_node_resend():
    """Node 1 confirmed node 0's copy, then is replaced (the same index, an
    empty NVMe: its receiver id is new): node 0's restarted seerd does not
    take the recorded confirmation for this node and sends the copy again;
    node 1 then holds torch.save's bytes (finding 2)."""
    from seertest import MpiDaemons
    tmp = tmpdir("seer-ck-")
    cl = None
    try:
        root, _ = dataset(tmp)
        pfs = os.path.join(tmp, "pfs")
        os.makedirs(pfs)
        s = settings(tmp, root, **{"checkpoint.drain_rate": "4KiB", "checkpoint.peers": 1,
                                   "daemon.stop_grace_s": 1})
        s["cache.nvme_dir"] = os.path.join(tmp, "nvme-%n")
        cl = MpiDaemons(tmp, 2, s)
        obj = state(400000, 41)
        h = sc.save(obj, os.path.join(pfs, "rep.pt"), socket=cl.socket(0), job_id=JOB)
        h.wait("local", timeout=LONG)
        peer_done(h)
        rec = own_record(tmp, 0, h)
        check("\npeer 1\n" in rec and "\npeer_disk " in rec, "node 0's record:\n" + rec)
        check(len(held_copies(tmp, 1, 0)) == 1, "node 1 holds the copy before it is replaced")
        cl.stop()
        cl = None
        shutil.rmtree(os.path.join(tmp, "nvme-1"))  # node 1 replaced: an empty disk
        cl = MpiDaemons(tmp, 2, s)
        wait_for(lambda: "of the copies found on NVMe" in cl.log() or None, LONG,
                 "node 0 to recover its copy")
        line = [ln for ln in cl.log().splitlines() if "of the copies found on NVMe" in ln][-1]
        check("0 are held by node 1, 1 not confirmed" in line, "node 0 after node 1 was "
              "replaced: %s" % line)
        check("with another receiver id" in cl.log(), "the log names the other receiver id")
        peer_done(h)
        held = wait_for(lambda: held_copies(tmp, 1, 0) or None, LONG, "node 1's new copy")
        check(len(held) == 1 and open(held[0], "rb").read() == torch_bytes(obj),
              "node 1's copy after the re-send: %s" % held)
        log("replaced node 1: %s" % line.split("INFO  ")[-1])
    finally:
        if cl:
            cl.stop()
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_save_wait_load_bytes, test_without_nvme, test_sigkill_after_local_then_restart,
               test_pfs_fails_eio_enospc, test_memory_full, test_sigterm_names_nvme_copy,
               test_training_exact_beside_checkpoints,
               test_drain_full_rate_when_the_plan_reads_no_pfs, test_pfsemu_write_mode,
               test_save_during_startup, test_peer_copy_two_nodes,
               test_peer_refuses_no_room, test_peer_retry_after_peer_returns,
               test_peer_resend_after_sigkill, test_peer_held_newest_by_id,
               test_peer_same_path_serves_newest, test_peer_replaced_node_resend])
