"""Exactness where features meet (issue 28): Python workers with reconnects,
held batches across a restart, checkpoints and seerd's saved positions with
workers and signals, the batches a TorchLoader declares it holds, and the
arenas a trainer keeps mapped over restarts.

Every check is on delivered data: each sample's crc32 (computed by the
transform from the bytes it was handed, or from the views) against the
file's, the ids against libseer's sampler, and the first batch after a
restart against the rule of docs/resume.md (section 6, "What the position is"). Trainers
run in this process, so the test acts between two batches without racing
anything; daemons are waited for by state (exit, socket), never by time."""

import errno
import gc
import os
import signal
import threading
import zlib

import numpy as np
import torch

from seertest import (LONG, Daemon, Fail, catalog, check, cleanup, log, make_classes, run_tests,
                      seer, tmpdir, wait_for)
from seer.torch import TorchLoader, WorkerError

SEED = 5
BATCH = 4


def crc_fn(v):
    """The transform: the sample's crc32 and length, from the bytes handed."""
    return torch.tensor([zlib.crc32(v), v.size], dtype=torch.int64)


def dataset(tmp, classes=3, per_class=20, lo=1024, hi=4096):
    root = os.path.join(tmp, "data")
    make_classes(root, ["c%d" % i for i in range(classes)], per_class, lo, hi, seed=7)
    return root, catalog(root)


def settings(tmp, root, **kw):
    s = {"dataset.path": root, "job.seed": SEED, "job.epochs": 3, "job.batch_size": BATCH,
         "job.id": "exact", "job.resume": "auto", "cache.ram": "64KiB",
         "prefetch.io_threads": 2, "daemon.socket": os.path.join(tmp, "seerd.sock"),
         "daemon.state_dir": os.path.join(tmp, "state")}
    s.update(kw)
    return s


class Stream:
    """What one rank was handed, checked against the sampler and the files."""

    def __init__(self, cat, world=1, rank=0):
        self.cat = cat
        self.rank = rank
        self.sampler = seer.Sampler(len(cat), SEED, world, BATCH)
        self.bpe = self.sampler.batches_per_epoch
        self.got = []  # (epoch, step)

    def add(self, epoch, step, ids, labels, crcs):
        want = self.sampler.batch(epoch, self.rank, step)
        check(list(ids) == want, "batch %d:%d ids %s, sampler %s" % (epoch, step, list(ids),
                                                                    want))
        for sid, lab, crc in zip(ids, labels, crcs):
            p, wl, wlen, wcrc = self.cat[sid]
            check(lab == wl, "batch %d:%d sample %d: label %d, file's class %d" %
                  (epoch, step, sid, lab, wl))
            check(crc == wcrc, "batch %d:%d sample %d (%s): crc %08x, the file's %08x: the "
                  "bytes came from the wrong memory" % (epoch, step, sid, p, crc, wcrc))
        self.got.append((epoch, step))

    def torch_batch(self, loader, x, y):
        lb = loader.last_batch
        self.add(lb.epoch, lb.step, lb.ids.tolist(), y.tolist(), x[:, 0].tolist())

    def batch(self, b, samples=None):
        views = b.samples if samples is None else samples
        self.add(b.epoch, b.step, b.ids.tolist(), b.labels.tolist(),
                 [zlib.crc32(v) for v in views])

    def unbroken(self, epochs):
        want = [(e, s) for e in range(epochs) for s in range(self.bpe)]
        check(self.got == want, "rank %d's stream is not the unbroken one: %d batches; first "
              "difference at %s" % (self.rank, len(self.got), next(
                  ((i, g, w) for i, (g, w) in enumerate(zip(self.got, want)) if g != w),
                  (len(self.got), None, want[len(self.got)] if len(self.got) < len(want)
                   else None))))


def torch_loader(d, **kw):
    """A TorchLoader of rank 0 of 1 on seerd d, transform crc_fn."""
    kw.setdefault("transform", crc_fn)
    return TorchLoader(socket=d.sock, job_id="exact", rank=0, world_size=1, **kw)


def restart_after_exit(old, tmp, sets, out, name):
    """In a thread: once `old` exited, a new seerd on the same socket and
    state (resume = auto); out["d"] is it."""
    def run():
        try:
            old.wait(LONG)
            old.stop()
            out["d"] = Daemon(tmp, sets, name=name)
        except BaseException as e:
            out["err"] = e
    th = threading.Thread(target=run)
    th.start()
    return th


def first_after_restart(tmp, sets, name, world=1, rank=0):
    """The (epoch, step) a fresh trainer of `rank` gets from a new seerd
    started with resume = auto; the seerd is stopped after."""
    with Daemon(tmp, sets, name=name) as d:
        L = seer.Loader(socket=d.sock, job_id="exact", rank=rank, world_size=world)
        try:
            b = L.next_batch()
            pos = (b.epoch, b.step)
            b.release()
        finally:
            L.close()
    return pos


def test_workers_reconnect_read_the_new_arena():
    """Finding 1: TorchLoader(num_workers=2, reconnect) across a SIGTERM and a
    SIGKILL of seerd, the cache smaller than the dataset: every sample after
    each restart comes from the new arena, and the stream is unbroken."""
    tmp = tmpdir("seer-ex-")
    try:
        root, cat = dataset(tmp)
        sets = settings(tmp, root)
        st = Stream(cat)
        base = _arena_maps()
        d = Daemon(tmp, sets, name="a")
        L = torch_loader(d, num_workers=2, reconnect=60)
        try:
            out = {}
            for e in range(L.epochs):
                for i, (x, y) in enumerate(L):
                    st.torch_batch(L, x, y)
                    if e == 0 and i == 4:  # SIGTERM: seerd waits for us to leave
                        d.proc.send_signal(signal.SIGTERM)
                        th = restart_after_exit(d, tmp, sets, out, "b")
                    if e == 1 and i == 6:  # SIGKILL, mid-epoch, workers busy
                        th.join(LONG)
                        check("d" in out, "restart failed: %s" % out.get("err"))
                        d = out.pop("d")
                        d.proc.kill()
                        d.wait()
                        d.stop()
                        d = Daemon(tmp, sets, name="c")
            check(L._lib.seer_reconnects(L._c) == 2, "reconnects: %d" %
                  L._lib.seer_reconnects(L._c))
            gc.collect()
            check(_arena_maps() - base == 1, "the trainer maps %d seer arenas after 2 restarts "
                  "(want the live one)" % (_arena_maps() - base))
            # each worker maps only the live arena (they had each had a task
            # after the last restart): the old seerds' memory can be freed
            for p in L._pipe._procs:
                check(_arena_maps(p.pid) == 1, "worker %d maps %d seer arenas after 2 restarts" %
                      (p.pid, _arena_maps(p.pid)))
            st.unbroken(3)
            log("2 workers, 2 restarts (SIGTERM, SIGKILL): %d batches exact" % len(st.got))
        finally:
            L.close()
            d.stop()
            if "d" in out:  # the restart a failure left behind
                out["d"].stop()
    finally:
        cleanup(tmp)


def test_held_batch_reads_its_own_arena_after_reconnect():
    """Finding 2: double buffering across a restart: the batch held when
    seerd went away keeps its bytes (views built after the reconnect read
    the old arena), the next comes from the new one."""
    tmp = tmpdir("seer-ex-")
    try:
        root, cat = dataset(tmp)
        sets = settings(tmp, root)
        st = Stream(cat)
        d = Daemon(tmp, sets, name="a")
        L = seer.Loader(socket=d.sock, job_id="exact", rank=0, world_size=1, reconnect=60)
        try:
            prev = L.next_batch()
            n = 1
            while True:
                if n == 5:  # the new seerd lays its arena out otherwise
                    d.proc.kill()
                    d.wait()
                    d.stop()
                    d = Daemon(tmp, dict(sets, **{"cache.ram": "1MiB"}), name="b")
                try:
                    cur = L.next_batch()
                except seer.EndOfEpoch:
                    continue
                except seer.EndOfJob:
                    break
                st.batch(prev)  # views made now, after the reconnect for n == 5
                prev.release()
                prev = cur
                n += 1
            st.batch(prev)
            prev.release()
            st.unbroken(3)
            log("double buffering across a SIGKILL: the held batch read its own arena")
        finally:
            L.close()
            d.stop()
    finally:
        cleanup(tmp)


def test_state_dict_with_workers():
    """Finding 3: state_dict() with 4 workers counts the batches yielded,
    not those taken ahead for the workers; Loader(state=) resumes there."""
    tmp = tmpdir("seer-ex-")
    try:
        root, cat = dataset(tmp, per_class=30)
        sets = settings(tmp, root, **{"job.resume": ""})
        with Daemon(tmp, sets, name="a") as d:
            L = torch_loader(d, num_workers=4)
            try:
                it = iter(L)
                for _ in range(10):
                    next(it)
                sd = L.state_dict()
            finally:
                L.close()
        check(sd["epoch"] == 0 and sd["segments"][-1]["steps"] == [10],
              "state_dict after 10 batches yielded by 4 workers: %s" % sd)
        with Daemon(tmp, sets, name="b") as d:
            L = seer.Loader(socket=d.sock, job_id="exact", rank=0, world_size=1, state=sd)
            try:
                b = L.next_batch()
                check((b.epoch, b.step) == (0, 10), "resumed at %d:%d, want 0:10" %
                      (b.epoch, b.step))
                b.release()
            finally:
                L.close()
        log("4 workers, 10 yielded: state_dict says 10, resume starts at 0:10")
    finally:
        cleanup(tmp)


def _consume(L, n, st=None):
    """Yield n batches from L (one epoch's iterator) and return it."""
    it = iter(L)
    for _ in range(n):
        x, y = next(it)
        if st is not None:
            st.torch_batch(L, x, y)
    return it


def test_positions_never_run_ahead():
    """Finding 4: seerd's saved position with workers and signals is the
    first batch the user did not finish: SIGTERM of seerd, a worker
    SIGKILLed, Ctrl-C in the loop body (4 workers) and inside the transform
    (0 workers)."""
    tmp = tmpdir("seer-ex-")
    try:
        root, cat = dataset(tmp, per_class=30)
        base = settings(tmp, root)

        def own(part):  # each part its own saved positions: they start at 0:0
            return dict(base, **{"daemon.state_dir": os.path.join(tmp, "state-" + part)})
        # (a) SIGTERM of seerd with 4 workers: the user asked for batch 9
        # after finishing 0..8 and gets ESHUTDOWN: position 0:9
        sets = own("a")
        d = Daemon(tmp, sets, name="a")
        L = torch_loader(d, num_workers=4)
        try:
            it = _consume(L, 9)
            d.proc.send_signal(signal.SIGTERM)
            wait_for(lambda: ": stopping (trainers are told" in d.log(), LONG,
                     "seerd to take the SIGTERM")
            try:
                next(it)
                raise Fail("no ESHUTDOWN after seerd's SIGTERM")
            except seer.SeerError as e:
                check(e.code == seer.ESHUTDOWN, "after SIGTERM: %r" % e)
        finally:
            L.close()
        d.wait()
        d.stop()
        pos = first_after_restart(tmp, sets, "a2")
        check(pos == (0, 9), "SIGTERM after 9 batches yielded (4 workers): resumed at %s, "
              "want 0:9" % (pos,))
        # (b) Ctrl-C in the loop body with 4 workers: the batch in hand (0:13)
        # is not finished, so it comes again
        sets = own("b")
        d = Daemon(tmp, sets, name="b")
        L = torch_loader(d, num_workers=4)
        try:
            try:
                for i, _ in enumerate(L):
                    if L.last_batch.step == 13:
                        raise KeyboardInterrupt
            except KeyboardInterrupt:
                pass
        finally:
            L.close()
        d.stop()
        pos = first_after_restart(tmp, sets, "b2")
        check(pos == (0, 13), "Ctrl-C in the step on 0:13 (4 workers): resumed at %s, want "
              "0:13" % (pos,))
        # (c) the workers SIGKILLed while the user trains on 0:6: the batches
        # they answered before come, then WorkerError at the next request,
        # which finished the last one yielded
        sets = own("c")
        d = Daemon(tmp, sets, name="c")
        L = torch_loader(d, num_workers=4)
        try:
            it = iter(L)
            while True:
                next(it)
                if L.last_batch.step == 6:
                    break
            pids = [p.pid for p in L._pipe._procs]
            for p in pids:
                os.kill(p, signal.SIGKILL)
            try:
                for _ in range(20):  # the batches answered before the kill come first
                    next(it)
                raise Fail("no WorkerError after the workers were killed")
            except WorkerError:
                pass
            last = L.last_batch.step
        finally:
            L.close()
        d.stop()
        pos = first_after_restart(tmp, sets, "c2")
        check(pos == (0, last + 1), "workers killed, 0:%d the last batch yielded (and finished: "
              "the next was asked for): resumed at %s, want 0:%d" % (last, pos, last + 1))
        # (d) Ctrl-C inside the transform with 0 workers: batch 0:20 was taken,
        # never handed: it comes again
        sets = own("d")
        d = Daemon(tmp, sets, name="d")

        def fn(v):
            if L._held is not None and L._held.step == 20:
                raise KeyboardInterrupt
            return crc_fn(v)
        L = torch_loader(d, transform=fn, num_workers=0)
        try:
            try:
                for _ in L:
                    pass
            except KeyboardInterrupt:
                pass
            check(L.last_batch.step == 19, "last yielded %s" % (L.last_batch,))
        finally:
            L.close()
        d.stop()
        pos = first_after_restart(tmp, sets, "d2")
        check(pos == (0, 20), "Ctrl-C inside the transform of 0:20 (0 workers): resumed at %s, "
              "want 0:20" % (pos,))
        log("positions: SIGTERM 0:9, Ctrl-C in the step 0:13, workers killed 0:%d, Ctrl-C in "
            "the transform 0:20 -- each the first batch not finished" % (last + 1))
    finally:
        cleanup(tmp)


def test_sixteen_workers_with_defaults():
    """Finding 8: TorchLoader(num_workers=16) against seerd's defaults (no
    max_held set) declares its 33 batches and runs exactly; a declaration
    seerd's slots or staging cannot serve is refused at connect naming what
    to raise; one batch kept while the others cycle is told to be released."""
    tmp = tmpdir("seer-ex-")
    try:
        root, cat = dataset(tmp, per_class=40, lo=8192, hi=16384)
        sets = settings(tmp, root, **{"job.resume": "", "job.epochs": 1})
        del sets["cache.ram"]
        st = Stream(cat)
        with Daemon(tmp, sets, name="a") as d:
            L = torch_loader(d, num_workers=16)
            try:
                for x, y in L:
                    st.torch_batch(L, x, y)
            finally:
                L.close()
        st.unbroken(1)
        # the same with the cache smaller than the dataset: the 33 batches
        # live in the trainer's staging ring, sized for them at connect
        st = Stream(cat)
        with Daemon(tmp, dict(sets, **{"cache.ram": "64KiB"}), name="s") as d:
            L = torch_loader(d, num_workers=16)
            try:
                for x, y in L:
                    st.torch_batch(L, x, y)
            finally:
                L.close()
            check("may hold 33 batches: its ring is" in d.log(), "no ring for 33 batches:\n" +
                  d.log())
        st.unbroken(1)
        # more than the batch slots: refused at connect, naming [job] max_held
        with Daemon(tmp, sets, name="b") as d:
            try:
                seer.Loader(socket=d.sock, job_id="exact", rank=0, world_size=1,
                            max_held=200).connect()
                raise Fail("max_held=200 accepted by a seerd with the default slots")
            except seer.SeerError as e:
                check(e.code == seer.EREFUSED and "[job] max_held to at least 200" in str(e),
                      "refusal: %s" % e)
        # more than the staging share (the dataset is not all in RAM): refused
        # naming [cache] staging
        small = dict(sets, **{"cache.ram": "64KiB", "cache.staging": "1MiB"})
        with Daemon(tmp, small, name="c") as d:
            try:
                torch_loader(d, num_workers=16).connect()
                raise Fail("33 batches of 48 KiB accepted in 1 MiB of staging")
            except seer.SeerError as e:
                check(e.code == seer.EREFUSED and "[cache] staging to at least" in str(e),
                      "refusal: %s" % e)
        # one batch kept while the next ones are taken and released
        with Daemon(tmp, small, name="e") as d:
            L = seer.Loader(socket=d.sock, job_id="exact", rank=0, world_size=1)
            try:
                kept = L.next_batch()
                for _ in range(200):
                    L.next_batch().release()
                raise Fail("200 batches past a kept one without a word")
            except seer.SeerError as e:
                check(e.code == -errno.EDEADLK and "release it (copy what you keep)" in str(e),
                      "one batch kept: %s" % e)
                kept.release()
            finally:
                L.close()
        log("16 workers on defaults: %d batches exact; max_held 200 and 33 batches in 1 MiB "
            "refused at connect (1 MiB of staging for 33 batches of ~48 KiB); a kept batch told to be released" % len(st.got))
    finally:
        cleanup(tmp)


def _arena_maps(pid="self"):
    """Distinct seer arenas mapped in a process (memfd 'seer-arena')."""
    inodes = set()
    with open("/proc/%s/maps" % pid) as f:
        for line in f:
            if "memfd:seer-arena" in line:
                inodes.add(line.split()[4])
    return len(inodes)


def test_declared_held_checked_against_the_node_share():
    """Two nodes, four ranks: a trainer declaring 33 held batches is checked
    at connect against the staging share it gets once the ranks are spread
    over the nodes (half of it), not the whole staging: 2 MiB holds its 34
    average batches of ~48 KiB, 1 MiB does not -> refused naming [cache]
    staging; with 4 MiB the same trainer is accepted."""
    from seertest import MpiDaemons
    tmp = tmpdir("seer-ex-")
    try:
        root, cat = dataset(tmp, per_class=40, lo=8192, hi=16384)
        sets = settings(tmp, root, **{"job.resume": "", "job.epochs": 1,
                                      "cache.ram": "64KiB", "cache.staging": "2MiB"})
        del sets["daemon.socket"], sets["daemon.state_dir"]
        cl = MpiDaemons(tmp, 2, sets, name="held")
        try:
            try:
                seer.Loader(socket=cl.socket(0), job_id="exact", rank=0, world_size=4,
                            max_held=33).connect()
                raise Fail("33 batches of ~48 KiB accepted in a 1 MiB share of 2 MiB staging")
            except seer.SeerError as e:
                check(e.code == seer.EREFUSED and "each of 2 trainers" in str(e) and
                      "[cache] staging to at least" in str(e), "refusal: %s" % e)
                why = str(e)
        finally:
            cl.stop()
        cl = MpiDaemons(tmp, 2, dict(sets, **{"cache.staging": "4MiB"}), name="held4")
        try:
            L = seer.Loader(socket=cl.socket(0), job_id="exact", rank=0, world_size=4,
                            max_held=33)
            L.connect()
            L.close()
        finally:
            cl.stop()
        log("33 held batches, 2 nodes x 2 ranks: refused at connect with 2 MiB (%s); "
            "accepted with 4 MiB" % why)
    finally:
        cleanup(tmp)


def test_old_arenas_unmapped_after_restarts():
    """Finding 9: three seerd restarts under Loader(reconnect): once no
    batch of an old session is held, its arena is unmapped (libseer's and
    the shim's mappings)."""
    tmp = tmpdir("seer-ex-")
    try:
        root, cat = dataset(tmp)
        sets = settings(tmp, root, **{"cache.ram": "1MiB", "job.epochs": 5})
        base = _arena_maps()
        d = Daemon(tmp, sets, name="a")
        L = seer.Loader(socket=d.sock, job_id="exact", rank=0, world_size=1, reconnect=60)
        counts = []
        try:
            for k in range(3):
                b = L.next_batch()
                b.release()
                d.proc.kill()
                d.wait()
                d.stop()
                d = Daemon(tmp, sets, name="r%d" % k)
                b = L.next_batch()  # reconnects
                b.release()
                gc.collect()
                counts.append(_arena_maps() - base)
            check(counts == [1, 1, 1], "arenas mapped after each of 3 restarts: %s (want 1: "
                  "the live one)" % counts)
        finally:
            L.close()
            d.stop()
        log("arenas mapped after 3 restarts: %s" % counts)
    finally:
        cleanup(tmp)


def _interrupt_when_waiting(d):
    """In a thread: once this process's main thread has waited in the kernel
    (a futex: seer_next's wait, seerd being stopped) for 50 polls in a row,
    send it SIGINT, then let seerd go on (SIGCONT)."""
    tid = threading.main_thread().native_id
    res = {}

    def waiting():
        with open("/proc/self/task/%d/wchan" % tid) as f:
            return "futex" in f.read()

    def run():
        try:
            streak = [0]

            def settled():
                streak[0] = streak[0] + 1 if waiting() else 0
                return streak[0] >= 50
            wait_for(settled, LONG, "the trainer to wait for a batch")
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException as e:
            res["err"] = e
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)
    th = threading.Thread(target=run)
    th.start()
    return th, res


def test_ctrl_c_while_waiting():
    """Review of issue 28: Ctrl-C while the trainer waits in seer_next for a
    batch (seerd stopped with SIGSTOP): the batch libseer returns after it is
    not lost. Plain Loader and TorchLoader(2 workers): the user catches the
    KeyboardInterrupt, goes on, and the stream is unbroken."""
    tmp = tmpdir("seer-ex-")
    try:
        root, cat = dataset(tmp)
        sets = settings(tmp, root, **{"prefetch.lookahead": 2, "job.resume": "",
                                      "job.epochs": 1})
        for kind in ("plain", "workers"):
            st = Stream(cat)
            with Daemon(tmp, sets, name=kind) as d:
                L = (seer.Loader(socket=d.sock, job_id="exact", rank=0, world_size=1)
                     if kind == "plain" else torch_loader(d, num_workers=2))
                try:
                    interrupted = False
                    while True:
                        try:
                            for item in L:
                                if kind == "plain":
                                    st.batch(item)
                                else:
                                    st.torch_batch(L, *item)
                                if len(st.got) == 3 and not interrupted:
                                    interrupted = True
                                    os.kill(d.proc.pid, signal.SIGSTOP)
                                    th, res = _interrupt_when_waiting(d)
                            break
                        except KeyboardInterrupt:
                            th.join(LONG)
                            check("err" not in res, "interrupting: %s" % res.get("err"))
                            continue  # the user goes on
                    check(interrupted, "no interrupt")
                finally:
                    L.close()
            st.unbroken(1)
        log("Ctrl-C while waiting for a batch, caught: plain and 2-worker streams unbroken")
    finally:
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_workers_reconnect_read_the_new_arena,
               test_held_batch_reads_its_own_arena_after_reconnect,
               test_state_dict_with_workers, test_positions_never_run_ahead,
               test_sixteen_workers_with_defaults, test_declared_held_checked_against_the_node_share,
               test_old_arenas_unmapped_after_restarts,
               test_ctrl_c_while_waiting])
