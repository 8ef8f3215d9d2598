"""Issue 15, the daemon's side: what hostile or unlucky trainers, configs and
machines did to seerd, each as a test that failed before the fix.

  abandoned seek   a SEEK followed by a disconnect while reads are in flight
                   (held at a gate: read_gate.c, an LD_PRELOAD shim) must not
                   poison the rank: its next session seeks and gets its batches
  max_held         a trainer that keeps batches while asking for the next
                   (double buffering) gets them up to [job] max_held; asking
                   for more than staging can hold is an error at once, not a
                   wait forever; staging too small for max_held is refused
                   naming the key
  world size       a stray trainer's world size can be replaced once no
                   trainer of it is attached; an absurd one is refused at once
                   and cheaply; [job] world_size fixes it
  file descriptors seerd raises its soft limit, sizes its readers' file
                   caches from it, and at the limit neither spins on accept
                   nor fails batches
  small ones       sizes that overflow or exceed the machine, seerctl refused
                   by another user, one warning per interval for silent
                   connections, `skipped` in every epoch, message texts

Run: /usr/bin/python3 test_hostile_daemon.py [test_name ...]
"""

import os
import re
import resource
import signal
import subprocess
import time
import zlib

from seertest import (BIN, LONG, ROOT, SANITIZER, Daemon, Fail, Gate, catalog, check, cleanup,
                      finish, log, make_classes, read_log, run_tests, seer, start_trainer,
                      tmpdir, verify_rank, wait_for)

HOSTILE = os.path.join(BIN, "seer-hostile")
HOSTILE_ENV = dict(os.environ, IPATH_NO_BACKTRACE="1",
                   ASAN_OPTIONS="handle_segv=0:handle_sigbus=0:detect_leaks=0")
DAEMON_ENV = {"IPATH_NO_BACKTRACE": "1"}


def build_shim(tmp, name):
    """Build tests/integration/<name>.c as an LD_PRELOAD library in tmp."""
    out = os.path.join(tmp, name + ".so")
    cc = subprocess.run(["cc", "-shared", "-fPIC", "-o", out,
                         os.path.join(ROOT, "tests", "integration", name + ".c"), "-ldl"],
                        capture_output=True, text=True)
    check(cc.returncode == 0, "building %s: %s" % (name, cc.stderr))
    return out


def preload_env(shim, extra):
    """Environment preloading shim into seerd; in sanitizer builds the
    sanitizer's runtime is preloaded first (it must come first)."""
    libs = [shim]
    if SANITIZER:
        rt = "libasan.so" if os.path.basename(os.path.dirname(BIN)) == "asan" else "libtsan.so"
        path = subprocess.run(["cc", "-print-file-name=" + rt], capture_output=True,
                              text=True).stdout.strip()
        check(os.path.isabs(path), "cannot find %s to preload" % rt)
        libs.insert(0, path)
    env = dict(DAEMON_ENV, LD_PRELOAD=":".join(libs))
    env.update(extra)
    return env


def trainer_state(d, rank):
    for t in d.status()["trainers"]:
        if t["rank"] == rank:
            return t
    return None


# ---- 9: an abandoned seek ---------------------------------------------------------------------

def test_abandoned_seek_keeps_the_rank():
    """Issue 15 item 9: SEEK, then disconnect while the stream's reads are
    still in flight (held at a gate). The rank's next session must seek and
    get exactly the sampler's batches from there (the seek used to stay
    pending for good: every later seek of the rank was refused)."""
    tmp = tmpdir("seer-hd-")
    try:
        root = os.path.join(tmp, "data")
        make_classes(root, ["a", "b"], 12, 500, 3000, seed=9)
        cat = catalog(root)
        shim = build_shim(tmp, "read_gate")
        gate_file = os.path.join(tmp, "gate")
        env = preload_env(shim, {"SEER_GATE_DIR": root + "/", "SEER_GATE_FILE": gate_file})
        s = {"dataset.path": root, "job.epochs": 2, "job.batch_size": 4, "cache.ram": "0",
             "prefetch.io_threads": 2}
        with Daemon(tmp, s, env=env) as d:
            open(gate_file, "w").close()  # the catalog is built: reads wait from now on
            r = subprocess.run([HOSTILE, "--socket", d.sock, "--mode", "seek-abandon",
                                "--rank", "0", "--world", "1"], capture_output=True, text=True,
                               timeout=LONG, env=HOSTILE_ENV)
            check(r.returncode == 0, "seer-hostile: %s %s" % (r.stdout, r.stderr))
            seek_re = re.compile(r"rank 0 seeks to epoch 0 step 1 \((\d+) reads")
            wait_for(lambda: seek_re.search(d.log()) and "rank 0 (pid" in d.log() and
                     "detached" in d.log(), LONG, "the seek and the disconnect in the log")
            inflight = int(seek_re.search(d.log()).group(1))
            check(inflight > 0, "no read was in flight at the seek: the test shows nothing")
            log("SEEK with %d reads in flight at the gate, then the trainer left" % inflight)
            os.unlink(gate_file)
            wait_for(lambda: (lambda t: t and not t["attached"] and t["inflight"] == 0)(
                trainer_state(d, 0)), LONG, "rank 0's reads to land")
            batches = {}
            with seer.Loader(socket=d.sock, rank=0, world_size=1) as ld:
                ld.seek(0, 2)
                for _ in range(ld.epochs):
                    for b in ld:
                        batches[(b.epoch, b.step)] = [
                            (i, int(sid), int(lab), v.nbytes,
                             zlib.crc32(v.reshape(-1).view("u1")))
                            for i, (v, sid, lab) in enumerate(zip(b.samples, b.ids, b.labels))]
            check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
        sampler = seer.Sampler(len(cat), 0, 1, 4)
        n = verify_rank(cat, sampler, 0, batches, 2, first=(0, 2))
        log("the rank's next session sought to 0:2 and got its %d batches, exact" % n)
    finally:
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_abandoned_seek_keeps_the_rank])
