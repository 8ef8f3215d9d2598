"""Stop and resume anywhere, exactly (issue 14): signals and drains under mpirun,
positions saved per job and rank, after SIGKILL, with the trainer's checkpoint
record, on another number of trainers, across a seerd restart.

Every test asserts on exact streams: what each rank took before the stop and
after the restart, concatenated, is an unbroken run (no batch twice, none
missing), with the files' bytes. Whatever a test does to a running job happens
while the trainers hold a batch at a pause point (seertest.Gate); the tests wait
for states, never for a sleep."""

import os
import signal
import time

import zlib

from seertest import (LONG, Daemon, Fail, Gate, MpiDaemons, catalog, check, cleanup, finish,
                      log, make_classes, read_log, run_tests, seer, start_trainer, tmpdir,
                      verify_rank, wait_for)


class Cluster(MpiDaemons):
    """`nodes` seerd processes under one mpirun (seertest.MpiDaemons; env:
    extra environment)."""

    def __init__(self, tmp, nodes, settings, name="job", env=None):
        super().__init__(tmp, nodes, settings, name=name, env=env)

    def wait(self, timeout=LONG):
        return super().wait(timeout)


def dataset(tmp, classes=4, per_class=18, seed=31):
    root = os.path.join(tmp, "data")
    make_classes(root, ["k%d" % i for i in range(classes)], per_class, 1500, 9000, seed=seed)
    return root, catalog(root)


def check_exact(cat, sampler, rank, before, after, epochs, first=(0, 0)):
    """Rank's batches before the stop and after the restart: disjoint, and
    together every batch from `first` to the job's end, each the sampler's
    with the files' bytes."""
    both = set(before) & set(after)
    check(not both, "rank %d: batches delivered before and after the restart: %s" %
          (rank, sorted(both)[:6]))
    merged = dict(before)
    merged.update(after)
    return verify_rank(cat, sampler, rank, merged, epochs, first=first)


def trainers(kinds, world, socks, logs, extra=(), env=None):
    """kinds[r] 'c' or 'py'; socks[r] the socket rank r attaches to."""
    return [start_trainer(kinds[r], r, world, socks[r], logs[r], list(extra), env=env)
            for r in range(world)]


def stopping(cl, node):
    """Whether node's seerd is draining (or already gone)."""
    if cl.proc.poll() is not None:
        raise Fail("the daemons died (mpirun exited %d) instead of draining:\n%s" %
                   (cl.proc.returncode, cl.log()))
    try:
        return cl.status(node)["state"] == "stopping"
    except Fail:
        return not os.path.exists(cl.socket(node))


def expect_shutdown(res, what):
    for r, (rc, _, err) in enumerate(res):
        check(rc != 0 and "shutting down" in err,
              "%s: rank %d should stop with 'seerd is shutting down': rc %d, %s" %
              (what, r, rc, err))


# ---- defect 1: SIGTERM under mpirun drains every daemon -----------------------------------

def run_mpirun_sigterm(target):
    """Two nodes, four ranks; SIGTERM to node 1's seerd or to mpirun while every
    rank holds batch 1:2. Every daemon drains (logs the stop, exits 0), every
    trainer is told, and resume = auto continues each rank exactly."""
    tmp = tmpdir("seer-rs-")
    T0 = time.time()
    cl = cl2 = None
    try:
        root, cat = dataset(tmp)
        s = {"dataset.path": root, "job.seed": 7, "job.epochs": 4, "job.batch_size": 3,
             "cache.ram": "64KiB", "prefetch.lookahead": 3, "job.resume": "auto",
             "net.peer_timeout_ms": 60000}
        world, nodes = 4, 2
        where = [r * nodes // world for r in range(world)]
        # mpirun kills what is left 1 s after forwarding SIGTERM unless told
        # otherwise (docs/resume.md): the drain needs the trainers' answer
        env = {"OMPI_MCA_odls_base_sigkill_timeout": "10"}
        cl = Cluster(tmp, nodes, s, env=env)
        gate, at = Gate(tmp), (1, 2)
        first = [os.path.join(tmp, "a%d.log" % r) for r in range(world)]
        kinds = ["c", "py", "c", "py"]
        procs = trainers(kinds, world, [cl.socket(where[r]) for r in range(world)], first,
                         ["--compute-ms", "5"] + gate.args(at))
        gate.wait(range(world), at, procs)
        if target == "seerd":
            pid = cl.status(1)["pid"]
            os.kill(pid, signal.SIGTERM)
            log("SIGTERM to node 1's seerd (pid %d)" % pid)
        else:
            cl.proc.send_signal(signal.SIGTERM)
            log("SIGTERM to mpirun (pid %d)" % cl.proc.pid)
        # every daemon learnt of the stop before the trainers take another batch
        wait_for(lambda: all(stopping(cl, k) for k in range(nodes)), LONG,
                 "every node to be stopping")
        gate.go(at)
        expect_shutdown(finish(procs, timeout=LONG), "SIGTERM to " + target)
        t0 = time.time()
        rc = cl.wait()
        out = cl.log()
        log("mpirun exited %d, %.1f s after the trainers" % (rc, time.time() - t0))
        check(target != "seerd" or rc == 0, "mpirun exited %d after the drain:\n%s" % (rc, out))
        for k in range(nodes):
            check("seerd[%d] INFO  Terminated: stopping" % k in out or
                  ("seerd[%d] INFO  another node stopped the job" % k) in out,
                  "node %d did not drain (killed by the signal?):\n%s" % (k, out))
        check("exited on signal" not in out, "a seerd died of the signal:\n" + out)
        sampler = seer.Sampler(len(cat), 7, world, 3)
        before = [read_log(p) for p in first]
        for r in range(world):
            check(max(before[r]) == at, "rank %d took %s after the stop began (held %s)" %
                  (r, max(before[r]), at))
        log("first job done at %.1f s" % (time.time() - T0))
        cl2 = Cluster(tmp, nodes, s, name="again")
        second = [os.path.join(tmp, "b%d.log" % r) for r in range(world)]
        procs = trainers(kinds, world, [cl2.socket(where[r]) for r in range(world)], second)
        log("second job started at %.1f s" % (time.time() - T0))
        for r, (rc, _, err) in enumerate(finish(procs)):
            check(rc == 0, "rank %d failed after the restart: %s\n%s" % (r, err, cl2.log()))
        log("second job trainers done at %.1f s" % (time.time() - T0))
        check(cl2.wait() == 0, "second job failed:\n" + cl2.log())
        for r in range(world):
            n = check_exact(cat, sampler, r, before[r], read_log(second[r]), 4)
        log("every rank resumed right after batch %d:%d; %d batches per rank, exact" %
            (at[0], at[1], n))
    finally:
        for c in (cl, cl2):
            if c:
                c.kill()
        cleanup(tmp)


def test_mpirun_sigterm_seerd():
    run_mpirun_sigterm("seerd")


def test_mpirun_sigterm_mpirun():
    run_mpirun_sigterm("mpirun")


# ---- defect 2: after SIGTERM, not one more batch; the position is what was taken ------------

def test_slow_trainer_sigterm():
    """Slow trainers (a long step, 8 batches prepared ahead) get SIGTERM's stop
    at their very next call, whatever was prepared; seerd waits for the step
    in progress (longer than the old 5 s grace) and records the release, so
    resume = auto continues right after the batch each one held."""
    tmp = tmpdir("seer-rs-")
    daemons = []
    try:
        root, cat = dataset(tmp)
        s = {"dataset.path": root, "job.seed": 5, "job.epochs": 3, "job.batch_size": 2,
             "cache.ram": "32KiB", "prefetch.lookahead": 8, "job.resume": "auto"}
        world = 2
        d = Daemon(tmp, s, name="first")
        daemons.append(d)
        gate, at = Gate(tmp), (1, 4)
        first = [os.path.join(tmp, "a%d.log" % r) for r in range(world)]
        procs = trainers(["c", "py"], world, [d.sock] * world, first,
                         ["--compute-ms", "20"] + gate.args(at))
        gate.wait(range(world), at, procs)
        # the lookahead is full: batches past the held one are published
        wait_for(lambda: all(t["ready_unread"] > 0 for t in d.status()["trainers"]), LONG,
                 "batches prepared ahead of both trainers")
        d.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: d.status()["state"] == "stopping", LONG, "seerd to be stopping")
        # a step of 6 s: longer than seerd used to wait for trainers after a stop
        time.sleep(6.0)
        t0 = time.time()
        gate.go(at)
        expect_shutdown(finish(procs, timeout=LONG), "SIGTERM")
        dt = time.time() - t0
        check(d.wait(LONG) == 0, "seerd exit code after SIGTERM:\n" + d.log())
        check("exiting anyway" not in d.log(), "seerd left before the trainers:\n" + d.log())
        before = [read_log(p) for p in first]
        for r in range(world):
            check(max(before[r]) == at, "rank %d took %s after the stop (it held %s)" %
                  (r, max(before[r]), at))
        log("trainers told at their next call and gone %.2f s after their step" % dt)
        d2 = Daemon(tmp, s, name="second")
        daemons.append(d2)
        second = [os.path.join(tmp, "b%d.log" % r) for r in range(world)]
        for rc, _, err in finish(trainers(["py", "c"], world, [d2.sock] * world, second)):
            check(rc == 0, "trainer failed after the restart: " + err)
        check(d2.wait(LONG) == 0, "second seerd failed:\n" + d2.log())
        sampler = seer.Sampler(len(cat), 5, world, 2)
        for r in range(world):
            n = check_exact(cat, sampler, r, before[r], read_log(second[r]), 3)
        log("resume = auto continued after the held batch: %d batches per rank, exact" % n)
    finally:
        for x in daemons:
            x.stop()
        cleanup(tmp)


# ---- defect 4: SIGKILL of seerd; crash and stop are told apart ------------------------------

def expect_crash(res, what):
    for r, (rc, _, err) in enumerate(res):
        check(rc != 0 and "went away without stopping the job" in err and
              "shutting down" not in err,
              "%s: rank %d should see a crashed daemon (SEER_EDAEMON), not a stop: rc %d, %s" %
              (what, r, rc, err))


def released_to(d, world, point):
    """seerd recorded every rank's releases up to the batch before `point`."""
    def ok():
        ts = {t["rank"]: t for t in d.status()["trainers"]}
        return all(r in ts and (ts[r]["resume_epoch"], ts[r]["resume_step"]) == point
                   for r in range(world))
    wait_for(ok, LONG, "seerd to record the releases before %d:%d" % point)


def test_sigkill_seerd():
    """seerd SIGKILLed while every rank holds batch 1:3: the trainers are told
    it crashed (SEER_EDAEMON, its own message, in C and Python), and resume =
    auto continues at the held batch: nothing whose release seerd took in
    (released_to waits for that) is delivered again (positions are stored in
    place at every release taken in, not every 10 s)."""
    tmp = tmpdir("seer-rs-")
    daemons = []
    try:
        root, cat = dataset(tmp)
        s = {"dataset.path": root, "job.seed": 9, "job.epochs": 3, "job.batch_size": 3,
             "cache.ram": "48KiB", "job.resume": "auto"}
        world = 2
        d = Daemon(tmp, s, name="first")
        daemons.append(d)
        gate, at = Gate(tmp), (1, 3)
        first = [os.path.join(tmp, "a%d.log" % r) for r in range(world)]
        procs = trainers(["c", "py"], world, [d.sock] * world, first, gate.args(at))
        gate.wait(range(world), at, procs)
        released_to(d, world, at)
        d.proc.send_signal(signal.SIGKILL)
        d.wait(LONG)
        gate.go(at)
        expect_crash(finish(procs, timeout=LONG), "SIGKILL")
        before = [read_log(p) for p in first]
        for r in range(world):
            check(max(before[r]) == at, "rank %d took %s, it held %s" % (r, max(before[r]), at))
            del before[r][at]  # held when seerd died: never released, delivered again
        # the killed seerd's job lock is left behind naming it; the next start takes it over
        lock = os.path.join(tmp, "state", "seer-pos-default", "lock")
        check(os.path.exists(lock) and "pid %d\n" % d.proc.pid in open(lock).read(),
              "no job lock naming the killed seerd (pid %d) in %s" % (d.proc.pid, lock))
        d2 = Daemon(tmp, s, name="second")
        daemons.append(d2)
        check(("took over the job's lock %s from seerd pid %d on host" % (lock, d.proc.pid))
              in d2.log(), "the restart did not say it took the killed seerd's lock over:\n" +
              d2.log())
        second = [os.path.join(tmp, "b%d.log" % r) for r in range(world)]
        for rc, _, err in finish(trainers(["py", "c"], world, [d2.sock] * world, second)):
            check(rc == 0, "trainer failed after the restart: " + err)
        check(d2.wait(LONG) == 0, "second seerd failed:\n" + d2.log())
        check(not os.path.exists(os.path.dirname(lock)),
              "the completed job left %s" % os.path.dirname(lock))
        sampler = seer.Sampler(len(cat), 9, world, 3)
        for r in range(world):
            n = check_exact(cat, sampler, r, before[r], read_log(second[r]), 3)
        log("after SIGKILL every rank resumed at the batch it held: %d batches, none twice" % n)
    finally:
        for x in daemons:
            x.stop()
        cleanup(tmp)


# ---- issue 28 (5): one job id, two daemons ---------------------------------------------------

def pos_files(d):
    """{name: bytes} of a positions directory."""
    out = {}
    for f in sorted(os.listdir(d)):
        with open(os.path.join(d, f), "rb") as fh:
            out[f] = fh.read()
    return out


def test_same_job_id_refused():
    """Two seerd with one [job] id and state_dir (other sockets): the second
    refuses to start, naming the job and the first (host, pid, socket), before
    it writes anything: the first's plan and position files keep their bytes,
    and after a stop its resume = auto restart continues exactly where it
    stopped."""
    tmp = tmpdir("seer-rs-")
    daemons = []
    try:
        root, cat = dataset(tmp)
        s = {"dataset.path": root, "job.seed": 4, "job.epochs": 3, "job.batch_size": 3,
             "cache.ram": "48KiB", "job.resume": "auto", "job.id": "fixed"}
        world = 2
        a = Daemon(tmp, s, name="first")
        daemons.append(a)
        gate, at = Gate(tmp), (1, 2)
        first = [os.path.join(tmp, "a%d.log" % r) for r in range(world)]
        job = {"SEER_JOB_ID": "fixed"}
        procs = trainers(["c", "py"], world, [a.sock] * world, first, gate.args(at), env=job)
        gate.wait(range(world), at, procs)
        released_to(a, world, at)
        pos = os.path.join(tmp, "state", "seer-pos-fixed")
        saved = pos_files(pos)
        check("plan" in saved, "no resume plan in %s: %s" % (pos, sorted(saved)))
        b = Daemon(tmp, s, name="second", wait=False)
        daemons.append(b)
        wait_for(lambda: b.proc.poll() is not None or os.path.exists(b.sock), LONG,
                 "the second seerd to exit or listen")
        out = b.log()
        host = os.uname().nodename
        check(b.proc.poll() is not None and b.proc.returncode != 0,
              "a second seerd with job id 'fixed' and the same state_dir started:\n" + out)
        for want in ("[job] id 'fixed' is in use", "seerd pid %d on host %s" % (a.proc.pid, host),
                     "socket %s" % a.sock, "another [job] id", "stop that seerd"):
            check(want in out, "the refusal does not say %r:\n%s" % (want, out))
        check(not os.path.exists(b.sock), "the refused seerd left its socket")
        check(pos_files(pos) == saved, "the refused seerd touched %s: %s -> %s" %
              (pos, sorted(saved), sorted(pos_files(pos))))
        log("second seerd refused: " + [x for x in out.splitlines() if "in use" in x][0][:160])
        # a two-node job with that id: node 0 refuses, node 1 leaves with it
        try:
            two = Cluster(tmp, 2, s, name="two")
            daemons.append(two)
            raise Fail("a two-node job with job id 'fixed' started beside the first:\n" +
                       two.log())
        except Fail as ex:
            out = str(ex)
        for want in ("seerd[0] ERROR [job] id 'fixed' is in use",
                     "seerd[1] ERROR node 0: [job] id 'fixed' is in use",
                     "seerd pid %d on host %s" % (a.proc.pid, host)):
            check(want in out, "the two-node refusal does not say %r:\n%s" % (want, out))
        check(pos_files(pos) == saved, "the refused job touched %s" % pos)
        log("a two-node job with the same id refused on both nodes")
        a.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: a.status()["state"] == "stopping", LONG, "seerd to be stopping")
        gate.go(at)
        expect_shutdown(finish(procs, timeout=LONG), "SIGTERM")
        check(a.wait(LONG) == 0, "first seerd after SIGTERM:\n" + a.log())
        before = [read_log(p) for p in first]
        for r in range(world):
            check(max(before[r]) == at, "rank %d took %s, it held %s" % (r, max(before[r]), at))
        c = Daemon(tmp, s, name="third")
        daemons.append(c)
        second = [os.path.join(tmp, "b%d.log" % r) for r in range(world)]
        for rc, _, err in finish(trainers(["py", "c"], world, [c.sock] * world, second,
                                          env=job)):
            check(rc == 0, "trainer failed after the restart: " + err)
        check(c.wait(LONG) == 0, "restarted seerd failed:\n" + c.log())
        check("took over" not in c.log(), "a clean stop left its lock:\n" + c.log())
        sampler = seer.Sampler(len(cat), 4, world, 3)
        for r in range(world):
            after = read_log(second[r])
            check(min(after) == (at[0], at[1] + 1), "rank %d restarted at %s, it stopped after "
                  "%s" % (r, min(after), at))
            n = check_exact(cat, sampler, r, before[r], after, 3)
        log("the first job's restart continued after %d:%d: %d batches per rank, exact" %
            (at[0], at[1], n))
    finally:
        for x in daemons:
            if isinstance(x, Cluster):
                x.kill()
            else:
                x.stop()
        cleanup(tmp)


# ---- defect 3: a rank restarted on another node --------------------------------------------

def test_rank_moves_to_another_node():
    """Four ranks on two nodes (0,0,1,1) stopped mid-epoch; restarted with the
    ranks placed (0,1,0,1): ranks 1 and 2 now attach to the other node and
    continue exactly (positions are per job and rank, not per node)."""
    tmp = tmpdir("seer-rs-")
    cl = cl2 = None
    try:
        root, cat = dataset(tmp)
        s = {"dataset.path": root, "job.seed": 4, "job.epochs": 3, "job.batch_size": 3,
             "cache.ram": "64KiB", "job.resume": "auto", "net.peer_timeout_ms": 60000}
        world, nodes = 4, 2
        cl = Cluster(tmp, nodes, s)
        gate, at = Gate(tmp), (1, 1)
        first = [os.path.join(tmp, "a%d.log" % r) for r in range(world)]
        block, cyclic = [0, 0, 1, 1], [0, 1, 0, 1]
        procs = trainers(["c", "py", "c", "py"], world, [cl.socket(block[r]) for r in range(world)],
                         first, gate.args(at))
        gate.wait(range(world), at, procs)
        cl.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: all(stopping(cl, k) for k in range(nodes)), LONG, "the stop")
        gate.go(at)
        expect_shutdown(finish(procs, timeout=LONG), "SIGTERM")
        cl.wait()
        before = [read_log(p) for p in first]
        cl2 = Cluster(tmp, nodes, s, name="moved")
        second = [os.path.join(tmp, "b%d.log" % r) for r in range(world)]
        procs = trainers(["py", "c", "py", "c"], world, [cl2.socket(cyclic[r]) for r in range(world)],
                         second)
        for r, (rc, _, err) in enumerate(finish(procs)):
            check(rc == 0, "rank %d failed on node %d: %s\n%s" % (r, cyclic[r], err, cl2.log()))
        check(cl2.wait() == 0, "second job failed:\n" + cl2.log())
        sampler = seer.Sampler(len(cat), 4, world, 3)
        for r in range(world):
            n = check_exact(cat, sampler, r, before[r], read_log(second[r]), 3)
        log("ranks 1 and 2 moved node and continued right after %d:%d (%d batches each)" %
            (at[0], at[1], n))
    finally:
        for c in (cl, cl2):
            if c:
                c.kill()
        cleanup(tmp)


# ---- the trainer's checkpoint is the truth ---------------------------------------------------

def raw_state(path):
    """A trainer's saved state as a record's bytes (C writes them raw, the
    Python trainer as torch.save({"loader": state_dict()}))."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw.startswith(b"SEERPOS"):
        return raw
    import io
    import torch
    return seer.record_encode(torch.load(io.BytesIO(raw), weights_only=True)["loader"])


def write_raw(tmp, name, data):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def test_checkpoint_record_after_sigkill():
    """Each rank saves its loader state at batch 1:3 (C: seer_state's bytes;
    Python: state_dict() through torch.save); seerd is SIGKILLed and its saved
    positions thrown away; a fresh seerd (no resume = auto) and trainers
    started with their states deliver exactly the batches after 1:3 -- the
    held batch counts as consumed, as StatefulDataLoader counts a yielded one.
    C and Python swap ranks' states on the way (the byte form is one)."""
    tmp = tmpdir("seer-rs-")
    daemons = []
    try:
        root, cat = dataset(tmp)
        s = {"dataset.path": root, "job.seed": 12, "job.epochs": 3, "job.batch_size": 2,
             "cache.ram": "40KiB"}
        world = 2
        d = Daemon(tmp, s, name="first")
        daemons.append(d)
        gate, at = Gate(tmp), (1, 3)
        first = [os.path.join(tmp, "a%d.log" % r) for r in range(world)]
        procs = [start_trainer("c", 0, world, d.sock, first[0], gate.args(at)),
                 start_trainer("py", 1, world, d.sock, first[1], gate.args(at) + ["--save-state"])]
        gate.wait(range(world), at, procs)
        d.proc.send_signal(signal.SIGKILL)
        d.wait(LONG)
        gate.go(at)
        expect_crash(finish(procs, timeout=LONG), "SIGKILL")
        import shutil
        shutil.rmtree(os.path.join(tmp, "state"), ignore_errors=True)
        states = [os.path.join(gate.dir, "state-%d-%d-%d" % (r, at[0], at[1])) for r in range(world)]
        import io
        import torch
        sd = torch.load(states[1], weights_only=True)["loader"]
        check(sd["format"] == "seer.position" and sd["epoch"] == 1 and sd["rank"] == 1 and
              sd["segments"] == [{"world_size": 2, "steps": [at[1] + 1]}],
              "rank 1's state_dict after batch 1:3: %s" % sd)
        rec = seer.record_decode(raw_state(states[0]))
        check(rec["epoch"] == 1 and rec["segments"][0]["steps"] == [at[1] + 1],
              "rank 0's record after batch 1:3: %s" % rec)
        d2 = Daemon(tmp, s, name="second")
        daemons.append(d2)
        second = [os.path.join(tmp, "b%d.log" % r) for r in range(world)]
        procs = [start_trainer("py", 0, world, d2.sock, second[0], ["--state-in", states[0]]),
                 start_trainer("c", 1, world, d2.sock, second[1],
                               ["--state-in", write_raw(tmp, "r1.rec", raw_state(states[1]))])]
        for rc, _, err in finish(procs):
            check(rc == 0, "trainer failed with its state: " + err)
        check(d2.wait(LONG) == 0, "second seerd failed:\n" + d2.log())
        sampler = seer.Sampler(len(cat), 12, world, 2)
        before = [read_log(p) for p in first]
        for r in range(world):
            check(max(before[r]) == at, "rank %d took %s" % (r, max(before[r])))
            n = check_exact(cat, sampler, r, before[r], read_log(second[r]), 3)
        log("resumed from the trainers' own states after 1:3: %d batches per rank, exact" % n)
        # another job's record is refused, naming both values
        s2 = dict(s, **{"job.seed": 13})
        d3 = Daemon(tmp, s2, name="third")
        daemons.append(d3)
        rc, _, err = finish([start_trainer("c", 0, world, d3.sock, os.path.join(tmp, "c.log"),
                                           ["--state-in", states[0]])])[0]
        check(rc != 0 and "seed 12" in err and "seed 13" in err,
              "a record of seed 12 given to a job of seed 13: rc %d, %s" % (rc, err))
        log("another seed's record refused: %s" % err.strip().splitlines()[-1][:160])
    finally:
        for x in daemons:
            x.stop()
        cleanup(tmp)


# ---- holding the job open across a seerd restart ---------------------------------------------

def test_reconnect_across_restarts():
    """Trainers with reconnect on (C: SEER_OPT_RECONNECT, Python: reconnect=)
    outlive two seerd: the first SIGKILLed while they hold batch 1:3, the
    second stopped by SIGTERM at 2:1; each restarted seerd takes them back
    with their own position, and every trainer's stream is one unbroken run
    of the job (exit 0, no batch twice, none missing)."""
    tmp = tmpdir("seer-rs-")
    daemons = []
    try:
        root, cat = dataset(tmp)
        s = {"dataset.path": root, "job.seed": 21, "job.epochs": 4, "job.batch_size": 3,
             "cache.ram": "48KiB", "daemon.socket": os.path.join(tmp, "seer.sock")}
        world = 2
        d = Daemon(tmp, s, name="first")
        daemons.append(d)
        gate, crash, stop = Gate(tmp), (1, 3), (2, 1)
        logs = [os.path.join(tmp, "r%d.log" % r) for r in range(world)]
        procs = [start_trainer("c", 0, world, d.sock, logs[0],
                               gate.args(crash, stop) + ["--reconnect", "120000"]),
                 start_trainer("py", 1, world, d.sock, logs[1],
                               gate.args(crash, stop) + ["--reconnect", "120"])]
        gate.wait(range(world), crash, procs)
        d.proc.send_signal(signal.SIGKILL)
        d.wait(LONG)
        d2 = Daemon(tmp, s, name="second")
        daemons.append(d2)
        gate.go(crash)
        gate.wait(range(world), stop, procs)
        check(all(t["attached"] for t in d2.status()["trainers"]), "the trainers did not "
              "reconnect to the second seerd")
        d2.proc.send_signal(signal.SIGTERM)
        gate.go(stop)
        check(d2.wait(LONG) == 0, "second seerd after SIGTERM:\n" + d2.log())
        d3 = Daemon(tmp, s, name="third")
        daemons.append(d3)
        for r, (rc, out, err) in enumerate(finish(procs, timeout=LONG)):
            check(rc == 0, "rank %d did not outlive the restarts: rc %d, %s" % (r, rc, err))
        check(d3.wait(LONG) == 0, "third seerd failed:\n" + d3.log())
        sampler = seer.Sampler(len(cat), 21, world, 3)
        for r in range(world):
            n = verify_rank(cat, sampler, r, read_log(logs[r]), 4)
        for x, what in ((d2, "second"), (d3, "third")):
            check("resume plan: epoch" in x.log(), "the %s seerd planned no resume:\n%s" %
                  (what, x.log()))
        log("one unbroken stream of %d batches per rank across a SIGKILL and a SIGTERM of "
            "seerd" % n)
    finally:
        for x in daemons:
            x.stop()
        cleanup(tmp)


# ---- elastic resume: another number of trainers ---------------------------------------------

def expectation(tmp, fmt):
    """(dataset root, extra settings, [(label, length, crc32)] per sample id)."""
    if fmt == "files":
        root, cat = dataset(tmp, classes=4, per_class=15, seed=41)
        return root, {}, [(c[1], c[2], c[3]) for c in cat]
    from test_formats_e2e import make
    root, extra, exp = make(tmp, fmt)
    extra = dict(extra, **{"dataset.format": fmt})
    out = []
    for arr, label in exp:
        raw = arr.tobytes()
        out.append((label, len(raw), zlib.crc32(raw)))
    return root, extra, out


def check_rows(exp, rank, key, rows):
    check(not isinstance(rows, str), "rank %d: batch %s failed: %s" % (rank, key, rows))
    for (_, sid, label, length, crc) in rows:
        check((label, length, crc) == exp[sid], "rank %d batch %s: sample %d delivered label %d, "
              "%d bytes, crc %08x; the dataset has %s" % (rank, key, sid, label, length, crc,
                                                          exp[sid]))


def serve(tmp, nodes, settings, name):
    """One seerd, or `nodes` under mpirun: (object, socket of node k, stop())."""
    if nodes == 1:
        d = Daemon(tmp, settings, name=name)
        return d, (lambda k: d.sock), d
    cl = Cluster(tmp, nodes, settings, name=name)
    return cl, cl.socket, cl


def run_elastic(fmt, world, world2, nodes, torch_state=False):
    """A job of `world` trainers checkpoints mid-epoch 1 (every rank saves its
    state holding a batch), everything is stopped and thrown away, and a new
    job of `world2` trainers starts from the state. The rest of epoch 1 is
    re-sharded: every sample of the epoch is delivered (at least once; twice
    only as padding), the new ranks' batches are ElasticSampler's, later
    epochs a fresh world2 job's; every sample carries its file's bytes."""
    tmp = tmpdir("seer-el-")
    daemon = None
    try:
        root, extra, exp = expectation(tmp, fmt)
        n, B, seed, E = len(exp), 2, 17, 3
        s = {"dataset.path": root, "job.seed": seed, "job.epochs": E, "job.batch_size": B,
             "cache.ram": "24KiB", "net.peer_timeout_ms": 60000}
        s.update(extra)
        plain = seer.Sampler(n, seed, world, B)
        at = (1, (plain.batches_per_epoch - 1) // 2)
        where = [r * nodes // world for r in range(world)]
        where2 = [r * nodes // world2 for r in range(world2)]
        daemon, sock, stopper = serve(tmp, nodes, s, "first")
        gate = Gate(tmp)
        first = [os.path.join(tmp, "a%d.log" % r) for r in range(world)]
        save = "--save-state" if torch_state else "--save-raw"
        procs = [start_trainer("py" if r == 1 else "c", r, world, sock(where[r]), first[r],
                               gate.args(at) + ([save] if r == 1 else []))
                 for r in range(world)]
        gate.wait(range(world), at, procs)
        # the first job ends, seerd killed (one node) or stopped (two), before
        # the trainers move on: they take nothing after their checkpoint
        if nodes == 1:
            daemon.proc.send_signal(signal.SIGKILL)
            daemon.wait(LONG)
        else:
            daemon.proc.send_signal(signal.SIGTERM)
            wait_for(lambda: all(stopping(daemon, k) for k in range(nodes)), LONG, "the stop")
        gate.go(at)
        finish(procs, timeout=LONG)
        if nodes > 1:
            daemon.wait()
            daemon.kill()
        else:
            daemon.stop()
        states = [seer.record_decode(raw_state(os.path.join(gate.dir, "state-%d-%d-%d" %
                                                           (r, at[0], at[1]))))
                  for r in range(world)]
        merged = seer.record_merge(states)
        raw = pt = write_raw(tmp, "merged.rec", seer.record_encode(merged))
        if torch_state:
            import torch
            pt = os.path.join(tmp, "merged.pt")
            torch.save({"loader": merged}, pt)
        daemon, sock, stopper = serve(tmp, nodes, dict(s, **{"daemon.state_dir":
                                                              os.path.join(tmp, "state2")}),
                                      "second")
        second = [os.path.join(tmp, "b%d.log" % r) for r in range(world2)]
        procs = [start_trainer("py" if r == 1 else "c", r, world2, sock(where2[r]), second[r],
                               ["--state-in", pt if r == 1 else raw]) for r in range(world2)]
        for r, (rc, _, err) in enumerate(finish(procs, timeout=LONG)):
            check(rc == 0, "%s %d->%d: new rank %d failed: %s" % (fmt, world, world2, r, err))
        check((stopper.wait() if nodes > 1 else daemon.wait(LONG)) == 0,
              "second job failed:\n" + daemon.log())
        before = [read_log(p) for p in first]
        after = [read_log(p) for p in second]
        es = seer.ElasticSampler(n, seed, world2, B, dataset_hash=merged["dataset_hash"],
                                 state=merged)
        fresh = seer.Sampler(n, seed, world2, B)
        check(es.start == (1, 0), "%s: the resumed job starts at %s" % (fmt, es.start))
        counts = [0] * n
        for r in range(world):
            for key, rows in before[r].items():
                check_rows(exp, r, key, rows)
                check([x[1] for x in sorted(rows)] == plain.batch(key[0], r, key[1]),
                      "old rank %d batch %s is not the sampler's" % (r, key))
                if key[0] == 1:
                    for x in rows:
                        counts[x[1]] += 1
            check(max(before[r]) == at, "old rank %d took %s after its pause" % (r, max(before[r])))
        nb = es.epoch_batches(1)
        for r in range(world2):
            want = {(1, st) for st in range(nb)} | {(e, st) for e in range(2, E)
                                                     for st in range(fresh.batches_per_epoch)}
            check(set(after[r]) == want, "%s: new rank %d got batches %s, expected %s" %
                  (fmt, r, sorted(set(after[r]) ^ want)[:6], "the rest of the job"))
            for key, rows in after[r].items():
                check_rows(exp, r, key, rows)
                ids = [x[1] for x in sorted(rows)]
                check(ids == es.batch(key[0], r, key[1]), "%s: new rank %d batch %s: %s, the "
                      "elastic sampler says %s" % (fmt, r, key, ids, es.batch(*[key[0], r,
                                                                                  key[1]])))
                if key[0] > 1:
                    check(ids == fresh.batch(key[0], r, key[1]), "%s: epoch %d of rank %d is "
                          "not a fresh %d-trainer job's" % (fmt, key[0], r, world2))
                else:
                    for x in rows:
                        counts[x[1]] += 1
        missing = [i for i in range(n) if counts[i] == 0]
        check(not missing, "%s: samples %s of epoch 1 never delivered" % (fmt, missing[:8]))
        dup = sum(c - 1 for c in counts)
        check(max(counts) <= 2 and dup < world + world2,
              "%s: epoch 1 delivered %d duplicates (max %d of one sample): more than padding" %
              (fmt, dup, max(counts)))
        log("%-8s %d->%d trainers, %d node(s), %3d samples: checkpoint at %d:%d, epoch 1 "
            "finished in %d re-sharded batches per rank (%d padding), later epochs a fresh "
            "%d-trainer job's" % (fmt, world, world2, nodes, n, at[0], at[1], nb, dup, world2))
    finally:
        if isinstance(daemon, Daemon):
            daemon.stop()
        elif daemon:
            daemon.kill()
        cleanup(tmp)


def test_elastic_one_node():
    for w, w2 in ((4, 2), (2, 3), (3, 4)):
        run_elastic("files", w, w2, 1, torch_state=w == 4)


def test_elastic_two_nodes():
    for w, w2 in ((4, 2), (2, 3), (3, 4)):
        run_elastic("files", w, w2, 2)


def test_elastic_every_format():
    for fmt, w, w2, nodes in (("npz", 4, 2, 2), ("hdf5", 2, 3, 1), ("tfrecord", 3, 4, 2),
                              ("indexed", 4, 2, 1), ("npy", 2, 3, 2)):
        run_elastic(fmt, w, w2, nodes)


def test_auto_resume_other_world():
    """resume = auto with another number of trainers: four ranks stopped by
    SIGTERM after batch 1:2, restarted as two. seerd re-shards the rest of
    epoch 1 from its saved positions alone (no trainer record): the new
    ranks' batches are ElasticSampler's from the record of four ranks at step
    3, later epochs a fresh two-trainer job's, every sample of epoch 1 once
    (no padding: 60 samples)."""
    tmp = tmpdir("seer-rs-")
    daemons = []
    try:
        root, cat = dataset(tmp, classes=4, per_class=15, seed=43)
        n = len(cat)
        s = {"dataset.path": root, "job.seed": 8, "job.epochs": 3, "job.batch_size": 2,
             "cache.ram": "32KiB", "job.resume": "auto"}
        d = Daemon(tmp, s, name="four")
        daemons.append(d)
        gate, at = Gate(tmp), (1, 2)
        first = [os.path.join(tmp, "a%d.log" % r) for r in range(4)]
        procs = trainers(["c", "py", "c", "c"], 4, [d.sock] * 4, first, gate.args(at))
        gate.wait(range(4), at, procs)
        d.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: d.status()["state"] == "stopping", LONG, "the stop")
        gate.go(at)
        expect_shutdown(finish(procs, timeout=LONG), "SIGTERM")
        check(d.wait(LONG) == 0, "seerd after SIGTERM:\n" + d.log())
        d2 = Daemon(tmp, s, name="two")
        daemons.append(d2)
        second = [os.path.join(tmp, "b%d.log" % r) for r in range(2)]
        for rc, _, err in finish(trainers(["py", "c"], 2, [d2.sock] * 2, second)):
            check(rc == 0, "trainer failed after the restart: " + err)
        check(d2.wait(LONG) == 0, "second seerd failed:\n" + d2.log())
        check("re-sharded over 2 trainers" in d2.log(), "no re-sharding logged:\n" + d2.log())
        # the contract: four ranks having consumed steps 0..2 of epoch 1, resumed by two
        rec = seer.ElasticSampler(n, 8, 4, 2).state_dict(None, 1, at[1] + 1)
        es = seer.ElasticSampler(n, 8, 2, 2, state=rec)
        pos = os.path.join(tmp, "state", "seer-pos-default")
        check(not os.path.exists(pos), "the finished job's positions remain: %s" %
              (os.listdir(pos) if os.path.isdir(pos) else pos))
        counts = [0] * n
        for r in range(4):
            for (e, st), rows in read_log(first[r]).items():
                if e == 1:
                    for x in rows:
                        counts[x[1]] += 1
        fresh = seer.Sampler(n, 8, 2, 2)
        for r in range(2):
            got = read_log(second[r])
            for key, rows in got.items():
                ids = [x[1] for x in sorted(rows)]
                if key[0] == 1:
                    for x in rows:
                        counts[x[1]] += 1
                else:
                    check(ids == fresh.batch(key[0], r, key[1]), "epoch %d" % key[0])
            e1 = {k: v for k, v in got.items() if k[0] == 1}
            check(min(got) == (1, 0) and set(e1) == {(1, st) for st in
                                                     range(es.epoch_batches(1))},
                  "rank %d: epoch 1 has %d re-sharded batches from %s, the elastic sampler "
                  "says %d" % (r, len(e1), min(got), es.epoch_batches(1)))
            for k, rows in e1.items():
                check([x[1] for x in sorted(rows)] == es.batch(1, r, k[1]),
                      "rank %d batch %s is not the elastic sampler's" % (r, k))
                for (_, sid, label, length, crc) in rows:
                    check((label, length, crc) == cat[sid][1:], "bytes of sample %d" % sid)
        check(counts == [1] * n, "epoch 1: samples delivered %s times" %
              sorted(set(counts)))
        log("4 ranks at 1:2 -> 2 ranks from the saved positions: epoch 1 finished in %d "
            "re-sharded batches each, every sample once" % es.epoch_batches(1))
    finally:
        for x in daemons:
            x.stop()
        cleanup(tmp)


def test_load_state_dict():
    """The StatefulDataLoader calls on a connected Loader: load_state_dict()
    before the first batch connects again with the record (same world size:
    the first batch is the one after it); a record that needs another plan
    than the first connection made is refused with the fix named; given to
    the constructor it works; a Loader that gave out batches refuses."""
    tmp = tmpdir("seer-rs-")
    try:
        root, cat = dataset(tmp, per_class=10)
        s = {"dataset.path": root, "job.seed": 3, "job.epochs": 3, "job.batch_size": 3,
             "cache.ram": "32KiB"}
        n = len(cat)
        with Daemon(tmp, s, name="a") as d:
            ld = seer.Loader(socket=d.sock, rank=0, world_size=2)
            h = ld.dataset_hash
            sd = seer.ElasticSampler(n, 3, 2, 3, dataset_hash=h).state_dict(None, 1, 2)
            ld.load_state_dict(sd)
            b = ld.next_batch()
            check((b.epoch, b.step) == (1, 2), "after load_state_dict: batch %d:%d" %
                  (b.epoch, b.step))
            check(b.ids.tolist() == seer.Sampler(n, 3, 2, 3).batch(1, 0, 2), "ids")
            st = ld.state_dict()
            check(st["epoch"] == 1 and st["segments"] == [{"world_size": 2, "steps": [3]}] and
                  st["rank"] == 0, "state_dict after batch 1:2: %s" % st)
            try:
                ld.load_state_dict(sd)
                raise Fail("load_state_dict after a batch was accepted")
            except seer.SeerError as e:
                check("already gave out batches" in str(e), str(e))
            b.release()
            # a 4-rank record re-shards epoch 1: another plan than this job's
            sd4 = seer.ElasticSampler(n, 3, 4, 3, dataset_hash=h).state_dict(None, 1, 1)
            ld2 = seer.Loader(socket=d.sock, rank=1, world_size=2)
            try:
                ld2.load_state_dict(sd4)  # kept for the connection (lazy), which seerd refuses
                ld2.connect()
                raise Fail("an elastic record was taken by a job planned without it")
            except seer.SeerError as e:
                check("needs another resume plan" in str(e) and "4 ranks at step 1" in str(e),
                      "refusal: %s" % e)
                log("refused: %s" % str(e)[:150])
            ld.close()
        with Daemon(tmp, s, name="b") as d:
            ld = seer.Loader(socket=d.sock, rank=1, world_size=2, state=sd4)
            es = seer.ElasticSampler(n, 3, 2, 3, dataset_hash=h, state=sd4)
            check(ld.epoch_batches(1) == es.epoch_batches(1) != ld.batches_per_epoch,
                  "epoch 1 has %d batches, the elastic sampler says %d" %
                  (ld.epoch_batches(1), es.epoch_batches(1)))
            b = ld.next_batch()
            check((b.epoch, b.step) == (1, 0) and b.ids.tolist() == es.batch(1, 1, 0),
                  "elastic first batch %d:%d %s" % (b.epoch, b.step, b.ids.tolist()))
            ld.close()
        log("load_state_dict, state_dict and an elastic state through the constructor")
    finally:
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_mpirun_sigterm_seerd, test_mpirun_sigterm_mpirun, test_slow_trainer_sigterm,
               test_sigkill_seerd, test_same_job_id_refused, test_rank_moves_to_another_node,
               test_checkpoint_record_after_sigkill, test_reconnect_across_restarts,
               test_elastic_one_node, test_elastic_two_nodes, test_elastic_every_format,
               test_auto_resume_other_world, test_load_state_dict])
