"""Faults and hostile input, injected for real; asserts on what trainers got.

Each test injects one fault and checks delivered bytes, labels and order
(against the files and the sampler function), exit codes, error messages
and timings:

  PFS errors       seer-pfsemu --fault-rate/--fault-kinds/--fault-path under
                   the dataset: transient faults are retried, a file that
                   always fails fails exactly its batches, with its name
  killed trainer   SIGKILL of a trainer that holds three batches
  peer death       SIGKILL of one of three seerd under mpirun (Open MPI's
                   default, and with orte_abort_on_non_zero_status=0)
  hostile clients  bin/seer-hostile (hostile.c) breaks the handshake, its
                   control region, the shared-memory seals, floods the socket
  another uid      a trainer run as user `seertest`: the socket's mode, then
                   SO_PEERCRED

Covered elsewhere: SIGKILLed trainer reconnect (test_single_node), NVMe
ENOSPC and corruption (test_nvme), SIGSTOPped peer (test_multi_node),
SIGTERM (test_ops). Measured figures and findings: docs/faults.md.

This file is also the Python trainer those tests start:
  /usr/bin/python3 test_faults.py trainer --rank R --world W --socket S --log F
      [--times F] [--compute-ms MS] [--pace-file F] [--release-first N --hold K --marker F]
      [--sync DIR --pause-at E:S ...]
"""

import argparse
import os
import pwd
import re
import signal
import stat
import subprocess
import sys
import time
import zlib

from seertest import (BIN, LONG, RECLAIM_BOUND_S, Daemon, Fail, Gate, MpiDaemons, Pauses,
                      catalog, check, cleanup, finish, log, make_classes, read_log, run_tests,
                      seer, start_trainer, tmpdir, verify_exactly_once, verify_rank, wait_for)

HERE = os.path.dirname(os.path.abspath(__file__))
HOSTILE = os.path.join(BIN, "seer-hostile")
EBATCH = -30806
# a well-behaved trainer must never wait longer than this for a batch while
# another client misbehaves (the daemon's own work per batch is ~1 ms here)
BYSTANDER_MAX_WAIT_S = 2.0
# the daemon names its own protocol version (proto/seer_proto.h)
with open(os.path.join(HERE, "..", "..", "proto", "seer_proto.h")) as _f:
    SEER_EPROTO_TEXT = "this seerd speaks %s" % re.search(
        r"#define SEER_PROTO_VERSION (\d+)u", _f.read()).group(1)
# libinfinipath (loaded with Open MPI's PSM support) catches SIGSEGV, SIGBUS
# and SIGABRT, prints "terminated with signal N" and exits 1; without it a
# crashed seerd dies by its signal, which is what these tests look for
DAEMON_ENV = {"IPATH_NO_BACKTRACE": "1"}
# the hostile client must die by the signal itself, also in the ASan build
HOSTILE_ENV = dict(os.environ, IPATH_NO_BACKTRACE="1",
                   ASAN_OPTIONS="handle_segv=0:handle_sigbus=0:detect_leaks=0")


# ---- the Python trainer ----------------------------------------------------------------

def trainer_main(argv):
    """A trainer on seer.Loader. Logs like seer-trainer ("E S i id label len crc"
    per sample, "E S FAILED msg" per failed batch, the failure coming from a
    seer.SeerError raised by iterating the Loader); --times gets "E S wait_s
    ok|failed gap_s" per batch (wait: since this trainer asked for it, after
    its work on the one before; gap: since the one before was delivered, or
    for the first since the trainer began connecting). Exit 1 if any batch
    failed. With --hold it releases --release-first batches, takes --hold more
    without releasing, writes them to --marker and waits to be killed."""
    ap = argparse.ArgumentParser(prog="test_faults.py trainer")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--times")
    ap.add_argument("--compute-ms", type=float, default=0.0)
    ap.add_argument("--pace-file", help="sleep --compute-ms per batch only while it exists")
    ap.add_argument("--release-first", type=int, default=0)
    ap.add_argument("--hold", type=int, default=0)
    ap.add_argument("--marker")
    ap.add_argument("--sync")
    ap.add_argument("--pause-at", action="append")
    a = ap.parse_args(argv)
    out = open(a.log, "w")
    times = open(a.times, "w") if a.times else None

    def record(b):
        for i, (v, sid, label) in enumerate(zip(b.samples, b.ids.tolist(), b.labels.tolist())):
            out.write("%d %d %d %d %d %d %08x\n" % (b.epoch, b.step, i, sid, label, v.nbytes,
                                                    zlib.crc32(v.reshape(-1).view("u1"))))

    t_got = time.monotonic()  # when the batch before was delivered (or we connected)
    with seer.Loader(socket=a.socket, rank=a.rank, world_size=a.world) as loader:
        pauses = Pauses(a.sync, a.pause_at, a.rank)
        if a.hold:
            taken, held = 0, []
            while True:
                try:
                    b = loader.next_batch()
                except seer.EndOfEpoch:
                    continue
                record(b)
                taken += 1
                if taken <= a.release_first:
                    b.release()
                    continue
                held.append(b)
                if len(held) == a.hold:
                    out.flush()
                    with open(a.marker + ".tmp", "w") as f:
                        f.write("".join("%d %d\n" % (x.epoch, x.step) for x in held))
                    os.rename(a.marker + ".tmp", a.marker)
                    # killed here, holding them (or gone when the test removed its files)
                    t0 = time.monotonic()
                    while os.path.exists(a.marker) and time.monotonic() - t0 < 3600:
                        time.sleep(0.05)
                    return 1
        failed = 0
        for _ in range(loader.epochs):
            while True:
                t_prev = time.monotonic()
                try:
                    for b in loader:
                        t = time.monotonic()
                        waited = t - t_prev
                        record(b)
                        if times:
                            times.write("%d %d %.6f ok %.6f\n" % (b.epoch, b.step, waited,
                                                                  t - t_got))
                        t_got = t
                        if a.compute_ms and (not a.pace_file or os.path.exists(a.pace_file)):
                            time.sleep(a.compute_ms / 1000.0)
                        pauses.at(b.epoch, b.step)  # a pause is not a wait for a batch
                        t_prev = time.monotonic()
                    break  # the epoch is complete
                except seer.SeerError as ex:
                    t = time.monotonic()
                    waited = t - t_prev
                    m = re.match(r"batch (\d+):(\d+) failed: (.*)", str(ex), re.S)
                    if ex.code != EBATCH or not m:
                        raise
                    out.write("%s %s FAILED %s\n" % (m.group(1), m.group(2),
                                                     m.group(3).replace("\n", " ")))
                    if times:
                        times.write("%s %s %.6f failed %.6f\n" % (m.group(1), m.group(2), waited,
                                                                  t - t_got))
                    t_got = t
                    failed += 1
                    # iterating again continues with the next batch
    out.close()
    if times:
        times.close()
    return 1 if failed else 0


def start_py(rank, world, sock, logfile, *extra):
    args = ["/usr/bin/python3", os.path.abspath(__file__), "trainer", "--rank", str(rank),
            "--world", str(world), "--socket", sock, "--log", logfile] + [str(x) for x in extra]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_times(path):
    """[(epoch, step, wait_s, ok, gap_s)] in delivery order."""
    out = []
    with open(path) as f:
        for line in f:
            e, s, w, k, g = line.split()
            out.append((int(e), int(s), float(w), k == "ok", float(g)))
    return out


# ---- helpers ------------------------------------------------------------------------------

def fd_count(pid):
    """Descriptors of pid other than dataset files (the I/O threads keep a
    cache of those): sockets, memfds, eventfds, pipes, ..."""
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if not (target.startswith("/") and os.path.isfile(target)) or target.startswith("/dev/"):
            n += 1
    return n


def exit_text(rc):
    """How a process ended; the ASan build reports a fatal signal as exit 1."""
    return "killed by %s" % signal.Signals(-rc).name if rc is not None and rc < 0 else \
        "exit %s" % rc


def daemon_rc_settled(d):
    """None if seerd still runs once it has answered a status request (its
    dispatcher handled what came before), else its exit status."""
    try:
        d.status()
        return d.proc.poll()
    except Fail:
        try:
            return d.proc.wait(LONG)
        except subprocess.TimeoutExpired:
            return None


def trainer_status(d, rank):
    for t in d.status()["trainers"]:
        if t["rank"] == rank:
            return t
    return None


def verify_one(cat, sampler, rank, key, got):
    """One delivered batch equals the sampler's and the files' bytes."""
    verify_rank(cat, sampler, rank, {key: got}, key[0] + 1, first=key,
                last=(key[0], key[1] + 1))


def verify_prefix(cat, sampler, rank, batches):
    """Batches from (0, 0) up to the last one logged: none missing, all exact.
    Returns how many."""
    if not batches:
        return 0
    bpe = sampler.batches_per_epoch
    last = max(batches)
    verify_rank(cat, sampler, rank, batches, last[0] + 1, first=(0, 0),
                last=(last[0], last[1] + 1) if last[1] + 1 < bpe else (last[0] + 1, 0))
    return len(batches)


def pfs_tools():
    import test_multi_node as mn
    check(mn.pfsemu_available(), "the fault tests need bin/seer-pfsemu and /dev/fuse")
    return mn


def daemon_retry_count(stats):
    """The daemon's count of retried reads, wherever its stats report it:
    the sum over epochs if per epoch, else the largest total. None if absent."""
    per_epoch, totals = [], []

    def walk(x, in_epochs):
        if isinstance(x, dict):
            for k, v in x.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and "retr" in k:
                    (per_epoch if in_epochs else totals).append(v)
                else:
                    walk(v, in_epochs or k == "epochs")
        elif isinstance(x, list):
            for v in x:
                walk(v, in_epochs)
    walk(stats, False)
    if per_epoch:
        return sum(per_epoch)
    return max(totals) if totals else None


# ---- PFS faults -------------------------------------------------------------------------------

CLASSES = ["a", "b", "c", "d", "e", "f"]


def pfs_dataset(tmp, per_class=20, seed=31):
    src = os.path.join(tmp, "data")
    make_classes(src, CLASSES, per_class, 2000, 12000, seed=seed)
    return src, catalog(src)


def test_pfs_transient_faults():
    """5 % of reads fail with EIO, ENOENT or come back short: every batch
    still arrives with exact bytes; the daemon's retries account for every
    injected error."""
    mn = pfs_tools()
    tmp = tmpdir("seer-ft-")
    mnt = os.path.join(tmp, "pfs")
    mounted = False
    try:
        src, cat = pfs_dataset(tmp, per_class=30)
        os.environ["PFSEMU_LOG"] = os.path.join(tmp, "pfsemu.log")
        mn.mount_pfs(src, mnt, "--fault-rate", "0.05", "--fault-kinds", "eio,enoent,short",
                     "--fault-seed", "7")
        mounted = True
        world, epochs, batch = 3, 5, 4
        s = {"dataset.path": mnt, "job.seed": 17, "job.epochs": epochs, "job.batch_size": batch,
             "cache.ram": "256KiB", "cache.staging": "2MiB", "prefetch.io_threads": 4,
             "prefetch.lookahead": 4, "prefetch.retries": 4, "prefetch.retry_backoff_ms": 2}
        t0 = time.time()
        with Daemon(tmp, s, env=DAEMON_ENV) as d:
            logs = [os.path.join(tmp, "r%d.log" % r) for r in range(world)]
            procs = [start_trainer("c", 0, world, d.sock, logs[0]),
                     start_py(1, world, d.sock, logs[1]),
                     start_trainer("c", 2, world, d.sock, logs[2])]
            for r, (rc, _, err) in enumerate(finish(procs, timeout=300)):
                check(rc == 0, "trainer %d failed under 5%% transient faults: %s\n%s" %
                      (r, err, d.log()[-3000:]))
            check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
        elapsed = time.time() - t0
        ps = mn.pfs_stats(mnt)["totals"]
        faults = ps["faults"]
        sampler = seer.Sampler(len(cat), 17, world, batch)
        all_logs = [read_log(p) for p in logs]
        n = sum(verify_rank(cat, sampler, r, all_logs[r], epochs) for r in range(world))
        verify_exactly_once(cat, all_logs, epochs, world, batch, drop_last=False)
        st = d.stats()
        failed = sum(e["failed_batches"] for e in st["epochs"])
        errors = faults["eio"] + faults["enoent"]
        log("%d reads through the emulator, faults injected: %s; %d batches (%d samples) "
            "verified exact, %d failed; job took %.2f s" %
            (ps["reads"], faults, n, n * batch, failed, elapsed))
        check(faults["eio"] > 0 and faults["enoent"] > 0 and faults["short"] > 0,
              "the emulator injected too few faults to test anything: %s" % faults)
        check(failed == 0, "%d batches failed although every read succeeds within 4 retries" %
              failed)
        # the retries must be visible to the operator: stats or log
        retries = daemon_retry_count(st)
        logged = [ln for ln in d.log().splitlines() if re.search(r"retr(y|ies|ied|ying)", ln)]
        log("daemon-reported retries: %s in the stats, %d log lines (injected errors: %d)" %
            (retries, len(logged), errors))
        check(retries is not None or logged,
              "the daemon retried %d failed reads but neither its stats nor its log say so "
              "(a PFS going bad is invisible until reads fail for good)" % errors)
        if retries is not None:
            check(retries == errors, "the daemon counts %d retries, the emulator injected %d "
                  "EIO/ENOENT (each costs exactly one retry)" % (retries, errors))
    finally:
        if mounted:
            pfs_tools().umount_pfs(mnt)
        cleanup(tmp)


def test_pfs_file_always_fails():
    """One file fails every read: exactly the batches holding its sample fail,
    with the file named, through the C API and as a seer.SeerError; every
    other batch of every trainer is exact and the daemon keeps serving."""
    mn = pfs_tools()
    tmp = tmpdir("seer-ft-")
    mnt = os.path.join(tmp, "pfs")
    mounted = False
    try:
        src, cat = pfs_dataset(tmp)
        world, epochs, batch, seed = 3, 3, 4, 23
        sampler = seer.Sampler(len(cat), seed, world, batch)
        bpe = sampler.batches_per_epoch

        def where(sid):
            return [(e, r, s) for e in range(epochs) for r in range(world) for s in range(bpe)
                    if sid in sampler.batch(e, r, s)]
        # a sample that the Python trainer (rank 1) and a C trainer both meet
        bad = next(i for i in range(len(cat))
                   if {1} < {r for _, r, _ in where(i)} and
                   sum(1 for p in cat if cat[i][0] in p[0]) == 1)
        bad_path = cat[bad][0]
        hits = where(bad)
        os.environ["PFSEMU_LOG"] = os.path.join(tmp, "pfsemu.log")
        mn.mount_pfs(src, mnt, "--fault-rate", "1", "--fault-kinds", "eio",
                     "--fault-path", bad_path)
        mounted = True
        retries, backoff_ms = 3, 20
        backoff_s = sum(backoff_ms * 2 ** k for k in range(retries)) / 1000.0
        s = {"dataset.path": mnt, "job.seed": seed, "job.epochs": epochs,
             "job.batch_size": batch, "cache.ram": "0", "cache.staging": "1MiB",
             "prefetch.io_threads": 4, "prefetch.lookahead": 1,
             "prefetch.retries": retries, "prefetch.retry_backoff_ms": backoff_ms}
        with Daemon(tmp, s, env=DAEMON_ENV) as d:
            logs = [os.path.join(tmp, "r%d.log" % r) for r in range(world)]
            times = os.path.join(tmp, "r1.times")
            procs = [start_trainer("c", 0, world, d.sock, logs[0]),
                     start_py(1, world, d.sock, logs[1], "--times", times),
                     start_trainer("c", 2, world, d.sock, logs[2])]
            res = finish(procs, timeout=300)
            check(d.wait(LONG) == 0, "seerd did not finish the job after the failed batches:\n" +
                  d.log())
        failing = {}
        for e, r, st in hits:
            failing.setdefault(r, set()).add((e, st))
        verified = 0
        for r in range(world):
            rc, _, err = res[r]
            got = read_log(logs[r])
            want_failed = failing.get(r, set())
            check(rc == (1 if want_failed else 0),
                  "rank %d exited %d (%d failed batches expected): %s" % (r, rc,
                                                                        len(want_failed), err))
            for key in sorted(want_failed):
                check(isinstance(got.get(key), str),
                      "rank %d batch %s holds sample %d (%s) whose file always fails, but it "
                      "was delivered: %s" % (r, key, bad, bad_path, str(got.get(key))[:80]))
                check(bad_path in got[key] and "Input/output error" in got[key],
                      "rank %d batch %s: the error does not name %s and the cause: %r" %
                      (r, key, bad_path, got[key]))
                check("after %d attempts" % (retries + 1) in got[key],
                      "rank %d batch %s: the error does not say it was retried: %r" %
                      (r, key, got[key]))
            if want_failed and r != 1:
                check(re.search(r"batch \d+:\d+ failed: .*%s" % re.escape(bad_path), err),
                      "seer-trainer %d did not print the failed batch with the file: %s" %
                      (r, err))
            for key in sorted(got):
                if key in want_failed:
                    continue
                check(not isinstance(got[key], str), "rank %d batch %s failed but holds no "
                      "failing sample: %s" % (r, key, got[key]))
                verify_one(cat, sampler, r, key, got[key])
                verified += 1
            check(len(got) == epochs * bpe, "rank %d got %d batches of %d" %
                  (r, len(got), epochs * bpe))
        st = d.stats()
        failed_stat = sum(e["failed_batches"] for e in st["epochs"])
        check(failed_stat == len(hits), "stats count %d failed batches, %d expected" %
              (failed_stat, len(hits)))
        # timings of the Python trainer: the failed batch waits for the retries,
        # the next one comes at once
        tm = read_times(times)
        py_failed = [i for i, x in enumerate(tm) if not x[3]]
        check(len(py_failed) == len(failing[1]), "the Python trainer saw %d SeerError, %d "
              "expected" % (len(py_failed), len(failing[1])))
        normal = sorted(x[2] for x in tm if x[3])
        median = normal[len(normal) // 2]
        for i in py_failed:
            waited = tm[i][2]
            nxt = tm[i + 1][2] if i + 1 < len(tm) else 0.0
            log("batch %d:%d (sample %d, %s) failed after %.0f ms in the trainer's wait, "
                "%.0f ms after the batch before was delivered (backoff %.0f ms over %d "
                "retries); next batch after %.1f ms (median %.1f ms)" %
                (tm[i][0], tm[i][1], bad, bad_path, waited * 1e3, tm[i][4] * 1e3,
                 backoff_s * 1e3, retries, nxt * 1e3, median * 1e3))
            check(waited < backoff_s + 2.0, "the failed batch took %.2f s" % waited)
            check(nxt < 1.0, "the batch after the failure took %.2f s to arrive" % nxt)
        # the read of the failing sample began no earlier than when the batch
        # before was delivered (lookahead 1, no cache): it cannot fail sooner
        # than its backoff after that (the trainer's own work on the batch
        # before, slower on a busy machine, does not count)
        lat = [tm[i][4] for i in py_failed]
        check(max(lat) >= 0.8 * backoff_s, "every failed batch arrived %.0f ms or less after "
              "the batch before, before its %.0f ms of backoff could have run" %
              (max(lat) * 1e3, backoff_s * 1e3))
        log("%d failed batches as expected (%s), %d other batches verified exact" %
            (len(hits), ", ".join("rank %d %d:%d" % (r, e, st) for e, r, st in hits), verified))
        ps = mn.pfs_stats(mnt)["totals"]
        log("emulator: %d faults injected into %s" % (ps["errors_injected"], bad_path))
    finally:
        if mounted:
            pfs_tools().umount_pfs(mnt)
        cleanup(tmp)


# ---- a trainer killed while holding batches -------------------------------------------------

def test_killed_holding_batches():
    tmp = tmpdir("seer-ft-")
    try:
        root = os.path.join(tmp, "data")
        make_classes(root, ["x", "y", "z", "w"], 30, 3000, 12000, seed=41)
        cat = catalog(root)
        world, epochs, batch = 3, 40, 4
        s = {"dataset.path": root, "job.seed": 2, "job.epochs": epochs, "job.batch_size": batch,
             "cache.ram": "64KiB", "cache.staging": "2MiB", "prefetch.lookahead": 2,
             "prefetch.io_threads": 4}
        sampler = seer.Sampler(len(cat), 2, world, batch)
        # the bystanders run beside the kill; they pause in the last epoch, so
        # they cannot have finished before it however slow the machine is
        gate, last = Gate(tmp), (epochs - 1, 0)
        with Daemon(tmp, s, env=DAEMON_ENV) as d:
            logs = [os.path.join(tmp, "r%d.log" % r) for r in range(world)]
            marker = os.path.join(tmp, "held")
            times = os.path.join(tmp, "r1.times")
            by = [start_trainer("c", 0, world, d.sock, logs[0],
                                ["--compute-ms", "10"] + gate.args(last)),
                  start_py(1, world, d.sock, logs[1], "--compute-ms", "10", "--times", times,
                           *gate.args(last))]
            victim = start_py(2, world, d.sock, logs[2], "--release-first", "2", "--hold", "3",
                              "--marker", marker)
            wait_for(lambda: os.path.exists(marker) or victim.poll() is not None, LONG,
                     "the holding trainer to take its batches")
            if victim.poll() is not None:
                raise Fail("the holding trainer exited: %s" % victim.communicate()[1])
            with open(marker) as f:
                held = [tuple(map(int, ln.split())) for ln in f]
            check(held == [(0, 2), (0, 3), (0, 4)], "held batches %s" % held)
            t = wait_for(lambda: (lambda x: x if x and x["held"] == 3 else None)(
                trainer_status(d, 2)), LONG, "the daemon to see three held batches")
            log("before the kill: rank 2 holds %d batches, staging %d B in use, %d ready unread"
                % (t["held"], t["staging_used"], t["ready_unread"]))
            check(t["staging_used"] > 0, "held batches use no staging: nothing to reclaim")
            check(all(p.poll() is None for p in by), "the other trainers ended too early")
            victim.kill()
            t_kill = time.time()
            victim.wait()
            polls = [0]

            def reclaimed():
                polls[0] += 1
                x = trainer_status(d, 2)
                return x and not x["attached"] and x["staging_used"] == 0 and x["inflight"] == 0
            wait_for(reclaimed, LONG, "the killed trainer's staging to be reclaimed", step=0.002)
            dt = time.time() - t_kill
            log("SIGKILL while holding 3 batches: detached and staging reclaimed within "
                "%.0f ms (%d status polls)" % (dt * 1e3, polls[0]))
            check(dt < RECLAIM_BOUND_S, "reclaim took %.2f s (> %.0f s)" % (dt, RECLAIM_BOUND_S))
            check(d.proc.poll() is None, "seerd died with the trainer")
            t = trainer_status(d, 2)
            check((t["epoch"], t["step"]) == held[0], "rank 2 will resume at %d:%d, its first "
                  "unreleased batch is %d:%d" % (t["epoch"], t["step"], held[0][0], held[0][1]))
            relog = os.path.join(tmp, "r2-again.log")
            again = start_trainer("c", 2, world, d.sock, relog)
            gate.go(last)
            for rc, _, err in finish([again] + by):
                check(rc == 0, "a trainer failed after the kill: %s\n%s" % (err, d.log()[-2000:]))
            check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
        first = read_log(logs[2])
        verify_rank(cat, sampler, 2, first, epochs, last=(0, 5))
        second = read_log(relog)
        check(min(second) == held[0], "rank 2 resumed at %s, expected %s" % (min(second),
                                                                             held[0]))
        n = verify_rank(cat, sampler, 2, second, epochs, first=held[0])
        for r in (0, 1):
            n += verify_rank(cat, sampler, r, read_log(logs[r]), epochs)
        waits = [x[2] for x in read_times(times)[1:]]
        log("bystander rank 1: longest wait for a batch %.1f ms; %d batches verified" %
            (max(waits) * 1e3, n))
        check(max(waits) < BYSTANDER_MAX_WAIT_S, "rank 1 waited %.2f s for a batch" % max(waits))
    finally:
        cleanup(tmp)


# ---- a peer daemon dies ------------------------------------------------------------------------

def running(pid):
    """pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def peer_death(mca, survivors_hold_last=False):
    """Three seerd under mpirun (extra `mca` options), six trainers, node 2's
    seerd SIGKILLed in epoch 1. With survivors_hold_last, the other nodes'
    trainers hold their last batch until their daemons' status is taken (once
    their trainers are done, they leave 5 s later: the dead node never
    answers). Returns what happened."""
    import test_multi_node as mn

    tmp = tmpdir("seer-ft-")
    out = {"tmp": tmp}
    try:
        src = os.path.join(tmp, "data")
        make_classes(src, ["c%02d" % i for i in range(12)], 23, 4000, 16000, seed=12)
        cat = catalog(src)
        epochs = 30
        s = {"dataset.path": src, "job.seed": 9, "job.epochs": epochs, "job.batch_size": 4,
             "cache.ram": "1MiB", "cache.staging": "2MiB", "prefetch.io_threads": 4,
             "prefetch.lookahead": 2, "net.peer_timeout_ms": 300}
        cl = MpiDaemons(tmp, mn.NODES, s, mca=mca)
        sampler = seer.Sampler(len(cat), 9, mn.WORLD, 4)
        gate, at, last = Gate(tmp), (1, 3), (epochs - 1, sampler.batches_per_epoch - 1)
        try:
            nodes = mn.placement("block")
            logs = [os.path.join(tmp, "r%d.log" % r) for r in range(mn.WORLD)]
            survivors = [r for r in range(mn.WORLD) if nodes[r] != 2]
            procs = [start_trainer("c", r, mn.WORLD, cl.socket(nodes[r]), logs[r],
                                   ["--compute-ms", "15"] +
                                   gate.args(at, *([last] if survivors_hold_last and
                                                   r in survivors else [])))
                     for r in range(mn.WORLD)]
            # every trainer holds its batch 1:3 (the caches are filled), then all
            # go on and node 2's seerd is killed while they run: 29 epochs remain
            gate.wait(range(mn.WORLD), at, procs)
            pids = [cl.status(k)["pid"] for k in range(mn.NODES)]
            gate.go(at)
            os.kill(pids[2], signal.SIGKILL)
            t_kill = time.time()
            ends, bound = {}, LONG

            def poll_ends():
                for r, p in enumerate(procs):
                    if r not in ends and p.poll() is not None:
                        ends[r] = time.time() - t_kill
            survivors_status, holding = {}, False
            if survivors_hold_last:
                while time.time() - t_kill < bound:
                    poll_ends()
                    holding = all(gate.held(r, last) for r in survivors)
                    if holding or any(r in ends for r in survivors):
                        break
                    time.sleep(0.01)
                if holding:  # every read of the job is done; the daemons still run
                    survivors_status = {k: cl.status(k) for k in (0, 1)}
                gate.go(last)
            while len(ends) < mn.WORLD and time.time() - t_kill < bound:
                poll_ends()
                time.sleep(0.01)
            hung = [r for r in range(mn.WORLD) if r not in ends]
            for r in hung:
                procs[r].kill()
            res = [(p.wait(), p.stdout.read(), p.stderr.read()) for p in procs]
            # the daemons that are left: do they end on their own?
            t_done = time.time()
            try:
                mpirun_rc = cl.proc.wait(60)
            except subprocess.TimeoutExpired:
                mpirun_rc = None
            mpirun_s, exit_after = time.time() - t_kill, time.time() - t_done

            def alive():
                return [k for k in range(mn.NODES) if running(pids[k])]
            # mpirun may return while a daemon it killed is still being torn
            # down (a sanitized one unmaps a lot): wait for that state, bounded
            t_end = time.time()
            while alive() and time.time() - t_end < 10:
                time.sleep(0.01)
            out.update(nodes=nodes, ends=ends, hung=hung, res=res, pids=pids,
                       survivors_status=survivors_status, mpirun_rc=mpirun_rc,
                       mpirun_s=mpirun_s, exit_after_trainers=exit_after,
                       alive=alive(), gone_after_mpirun_s=time.time() - t_end)
        finally:
            cl.kill()
            out["log"] = cl.log()
        out["verified"] = [verify_prefix(cat, sampler, r, read_log(logs[r]))
                           for r in range(mn.WORLD)]
        out["epochs"] = epochs
        out["bpe"] = sampler.batches_per_epoch
        return out
    finally:
        cleanup(tmp)


def describe(out):
    for r, (rc, _, err) in enumerate(out["res"]):
        log("rank %d (node %d): exit %s after %s, %d batches verified; %s" %
            (r, out["nodes"][r], rc, "%.2f s" % out["ends"][r] if r in out["ends"] else "HUNG",
             out["verified"][r], err.strip().splitlines()[-1] if err.strip() else "no message"))
    log("mpirun exit %s %.1f s after the kill; seerd still running 10 s later: nodes %s "
        "(the last gone %.2f s after mpirun)" % (out["mpirun_rc"], out["mpirun_s"], out["alive"],
                                                 out["gone_after_mpirun_s"]))


def test_peer_daemon_killed_default_mpirun():
    """Open MPI's default: the job is aborted. No trainer may hang; each
    gets an error; every batch delivered before is exact."""
    out = peer_death([])
    describe(out)
    check(not out["hung"], "trainers %s hung > %.0f s after a daemon died" % (out["hung"], LONG))
    for r, (rc, _, err) in enumerate(out["res"]):
        if out["nodes"][r] == 2:
            # a crash, told apart from a stop (SEER_EDAEMON)
            check(rc != 0 and "went away without stopping the job" in err,
                  "rank %d lost its daemon: exit %d, %r" % (r, rc, err))
            check(out["ends"][r] < 2.0, "rank %d noticed its daemon's death after %.2f s" %
                  (r, out["ends"][r]))
        elif rc == 0:
            check(out["verified"][r] == out["epochs"] * out["bpe"], "rank %d" % r)
        else:
            check("shutting down" in err or "went away without stopping the job" in err,
                  "rank %d: exit %d without a clear error: %r" % (r, rc, err))
    check(out["mpirun_rc"] not in (None, 0), "mpirun exit %s after a daemon was killed" %
          out["mpirun_rc"])
    check(not out["alive"], "seerd of nodes %s still running 10 s after mpirun ended" %
          out["alive"])


def test_peer_daemon_killed_survivors_finish():
    """With orte_abort_on_non_zero_status=0 the other two daemons keep
    serving: their trainers finish the whole job with exact data (peer
    fetches fall back to the PFS), the dead node's trainers get an error at
    once, and the surviving daemons must then exit rather than wait forever
    for the dead one."""
    out = peer_death([("orte_abort_on_non_zero_status", "0")], survivors_hold_last=True)
    describe(out)
    check(not out["hung"], "trainers %s hung > %.0f s after a daemon died" % (out["hung"], LONG))
    full = out["epochs"] * out["bpe"]
    for r, (rc, _, err) in enumerate(out["res"]):
        if out["nodes"][r] == 2:
            check(rc != 0 and "went away without stopping the job" in err and
                  out["ends"][r] < 2.0,
                  "rank %d lost its daemon: exit %d after %.2f s, %r" % (r, rc, out["ends"][r],
                                                                       err))
        else:
            check(rc == 0 and out["verified"][r] == full,
                  "rank %d on a surviving node: exit %d, %d of %d batches: %s" %
                  (r, rc, out["verified"][r], full, err))
    check(sorted(out["survivors_status"]) == [0, 1], "no status of the surviving daemons")
    fb = sum(e["peer_fallbacks"] for st in out["survivors_status"].values()
             for e in st["epochs"])
    log("surviving daemons: %d peer fetches fell back to the PFS" % fb)
    check(fb > 0, "no fallback to the PFS after a peer died")
    waiting = [ln.split(" ", 2)[-1] for ln in out["log"].splitlines()
               if "serving peers until every node is done" in ln]
    check(out["mpirun_rc"] is not None,
          "the surviving seerd (nodes %s) did not exit within %.0f s after their trainers "
          "finished: they wait forever in the end-of-job barrier for the dead node; last "
          "words: %s" % (out["alive"], out["exit_after_trainers"], waiting))


# ---- hostile clients ----------------------------------------------------------------------------

class Bystanders:
    """A seerd for world 3: ranks 0 and 1 are well-behaved Python trainers
    (paced while the pace file exists, timing every batch, paused at the last
    epoch until finish(): they outlive the hostile clients however long those
    take); rank 2 is left to hostile clients. finish() lets rank 2 complete
    with seer-trainer and verifies every rank."""

    def __init__(self, tmp, epochs=150, **settings):
        self.tmp = tmp
        root = os.path.join(tmp, "data")
        make_classes(root, ["p", "q", "r", "s", "t", "u"], 20, 1000, 8000, seed=51)
        self.cat = catalog(root)
        self.epochs = epochs
        s = {"dataset.path": root, "job.seed": 6, "job.epochs": epochs, "job.batch_size": 4,
             "cache.ram": "128KiB", "cache.staging": "1MiB", "prefetch.lookahead": 2,
             "prefetch.io_threads": 4}
        s.update(settings)
        self.d = Daemon(tmp, s, env=DAEMON_ENV)
        self.pace = os.path.join(tmp, "pace")
        open(self.pace, "w").close()
        self.logs = [os.path.join(tmp, "r%d.log" % r) for r in range(3)]
        self.times = [os.path.join(tmp, "r%d.times" % r) for r in range(2)]
        self.gate, self.last = Gate(tmp), (epochs - 1, 0)
        self.procs = [start_py(r, 3, self.d.sock, self.logs[r], "--compute-ms", "10",
                               "--pace-file", self.pace, "--times", self.times[r],
                               *self.gate.args((0, 0), self.last))
                      for r in range(2)]
        # both attached, holding their first batch: the daemon's descriptors
        # now (no `seerctl status` connection still being closed among them)
        # are what it must come back to
        self.gate.wait(range(2), (0, 0), self.procs)
        self.fds = fd_count(self.d.proc.pid)
        self.gate.go((0, 0))
        self.problems = []

    def alive(self):
        return self.d.proc.poll() is None

    def hostile(self, mode, rank=2, timeout=LONG, **kw):
        args = [HOSTILE, "--socket", self.d.sock, "--mode", mode, "--rank", str(rank),
                "--world", "3"]
        for k, v in kw.items():
            args += ["--" + k, str(v)]
        mark = len(self.d.log())
        t0 = time.time()
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                           env=HOSTILE_ENV)
        dt = time.time() - t0
        res = " | ".join(ln for ln in r.stdout.splitlines() if ln.startswith(("RESULT", "CHECK",
                                                                               "FLOOD")))
        log("%-12s exit %-4s %.2f s: %s" % (mode, r.returncode, dt, res))
        check(self.alive(), "seerd died (%s) after hostile mode %s:\n%s" %
              (self.d.proc.returncode, mode, self.d.log()[-2000:]))
        return r, mark

    def expect(self, cond, what):
        if not cond:
            self.problems.append(what)
            log("PROBLEM: " + what)

    def expect_log(self, mark, pattern, what, timeout=60.0):
        t0 = time.time()
        while time.time() - t0 < timeout:
            new = self.d.log()[mark:]
            m = re.search(pattern, new)
            if m:
                line = new[:m.end()].rsplit("\n", 1)[-1] + new[m.end():].split("\n", 1)[0]
                log("   daemon: " + line.split(" ", 3)[-1].strip())
                return True
            time.sleep(0.02)
        self.expect(False, "%s: the daemon logged nothing matching %r" % (what, pattern))
        return False

    def finish(self):
        check(self.alive(), "seerd died:\n" + self.d.log()[-2000:])
        check(all(p.poll() is None for p in self.procs),
              "a bystander exited before the hostile clients were done: %s" %
              "; ".join(p.stderr.read() for p in self.procs if p.poll() is not None))
        # every hostile session and connection is gone: no descriptor leaked
        try:
            wait_for(lambda: fd_count(self.d.proc.pid) == self.fds, LONG,
                     "the daemon's descriptors to return to %d" % self.fds, step=0.05)
        except Fail:
            self.expect(False, "seerd holds %d descriptors, %d before the hostile clients" %
                        (fd_count(self.d.proc.pid), self.fds))
        t2 = trainer_status(self.d, 2)
        start = (t2["epoch"], t2["step"]) if t2 else (0, 0)
        os.unlink(self.pace)
        relog = os.path.join(self.tmp, "r2-final.log")
        last = start_trainer("c", 2, 3, self.d.sock, relog)
        self.gate.go(self.last)
        for r, (rc, _, err) in enumerate(finish(self.procs + [last], timeout=300)):
            check(rc == 0, "trainer %d failed: %s\n%s" % (r, err, self.d.log()[-2000:]))
        check(self.d.wait(LONG) == 0, "seerd failed at the end:\n" + self.d.log()[-3000:])
        sampler = seer.Sampler(len(self.cat), 6, 3, 4)
        n = 0
        for r in range(2):
            n += verify_rank(self.cat, sampler, r, read_log(self.logs[r]), self.epochs)
        got = read_log(relog)
        check(min(got) == start, "rank 2 resumed at %s, the daemon said %s" % (min(got), start))
        n += verify_rank(self.cat, sampler, 2, got, self.epochs, first=start)
        waits = []
        for p in self.times:
            waits += [x[2] for x in read_times(p)[1:]]
        log("bystanders: %d batches verified exact; longest wait for a batch %.1f ms" %
            (n, max(waits) * 1e3))
        check(max(waits) < BYSTANDER_MAX_WAIT_S,
              "a well-behaved trainer waited %.2f s for a batch" % max(waits))
        check(not self.problems, "%d problem(s):\n  %s" % (len(self.problems),
                                                           "\n  ".join(self.problems)))

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.d.stop(signal.SIGKILL if self.d.proc.poll() is None else signal.SIGTERM)


def with_bystanders(body, **kw):
    tmp = tmpdir("seer-ft-")
    env = None
    try:
        env = Bystanders(tmp, **kw)
        body(env)
        env.finish()
    finally:
        if env:
            env.kill()
        cleanup(tmp)


def test_hostile_handshakes():
    """Broken handshakes: refused with a message naming the problem, logged
    by the daemon; everybody else keeps receiving exact data."""
    def body(b):
        cases = [
            ("version", 2, SEER_EPROTO_TEXT, r"protocol version"),
            ("short-hello", 2, "malformed handshake", r"malformed handshake \(648 bytes\)"),
            ("bad-magic", 2, "malformed handshake", r"malformed handshake \(1296 bytes\)"),
            ("bad-kind", 2, "", r"(unknown|unexpected|invalid).*(kind|message)"),
            ("dup-rank", 0, "already connected", r"rank 0 .*already connected"),
            ("rank-range", 2, "is not in [0, world size 3)", r"not in \[0, world size 3\)"),
        ]
        for mode, rank, text, pattern in cases:
            r, mark = b.hostile(mode, rank=rank)
            b.expect(r.returncode == 0 and text in r.stdout,
                     "%s: the client got no clear refusal: %s" % (mode, r.stdout.strip()))
            b.expect_log(mark, pattern, mode)
    with_bystanders(body)


def test_hostile_control_region():
    """A trainer writing garbage into its ctrl_in: evicted with the reason
    logged (or, for the consumer index, which is only a hint, served again
    once it is sane); nobody else notices."""
    def body(b):
        evictions = [
            ("rel-garbage", r"released a batch slot it does not hold"),
            ("rel-ahead", r"release ring index out of range"),
            ("rel-unheld", r"released a batch slot it does not hold"),
            ("rel-double", r"released a batch slot it does not hold"),
            ("sock-garbage", r"unknown message on the socket"),
        ]
        for mode, why in evictions:
            r, mark = b.hostile(mode, seed=len(mode))
            b.expect(r.returncode == 0 and "RESULT evicted state=EVICTED" in r.stdout,
                     "%s: not evicted: %s" % (mode, r.stdout.strip()))
            b.expect_log(mark, r"rank 2 \(pid \d+\) sent invalid control data \(%s\)" % why,
                         mode)
        for mode in ("cons-ahead", "cons-behind"):
            r, _ = b.hostile(mode, seconds=1, count=5)
            b.expect(r.returncode == 0 and "RESULT recovered" in r.stdout,
                     "%s: the stream did not resume once the consumer index was sane: %s" %
                     (mode, r.stdout.strip()))
        r, _ = b.hostile("seek-range")
        b.expect(r.returncode == 0, "seek past the end: %s" % r.stdout.strip())
        r, _ = b.hostile("efd-flood", seconds=2)
        b.expect(r.returncode == 0, "eventfd flood: %s" % r.stdout.strip())
    with_bystanders(body)


def test_hostile_shared_memory():
    """The arena and ctrl_out cannot be written: no writable mapping, no
    mprotect, no write(), no truncation, seals sealed; a write through the
    read-only mapping kills the writer with SIGSEGV, not the daemon."""
    def body(b):
        r, _ = b.hostile("mmap-rw")
        check(r.returncode == 0, "a trainer could write the daemon's memory:\n" + r.stdout)
        for mode in ("write-arena", "write-ctrl"):
            r, mark = b.hostile(mode)
            check(r.returncode == -signal.SIGSEGV, "%s: exit %s, expected SIGSEGV: %s" %
                  (mode, r.returncode, r.stdout))
            b.expect_log(mark, r"rank 2 \(pid \d+\) detached: connection closed", mode)
    with_bystanders(body)


def test_hostile_connections():
    """A connection that never says hello is closed after the handshake
    timeout; 300 such connections at once are survived, and a trainer
    connecting meanwhile gets in (or is told why not)."""
    def body(b):
        silent = subprocess.Popen([HOSTILE, "--socket", b.d.sock, "--mode", "silent",
                                   "--seconds", "30"], stdout=subprocess.PIPE, text=True,
                                  env=HOSTILE_ENV)
        mark = len(b.d.log())
        flood = subprocess.Popen([HOSTILE, "--socket", b.d.sock, "--mode", "flood", "--count",
                                  "300", "--seconds", "3"], stdout=subprocess.PIPE, text=True,
                                 env=HOSTILE_ENV)
        wait_for(lambda: "too many connections" in b.d.log()[mark:] or flood.poll() is not None,
                 LONG, "the flood to fill the handshake queue", step=0.02)
        t0 = time.time()
        newcomer = subprocess.run([os.path.join(BIN, "seer-trainer"), "--rank", "2", "--world",
                                   "3", "--socket", b.d.sock, "--quiet", "--kill-after", "1"],
                                  capture_output=True, text=True, timeout=LONG)
        log("trainer connecting during the flood: exit %s after %.2f s: %s" %
            (newcomer.returncode, time.time() - t0, newcomer.stderr.strip() or "attached"))
        b.expect(newcomer.returncode == -signal.SIGKILL or
                 re.search(r"too many|busy|connections", newcomer.stderr),
                 "a trainer connecting while 300 idle connections wait for their handshake "
                 "is turned away without a reason: %r" % newcomer.stderr.strip())
        fo = flood.communicate(timeout=LONG)[0]
        log("flood: " + fo.strip().replace("\n", " | "))
        b.expect_log(mark, r"too many connections awaiting their handshake", "flood")
        drops = b.d.log()[mark:].count("too many connections awaiting")
        b.expect(drops <= 10, "the daemon logged %d lines for one flood (rate-limit it)" % drops)
        so = silent.communicate(timeout=LONG)[0]
        m = re.search(r"closed-by-daemon after_s=([\d.]+) bytes=(\d+)", so)
        log("silent connection: " + so.strip())
        # the silent connection is the oldest one waiting: during the flood it is
        # shed first, told why (an error message), or else closed at the 5 s
        # handshake timeout
        check(m and (4.5 <= float(m.group(1)) <= 7.5 or int(m.group(2)) > 0),
              "a connection without hello must be closed after the 5 s handshake timeout "
              "or shed with a reason: %s" % so)
        if float(m.group(1)) >= 4.5:
            b.expect_log(mark, r"sent no handshake within 5 s and were closed", "silent")
    with_bystanders(body, epochs=250)


def test_hostile_truncated_ctrl_in():
    """ctrl_in is the one segment a trainer may write; shrinking it must be
    impossible (F_SEAL_SHRINK), or the daemon's next read of it is a SIGBUS."""
    def body(b):
        r = subprocess.run([HOSTILE, "--socket", b.d.sock, "--mode", "truncate-in",
                            "--rank", "2", "--world", "3", "--seconds", "1"],
                           capture_output=True, text=True, timeout=LONG, env=HOSTILE_ENV)
        log("truncate-in: exit %s: %s" % (r.returncode, r.stdout.strip().replace("\n", " | ")))
        rc = daemon_rc_settled(b.d)
        check(rc is None, "seerd died (%s) when a trainer truncated its ctrl_in segment; "
              "its log ends:\n%s" % (exit_text(rc), "\n".join(b.d.log().splitlines()[-2:])))
        check(r.returncode == 0, "ctrl_in could be truncated: " + r.stdout)
    with_bystanders(body)


def test_hostile_first_hello_world_size():
    """The first trainer fixes the job's world size; an absurd one must be
    refused with a reason, not crash the daemon (and the staging advice it
    gives for a world that does not fit must be right)."""
    tmp = tmpdir("seer-ft-")
    try:
        root = os.path.join(tmp, "data")
        make_classes(root, ["a", "b", "c"], 20, 1000, 8000, seed=61)
        cat = catalog(root)
        s = {"dataset.path": root, "job.epochs": 1, "job.batch_size": 4, "cache.ram": "64KiB",
             "cache.staging": "1MiB"}
        problems = []
        d = Daemon(tmp, s, name="huge", env=DAEMON_ENV)
        try:
            r = subprocess.run([HOSTILE, "--socket", d.sock, "--mode", "world-huge"],
                               capture_output=True, text=True, timeout=LONG, env=HOSTILE_ENV)
            rc = daemon_rc_settled(d)
            log("HELLO with world 2^31: client %s; seerd %s" %
                (r.stdout.strip(), "running" if rc is None else "exit %s" % rc))
            if rc is not None and (rc < 0 or re.search(r"terminated with signal|Sanitizer|"
                                                       r"out of memory", d.log())):
                problems.append("seerd died (%s) on a HELLO with world size 2^31; its log "
                                "ends:\n%s" % (exit_text(rc), "\n".join(d.log().splitlines()[-2:])))
            if "RESULT refused" not in r.stdout:
                problems.append("the client got no refusal: %s; seerd %s, log ends: %s" %
                                (r.stdout.strip(), "running" if rc is None else exit_text(rc),
                                 d.log().strip().splitlines()[-1]))
        finally:
            d.stop(signal.SIGKILL)
        # world 50: the staging share is too small; the advice must add up
        d = Daemon(tmp, s, name="fifty", env=DAEMON_ENV)
        try:
            r = subprocess.run([HOSTILE, "--socket", d.sock, "--mode", "dup-rank", "--rank",
                                "0", "--world", "50"], capture_output=True, text=True,
                               timeout=LONG, env=HOSTILE_ENV)
            log("HELLO with world 50: " + r.stdout.strip())
            m = re.search(r"set staging to at least ([\d.]+) (KiB|MiB|GiB)", r.stdout)
            need = 50 * 4 * max(c[2] for c in cat)
            if not m:
                problems.append("no staging advice: " + r.stdout.strip())
            else:
                told = float(m.group(1)) * {"KiB": 1 << 10, "MiB": 1 << 20,
                                            "GiB": 1 << 30}[m.group(2)]
                if told < need * 0.99:
                    problems.append("the daemon advises staging >= %s %s, but 50 trainers x "
                                    "4 samples of up to %d B need %d B" %
                                    (m.group(1), m.group(2), max(c[2] for c in cat), need))
        finally:
            d.stop(signal.SIGKILL)
        check(not problems, "\n  ".join(problems))
    finally:
        cleanup(tmp)


# ---- another user -------------------------------------------------------------------------------

def ensure_user(name):
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        out = subprocess.run(["useradd", "-M", "-r", "-s", "/usr/sbin/nologin", name],
                             capture_output=True, text=True)
        check(out.returncode == 0 or "already exists" in out.stderr,
              "useradd %s: %s" % (name, out.stderr))
        return pwd.getpwnam(name).pw_uid


def test_other_uid():
    """Another user's trainer: stopped by the socket's 0600 mode (and a 0700
    runtime directory, when there is one); with the socket opened up to
    everyone, SO_PEERCRED still refuses it with a message naming the uids."""
    check(os.getuid() == 0, "this test creates a user and switches to it: run as root")
    uid = ensure_user("seertest")
    tmp = tmpdir("seer-ft-")
    problems = []
    try:
        root = os.path.join(tmp, "data")
        make_classes(root, ["a", "b"], 15, 1000, 6000, seed=71)
        cat = catalog(root)
        rundir = os.path.join(tmp, "run")
        os.makedirs(rundir)
        os.chmod(tmp, 0o755)
        os.chmod(rundir, 0o755)
        epochs = 3
        s = {"dataset.path": root, "job.epochs": epochs, "job.batch_size": 4,
             "cache.ram": "64KiB", "daemon.socket": os.path.join(rundir, "seerd.sock")}
        gate = Gate(tmp)
        with Daemon(tmp, s, env=DAEMON_ENV) as d:
            # the job's own trainer holds batch 1:0 until the test is done: the
            # socket and the daemon stay up whatever the machine's load
            legit = start_trainer("c", 0, 1, d.sock, os.path.join(tmp, "r0.log"),
                                  ["--compute-ms", "5"] + gate.args((1, 0)))
            gate.wait([0], (1, 0), [legit])
            mode = stat.S_IMODE(os.stat(d.sock).st_mode)
            check(mode == 0o600, "socket mode %o, expected 0600" % mode)

            def as_other(sock, refusal=None):
                """Run a trainer as uid `seertest`; with `refusal` (a log
                pattern), wait for the daemon to log it. Returns (run, new log)."""
                mark = len(d.log())
                r = subprocess.run(["runuser", "-u", "seertest", "--", os.path.join(
                    BIN, "seer-trainer"), "--rank", "0", "--world", "1", "--socket", sock],
                    capture_output=True, text=True, timeout=LONG,
                    env=dict(os.environ, SEER_CONNECT_TIMEOUT_MS=str(int(LONG * 1000))))
                if refusal:
                    try:
                        wait_for(lambda: re.search(refusal, d.log()[mark:]), LONG,
                                 "the daemon to log the refusal", step=0.01)
                    except Fail:
                        pass  # reported by the caller with the log
                return r, d.log()[mark:]
            # 1. a private runtime directory stops it first
            os.chmod(rundir, 0o700)
            r, dl = as_other(d.sock)
            log("uid %d, directory 0700: exit %d: %s" % (uid, r.returncode, r.stderr.strip()))
            check(r.returncode != 0 and "Permission denied" in r.stderr and "refused" not in dl,
                  "through a 0700 directory: %s" % r.stderr)
            # 2. a traversable directory: the socket's own 0600 mode stops it
            os.chmod(rundir, 0o755)
            r, dl = as_other(d.sock)
            log("uid %d, directory 0755, socket 0600: exit %d: %s" % (uid, r.returncode,
                                                                      r.stderr.strip()))
            check(r.returncode != 0 and "Permission denied" in r.stderr and "refused" not in dl,
                  "socket 0600: %s" % r.stderr)
            if "no seerd" in r.stderr or "start seerd" in r.stderr:
                problems.append("a trainer without access to the socket is told there is "
                                "\"no seerd\" and to start one, though one runs: %r" %
                                r.stderr.strip())
            # 3. the socket opened to everyone: SO_PEERCRED refuses it, every time
            # with the reason (tried several times: the refusal races the hello)
            os.chmod(d.sock, 0o666)
            outcomes = []
            refused = r"refused a connection from uid %d \(pid \d+\)" % uid
            try:
                for _ in range(5):
                    r, dl = as_other(d.sock, refused)
                    check(r.returncode != 0, "uid %d was admitted" % uid)
                    check(re.search(refused, dl),
                          "the daemon did not log the refused uid %d:\n%s" % (uid, dl))
                    outcomes.append(r.stderr.strip())
            finally:
                os.chmod(d.sock, 0o600)
            told = [o for o in outcomes if "serves only its own user (uid %d)" % os.getuid() in o]
            log("uid %d, socket 0666: refused 5 of 5 times; the trainer was told why %d times" %
                (uid, len(told)))
            log("   daemon: " + " ".join(ln.split(" ", 3)[-1] for ln in dl.splitlines()
                                         if "refused" in ln))
            for o in sorted(set(outcomes)):
                log("   trainer (%dx): %s" % (outcomes.count(o), o))
            if len(told) < len(outcomes):
                problems.append("SO_PEERCRED refusal: the trainer got the daemon's reason in "
                                "only %d of %d attempts; otherwise: %s" %
                                (len(told), len(outcomes),
                                 "; ".join(sorted(set(outcomes) - set(told)))))
            gate.go((1, 0))
            rc, _, err = finish([legit])[0]
            check(rc == 0, "the job's own trainer failed: " + err)
            check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
        n = verify_rank(cat, seer.Sampler(len(cat), 0, 1, 4), 0,
                        read_log(os.path.join(tmp, "r0.log")), epochs)
        log("the job's own trainer: %d batches verified exact" % n)
        check(not problems, "\n  ".join(problems))
    finally:
        cleanup(tmp)


if __name__ == "__main__":
    if sys.argv[1:2] == ["trainer"]:
        sys.exit(trainer_main(sys.argv[2:]))
    tests = [test_pfs_transient_faults, test_pfs_file_always_fails,
             test_killed_holding_batches, test_peer_daemon_killed_default_mpirun,
             test_peer_daemon_killed_survivors_finish, test_hostile_handshakes,
             test_hostile_control_region, test_hostile_shared_memory,
             test_hostile_connections, test_hostile_truncated_ctrl_in,
             test_hostile_first_hello_world_size, test_other_uid]
    only = sys.argv[1:]  # names of tests to run (default: all)
    run_tests([t for t in tests if not only or t.__name__ in only])
