"""Running seer like HPC software: clean stop, restart and resume, seerctl,
several jobs on one node, and an installed copy used through pkg-config.

Whatever a test does to a running job (SIGTERM, seerctl, reading the threads'
placement) happens while its trainers hold a batch at a pause point
(seertest.Gate): on a busy machine the job cannot finish first."""

import glob
import json
import os
import re
import signal
import stat
import subprocess
import time

from seertest import (BIN, LONG, ROOT, Daemon, Fail, Gate, catalog, check, cleanup, finish, log,
                      make_classes, read_log, run_tests, seer, start_trainer, tmpdir, verify_rank,
                      wait_for)


def dataset(tmp, per_class=20, seed=21):
    root = os.path.join(tmp, "data")
    make_classes(root, ["x", "y", "z"], per_class, 2000, 12000, seed=seed)
    return root, catalog(root)


def shm_entries():
    return sorted(glob.glob("/dev/shm/*seer*"))


def test_sigterm_mid_epoch_then_resume():
    tmp = tmpdir("seer-ops-")
    daemons = []  # stopped at the end, whatever happened
    try:
        root, cat = dataset(tmp)
        nvme = os.path.join(tmp, "nvme")
        s = {"dataset.path": root, "job.seed": 3, "job.epochs": 6, "job.batch_size": 4,
             "cache.ram": "100KiB", "cache.nvme_dir": nvme, "cache.nvme": "4MiB",
             "prefetch.lookahead": 3}
        world = 3
        shm_before = shm_entries()
        d = Daemon(tmp, s, name="first")
        daemons.append(d)
        first = [os.path.join(tmp, "a%d.log" % r) for r in range(world)]
        # SIGTERM mid-epoch 1, every trainer holding its batch 1:2 (as a trainer
        # computing on it does)
        gate, at = Gate(tmp), (1, 2)
        procs = [start_trainer("c" if r != 1 else "py", r, world, d.sock, first[r],
                               ["--compute-ms", "40"] + gate.args(at)) for r in range(world)]
        gate.wait(range(world), at, procs)
        t0 = time.time()
        d.proc.send_signal(signal.SIGTERM)
        gate.go(at)
        res = finish(procs, timeout=LONG)
        dt = time.time() - t0
        for rc, _, err in res:
            check(rc != 0 and "shutting down" in err,
                  "a trainer should stop with 'shutting down': rc %d, %s" % (rc, err))
        check(d.wait(LONG) == 0, "seerd exit code after SIGTERM:\n" + d.log())
        log("SIGTERM: trainers told and exited, daemon gone in %.2f s" % dt)
        check(dt < 10, "stopping took %.1f s" % dt)
        check(not os.path.exists(d.sock), "the socket %s was left behind" % d.sock)
        check(os.listdir(nvme) == [], "NVMe files left behind: %s" % os.listdir(nvme))
        check(shm_entries() == shm_before, "/dev/shm entries left behind: %s" % shm_entries())
        check("resume positions saved" in d.log(), "no resume record:\n" + d.log())
        sampler = seer.Sampler(len(cat), 3, world, 4)
        bpe = sampler.batches_per_epoch
        before = [read_log(p) for p in first]
        for r in range(world):
            check(0 < len(before[r]) < 6 * bpe, "rank %d delivered %d batches before the stop" %
                  (r, len(before[r])))
        # restart: resume = auto continues every rank where it stopped
        s["job.resume"] = "auto"
        d2 = Daemon(tmp, s, name="second")
        daemons.append(d2)
        second = [os.path.join(tmp, "b%d.log" % r) for r in range(world)]
        procs = [start_trainer("c", r, world, d2.sock, second[r]) for r in range(world)]
        for rc, _, err in finish(procs):
            check(rc == 0, "trainer failed after the restart: " + err)
        check(d2.wait(LONG) == 0, "second seerd failed:\n" + d2.log())
        for r in range(world):
            after = read_log(second[r])
            start = min(after)
            last_before = max(before[r])
            # the first batch after the restart is the first one not released
            # before: the one it held (already logged) or the next one
            check(start in (last_before, (last_before[0], last_before[1] + 1)) or
                  (last_before[1] + 1 == bpe and start == (last_before[0] + 1, 0)),
                  "rank %d resumed at %s, it had taken up to %s" % (r, start, last_before))
            verify_rank(cat, sampler, r, after, 6, first=start)
            verify_rank(cat, sampler, r, before[r], 6, last=start if start <= last_before
                        else (last_before[0], last_before[1] + 1))
        log("resume = auto: every rank continued at its first unreleased batch")
        check(not os.path.exists(os.path.join(tmp, "state", "seer-pos-default")),
              "the resume positions of a finished job must be removed")
        # an explicit position
        s["job.resume"] = "2:3"
        d3 = Daemon(tmp, s, name="third")
        daemons.append(d3)
        third = [os.path.join(tmp, "c%d.log" % r) for r in range(world)]
        procs = [start_trainer("c", r, world, d3.sock, third[r]) for r in range(world)]
        for rc, _, err in finish(procs):
            check(rc == 0, "trainer failed with resume 2:3: " + err)
        d3.stop()
        for r in range(world):
            verify_rank(cat, sampler, r, read_log(third[r]), 6, first=(2, 3))
    finally:
        for x in daemons:
            x.stop()
        cleanup(tmp)


def seerctl(*args, env=None):
    return subprocess.run([os.path.join(BIN, "seerctl")] + list(args), capture_output=True,
                          text=True, timeout=LONG, env=env)


def test_seerctl():
    tmp = tmpdir("seer-ops-")
    try:
        root, cat = dataset(tmp, per_class=10)
        s = {"dataset.path": root, "job.epochs": 50, "job.batch_size": 4, "cache.ram": "64KiB"}
        gate, at = Gate(tmp), (1, 0)
        with Daemon(tmp, s) as d:
            # the trainer holds batch 1:0 until seerctl is done with the job
            p = start_trainer("c", 0, 1, d.sock, os.path.join(tmp, "t.log"),
                              ["--compute-ms", "5"] + gate.args(at))
            gate.wait([0], at, [p])
            st = seerctl("--socket", d.sock, "status")
            check(st.returncode == 0, "status failed: " + st.stderr)
            for w in ("rank", "RAM", "sources", "epoch", "topology"):
                check(w in st.stdout, "status lacks %r:\n%s" % (w, st.stdout))
            t = d.status()["trainers"][0]
            check(t["attached"] and t["batches"] > 0, "status JSON: %s" % t)
            # the daemon prefetches past the held batch: wait for it to be reported
            try:
                t = wait_for(lambda: (lambda x: x if x["prefetch_lead"] >= 1 else None)(
                    d.status()["trainers"][0]), LONG, "a prefetch lead", step=0.02)
            except Fail:
                pass
            check(t["prefetch_lead"] >= 1, "no prefetch lead reported: %s" % t)
            cf = seerctl("--socket", d.sock, "config")
            check(cf.returncode == 0 and "job.epochs" not in cf.stdout and "epochs = 50" in cf.stdout
                  and "--set" in cf.stdout, "config output:\n" + cf.stdout)
            bad = seerctl("--socket", d.sock, "frobnicate")
            check(bad.returncode == 1 and "unknown command" in bad.stderr, "bad command: " + bad.stderr)
            dr = seerctl("--socket", d.sock, "drain")
            check(dr.returncode == 0 and "draining" in dr.stdout, "drain: " + dr.stdout + dr.stderr)
            late = subprocess.run([os.path.join(BIN, "seer-trainer"), "--rank", "0", "--world", "1",
                                   "--socket", d.sock], capture_output=True, text=True,
                                  timeout=LONG)
            check(late.returncode != 0 and "shutting down" in late.stderr,
                  "a draining daemon must refuse new trainers: " + late.stderr)
            gate.go(at)
            rc, _, err = finish([p], timeout=LONG)[0]
            check(rc == 0, "the attached trainer must finish during a drain: " + err)
            check(d.wait(LONG) == 0, "seerd did not exit after the drain:\n" + d.log())
        gone = seerctl("--socket", os.path.join(tmp, "nope.sock"), "status")
        check(gone.returncode == 1 and "no seerd at" in gone.stderr, "missing daemon: " + gone.stderr)
    finally:
        cleanup(tmp)

def test_json_job_id():
    """A job id holding a double quote, a backslash and a newline: the stats
    file, `seerctl --json status` and `--json config` stay valid JSON that
    gives the id back exactly, and scripts/plot_stats.py draws the file."""
    tmp = tmpdir("seer-ops-")
    jid = 'exp"1\\run\nsecond line'
    try:
        root, cat = dataset(tmp, per_class=8)
        s = {"dataset.path": root, "job.id": jid, "job.epochs": 3, "job.batch_size": 4,
             "cache.ram": "32KiB"}
        env = {"SEER_JOB_ID": jid}
        with Daemon(tmp, s) as d:
            # world 2: rank 1 joins only after the checks, so the job (and the
            # daemon) stays open while they run
            first = start_trainer("c", 0, 2, d.sock, os.path.join(tmp, "r0.log"), env=env)
            wait_for(lambda: any(t["done"] for t in d.status()["trainers"]), 30,
                     "rank 0 to finish its part", step=0.05)
            st = d.status()
            check(st["job_id"] == jid, "status job_id %r, want %r" % (st["job_id"], jid))
            human = seerctl("--socket", d.sock, "status")
            check(human.returncode == 0 and "second line" in human.stdout,
                  "seerctl status: " + human.stdout + human.stderr)
            cf = seerctl("--socket", d.sock, "--json", "config")
            check(cf.returncode == 0, "seerctl --json config: " + cf.stderr)
            conf = json.loads(cf.stdout)
            check(conf["config"]["job"]["id"] == jid and conf["origin"]["job.id"] == "--set"
                  and conf["config"]["job"]["epochs"] == 3, "config JSON: %s" % conf["config"]["job"])
            ini = seerctl("--socket", d.sock, "config")
            check(ini.returncode == 0 and ini.stdout == conf["ini"],
                  "seerctl config prints the reply's INI text:\n" + ini.stdout)
            last = start_trainer("c", 1, 2, d.sock, os.path.join(tmp, "r1.log"), env=env)
            for rc, _, err in finish([first, last]):
                check(rc == 0, "trainer failed: " + err)
            check(d.wait(30) == 0, "seerd failed:\n" + d.log())
        n = sum(verify_rank(cat, seer.Sampler(len(cat), 0, 2, 4), r,
                            read_log(os.path.join(tmp, "r%d.log" % r)), 3) for r in (0, 1))
        stats = d.stats()
        check(stats["job_id"] == jid, "stats file job_id %r" % stats["job_id"])
        check(n == 2 * 3 * 3 and sum(e["samples"] for e in stats["epochs"]) == n * 4,
              "%d batches verified; stats file epochs: %s" % (n, stats["epochs"]))
        png = os.path.join(tmp, "stats.png")
        pl = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "plot_stats.py"),
                             d.stats_file, "-o", png], capture_output=True, text=True, timeout=120)
        check(pl.returncode == 0 and os.path.getsize(png) > 1000,
              "plot_stats.py: " + pl.stdout + pl.stderr)
        log("job id %r: status, config and the stats file parse; %d batches exact; plot drawn"
            % (jid, n))
    finally:
        cleanup(tmp)


def test_status_of_a_long_job():
    """status lists the last 64 epochs (the stats file has them all), and a
    seerctl that does not read its reply does not hold up anyone else."""
    tmp = tmpdir("seer-ops-")
    try:
        root, cat = dataset(tmp, per_class=2)  # 6 samples: 2 batches of 4 per epoch
        epochs = 600
        s = {"dataset.path": root, "job.epochs": epochs, "job.batch_size": 4}
        gate, at = Gate(tmp), (150, 0)
        with Daemon(tmp, s) as d:
            logf = os.path.join(tmp, "t.log")
            # the trainer holds batch 150:0 while the test looks: 150 epochs are
            # in the daemon's stats, 450 to go
            p = start_trainer("c", 0, 1, d.sock, logf, ["--compute-ms", "5"] + gate.args(at))
            gate.wait([0], at, [p], timeout=300)
            slow = subprocess.Popen([os.path.join(BIN, "seer-hostile"), "--socket", d.sock,
                                     "--mode", "ctl-slow", "--seconds", "1.5"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            sent = slow.stdout.readline()  # it asked for its status and reads nothing
            check(sent.strip() == "SENT", "the slow status reader: %r" % sent)
            t0 = time.time()
            js = d.status()
            dt = time.time() - t0
            eps = [e["epoch"] for e in js["epochs"]]
            check(len(eps) == 64 and eps == list(range(js["epochs_omitted"],
                                                       js["epochs_omitted"] + 64)),
                  "status epochs %s.. (%d), omitted %d" % (eps[:3], len(eps),
                                                          js["epochs_omitted"]))
            human = seerctl("--socket", d.sock, "status")
            m = re.search(r"\((\d+) earlier epochs not shown", human.stdout)
            check(m and int(m.group(1)) >= js["epochs_omitted"],
                  "seerctl status does not say epochs were left out:\n" + human.stdout[:1500])
            out, err = slow.communicate(timeout=LONG)
            check(slow.returncode == 0, "the slow status reader: %s %s" % (out, err))
            gate.go(at)
            rc, _, err = finish([p], timeout=300)[0]
            check(rc == 0, "trainer failed: " + err)
            check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
        st = d.stats()
        check(st["epochs_omitted"] == 0 and [e["epoch"] for e in st["epochs"]] ==
              list(range(epochs)), "the stats file must list all %d epochs" % epochs)
        verify_rank(cat, seer.Sampler(len(cat), 0, 1, 4), 0, read_log(logf), epochs)
        log("status at epoch %d: the last 64 epochs in %.0f ms while a reader sat on its reply "
            "(%s); stats file: all %d" % (js["epochs_omitted"] + 64, dt * 1e3,
                                          out.strip().replace("RESULT ", ""), epochs))
    finally:
        cleanup(tmp)


def test_two_jobs_on_one_node():
    tmp = tmpdir("seer-ops-")
    daemons = []  # stopped at the end, whatever happened
    try:
        ra, ca = dataset(os.path.join(tmp, "A"), per_class=8, seed=1)
        rb, cb = dataset(os.path.join(tmp, "B"), per_class=9, seed=2)
        env = {"SEER_RUNTIME_DIR": tmp}
        da = Daemon(tmp, {"dataset.path": ra, "job.id": "jobA", "daemon.socket": "",
                          "job.epochs": 2}, name="A", env=env, wait=False)
        daemons.append(da)
        db = Daemon(tmp, {"dataset.path": rb, "job.id": "jobB", "daemon.socket": "",
                          "job.epochs": 2}, name="B", env=env, wait=False)
        daemons.append(db)
        user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
        da.sock = os.path.join(tmp, "seer-%s-jobA.sock" % user)
        db.sock = os.path.join(tmp, "seer-%s-jobB.sock" % user)
        da.wait_socket()
        db.wait_socket()
        for sk in (da.sock, db.sock):
            mode = stat.S_IMODE(os.stat(sk).st_mode)
            check(mode == 0o600, "%s has mode %o, expected 0600" % (sk, mode))
        la, lb = os.path.join(tmp, "a.log"), os.path.join(tmp, "b.log")
        # trainers find their daemon from the job id alone
        env_a = dict(os.environ, SEER_RUNTIME_DIR=tmp, SEER_JOB_ID="jobA")
        env_b = dict(os.environ, SEER_RUNTIME_DIR=tmp, SEER_JOB_ID="jobB")
        pa = subprocess.Popen([os.path.join(BIN, "seer-trainer"), "--rank", "0", "--world", "1",
                               "--log", la], env=env_a, stderr=subprocess.PIPE, text=True)
        pb = subprocess.Popen([os.path.join(BIN, "seer-trainer"), "--rank", "0", "--world", "1",
                               "--log", lb], env=env_b, stderr=subprocess.PIPE, text=True)
        for p in (pa, pb):
            _, err = p.communicate(timeout=LONG)
            check(p.returncode == 0, "trainer failed: " + err)
        verify_rank(ca, seer.Sampler(len(ca), 0, 1, 32), 0, read_log(la), 2)
        verify_rank(cb, seer.Sampler(len(cb), 0, 1, 32), 0, read_log(lb), 2)
        check(da.wait(LONG) == 0 and db.wait(LONG) == 0, "a daemon failed")
        log("jobs jobA and jobB served side by side from sockets %s, %s (0600)" %
            (os.path.basename(da.sock), os.path.basename(db.sock)))
    finally:
        for x in daemons:
            x.stop()
        cleanup(tmp)


def test_installed_copy():
    tmp = tmpdir("seer-ops-")
    try:
        prefix = os.path.join(tmp, "prefix")
        out = subprocess.run(["make", "-C", ROOT, "install", "PREFIX=" + prefix],
                             capture_output=True, text=True, timeout=300)
        check(out.returncode == 0, "make install failed: " + out.stderr[-2000:])
        for f in ("bin/seerd", "bin/seerctl", "include/seer.h", "lib/libseer.so.0",
                  "lib/pkgconfig/seer.pc", "share/man/man1/seerd.1", "share/man/man1/seerctl.1"):
            check(os.path.exists(os.path.join(prefix, f)), "not installed: " + f)
        src = os.path.join(tmp, "client.c")
        with open(src, "w") as f:
            f.write('#include <seer.h>\n#include <stdio.h>\nint main(void){seer_client_t *c;\n'
                    'if (seer_connect(NULL, &c) < 0) { puts(seer_errmsg()); return 1; }\n'
                    'unsigned long n = 0; seer_batch_t *b; int rc;\n'
                    'while ((rc = seer_next(c, 10000, &b)) != SEER_EEND) {\n'
                    ' if (rc == SEER_EEPOCH) continue; if (rc < 0) return 2;\n'
                    ' n += seer_batch_len(b); seer_release(c, b); }\n'
                    'printf("%lu\\n", n); seer_close(c); return 0; }\n')
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "seer"], capture_output=True,
                               text=True, env=env).stdout.split()
        exe = os.path.join(tmp, "client")
        cc = subprocess.run(["cc", "-o", exe, src] + flags + ["-Wl,-rpath," +
                                                            os.path.join(prefix, "lib")],
                            capture_output=True, text=True)
        check(cc.returncode == 0, "building against seer.pc failed: " + cc.stderr)
        root, cat = dataset(tmp, per_class=5)
        with Daemon(tmp, {"dataset.path": root, "job.epochs": 1}, name="inst",
                    binary=os.path.join(prefix, "bin", "seerd")) as d:
            run = subprocess.run([exe], capture_output=True, text=True, timeout=LONG,
                                 env=dict(os.environ, SEER_SOCKET=d.sock))
            check(run.returncode == 0 and run.stdout.strip() == str(len(cat)),
                  "installed client delivered %r: %s" % (run.stdout, run.stderr))
        py = subprocess.run(["/usr/bin/python3", "-c", "import seer, sys; print(seer._find_lib())"],
                            capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=os.path.join(
                                prefix, "lib", "python3", "dist-packages"), SEER_LIB=""))
        check(py.returncode == 0 and py.stdout.strip().startswith(prefix),
              "installed Python shim finds %r: %s" % (py.stdout, py.stderr))
    finally:
        cleanup(tmp)

def cpu_list(text):
    """'0-2,5' -> {0, 1, 2, 5}"""
    out = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def daemon_threads(pid):
    """{name: allowed CPUs} of seerd's own threads: the dispatcher (the main
    thread) and the seer-io*/seer-net threads, not a sanitizer's helpers."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        base = "/proc/%d/task/%s/" % (pid, tid)
        try:
            with open(base + "comm") as f:
                name = f.read().strip()
            with open(base + "status") as f:
                allowed = [ln.split(":", 1)[1].strip() for ln in f
                           if ln.startswith("Cpus_allowed_list:")][0]
        except OSError:
            continue  # the thread ended meanwhile
        if int(tid) == pid:
            name = "dispatcher"
        elif not name.startswith("seer-"):
            continue
        out["%s/%s" % (name, tid)] = cpu_list(allowed)
    return out


def wait_placement(d, want, what, timeout=LONG):
    t0 = time.time()
    while True:
        got = daemon_threads(d.proc.pid)
        if len(got) >= 3 and all(v == want for v in got.values()):
            return got
        if time.time() - t0 > timeout:
            raise Fail("%s: seerd's threads run on %s, expected all on %s\n%s" %
                       (what, got, sorted(want), d.log()))
        time.sleep(0.05)


def test_thread_placement():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        log("skipped: this machine gives the test one CPU")
        return
    tmp = tmpdir("seer-ops-")
    try:
        root, cat = dataset(tmp)
        s = {"dataset.path": root, "job.epochs": 3, "job.batch_size": 4, "prefetch.io_threads": 2}
        # [daemon] cpuset: every daemon thread runs there from the start
        last = {cpus[-1]}
        with Daemon(tmp, dict(s, **{"daemon.cpuset": str(cpus[-1])}), name="cpuset") as d:
            got = wait_placement(d, last, "daemon.cpuset = %d" % cpus[-1])
            check("([daemon] cpuset)" in d.log(), "placement not logged:\n" + d.log())
        log("daemon.cpuset = %d: %d threads (%s) on CPU %d" %
            (cpus[-1], len(got), ", ".join(sorted(k.split("/")[0] for k in got)), cpus[-1]))
        # no cpuset, a trainer bound to the first CPU: the threads leave it
        with Daemon(tmp, s, name="trainers") as d:
            before = daemon_threads(d.proc.pid)
            check(all(v == set(cpus) for v in before.values()),
                  "threads pinned before any trainer attached: %s" % before)
            logf = os.path.join(tmp, "t.log")
            mine = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {cpus[0]})
            gate, at = Gate(tmp), (1, 0)
            try:
                # attached until the placement is seen: it holds batch 1:0
                p = start_trainer("c", 0, 1, d.sock, logf, ["--compute-ms", "20"] + gate.args(at))
            finally:
                os.sched_setaffinity(0, mine)
            rest = set(cpus) - {cpus[0]}
            gate.wait([0], at, [p])
            got = wait_placement(d, rest, "trainer bound to CPU %d" % cpus[0])
            gate.go(at)
            for rc, _, err in finish([p]):
                check(rc == 0, "trainer failed: " + err)
            check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
            check("cores the trainers do not use" in d.log(), "placement not logged:\n" + d.log())
        verify_rank(cat, seer.Sampler(len(cat), 0, 1, 4), 0, read_log(logf), 3)
        log("trainer on CPU %d: seerd's %d threads moved to CPUs %s; 3 epochs exact" %
            (cpus[0], len(got), sorted(rest)))
    finally:
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_sigterm_mid_epoch_then_resume, test_seerctl, test_json_job_id,
               test_status_of_a_long_job,
               test_two_jobs_on_one_node,
               test_thread_placement, test_installed_copy])
