"""seerd's start-up and signals (issue 28, findings 10-12).

  signals     SIGHUP, SIGUSR1, SIGUSR2 to a serving seerd with a trainer
              mid-epoch: logged, the stats file written, the stream goes on
              exactly; a later SIGTERM still stops cleanly with positions
  SIGQUIT     the clean stop, as SIGTERM
  scan        a catalog scan made slow by the PFS emulator (metadata latency):
              seerd listens during it; `seerctl status` shows "scanning: N
              of M files"; SIGTERM stops it promptly and cleanly; a trainer
              whose connect timeout is shorter than the scan connects and
              gets exact data; under mpirun both nodes answer and SIGTERM to
              mpirun stops both
  stats_file  a [daemon] stats_file in a missing directory: refused at start,
              naming the key and the path

The tests wait for states (log lines, seerctl status, pause points), never
for sleeps. The scan tests need bin/seer-pfsemu and /dev/fuse.
"""

import os
import re
import signal
import subprocess
import time

from seertest import (BIN, LONG, Daemon, Fail, Gate, MpiDaemons, catalog, check, cleanup,
                      finish, log, make_classes, read_log, run_tests, seer, start_trainer,
                      tmpdir, verify_rank, wait_for)

DAEMON_ENV = {"IPATH_NO_BACKTRACE": "1"}


def seerctl(sock, *args):
    return subprocess.run([os.path.join(BIN, "seerctl"), "--socket", sock] + list(args),
                          capture_output=True, text=True, timeout=LONG)


def wait_log(d, pattern, what):
    def seen():
        if re.search(pattern, d.log()):
            return True
        if d.proc.poll() is not None:
            raise Fail("seerd exited %s while waiting for %s:\n%s" % (d.proc.returncode, what,
                                                                     d.log()))
        return False
    wait_for(seen, LONG, what)


# ---- signals to a serving seerd ----------------------------------------------------------

def test_signals_keep_serving():
    """SIGHUP, SIGUSR1, SIGUSR2 while a trainer holds a batch mid-epoch: each
    logged, USR1/USR2 write the stats file and the positions, seerd keeps
    serving and the trainer's stream is exact; SIGTERM later stops cleanly
    with the position of the batch the trainer holds."""
    tmp = tmpdir("seer-su-")
    try:
        src = os.path.join(tmp, "data")
        make_classes(src, ["a", "b", "c"], 12, 100, 900, seed=3)
        cat = catalog(src)
        epochs, batch = 3, 4
        # the trainer stays paused holding (1, 2) through the stop: seerd leaves
        # after 0.5 s of grace with that batch unreleased
        s = {"dataset.path": src, "job.seed": 5, "job.epochs": epochs, "job.batch_size": batch,
             "job.resume": "auto", "daemon.stop_grace_s": 0.5}
        gate = Gate(tmp)
        with Daemon(tmp, s, env=DAEMON_ENV) as d:
            logf = os.path.join(tmp, "r0.log")
            p = start_trainer("c", 0, 1, d.sock, logf, extra=gate.args((0, 3), (1, 2)))
            gate.wait([0], (0, 3), [p])
            check(not os.path.exists(d.stats_file), "stats file before any signal")
            for sig, pat in ((signal.SIGHUP, r"SIGHUP from pid \d+ ignored: seerd is not a "
                              r"terminal program"),
                             (signal.SIGUSR1, r"received SIGUSR1 from pid \d+ \(Slurm's "
                              r"--signal warning\?\)"),
                             (signal.SIGUSR2, r"received SIGUSR2 from pid \d+ \(Slurm's "
                              r"--signal warning\?\)")):
                d.proc.send_signal(sig)
                wait_log(d, pat, "seerd's line for %s" % sig.name)
                check(d.proc.poll() is None, "seerd died of %s:\n%s" % (sig.name, d.log()))
            wait_for(lambda: d.log().count("resume positions of 1 rank(s) written to disk") == 2,
                     LONG, "two position syncs")
            st = d.stats()  # the snapshot: written while serving
            check(st.get("world") == 1, "stats snapshot: %s" % str(st)[:300])
            gate.go((0, 3))
            gate.wait([0], (1, 2), [p])
            d.proc.send_signal(signal.SIGTERM)
            check(d.wait(LONG) == 0, "seerd after SIGTERM:\n" + d.log())
            gate.go((1, 2))
            finish([p])  # it fails: its seerd stopped
            full = d.log()
        check("resume positions saved in" in full and "at epoch 1 step 2" in full,
              "SIGTERM did not save the position of the held batch (1, 2):\n" + full)
        check(not os.path.exists(d.sock), "socket left behind")
        got = read_log(logf)
        got.pop((1, 2), None)  # held at the stop: the position saved
        sampler = seer.Sampler(len(cat), 5, 1, batch)
        n = verify_rank(cat, sampler, 0, got, epochs, last=(1, 2))
        log("signals logged, stats and positions written while serving; %d batches exact; "
            "SIGTERM saved epoch 1 step 2" % n)
    finally:
        cleanup(tmp)


def test_sigquit_stops_cleanly():
    """SIGQUIT is the clean stop (no core dump): exit 0, positions kept,
    socket removed."""
    tmp = tmpdir("seer-su-")
    try:
        src = os.path.join(tmp, "data")
        make_classes(src, ["a", "b"], 10, 100, 500, seed=4)
        s = {"dataset.path": src, "job.epochs": 2, "job.batch_size": 4, "job.resume": "auto",
             "daemon.stop_grace_s": 0.5}
        gate = Gate(tmp)
        with Daemon(tmp, s, env=DAEMON_ENV) as d:
            p = start_trainer("c", 0, 1, d.sock, os.path.join(tmp, "r0.log"),
                              extra=gate.args((0, 2)))
            gate.wait([0], (0, 2), [p])
            d.proc.send_signal(signal.SIGQUIT)
            rc = d.wait(LONG)
            gate.go((0, 2))
            finish([p])
            full = d.log()
        check(rc == 0, "seerd after SIGQUIT exited %s:\n%s" % (rc, full))
        check("Quit: stopping" in full and "at epoch 0 step 2" in full,
              "SIGQUIT did not stop cleanly with the position:\n" + full)
        check(not os.path.exists(d.sock), "socket left behind")
    finally:
        cleanup(tmp)


# ---- [daemon] stats_file -----------------------------------------------------------------

def test_stats_file_dir_missing():
    """A stats file in a directory that does not exist: seerd refuses to start,
    naming the key and the path, before it listens."""
    tmp = tmpdir("seer-su-")
    try:
        src = os.path.join(tmp, "data")
        make_classes(src, ["a"], 3, 10, 20)
        bad = os.path.join(tmp, "no-such-dir", "stats.json")
        d = Daemon(tmp, {"dataset.path": src, "daemon.stats_file": bad}, env=DAEMON_ENV,
                   wait=False)
        rc = d.wait(LONG)
        d.stop()
        out = d.log()
        check(rc != 0, "seerd started with a stats file in a missing directory:\n" + out)
        check("stats_file" in out and bad in out and "does not exist" in out,
              "the refusal does not name the key and the path:\n" + out)
        check(not os.path.exists(d.sock), "seerd listened before refusing")
    finally:
        cleanup(tmp)


# ---- a slow catalog scan (PFS emulator) ---------------------------------------------------

def pfs():
    import test_multi_node as mn
    check(mn.pfsemu_available(), "the scan tests need bin/seer-pfsemu and /dev/fuse")
    return mn


def slow_dataset(tmp, per_class, meta_ms):
    """A tree of 4 classes behind the emulator at meta_ms per metadata op;
    returns (mount point, catalog of the source)."""
    mn = pfs()
    src = os.path.join(tmp, "data")
    make_classes(src, ["a", "b", "c", "d"], per_class, 50, 400, seed=9)
    mnt = os.path.join(tmp, "pfs")
    os.environ["PFSEMU_LOG"] = os.path.join(tmp, "pfsemu.log")
    mn.mount_pfs(src, mnt, "--meta-latency-ms", str(meta_ms), "--attr-timeout", "0")
    return mnt, catalog(src)


SCANNING = re.compile(r"scanning: (\d+) of (\d+) files")


def scanning(sock, least=1):
    """seerctl status's progress line while the scan has done >= least files."""
    out = seerctl(sock, "status")
    m = SCANNING.search(out.stdout)
    return m if out.returncode == 0 and m and int(m.group(1)) >= least else None


def test_scan_sigterm_and_status():
    """During a slow scan seerd listens: `seerctl status` shows "scanning: N of
    M files" (N growing), SIGTERM stops it within seconds (not at the scan's
    end), exit 0, socket removed."""
    tmp = tmpdir("seer-su-")
    mnt = None
    try:
        mnt, cat = slow_dataset(tmp, 500, 20)
        s = {"dataset.path": mnt, "job.epochs": 1, "job.batch_size": 4}
        d = Daemon(tmp, s, env=DAEMON_ENV, wait=False)
        try:
            m1 = wait_for(lambda: scanning(d.sock, 1), LONG, "status showing the scan")
            m2 = wait_for(lambda: scanning(d.sock, int(m1.group(1)) + 1), LONG,
                          "the scan to progress")
            check(int(m2.group(2)) == len(cat), "status says %s, the dataset has %d files" %
                  (m2.group(0), len(cat)))
            log("seerctl status during the scan: '%s', then '%s'" % (m1.group(0), m2.group(0)))
            t0 = time.time()
            d.proc.send_signal(signal.SIGTERM)
            rc = d.wait(LONG)
            took = time.time() - t0
        finally:
            d.stop()
        out = d.log()
        check(rc == 0, "seerd exited %s after SIGTERM during the scan:\n%s" % (rc, out))
        m = re.search(r"stopped after (\d+) of (\d+) files", out)
        check(m and int(m.group(1)) < len(cat), "the scan was not stopped early:\n" + out)
        check("stopped during start-up" in out, "no stop line:\n" + out)
        check(not os.path.exists(d.sock), "socket left behind after the stop")
        check(took < 10, "SIGTERM took %.1f s to stop the scan" % took)
        log("SIGTERM during the scan: exit 0 in %.2f s after %s of %s files" %
            (took, m.group(1), m.group(2)))
    finally:
        if mnt:
            pfs().umount_pfs(mnt)
        cleanup(tmp)


def test_scan_trainer_waits():
    """A trainer with a 300 ms connect timeout, started while the scan still
    has most of its files to go (the scan takes seconds): it is answered
    "still starting" and waits, then gets every batch exactly."""
    tmp = tmpdir("seer-su-")
    mnt = None
    try:
        mnt, cat = slow_dataset(tmp, 40, 20)
        epochs, batch = 2, 4
        s = {"dataset.path": mnt, "job.seed": 3, "job.epochs": epochs, "job.batch_size": batch}
        d = Daemon(tmp, s, env=DAEMON_ENV, wait=False)
        try:
            m = wait_for(lambda: scanning(d.sock, 0), LONG, "status showing the scan")
            logf = os.path.join(tmp, "r0.log")
            p = start_trainer("c", 0, 1, d.sock, logf,
                              env={"SEER_CONNECT_TIMEOUT_MS": "300"})
            (rc, _, err), = finish([p])
            check(rc == 0, "trainer failed during the scan: %s\n%s" % (err, d.log()))
            check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
        finally:
            d.stop()
        out = d.log()
        t = re.search(r"files scanned in ([0-9.]+) s", out)
        check(t and float(t.group(1)) > 1.0,
              "the scan was too fast (%s) to test a 300 ms connect timeout" % (t and t.group(0)))
        n = verify_rank(cat, seer.Sampler(len(cat), 3, 1, batch), 0, read_log(logf), epochs)
        log("trainer started at '%s' with a 300 ms connect timeout; scan took %s s; %d "
            "batches exact" % (m.group(0), t.group(1), n))
    finally:
        if mnt:
            pfs().umount_pfs(mnt)
        cleanup(tmp)


def test_scan_two_nodes_sigterm():
    """mpirun -np 2: during node 0's scan both nodes answer seerctl status
    (node 0 its progress, node 1 that it waits); SIGTERM to mpirun stops both
    cleanly (no error, no MPI abort), both sockets removed."""
    tmp = tmpdir("seer-su-")
    mnt = None
    try:
        mnt, cat = slow_dataset(tmp, 500, 20)
        s = {"dataset.path": mnt, "job.epochs": 1, "job.batch_size": 4,
             "daemon.stats_file": None}
        cl = MpiDaemons(tmp, 2, s, name="mpi", env=DAEMON_ENV, wait=False)
        try:
            s0, s1 = cl.socket(0), cl.socket(1)
            m = wait_for(lambda: scanning(s0, 1), LONG, "node 0's status showing the scan")
            out1 = wait_for(lambda: (lambda o: o.returncode == 0 and o)(
                seerctl(s1, "status")), LONG, "node 1's status")
            check("waits for it" in out1.stdout, "node 1 says: %s" % out1.stdout)
            cl.signal(signal.SIGTERM)
            rc = cl.wait(LONG)
        finally:
            cl.stop(signal.SIGKILL)
        out = cl.log()
        # mpirun reports its own SIGTERM as status 1; the daemons' clean exits
        # are their stop lines, and no error or abort
        check(rc in (0, 1), "mpirun exited %s after SIGTERM during the scan:\n%s" % (rc, out))
        check(" ERROR " not in out and "MPI_ABORT" not in out and "abort" not in out.lower(),
              "a node failed or aborted:\n" + out)
        check(not os.path.exists(s0) and not os.path.exists(s1), "a socket was left behind")
        check(out.count("stopped during start-up") == 2, "not both nodes stopped:\n" + out)
        log("two nodes during the scan: node 0 '%s', node 1 '%s'; SIGTERM to mpirun: both "
            "stop cleanly (mpirun status %d)" % (m.group(0), out1.stdout.strip().splitlines()[-1],
                                                 rc))
    finally:
        if mnt:
            pfs().umount_pfs(mnt)
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_signals_keep_serving, test_sigquit_stops_cleanly, test_stats_file_dir_missing,
               test_scan_sigterm_and_status, test_scan_trainer_waits,
               test_scan_two_nodes_sigterm])
