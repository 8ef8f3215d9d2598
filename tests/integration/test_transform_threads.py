"""The transform stage's tensors do not depend on how many transform threads
make them or how many trainers take them: 1 vs 3 transform threads, 1 vs 2
trainers, every (epoch, sample) bit-identical (CRC of the delivered tensor,
read through the shim and checked against seer_batch_tensor's block by
xf_trainer.py). Also in the TSan list (Makefile): the transform pool, the
I/O threads waiting for decoded-cache entries and the dispatcher, raced."""

import os
import subprocess

from seertest import Daemon, LONG, check, cleanup, finish, log, run_tests, tmpdir
from xf_common import TRAINER, make_images, run, same_tensors

N = 30


def test_threads_and_trainers():
    tmp = tmpdir("seer-xft-")
    try:
        data = os.path.join(tmp, "data")
        make_images(data, classes=3, per_class=N // 3, seed=3)
        spec = {"decode": "image", "size": "48x64", "output": "float32_chw"}
        one = run(tmp, data, dict(spec, threads=1), "t1w1", world=1)
        many = run(tmp, data, dict(spec, threads=3), "t3w1", world=1)
        two = run(tmp, data, dict(spec, threads=1), "t1w2", world=2)
        # decoded cache: I/O threads wait for the pool's decodes; crops come
        # from the decoded images (at this size some files are DCT-scaled, so
        # these tensors are compared among themselves: test_transform.py
        # compares decoded with encoded where no DCT scaling applies)
        dec1 = run(tmp, data, dict(spec, threads=1, cache="decoded"), "t1w1d", world=1)
        dec2 = run(tmp, data, dict(spec, threads=3, cache="decoded"), "t3w2d", world=2)
        for job, threads in ((one, 1), (many, 3), (two, 1), (dec1, 1), (dec2, 3)):
            check(not job.errors, "failed batches: %s" % job.errors[:3])
            check(len(job.samples) == 2 * N, "%d of %d (epoch, sample) delivered" %
                  (len(job.samples), 2 * N))
            xf = job.stats[0]["transform"]
            check(xf["threads"] == threads and xf["total"]["failed"] == 0,
                  "transform stats: %s" % xf)
        n = same_tensors(one, many, "1 vs 3 transform threads")
        same_tensors(one, two, "1 vs 2 trainers")
        same_tensors(dec1, dec2, "decoded cache: 1 thread, 1 trainer vs 3 threads, 2 trainers")
        log("%d tensors bit-identical across 1/3 threads and 1/2 trainers, both cache modes" % n)
    finally:
        cleanup(tmp)


def test_placement():
    """transform.threads automatic: one per CPU the trainers do not use. A
    trainer bound to CPU 0 (taskset) leaves the daemon's threads, the
    transform threads among them, the other CPUs."""
    ncpu = len(os.sched_getaffinity(0))
    if ncpu < 2 or subprocess.run(["which", "taskset"], capture_output=True).returncode:
        log("skipped: needs 2 CPUs and taskset")
        return
    tmp = tmpdir("seer-xft-")
    try:
        data = os.path.join(tmp, "data")
        make_images(data, classes=1, per_class=8, seed=4)
        spec = "decode=image size=32"
        with Daemon(tmp, {"dataset.path": data, "job.epochs": 1, "job.batch_size": 4,
                          "transform.decode": "image", "transform.size": 32}) as d:
            cpu0 = min(os.sched_getaffinity(0))
            p = subprocess.Popen(["taskset", "-c", str(cpu0), "/usr/bin/python3", TRAINER,
                                  "--rank", "0", "--world", "1", "--socket", d.sock, "--log",
                                  os.path.join(tmp, "r0.log"), "--spec", spec],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            rc, _, err = finish([p])[0]
            check(rc == 0, "trainer failed: %s\n%s" % (err, d.log()))
            check(d.wait(LONG) == 0, "seerd failed:\n%s" % d.log())
            st = d.stats()
        xf, where = st["transform"], st["io"]["placement"]
        log("trainer on CPU %d: %d transform threads, %d running; daemon threads %s" %
            (cpu0, xf["threads"], xf["active_threads"], where))
        check(xf["threads"] >= ncpu - 1 and xf["active_threads"] == ncpu - 1,
              "transform threads %d, running %d, with %d CPUs and the trainer on one" %
              (xf["threads"], xf["active_threads"], ncpu))
        check("cores the trainers do not use" in where, "placement: %s" % where)
    finally:
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_threads_and_trainers, test_placement])
