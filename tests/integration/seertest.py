"""Helpers for seer's integration tests (Debian's /usr/bin/python3).

The expectations here are computed independently of seerd: the catalog order
is rebuilt from the directory tree (sorted relative paths, class = the index
of the top-level directory among torchvision's find_classes), bytes are
hashed from the files themselves; only the access sequence comes from
libseer's sampler (the function under contract).

Tests never race the job they observe (they pass on a machine busy with
other work: `make test-stress`): a test that must act while a job runs holds
the job open with pause points (Gate below; seer-trainer --sync/--pause-at,
py_trainer.py and test_faults.py's trainer take the same options) and waits
for states (files, log lines, `seerctl status`) with generous deadlines
(LONG), never for a sleep to pass.
"""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BIN = os.path.join(ROOT, os.environ.get("BIN", "bin"))
LIB = os.path.join(ROOT, os.environ.get("PYLIB", "lib"))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
os.environ.setdefault("SEER_LIB", os.path.join(ROOT, "lib", "libseer.so.0"))

import seer  # noqa: E402

# A deadline for something that takes milliseconds on an idle machine: it only
# bounds a failure, so it is generous enough for a loaded one.
LONG = 120.0
# Sanitizer builds (BIN=build/asan/bin, build/tsan/bin) run several times
# slower, their seerctl included: each `seerctl status` a test polls with
# takes 0.3-0.7 s just to start on a busy machine.
SANITIZER = os.path.basename(os.path.dirname(BIN)) in ("asan", "tsan")
# A killed trainer's staging is reclaimed within this (a measurement that
# includes the status polls that see it: 30-120 ms in release builds beside
# CPU hogs; in sanitizer builds the polls alone can take a second).
RECLAIM_BOUND_S = 3.0 if SANITIZER else 1.0


class Fail(AssertionError):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def log(msg):
    print("  " + msg, flush=True)


def make_classes(root, classes, per_class, min_size, max_size, seed=1):
    """ImageNet-style tree root/<class>/<file> of random bytes."""
    rnd = random.Random(seed)
    for c in classes:
        os.makedirs(os.path.join(root, c), exist_ok=True)
        for i in range(per_class):
            size = rnd.randint(min_size, max_size)
            with open(os.path.join(root, c, "img_%04d.bin" % i), "wb") as f:
                f.write(rnd.randbytes(size))


def find_classes(root):
    """Class directories as torchvision's find_classes numbers them: every
    directory of the root (os.scandir's is_dir(): links followed, hidden
    names included), sorted (code points: bytewise for UTF-8 names)."""
    return sorted((e.name for e in os.scandir(root) if e.is_dir()), key=lambda c: c.encode())


def catalog(root):
    """[(relpath, label, size, crc32)] in seer's catalog order, rebuilt here:
    files not hidden, sorted by path; label = the index of the top-level
    directory among find_classes(root) (0 for files only at the root)."""
    rels = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        for f in files:
            if f.startswith("."):
                continue
            rels.append(os.path.relpath(os.path.join(d, f), root))
    rels.sort(key=lambda p: p.encode())
    classes = find_classes(root) if any("/" in p for p in rels) else []
    out = []
    for p in rels:
        label = classes.index(p.split("/")[0]) if classes else 0
        with open(os.path.join(root, p), "rb") as f:
            data = f.read()
        out.append((p, label, len(data), zlib.crc32(data)))
    return out


class Daemon:
    """A seerd process with its own config; stop() or a with-block ends it."""

    def __init__(self, workdir, settings, name="seerd", env=None, binary=None, wait=True):
        self.workdir = workdir
        self.sock = settings.get("daemon.socket") or os.path.join(workdir, name + ".sock")
        settings = dict(settings)
        settings.setdefault("daemon.socket", self.sock)
        settings.setdefault("daemon.state_dir", os.path.join(workdir, "state"))
        settings.setdefault("daemon.stats_file", os.path.join(workdir, name + "-stats.json"))
        self.stats_file = settings["daemon.stats_file"]
        self.log_path = os.path.join(workdir, name + ".log")
        args = [binary or os.path.join(BIN, "seerd")]
        for k, v in settings.items():
            args += ["--set", "%s=%s" % (k, v)]
        self.logf = open(self.log_path, "w")
        e = dict(os.environ)
        e.update(env or {})
        self.proc = subprocess.Popen(args, stdout=self.logf, stderr=subprocess.STDOUT, env=e)
        if wait:
            try:
                self.wait_socket()
            except BaseException:  # a seerd that never served is not left behind
                self.proc.kill()
                self.proc.wait()
                self.logf.close()
                raise

    def wait_socket(self, timeout=LONG):
        """Until seerd serves: its socket answers from before the catalog scan
        (with its progress), the job from its "serving job" line on."""
        t0 = time.time()
        while not os.path.exists(self.sock) or "serving job '" not in self.log():
            if self.proc.poll() is not None:
                raise Fail("seerd exited with %s before listening:\n%s" % (self.proc.returncode,
                                                                          self.log()))
            if time.time() - t0 > timeout:
                raise Fail("seerd did not listen within %ss:\n%s" % (timeout, self.log()))
            time.sleep(0.02)

    def log(self):
        if not self.logf.closed:
            self.logf.flush()
        with open(self.log_path) as f:
            return f.read()

    def status(self):
        out = subprocess.run([os.path.join(BIN, "seerctl"), "--socket", self.sock, "--json",
                              "status"], capture_output=True, text=True, timeout=LONG)
        if out.returncode != 0:
            raise Fail("seerctl status failed: %s" % out.stderr)
        return json.loads(out.stdout)

    def wait(self, timeout=120):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise Fail("seerd did not exit within %ss:\n%s" % (timeout, self.log()))

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()

    def stats(self):
        with open(self.stats_file) as f:
            return json.load(f)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


# the libfabric provider the daemons of a multi-node test talk over
PROVIDER = os.environ.get("SEER_TEST_PROVIDER", "tcp;ofi_rxm")


class MpiDaemons:
    """`nodes` seerd processes under one mpirun, as every multi-node test and
    scripts/walk.py start them (one launcher: MPI over TCP, root allowed).
    Default settings: socket, stats file and state directory in `tmp` named
    after `name` (%n = the node), net.provider = PROVIDER; `settings`
    override them (a value None drops the key). `mca`: (key, value) pairs for
    mpirun's --mca; `env`: extra environment. With `wait`, returns once every
    node serves: its socket exists and, with `serving`, its "serving job"
    line is logged (the sockets answer from before the catalog scan); an
    mpirun that never served is stopped before the failure is raised."""

    def __init__(self, tmp, nodes, settings, name="job", env=None, mca=(), wait=True,
                 serving=True):
        self.tmp, self.nodes, self.serving = tmp, nodes, serving
        s = {"daemon.socket": os.path.join(tmp, name + "-%n.sock"),
             "daemon.stats_file": os.path.join(tmp, name + "-stats-%n.json"),
             "daemon.state_dir": os.path.join(tmp, "state"), "net.provider": PROVIDER}
        s.update(settings)
        s = {k: v for k, v in s.items() if v is not None}
        self.sock, self.stats = s["daemon.socket"], s.get("daemon.stats_file")
        args = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(nodes)]
        for k, v in mca:
            args += ["--mca", k, v]
        args += ["-x", "OMPI_ALLOW_RUN_AS_ROOT=1", "-x", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                 os.path.join(BIN, "seerd")]
        for k, v in s.items():
            args += ["--set", "%s=%s" % (k, v)]
        self.log_path = os.path.join(tmp, name + ".log")
        self.logf = open(self.log_path, "w")
        e = dict(os.environ, OMPI_MCA_btl="self,tcp", OMPI_MCA_pml="ob1")
        e.update(env or {})
        self.proc = subprocess.Popen(args, stdout=self.logf, stderr=subprocess.STDOUT, env=e)
        if wait:
            try:
                wait_for(self.listening, LONG, "%d daemons to serve" % nodes, step=0.05)
            except BaseException:
                self.stop()
                raise

    def listening(self):
        """Whether every node serves; Fail if mpirun has exited."""
        if self.proc.poll() is not None:
            raise Fail("mpirun seerd exited %d:\n%s" % (self.proc.returncode, self.log()))
        return (all(os.path.exists(self.socket(k)) for k in range(self.nodes)) and
                (not self.serving or self.log().count("serving job '") >= self.nodes))

    def socket(self, node):
        return self.sock.replace("%n", str(node))

    def stats_path(self, node):
        return self.stats.replace("%n", str(node))

    def node_stats(self, node):
        with open(self.stats_path(node)) as f:
            return json.load(f)

    def log(self):
        if not self.logf.closed:
            self.logf.flush()
        with open(self.log_path) as f:
            return f.read()

    def status(self, node=0):
        out = subprocess.run([os.path.join(BIN, "seerctl"), "--socket", self.socket(node),
                              "--json", "status"], capture_output=True, text=True, timeout=LONG)
        if out.returncode != 0:
            raise Fail("seerctl status on node %d: %s" % (node, out.stderr))
        return json.loads(out.stdout)

    def pid(self, node):
        return self.status(node)["pid"]

    def signal(self, sig, node=None):
        """sig to mpirun (None) or to one node's seerd."""
        if node is None:
            self.proc.send_signal(sig)
        else:
            os.kill(self.pid(node), sig)

    def wait(self, timeout=300):
        """mpirun's exit status; Fail (mpirun killed) if it runs past timeout."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise Fail("the daemons did not exit within %ds:\n%s" % (timeout, self.log()))
        self.logf.close()
        return rc

    def stop(self, sig=None, grace=30):
        """sig (default SIGTERM) to mpirun, which forwards it; SIGKILL after
        `grace` seconds."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig or signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.logf.closed:
            self.logf.close()

    kill = stop  # (the name the multi-node tests use)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def start_trainer(kind, rank, world, sock, logfile, extra=(), env=None):
    """kind: 'c' (seer-trainer) or 'py' (py_trainer.py)."""
    if kind == "c":
        args = [os.path.join(BIN, "seer-trainer")]
    else:
        args = ["/usr/bin/python3", os.path.join(ROOT, "tests", "integration", "py_trainer.py")]
    args += ["--rank", str(rank), "--world", str(world), "--socket", sock, "--log", logfile,
             "--quiet"]
    args += list(extra)
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=e)


def finish(procs, timeout=180):
    """Wait for trainer processes; returns [(rc, stdout, stderr)]."""
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
            raise Fail("trainer pid %d hung (killed after %ss): %s" % (p.pid, timeout, e))
        out.append((p.returncode, o, e))
    return out


def read_log(path):
    """{(epoch, step): [(index, id, label, length, crc)]} from a trainer log."""
    batches = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 3:
                continue
            if parts[2] == "FAILED":
                batches[(int(parts[0]), int(parts[1]))] = "FAILED " + " ".join(parts[3:])
                continue
            e, s, i, sid, label, length, crc = parts
            batches.setdefault((int(e), int(s)), []).append(
                (int(i), int(sid), int(label), int(length), int(crc, 16)))
    return batches


def verify_rank(cat, sampler, rank, batches, epochs, first=(0, 0), last=None):
    """Every batch of `rank` from `first` up to `last` (exclusive, default:
    job end) equals the sampler's and carries the files' bytes and labels."""
    bpe = sampler.batches_per_epoch
    g0 = first[0] * bpe + first[1]
    g1 = epochs * bpe if last is None else last[0] * bpe + last[1]
    seen = 0
    for g in range(g0, g1):
        key = (g // bpe, g % bpe)
        check(key in batches, "rank %d: batch %s missing" % (rank, key))
        got = batches[key]
        check(not isinstance(got, str), "rank %d: batch %s failed: %s" % (rank, key, got))
        want = sampler.batch(key[0], rank, key[1])
        ids = [x[1] for x in sorted(got)]
        check(ids == want, "rank %d batch %s: ids %s, sampler says %s" % (rank, key, ids[:8],
                                                                           want[:8]))
        for (_, sid, label, length, crc) in got:
            p, wl, wlen, wcrc = cat[sid]
            check(label == wl, "sample %d (%s): label %d, expected %d" % (sid, p, label, wl))
            check(length == wlen and crc == wcrc,
                  "sample %d (%s): delivered %d bytes crc %08x, file has %d bytes crc %08x" %
                  (sid, p, length, crc, wlen, wcrc))
        seen += 1
    extra = [k for k in batches if not (g0 <= k[0] * bpe + k[1] < g1)]
    check(not extra, "rank %d: unexpected batches %s" % (rank, extra[:5]))
    return seen


def verify_exactly_once(cat, all_batches, epochs, world, batch, drop_last):
    """Per epoch across ranks: every sample exactly once, plus exactly the
    DistributedSampler padding (or minus the dropped tail)."""
    n = len(cat)
    for e in range(epochs):
        counts = [0] * n
        for rank_batches in all_batches:
            for (ep, _), got in rank_batches.items():
                if ep == e:
                    for x in got:
                        counts[x[1]] += 1
        total = sum(counts)
        if drop_last:
            per = n // world
            per = (per // batch) * batch
            check(total == per * world, "epoch %d: %d samples, expected %d" % (e, total, per * world))
            check(max(counts) <= 1, "epoch %d: a sample delivered twice with drop_last" % e)
        else:
            per = -(-n // world)
            check(total == per * world, "epoch %d: %d samples, expected %d" % (e, total, per * world))
            if min(counts) < 1:
                raise Fail("epoch %d: sample %d never delivered" % (e, counts.index(0)))
            pad = per * world - n
            check(sum(c - 1 for c in counts) == pad,
                  "epoch %d: %d duplicates, padding is %d" % (e, sum(c - 1 for c in counts), pad))


def tmpdir(prefix):
    d = tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("SEER_TEST_TMP"))
    return d


def cleanup(d):
    shutil.rmtree(d, ignore_errors=True)


class Gate:
    """Pause points: trainers started with gate.args((E, S), ...) hold the first
    batch at or after each point, announce it and wait for go() (see
    seer-trainer's header). The job cannot end, nor pass the point, before the
    test says so."""

    def __init__(self, tmp, name="sync"):
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir, exist_ok=True)

    def args(self, *points):
        out = ["--sync", self.dir]
        for e, s in points:
            out += ["--pause-at", "%d:%d" % (e, s)]
        return out

    def held(self, rank, point):
        """(epoch, step) of the batch rank holds at point, or None."""
        try:
            with open(os.path.join(self.dir, "paused-%d-%d-%d" % (rank, point[0], point[1]))) as f:
                e, s = f.read().split()
            return int(e), int(s)
        except FileNotFoundError:
            return None

    def wait(self, ranks, point, procs=(), timeout=LONG):
        """Wait until every rank in `ranks` is paused at point; a process of
        `procs` exiting meanwhile fails at once. Returns {rank: held}."""
        def ready():
            for p in procs:
                if p.poll() is not None:
                    raise Fail("a trainer (pid %d) exited %s before its pause at %d:%d: %s" %
                               (p.pid, p.returncode, point[0], point[1],
                                p.stderr.read() if p.stderr else ""))
            got = {r: self.held(r, point) for r in ranks}
            return got if all(got.values()) else None
        return wait_for(ready, timeout, "ranks %s to pause at %d:%d" % (list(ranks), point[0],
                                                                        point[1]), step=0.01)

    def go(self, point, rank=None):
        name = "go-%d-%d" % point if rank is None else "go-%d-%d-%d" % (rank, point[0], point[1])
        open(os.path.join(self.dir, name), "w").close()


class Pauses:
    """The trainer side of Gate for the Python trainers (--sync DIR --pause-at
    E:S ...): at(epoch, step) is called holding each delivered batch."""

    def __init__(self, sync_dir, points, rank, timeout=900.0):
        if points and not sync_dir:
            raise SystemExit("--pause-at needs --sync DIR")
        self.dir, self.rank, self.timeout = sync_dir, rank, timeout
        self.points = sorted(tuple(int(x) for x in p.split(":")) for p in points or [])

    def at(self, epoch, step, save=None):
        """save(path): called before each announcement, to write the trainer's
        checkpoint state to path (DIR/state-R-E-S)."""
        while self.points and self.points[0] <= (epoch, step):
            pe, ps = self.points.pop(0)
            if save:
                save(os.path.join(self.dir, "state-%d-%d-%d" % (self.rank, pe, ps)))
            name = os.path.join(self.dir, "paused-%d-%d-%d" % (self.rank, pe, ps))
            with open(name + ".tmp", "w") as f:
                f.write("%d %d\n" % (epoch, step))
            os.rename(name + ".tmp", name)
            go = [os.path.join(self.dir, "go-%d-%d" % (pe, ps)),
                  os.path.join(self.dir, "go-%d-%d-%d" % (self.rank, pe, ps))]
            t0 = time.monotonic()
            while not any(os.path.exists(g) for g in go):
                if not os.path.isdir(self.dir):
                    raise SystemExit("trainer %d: %s was removed while paused at %d:%d" %
                                     (self.rank, self.dir, pe, ps))
                if time.monotonic() - t0 > self.timeout:
                    raise SystemExit("trainer %d: no go for the pause at %d:%d within %.0f s" %
                                     (self.rank, pe, ps, self.timeout))
                time.sleep(0.002)


def wait_for(pred, timeout, what, step=0.005):
    """Poll pred() until it returns something true (returned), or Fail."""
    t0 = time.time()
    while True:
        v = pred()
        if v:
            return v
        if time.time() - t0 > timeout:
            raise Fail("timed out after %.1f s waiting for %s" % (timeout, what))
        time.sleep(step)


def run_tests(tests):
    """Run test functions (those named on the command line, default all);
    print PASS/FAIL; exit non-zero on any failure."""
    only = [a for a in sys.argv[1:] if a.startswith("test_")]
    unknown = set(only) - {t.__name__ for t in tests}
    if unknown:
        raise SystemExit("no such test: %s" % ", ".join(sorted(unknown)))
    failed = 0
    for t in [t for t in tests if not only or t.__name__ in only]:
        t0 = time.time()
        print("-- %s" % t.__name__, flush=True)
        try:
            t()
            print("PASS %s (%.1f s)" % (t.__name__, time.time() - t0), flush=True)
        except Exception as ex:  # report and continue with the next test
            failed += 1
            print("FAIL %s: %s" % (t.__name__, ex), flush=True)
    sys.exit(1 if failed else 0)
