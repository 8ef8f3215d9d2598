#!/usr/bin/python3
"""Randomised walk of the paths users take together, against an oracle
(issue 28). Run with /usr/bin/python3 after `make all`:

    scripts/walk.py [--seed N] [--minutes M | --episodes K] [--ops LIST]
                    [--kinds LIST] [--nodes 1|2|mix] [--keep] [--workdir DIR]
                    [--exclude KIND:OP,...] [--first-episode N] [--inject drop|dup|crc|restart|last]

Each episode (reproducible from (seed, episode) as far as choices go) makes
or reuses a small class-folder dataset of random bytes, starts seerd (or two
under mpirun), runs W trainer ranks as subprocesses -- C (bin/seer-trainer),
Python Loader, TorchLoader with a crc32 transform and 0 or 2 workers
(tests/integration/walk_trainer.py) -- and applies operations at pause
points, where every rank holds a batch and waits for the driver (nothing
races: the driver waits for files, log lines and seerctl status, never for
a sleep):

  tkill    SIGKILL one trainer, restart that rank (another kind maybe)
  wkill    SIGKILL a TorchLoader worker (WorkerError; the trainer connects again)
  seek     seek(e, s) backwards or forwards in one rank's stream
  state    one rank saves state_dict(), closes; a new Loader(state=sd)
  elastic  every rank saves state_dict() and closes; a new job on W' ranks
           resumes from rank 0's record (expected: seer.ElasticSampler)
  dterm    SIGTERM seerd (resume = auto), restart it and every rank
  dkill    SIGKILL seerd, restart it and every rank
  recon    the episode's trainers use reconnect=60; seerd is SIGTERMed or
           SIGKILLed and restarted under them
  hold     Python Loaders use double buffering / out-of-order releases
  sigusr1, sighup   the signal to seerd: it must go on serving (one node)

The oracle (Oracle below; each rule a small function citing the rule of
the consumption contract, docs/resume.md) checks every batch handed to user
code against the sampler and the files, the stream of each session, where
every restart resumed, and that every batch of every rank was handed.

Output: one line per episode, a summary line; on a failure the seed, the
episode's operation log, the mismatch, and exit status 1.
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")

from seertest import (BIN, LONG, PROVIDER, Daemon, Fail, MpiDaemons, catalog,  # noqa: E402
                      make_classes, seer, wait_for)

ALL_OPS = ["tkill", "wkill", "seek", "state", "elastic", "dterm", "dkill", "recon", "hold",
           "sigusr1", "sighup"]
DEFAULT_OPS = list(ALL_OPS)
ALL_KINDS = ["c", "py", "torch0", "torch2"]
PY_KINDS = ("py", "torch0", "torch2")
TRAINER = os.path.join(ROOT, "tests", "integration", "walk_trainer.py")


class Mismatch(Fail):
    """An oracle failure: rank, what was expected, what came. `want`: the
    position expected (plan index or (epoch, step)), for its ids."""

    def __init__(self, msg, want=None):
        super().__init__(msg)
        self.want = want


# ==== the expected streams =====================================================================

class Plan:
    """The access sequence of one phase of a job: the plain sampler, or
    ElasticSampler from a record. positions: every (epoch, step) a rank
    takes from the phase's start to the job's end, in order."""

    def __init__(self, n, seed, world, batch, drop_last, epochs, state=None):
        self.world, self.epochs = world, epochs
        if state is None:
            self.s = seer.Sampler(n, seed, world, batch, drop_last)
            start = (0, 0)
            counts = {e: self.s.batches_per_epoch for e in range(epochs)}
        else:
            self.s = seer.ElasticSampler(n, seed, world, batch, drop_last,
                                         dataset_hash=state["dataset_hash"], state=state)
            start = self.s.start
            counts = {e: self.s.epoch_batches(e) for e in range(start[0], epochs)}
        self.positions = []
        for e in range(start[0], epochs):
            for s in range(start[1] if e == start[0] else 0, counts[e]):
                self.positions.append((e, s))
        self.index = {p: g for g, p in enumerate(self.positions)}
        self._cache = {}

    def g(self, pos):
        if tuple(pos) not in self.index:
            raise Mismatch("position %s is not in the stream (%s .. %s)" %
                           (tuple(pos), self.positions[0], self.positions[-1]))
        return self.index[tuple(pos)]

    def next(self, pos):
        g = self.g(pos) + 1
        return self.positions[g] if g < len(self.positions) else None

    def ids(self, rank, pos):
        k = (rank, tuple(pos))
        if k not in self._cache:
            self._cache[k] = self.s.batch(pos[0], rank, pos[1])
        return self._cache[k]


# ==== the oracle: one function per rule ========================================================

def rule_bytes(plan, cat, rank, b):
    """Nothing is ever skipped...; every sample handed has the sampler's id,
    the catalog's label and the file's bytes (rule, last paragraph)."""
    want = plan.ids(rank, (b["e"], b["s"]))
    if b["ids"] != want:
        raise Mismatch("rank %d: batch %d:%d: expected ids %s, got %s" %
                       (rank, b["e"], b["s"], want, b["ids"]))
    for i, sid in enumerate(b["ids"]):
        path, label, size, crc = cat[sid]
        if b["labels"][i] != label or b["len"][i] != size or b["crc"][i] != crc:
            raise Mismatch("rank %d: batch %d:%d sample %d (id %d, %s): expected label %d, %d "
                           "bytes, crc %08x; got label %d, %d bytes, crc %08x" %
                           (rank, b["e"], b["s"], i, sid, path, label, size, crc, b["labels"][i],
                            b["len"][i], b["crc"][i]))


def rule_held_bytes(cat, rank, ev):
    """Rule 4 (and the Loader's lifetime contract): a batch held across a
    pause -- a reconnect, seerd SIGTERMed, SIGKILLed or restarted meanwhile --
    keeps readable bytes: read again after it, they are still the files'."""
    for i, sid in enumerate(ev["ids"]):
        if ev["crc"][i] != cat[sid][3]:
            raise Mismatch("rank %d: batch %d:%d held across a pause, read again: sample %d "
                           "(id %d, %s) expected crc %08x, got %08x" %
                           (rank, ev["e"], ev["s"], i, sid, cat[sid][0], cat[sid][3],
                            ev["crc"][i]))


def rule_unbroken(plan, rank, prev, cur, why="the session's stream"):
    """Within one connection the stream is unbroken: each batch handed is
    the one after the previous (rule 4 across reconnects: 'the stream
    continues exactly after the last batch handed')."""
    want = plan.next(prev)
    if tuple(cur) != want:
        raise Mismatch("rank %d: %s: after %s expected %s, got %s" %
                       (rank, why, tuple(prev), want, tuple(cur)), want=want)


def rule_seek(rank, target, cur):
    """Explicit seek(epoch, step) restarts the stream there (rule, last line)."""
    if tuple(cur) != tuple(target):
        raise Mismatch("rank %d: after seek%s expected %s, got %s" %
                       (rank, tuple(target), tuple(target), tuple(cur)), want=tuple(target))


def first_unreleased(plan, sess):
    """Rule 1: seerd's saved position for a rank is the first batch the rank
    has NOT released: the earliest held at the end of the session, else the
    one after the last handed. A session that handed nothing (killed at its
    first batch) released nothing: where it started ((lo, hi) range of plan
    indices, as its own start rule allowed)."""
    if sess.unreleased:
        g = plan.g(min(sess.unreleased, key=plan.g))
        return g, g
    if sess.last:
        g = plan.g(sess.last) + 1
        return g, g
    return sess.start_range


def fmt_range(plan, lo, hi):
    p = lambda g: "%d:%d" % plan.positions[g] if g < len(plan.positions) else "the end"
    return p(lo) if lo == hi else "%s..%s" % (p(lo), p(hi))


def rule_restart_exact(plan, rank, prev, cur, why):
    """Rules 1 and 5: after a trainer's death (SIGKILL, held batches never
    released) or seerd's SIGTERM, a restarted rank resumes exactly at the
    first batch it had not released: nothing skipped, nothing again but what
    it held."""
    lo, hi = first_unreleased(plan, prev)
    if not lo <= plan.g(cur) <= hi:
        raise Mismatch("rank %d: restart after %s: expected the first unreleased batch %s "
                       "(last handed %s, held %s), got %s" %
                       (rank, why, fmt_range(plan, lo, hi), prev.last,
                        sorted(prev.unreleased), tuple(cur)), want=hi)
    return lo, hi


def rule_restart_sigkill(plan, rank, prev, cur, lookahead):
    """Rule 5: after seerd's SIGKILL positions are exact to the last release
    seerd processed: up to about half the lookahead batches (bound here:
    the lookahead) may come again; never one skipped."""
    lo, hi = first_unreleased(plan, prev)
    lo = max(0, lo - lookahead)
    if not lo <= plan.g(cur) <= hi:
        raise Mismatch("rank %d: restart after seerd SIGKILL: expected a batch from %s (the "
                       "first unreleased %s back by at most the lookahead, %d), got %s" %
                       (rank, fmt_range(plan, lo, hi), fmt_range(plan, hi, hi), lookahead,
                        tuple(cur)), want=hi)
    return lo, hi


def rule_state(plan, rank, sess, state_pos):
    """Rule 3: state_dict() = every batch HANDED counts as consumed, whatever
    the number of workers: the record's position is the batch after the last
    one handed."""
    want = plan.next(sess.last)
    if tuple(state_pos) != tuple(want or (plan.epochs, 0)):
        raise Mismatch("rank %d: state_dict() after handing %s says the next batch is %s, "
                       "expected %s" % (rank, sess.last, tuple(state_pos), want))


def rule_resume_state(rank, state_pos, cur):
    """Rule 3: Loader(state=sd) continues exactly at the batch after those
    the record counts as consumed."""
    if tuple(cur) != tuple(state_pos):
        raise Mismatch("rank %d: resumed from state_dict at %s, got %s" %
                       (rank, tuple(state_pos), tuple(cur)), want=tuple(state_pos))


def rule_worker_restart(plan, rank, last, cur):
    """Rules 1 and 2: a TorchLoader whose worker died is closed (WorkerError);
    connecting again resumes at the first batch not released: the batch
    yielded last (if asking for the next did not release it) or the one
    after; batches the workers had taken ahead were never released."""
    ok = [tuple(last), plan.next(last)]
    if tuple(cur) not in ok:
        raise Mismatch("rank %d: reconnect after WorkerError: expected %s or %s (last handed "
                       "%s), got %s" % (rank, ok[0], ok[1], tuple(last), tuple(cur)),
                       want=ok[1] or ok[0])


def rule_coverage(plan, rank, handed, first, last, excused):
    """Nothing is ever skipped on any path: every batch of the rank's stream
    from `first` to `last` was handed at least once (but those an explicit
    seek forward jumped over)."""
    for g in range(plan.g(first), plan.g(last) + 1):
        p = plan.positions[g]
        if p not in handed and p not in excused:
            raise Mismatch("rank %d: batch %d:%d was never handed (expected %s, got nothing)" %
                           (rank, p[0], p[1], list(plan.ids(rank, p))))


def state_position(rec):
    """(epoch, step) where a record says its rank continues."""
    steps = rec["segments"][-1]["steps"]
    return (rec["epoch"], steps[0] if len(steps) == 1 else steps[rec["rank"] or 0])


# ==== sessions and their logs ==================================================================

class Session:
    """One trainer process of one rank (and, after a WorkerError, its later
    connections: `subs`)."""

    def __init__(self, rank, kind, hold, phase, log, start_rule):
        self.rank, self.kind, self.hold, self.phase = rank, kind, hold, phase
        self.log, self.start_rule = log, start_rule
        self.proc = self.end = None
        self.handed = []          # positions in order
        self.unreleased = set()
        self.last = self.first = None
        self.state = None         # position the saved state says
        self.excused = set()

    def describe(self):
        return "%s%s" % (self.kind, "/" + self.hold if self.kind == "py" else "")


def read_events(sess):
    """The session's log as walk_trainer events (C logs converted)."""
    if not os.path.exists(sess.log):
        return []
    with open(sess.log) as f:
        lines = f.read().split("\n")
    if sess.kind != "c":
        out = []
        for ln in lines:
            if ln.strip():
                try:
                    out.append(json.loads(ln))
                except ValueError:
                    pass  # a line cut by SIGKILL
        return out
    out, cur = [], None
    for ln in lines:
        p = ln.split()
        if len(p) != 7:
            continue
        e, s, i, sid, label, length, crc = p
        key = (int(e), int(s))
        if cur is None or (cur["e"], cur["s"]) != key or int(i) == 0:
            cur = {"ev": "b", "e": key[0], "s": key[1], "ids": [], "labels": [], "crc": [],
                   "len": []}
            out.append(cur)
            out.append({"ev": "rel", "e": key[0], "s": key[1]})  # C releases after logging
        cur["ids"].append(int(sid))
        cur["labels"].append(int(label))
        cur["len"].append(int(length))
        cur["crc"].append(int(crc, 16))
    # the last batch may be cut (SIGKILL never lands mid-batch: only at pauses)
    return [x for x in out if x["ev"] != "b" or len(x["ids"]) > 0]


class Oracle:
    def __init__(self, cat, lookahead):
        self.cat, self.lookahead = cat, lookahead
        self.batches = self.samples = self.rechecks = 0

    def check_session(self, plan, sess, prev):
        """Every batch of a session; where it started (by how `prev`, the
        rank's previous session, ended)."""
        evs = read_events(sess)
        last = None
        seek_to = after_worker = None
        start_checked = False
        excused = set()
        for ev in evs:
            k = ev["ev"]
            if k == "b":
                pos = (ev["e"], ev["s"])
                try:
                    self.check_batch(plan, sess, prev, ev, pos, last, seek_to, after_worker,
                                     start_checked, excused)
                except Mismatch as m:
                    if m.want is None:
                        raise
                    w = m.want if isinstance(m.want, tuple) else (
                        plan.positions[m.want] if m.want < len(plan.positions) else None)
                    raise Mismatch("%s; expected ids %s at %s, got ids %s at %d:%d" % (
                        m, plan.ids(sess.rank, w) if w else "(the job's end)", w, ev["ids"],
                        pos[0], pos[1]))
                if not start_checked:
                    start_checked = True
                    sess.first = pos
                seek_to = after_worker = None
                last = pos
                sess.handed.append(pos)
                sess.unreleased.add(pos)
            elif k == "recheck":
                rule_held_bytes(self.cat, sess.rank, ev)
                self.rechecks += 1
            elif k == "rel":
                sess.unreleased.discard((ev["e"], ev["s"]))
            elif k == "seek":
                seek_to = (ev["e"], ev["s"])
            elif k == "state":
                sess.state = state_position(ev["record"])
                sess.last = last
                rule_state(plan, sess.rank, sess, sess.state)
            elif k == "err" and ev["what"] == "worker":
                after_worker = last
                sess.unreleased = set()
        if not start_checked:  # killed before it handed a batch
            self.check_start(plan, sess, prev, None)
        sess.last = last
        sess.excused = excused
        return evs

    def check_batch(self, plan, sess, prev, ev, pos, last, seek_to, after_worker, started,
                    excused):
        """One handed batch: its bytes, and that it is the one its place in
        the session allows (the start rule, after a seek, after a WorkerError,
        else the next one)."""
        rule_bytes(plan, self.cat, sess.rank, ev)
        self.batches += 1
        self.samples += len(ev["ids"])
        if not started:
            self.check_start(plan, sess, prev, pos)
        elif seek_to is not None:
            rule_seek(sess.rank, seek_to, pos)
            nxt = plan.next(last)
            if nxt is not None and plan.g(seek_to) > plan.g(nxt):
                for g in range(plan.g(nxt), plan.g(seek_to)):
                    excused.add(plan.positions[g])
        elif after_worker is not None:
            rule_worker_restart(plan, sess.rank, after_worker, pos)
        else:
            rule_unbroken(plan, sess.rank, last, pos)

    def check_start(self, plan, sess, prev, pos):
        """Where a session started (pos; None when it handed nothing: then
        only the range its start rule allows is recorded, for the next)."""
        how = sess.start_rule
        if how[0] == "fresh":
            if pos is not None and tuple(pos) != plan.positions[0]:
                raise Mismatch("rank %d: a fresh job's first batch: expected %s, got %s" %
                               (sess.rank, plan.positions[0], pos), want=plan.positions[0])
            rng = (0, 0)
        elif how[0] == "state":
            if pos is not None:
                rule_resume_state(sess.rank, how[1], pos)
            rng = (plan.g(how[1]), plan.g(how[1]))
        elif how[0] in ("tkill", "dterm"):
            why = "the trainer's SIGKILL" if how[0] == "tkill" else "seerd's SIGTERM"
            rng = (first_unreleased(plan, prev) if pos is None else
                   rule_restart_exact(plan, sess.rank, prev, pos, why))
        elif how[0] == "dkill":
            if pos is None:
                lo, hi = first_unreleased(plan, prev)
                rng = (max(0, lo - self.lookahead), hi)
            else:
                rng = rule_restart_sigkill(plan, sess.rank, prev, pos, self.lookahead)
        else:
            raise AssertionError(how)
        sess.start_range = rng


# ==== daemons ==================================================================================

class Single:
    """One seerd."""

    def __init__(self, tmp, settings, name):
        self.nodes = 1
        sock = settings["daemon.socket"].replace("%n", "0")
        if os.path.exists(sock):
            os.unlink(sock)  # left by a SIGKILLed seerd
        s = dict(settings, **{"daemon.socket": sock})
        self.d = Daemon(tmp, s, name=name)
        self.proc = self.d.proc

    def socket(self, node):
        return self.d.sock

    def status(self, node=0):
        return self.d.status()

    def pid(self, node):
        return self.proc.pid

    def log(self):
        return self.d.log()

    def signal(self, sig, node=0):
        self.proc.send_signal(sig)

    def wait(self, timeout=LONG):
        return self.d.wait(timeout)

    def kill(self):
        self.d.stop(signal.SIGKILL)


class Cluster(MpiDaemons):
    """`nodes` seerd under one mpirun (tests/integration/seertest.MpiDaemons);
    a restart reuses the episode's socket names (a SIGKILLed seerd leaves its
    socket), so the sockets alone say the nodes serve."""

    def __init__(self, tmp, settings, name, nodes=2):
        for k in range(nodes):
            sock = settings["daemon.socket"].replace("%n", str(k))
            if os.path.exists(sock):
                os.unlink(sock)
        s = dict(settings, **{"net.provider": PROVIDER, "net.peer_timeout_ms": 60000})
        s.setdefault("daemon.stats_file", None)
        super().__init__(tmp, nodes, s, name=name, serving=False,
                         env={"OMPI_MCA_odls_base_sigkill_timeout": "20"})

    def wait(self, timeout=LONG):
        return super().wait(timeout)

    def kill(self):
        self.stop(signal.SIGKILL)


# ==== an episode ===============================================================================

class Episode:
    def __init__(self, args, seed, number, base):
        self.args, self.seed, self.number = args, seed, number
        self.rng = random.Random("%d:%d" % (seed, number))
        self.oplog = []
        self.counts = {}
        self.tmp = os.path.join(base, "ep%d" % number)
        os.makedirs(self.tmp, exist_ok=True)
        self.base = base
        self.daemon = None
        self.sessions = {}  # rank -> current Session (phase)
        self.history = []   # every session, in start order

    # ---- choices (all from self.rng, in program order) -----------------------------------------

    def choose(self):
        r, a = self.rng, self.args
        self.nodes = {"1": 1, "2": 2}.get(a.nodes) or r.choice([1, 2])
        self.world = r.randint(2, 3) if self.nodes == 2 else r.randint(1, 3)
        self.batch = r.randint(2, 5)
        self.epochs = r.randint(2, 3)
        self.drop_last = r.random() < 0.3
        self.jseed = r.randrange(1 << 30)
        self.lookahead = r.randint(2, 6)
        self.ram = r.choice(["32KiB", "4MiB"])
        self.classes = r.choice([3, 4, 5])
        self.per_class = r.choice([20, 30, 40])
        self.reconnect = ("recon" in a.ops and self.nodes == 1 and r.random() < 0.3)
        # an elastic episode ends its first phase with every rank saving
        # state_dict(): its trainers are Python until then
        self.elastic = "elastic" in a.ops and r.random() < 0.35
        self.kinds = [self.draw_kind() for _ in range(self.world)]

    def draw_kind(self, python_only=False):
        python_only = python_only or (self.elastic and getattr(self, "phase", 0) == 0)
        kinds = [k for k in self.args.kinds if not (python_only and k == "c")] or ["py"]
        k = self.rng.choice(kinds)
        hold = self.rng.choice(["iter", "double", "ooo"]) if "hold" in self.args.ops else "iter"
        return (k, hold if k == "py" else "iter")

    def draw_ops(self, plan, g0, kinds, allow_elastic):
        """The operations of a phase: [(g, op, rank, extra)], points increasing."""
        r, ops = self.rng, self.args.ops
        total = len(plan.positions)
        n = r.randint(1, 3)
        room = list(range(g0 + 1, total - 3))
        if not room:
            return []
        pts = sorted(r.sample(room, min(n, len(room))))
        out = []
        kinds = list(kinds)
        for i, g in enumerate(pts):
            cand = []
            forced = allow_elastic and self.elastic and i == len(pts) - 1
            for op in (["elastic"] if forced else ops):
                if op == "hold" or (op == "elastic" and not forced):
                    continue
                if any(k[0] + ":" + op in self.args.exclude for k in kinds):
                    continue
                if op == "wkill" and not any(k[0] == "torch2" for k in kinds):
                    continue
                if op in ("seek", "state") and not any(k[0] != "c" for k in kinds):
                    continue
                if op in ("dterm", "dkill") and self.reconnect:
                    continue
                if op == "recon" and not self.reconnect:
                    continue
                if op in ("sigusr1", "sighup") and self.nodes != 1:
                    continue
                cand.append(op)
            if not cand:
                continue
            op = r.choice(cand)
            extra = {}
            rank = None
            if op == "tkill":
                rank = r.randrange(len(kinds))
                kinds[rank] = extra["kind"] = self.draw_kind()
            elif op == "wkill":
                rank = r.choice([k for k in range(len(kinds)) if kinds[k][0] == "torch2"])
            elif op in ("seek", "state"):
                rank = r.choice([k for k in range(len(kinds)) if kinds[k][0] != "c"])
                if op == "seek":
                    nxt = pts[i + 1] if i + 1 < len(pts) else total - 1
                    extra["g"] = r.randint(max(0, g - 6), max(g - 1, min(nxt - 1, g + 4)))
                else:
                    kinds[rank] = extra["kind"] = self.draw_kind()
            elif op in ("dterm", "dkill"):
                kinds = [self.draw_kind() for _ in kinds]
                extra["kinds"] = list(kinds)  # later draws change `kinds`, not this
            elif op == "recon":
                extra["sig"] = r.choice(["TERM", "KILL"])
            elif op == "elastic":
                self.phase = 1  # the kinds drawn from here on are the new job's
                w = [x for x in ((2, 3) if self.nodes == 2 else (1, 2, 3)) if x != len(kinds)]
                extra["world"] = r.choice(w)
                extra["kinds"] = [self.draw_kind() for _ in range(extra["world"])]
            out.append((g, op, rank, extra))
        return out

    # ---- running -----------------------------------------------------------------------------

    def settings(self, job):
        return {"dataset.path": self.data, "job.seed": self.jseed, "job.epochs": self.epochs,
                "job.batch_size": self.batch, "job.drop_last": str(self.drop_last).lower(),
                "job.resume": "auto", "job.id": job, "job.max_held": 6,
                "cache.ram": self.ram, "cache.staging": "4MiB",
                "prefetch.lookahead": self.lookahead, "prefetch.io_threads": 2,
                "daemon.socket": os.path.join(self.tmp, job + "-%n.sock"),
                "daemon.state_dir": os.path.join(self.tmp, "state")}

    def start_daemon(self, job):
        self.ndaemons = getattr(self, "ndaemons", 0) + 1
        name = "seerd%d" % self.ndaemons
        s = self.settings(job)
        self.daemon = Single(self.tmp, s, name) if self.nodes == 1 else Cluster(self.tmp, s, name)

    def node_of(self, rank):
        return rank % self.nodes

    def start_session(self, rank, kind, start_rule, points, state_file=None):
        k, hold = kind
        n = len(self.history)
        log = os.path.join(self.tmp, "r%d-s%d.log" % (rank, n))
        sess = Session(rank, k, hold, self.phase, log, start_rule)
        sock = self.daemon.socket(self.node_of(rank))
        pts = []
        for (e, s) in points:
            pts += ["--pause-at", "%d:%d" % (e, s)]
        if k == "c":
            args = [os.path.join(BIN, "seer-trainer"), "--rank", str(rank), "--world",
                    str(self.plan.world), "--socket", sock, "--log", log, "--quiet"]
            if pts:
                args += ["--sync", self.sync] + pts
            if self.reconnect:
                args += ["--reconnect", "60000"]
            if state_file:
                raw = log + ".rec"  # one per session: another rank may be reading its own
                with open(state_file) as f:
                    rec = json.load(f)
                with open(raw, "wb") as f:
                    f.write(seer.record_encode(rec))
                args += ["--state-in", raw]
        else:
            args = ["/usr/bin/python3", TRAINER, "--rank", str(rank), "--world",
                    str(self.plan.world), "--socket", sock, "--job", self.job, "--log", log,
                    "--kind", k, "--hold", hold]
            if pts:
                args += ["--sync", self.sync] + pts
            if self.reconnect:
                args += ["--reconnect", "60"]
            if state_file:
                args += ["--state-in", state_file]
        env = dict(os.environ, SEER_JOB_ID=self.job)
        sess.err = log + ".err"
        with open(sess.err, "w") as ef:
            sess.proc = subprocess.Popen(args, stdout=ef, stderr=subprocess.STDOUT, env=env)
        self.sessions[rank] = sess
        self.history.append(sess)
        self.counts["kind:" + k] = self.counts.get("kind:" + k, 0) + 1
        if k == "py" and hold != "iter":
            self.counts["hold"] = self.counts.get("hold", 0) + 1
        return sess

    def points_after(self, k):
        return [self.plan.positions[g] for (g, _, _, _) in self.ops[k + 1:]]

    def paused(self, rank, point):
        """The pause announcement of rank's session at point, or None."""
        sess = self.sessions[rank]
        path = os.path.join(self.sync, "paused-%d-%d-%d" % (rank, point[0], point[1]))
        if not os.path.exists(path):
            if sess.proc.poll() is not None:
                raise Fail("rank %d's trainer (%s) exited %s before its pause at %d:%d:\n%s" %
                           (rank, sess.describe(), sess.proc.returncode, point[0], point[1],
                            tail(sess.err)))
            return None
        with open(path) as f:
            text = f.read()
        try:
            return json.loads(text)
        except ValueError:
            e, s = text.split()
            return {"e": int(e), "s": int(s), "held": [], "pid": sess.proc.pid}

    def barrier(self, point):
        return wait_for(lambda: self.all_paused(point), LONG,
                        "every rank to pause at %d:%d" % point, step=0.005)

    def all_paused(self, point):
        got = {r: self.paused(r, point) for r in self.sessions}
        return got if all(got.values()) else None

    def go(self, point, ranks=None, cmd="go"):
        for r in (self.sessions if ranks is None else ranks):
            path = os.path.join(self.sync, "go-%d-%d-%d" % (r, point[0], point[1]))
            with open(path + ".tmp", "w") as f:
                f.write(cmd)
            os.rename(path + ".tmp", path)

    def wait_exit(self, sess, codes, what):
        t0 = time.time()
        announced = set(os.listdir(self.sync))
        while sess.proc.poll() is None:
            new = [f for f in os.listdir(self.sync) if f not in announced and
                   f.startswith("paused-%d-" % sess.rank)]
            if new:
                sess.proc.kill()
                raise Fail("rank %d's trainer (%s) should have stopped after %s, but took more "
                           "batches and paused at the next pause point (%s): libseer did not "
                           "see its seerd go" % (sess.rank, sess.describe(), what, new[0]))
            if time.time() - t0 > LONG:
                if sess.kind != "c":  # its threads' stacks into its output (faulthandler)
                    sess.proc.send_signal(signal.SIGUSR2)
                    time.sleep(1.0)
                sess.proc.kill()
                raise Fail("rank %d's trainer hung after %s:\n%s" % (sess.rank, what,
                                                                     tail(sess.err)))
            time.sleep(0.01)
        rc = sess.proc.returncode
        if rc not in codes:
            drc = self.daemon.proc.poll()
            raise Fail("rank %d's trainer (%s) exited %d after %s (expected %s)%s:\n%s\nseerd:\n%s"
                       % (sess.rank, sess.describe(), rc, what, codes,
                          "" if drc is None else "; seerd had exited %s%s" % (
                              drc, " (killed by %s)" % signal.Signals(-drc).name if drc < 0
                              else ""),
                          tail(sess.err), self.daemon.log()[-3000:]))
        return rc

    def detached(self, rank):
        """seerd no longer sees rank attached (its staging reclaimed)."""
        def ok():
            try:
                ts = self.daemon.status(self.node_of(rank))["trainers"]
            except Fail:
                return False
            return all(not t["attached"] for t in ts if t["rank"] == rank)
        wait_for(ok, LONG, "seerd to detach rank %d" % rank, step=0.01)

    def daemon_gone(self, codes=None, what=""):
        rc = self.daemon.wait(LONG)
        if codes is not None and rc not in codes:
            raise Fail("seerd exited %s after %s (expected %s):\n%s" % (rc, what, codes,
                                                                        self.daemon.log()[-4000:]))
        return rc

    def stopping(self):
        if self.daemon.proc.poll() is not None:
            return True
        try:
            return all(self.daemon.status(k)["state"] == "stopping"
                       for k in range(self.daemon.nodes))
        except Fail:
            return False

    def debug(self, text):
        if os.environ.get("WALK_DEBUG"):
            print("  [%.1f s] %s" % (time.time() - self.t0, text), flush=True)

    def note(self, op, text):
        self.counts[op] = self.counts.get(op, 0) + 1
        self.oplog.append(text)
        if os.environ.get("WALK_DEBUG"):
            print("  [%.1f s] %s" % (time.time() - self.t0, text), flush=True)

    def run(self):
        a = self.args
        self.t0 = time.time()
        self.choose()
        key = "data-%dx%d" % (self.classes, self.per_class)
        self.data = os.path.join(self.base, key)
        if not os.path.isdir(self.data):
            make_classes(self.data + ".tmp", ["k%d" % i for i in range(self.classes)],
                         self.per_class, 300, 4000, seed=self.classes * 100 + self.per_class)
            os.rename(self.data + ".tmp", self.data)
        self.cat = cached_catalog(self.data)
        n = len(self.cat)
        self.oracle = Oracle(self.cat, self.lookahead)
        self.phase = 0
        self.plans = []
        self.job = "walk%d-p0" % self.number
        self.plan = Plan(n, self.jseed, self.world, self.batch, self.drop_last, self.epochs)
        self.plans.append(self.plan)
        self.ops = self.draw_ops(self.plan, 0, self.kinds, "elastic" in a.ops)
        self.phase = 0
        self.oplog.append("episode %d: nodes %d, world %d, %d samples, batch %d, epochs %d, "
                          "drop_last %s, seed %d, lookahead %d, ram %s%s; kinds %s" %
                          (self.number, self.nodes, self.world, n, self.batch, self.epochs,
                           self.drop_last, self.jseed, self.lookahead, self.ram,
                           ", reconnect=60" if self.reconnect else "",
                           ",".join("%s%s" % (k, "/" + h if k == "py" else "")
                                    for k, h in self.kinds)))
        self.sync = os.path.join(self.tmp, "sync0")
        os.makedirs(self.sync)
        self.start_daemon(self.job)
        for r in range(self.world):
            self.start_session(r, self.kinds[r], ("fresh",), self.points_after(-1))
        k = 0
        self.debug("ops %s" % (self.ops,))
        while k < len(self.ops):
            g, op, rank, extra = self.ops[k]
            point = self.plan.positions[g]
            held = self.barrier(point)
            if self.do_op(k, point, op, rank, extra, held):
                k = 0  # a new phase: its own operations
                self.debug("phase %d ops %s" % (self.phase, self.ops))
                continue
            k += 1
        self.finish()
        return self.check()

    def do_op(self, k, point, op, rank, extra, held):
        at = "%d:%d" % point
        later = self.points_after(k)
        if op == "tkill":
            sess = self.sessions[rank]
            sess.proc.send_signal(signal.SIGKILL)
            sess.proc.wait()
            sess.end = "tkill"
            self.detached(rank)
            self.note(op, "at %s: SIGKILL rank %d's trainer (%s, holding %s); restart as %s" %
                      (at, rank, sess.describe(), held[rank].get("held"), fmt_kind(extra["kind"])))
            self.start_session(rank, extra["kind"], ("tkill",), later)
            self.go(point, [r for r in self.sessions if r != rank])
        elif op == "wkill":
            sess = self.sessions[rank]
            kids = children(sess.proc.pid)
            if not kids:
                raise Fail("rank %d's TorchLoader has no worker processes to kill" % rank)
            victim = self.rng.choice(sorted(kids))
            os.kill(victim, signal.SIGKILL)
            self.note(op, "at %s: SIGKILL worker pid %d of rank %d's TorchLoader" %
                      (at, victim, rank))
            self.go(point)
        elif op == "seek":
            target = self.plan.positions[extra["g"]]
            self.note(op, "at %s: rank %d seeks to %d:%d" % (at, rank, target[0], target[1]))
            self.go(point, [rank], "seek %d %d" % target)
            self.go(point, [r for r in self.sessions if r != rank])
        elif op == "state":
            sess = self.sessions[rank]
            self.go(point, [rank], "close")
            self.wait_exit(sess, (0,), "state_dict + close")
            sess.end = "state"
            path = os.path.join(self.sync, "state-%d-%d-%d.json" % (rank, held[rank]["e"],
                                                                    held[rank]["s"]))
            with open(path) as f:
                pos = state_position(json.load(f))
            self.detached(rank)
            self.note(op, "at %s: rank %d (%s) saves state_dict (next %d:%d), closes; "
                      "Loader(state=sd) as %s" % (at, rank, sess.describe(), pos[0], pos[1],
                                                  fmt_kind(extra["kind"])))
            self.start_session(rank, extra["kind"], ("state", pos), later, state_file=path)
            self.go(point, [r for r in self.sessions if r != rank])
        elif op in ("dterm", "dkill"):
            sig = signal.SIGTERM if op == "dterm" else signal.SIGKILL
            if self.nodes == 1:
                self.daemon.signal(sig)
            elif op == "dterm":  # one seerd's SIGTERM drains every node
                self.daemon.signal(sig, node=1)
            else:  # every seerd killed (one alone: the others wait for it ~a minute)
                pids = [self.daemon.pid(k) for k in range(self.nodes)]
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                # mpirun takes ~40 s to notice: once its seerds are gone, end it
                wait_for(lambda: all(gone(p) for p in pids), LONG, "the seerds to die")
                self.daemon.kill()
            if op == "dterm":
                wait_for(self.stopping, LONG, "seerd to be stopping")
            else:
                self.daemon_gone()
            self.debug("seerd stopping or gone")
            self.go(point)
            # dkill on two nodes: a surviving seerd may stop its trainers (ESHUTDOWN)
            want = (1, 3) if op == "dterm" else (1, 4) if self.nodes == 1 else (1, 3, 4)
            for r, sess in sorted(self.sessions.items()):
                self.wait_exit(sess, want, "seerd's SIG%s" % sig.name[3:])
                sess.end = op
            self.debug("trainers gone")
            self.daemon_gone((0,) if op == "dterm" else None, "SIGTERM")
            self.note(op, "at %s: %s seerd%s; restart it and every rank as %s" % (
                at, sig.name, "" if self.nodes == 1 else "s", ",".join(
                    fmt_kind(x) for x in extra["kinds"])))
            self.start_daemon(self.job)
            for r in range(self.plan.world):
                self.start_session(r, extra["kinds"][r], (op,), later)
        elif op == "recon":
            sig = signal.SIGTERM if extra["sig"] == "TERM" else signal.SIGKILL
            self.daemon.signal(sig)
            if sig == signal.SIGTERM:
                wait_for(self.stopping, LONG, "seerd to be stopping")
                self.go(point)
                self.daemon_gone((0,), "SIGTERM with reconnecting trainers")
            else:
                self.daemon_gone()
            self.note(op, "at %s: SIG%s seerd under reconnecting trainers; restart it" %
                      (at, extra["sig"]))
            self.start_daemon(self.job)
            if sig == signal.SIGKILL:
                self.go(point)
        elif op in ("sigusr1", "sighup"):
            sig = signal.SIGUSR1 if op == "sigusr1" else signal.SIGHUP
            self.daemon.signal(sig)
            self.note(op, "at %s: %s to seerd (it must go on serving)" % (at, sig.name))
            self.go(point)
        elif op == "elastic":
            for r, sess in sorted(self.sessions.items()):
                self.go(point, [r], "close")
                self.wait_exit(sess, (0,), "state_dict + close")
                sess.end = "state"
            path = os.path.join(self.sync, "state-0-%d-%d.json" % (held[0]["e"], held[0]["s"]))
            with open(path) as f:
                sd = json.load(f)
            self.daemon.signal(signal.SIGTERM, node=self.nodes - 1)
            self.daemon_gone((0,), "SIGTERM of an idle seerd")
            self.phase += 1
            w = extra["world"]
            self.job = "walk%d-p%d" % (self.number, self.phase)
            self.plan = Plan(len(self.cat), self.jseed, w, self.batch, self.drop_last,
                             self.epochs, state=sd)
            self.plans.append(self.plan)
            self.sessions = {}
            self.sync = os.path.join(self.tmp, "sync%d" % self.phase)
            os.makedirs(self.sync)
            self.note(op, "at %s: every rank saves state_dict and closes; new job on %d ranks "
                      "from rank 0's (epoch %d, %s) as %s" % (
                          at, w, sd["epoch"], sd["segments"], ",".join(
                              fmt_kind(x) for x in extra["kinds"])))
            start = self.plan.positions[0] if self.plan.positions else None
            self.ops = self.draw_ops(self.plan, 0, extra["kinds"], False) if start else []
            self.start_daemon(self.job)
            for r in range(w):
                self.start_session(r, extra["kinds"][r], ("state", start), self.points_after(-1),
                                   state_file=path)
            return True
        return False

    def finish(self):
        for r, sess in sorted(self.sessions.items()):
            self.wait_exit(sess, (0,), "the job's end")
            sess.end = "end"
        self.daemon_gone((0,), "the job's end")

    # ---- the oracle over the whole episode ------------------------------------------------------

    def inject(self, how):
        """Falsify one handed batch in a log (--inject): the oracle must fail."""
        for sess in (self.history[::-1] if how == "last" else self.history):
            with open(sess.log) as f:
                lines = f.read().split("\n")
            if how == "last":
                # the job's last batch of a rank never handed: only coverage sees it
                if sess.kind == "c":
                    p = [ln.split() for ln in lines]
                    kl = [x[:2] for x in p if len(x) == 7][-1]
                    lines = [ln for ln, x in zip(lines, p) if not (len(x) == 7 and x[:2] == kl)]
                else:
                    i = [i for i, ln in enumerate(lines) if '"ev":"b"' in ln][-1]
                    del lines[i]
            elif how == "restart":
                # the first batch of a restarted session gone: a restart that skipped one
                if sess.start_rule[0] == "fresh":
                    continue
                if sess.kind == "c":
                    p = [ln.split() for ln in lines]
                    k0 = next((x[:2] for x in p if len(x) == 7), None)
                    lines = [ln for ln, x in zip(lines, p) if not (len(x) == 7 and x[:2] == k0)]
                else:
                    i = next((i for i, ln in enumerate(lines) if '"ev":"b"' in ln), None)
                    if i is None:
                        continue
                    del lines[i]
            elif sess.kind == "c":
                idx = [i for i, ln in enumerate(lines) if len(ln.split()) == 7]
                keys = []
                for i in idx:
                    k = tuple(lines[i].split()[:2])
                    if k not in keys:
                        keys.append(k)
                if len(keys) < 3:
                    continue
                mine = [i for i in idx if tuple(lines[i].split()[:2]) == keys[1]]
                if how == "crc":
                    p = lines[mine[0]].split()
                    p[6] = "%08x" % (int(p[6], 16) ^ 1)
                    lines[mine[0]] = " ".join(p)
                elif how == "drop":
                    lines = [ln for i, ln in enumerate(lines) if i not in mine]
                else:
                    lines = lines[:mine[-1] + 1] + [lines[i] for i in mine] + lines[mine[-1] + 1:]
            else:
                idx = [i for i, ln in enumerate(lines) if '"ev":"b"' in ln]
                if len(idx) < 3:
                    continue
                i = idx[1]
                if how == "crc":
                    ev = json.loads(lines[i])
                    ev["crc"][0] ^= 1
                    lines[i] = json.dumps(ev, separators=(",", ":"))
                elif how == "drop":
                    del lines[i]
                else:
                    lines.insert(i + 1, lines[i])
            with open(sess.log, "w") as f:
                f.write("\n".join(lines))
            self.oplog.append("injected: %s (a session's second batch, a restart's first or "
                              "the last) in rank %d's log %s" %
                              (how, sess.rank, os.path.basename(sess.log)))
            return
        raise Fail("--inject: no session handed 3 batches")

    def check(self):
        o = self.oracle
        if self.args.inject:
            self.inject(self.args.inject)
        for phase, plan in enumerate(self.plans):
            sessions = [s for s in self.history if s.phase == phase]
            for rank in range(plan.world):
                prev = None
                handed, excused = set(), set()
                for sess in [s for s in sessions if s.rank == rank]:
                    o.check_session(plan, sess, prev)
                    handed.update(sess.handed)
                    excused |= sess.excused
                    prev = sess
                if not plan.positions:
                    continue
                last = prev.last if prev.end == "state" and phase < len(self.plans) - 1 \
                    else plan.positions[-1]
                rule_coverage(plan, rank, handed, plan.positions[0], last, excused)
        return o.batches, o.samples, o.rechecks


def gone(pid):
    """pid has exited: gone, or a zombie whose threads are all gone too (a
    SIGKILLed leader shows Z while its other threads still exit, and its
    sockets stay open until the last one has)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            zombie = f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        return zombie and len(os.listdir("/proc/%d/task" % pid)) <= 1
    except OSError:
        return True


def fmt_kind(k):
    return k[0] + ("/" + k[1] if k[0] == "py" else "")


def children(pid):
    out = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def tail(path, n=3000):
    try:
        with open(path) as f:
            return f.read()[-n:]
    except OSError:
        return ""


_CATALOGS = {}


def cached_catalog(root):
    if root not in _CATALOGS:
        _CATALOGS[root] = catalog(root)
    return _CATALOGS[root]


def cleanup_episode(ep):
    d = ep.daemon
    for sess in ep.history:
        if sess.proc and sess.proc.poll() is None:
            sess.proc.kill()
            sess.proc.wait()
        for pid in children(sess.proc.pid) if sess.proc else []:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    if d is not None:
        d.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int)
    ap.add_argument("--minutes", type=float)
    ap.add_argument("--episodes", type=int)
    ap.add_argument("--ops", default=",".join(DEFAULT_OPS),
                    help="operation kinds (default %%(default)s; all: %s)" % ",".join(ALL_OPS))
    ap.add_argument("--kinds", default=",".join(ALL_KINDS), help="trainer kinds (%(default)s)")
    ap.add_argument("--nodes", choices=("1", "2", "mix"), default="1")
    ap.add_argument("--keep", action="store_true", help="keep the work dir on failure")
    ap.add_argument("--workdir", help="where episodes run (default: a new temporary dir)")
    ap.add_argument("--first-episode", type=int, default=0, help="replay from this episode")
    ap.add_argument("--exclude", default="",
                    help="KIND:OP,... : never OP while a trainer of KIND runs (a known bug "
                         "that would stop the walk, e.g. torch2:dterm)")
    ap.add_argument("--inject", choices=("drop", "dup", "crc", "restart", "last"),
                    help="check the oracle: falsify one handed batch in a log of each episode "
                         "(drop it, log it twice, flip a crc bit; restart: drop the first batch "
                         "of a restarted session; last: drop the job's last batch of a rank); "
                         "the walk must fail")
    a = ap.parse_args()
    a.ops = [x for x in a.ops.split(",") if x]
    a.kinds = [x for x in a.kinds.split(",") if x]
    a.exclude = [x for x in a.exclude.split(",") if x]
    bad = [x for x in a.ops if x not in ALL_OPS] + [x for x in a.kinds if x not in ALL_KINDS]
    if bad:
        ap.error("unknown operation or kind: %s" % ", ".join(bad))
    if a.seed is None:
        a.seed = random.randrange(1 << 31)
    if a.minutes is None and a.episodes is None:
        a.episodes = 5
    print("walk: seed %d, ops %s, kinds %s, nodes %s%s" % (
        a.seed, ",".join(a.ops), ",".join(a.kinds), a.nodes,
        ", excluded " + ",".join(a.exclude) if a.exclude else ""), flush=True)
    base = a.workdir or tempfile.mkdtemp(prefix="seer-walk-", dir=os.environ.get("SEER_TEST_TMP"))
    os.makedirs(base, exist_ok=True)
    t0 = time.time()
    totals = {"episodes": 0, "batches": 0, "samples": 0, "failures": 0, "ops": {},
              "rechecks": 0}
    number = a.first_episode
    failed = False
    while True:
        if a.episodes is not None and number - a.first_episode >= a.episodes:
            break
        if a.minutes is not None and time.time() - t0 > a.minutes * 60:
            break
        ep = Episode(a, a.seed, number, base)
        te = time.time()
        try:
            nb, ns, nr = ep.run()
        except Exception as ex:
            cleanup_episode(ep)
            totals["failures"] += 1
            failed = True
            print("FAIL seed %d episode %d: %s" % (a.seed, number, ex), flush=True)
            print("operation log:\n  " + "\n  ".join(ep.oplog), flush=True)
            if not isinstance(ex, Fail):
                traceback.print_exc()
            print("replay: %s --seed %d --first-episode %d --episodes 1 --ops %s --kinds %s "
                  "--nodes %s%s" % (sys.argv[0], a.seed, number, ",".join(a.ops),
                                    ",".join(a.kinds), a.nodes,
                                    " --exclude " + ",".join(a.exclude) if a.exclude else ""),
                  flush=True)
            if a.keep:
                print("work dir kept: %s" % ep.tmp, flush=True)
            break
        cleanup_episode(ep)
        totals["episodes"] += 1
        totals["batches"] += nb
        totals["samples"] += ns
        totals["rechecks"] += nr
        for k, v in ep.counts.items():
            totals["ops"][k] = totals["ops"].get(k, 0) + v
        print("episode %d (seed %d): %s | ops: %s | %d batches, %d samples checked, %d held "
              "batches re-read after a pause (%.1f s)" %
              (number, a.seed, ep.oplog[0].split(": ", 1)[1],
               "; ".join(ep.oplog[1:]) or "none", nb, ns, nr, time.time() - te), flush=True)
        shutil.rmtree(ep.tmp, ignore_errors=True)
        number += 1
    ops = ", ".join("%s %d" % (k, totals["ops"].get(k, 0)) for k in ALL_OPS if k in a.ops)
    kinds = ", ".join("%s %d" % (k, totals["ops"].get("kind:" + k, 0)) for k in a.kinds)
    print("walk summary: seed %d, %d episodes in %.0f s, operations: %s; trainer sessions: %s; "
          "%d batches, %d samples checked, %d held batches re-read; %d failures" %
          (a.seed, totals["episodes"], time.time() - t0, ops, kinds, totals["batches"],
           totals["samples"], totals["rechecks"], totals["failures"]), flush=True)
    if not (failed and a.keep):
        shutil.rmtree(base, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
