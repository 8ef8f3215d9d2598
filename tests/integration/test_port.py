"""pytorch/examples' imagenet/main.py ported to seer (examples/imagenet_main.py,
issue 30's "done when"): the script, run as a user runs it, on a tiny JPEG
folder on CPU, with a tiny model registered as torchvision.models.tiny.

  - single process: seerd started by the loader (daemon="auto"), every batch
    the sampler's for (seed, epoch, rank 0 of 1), labels the folder's, and
    seerd gone when the script ends (it ends with the job);
  - --resume from the script's own checkpoint: the next epoch, exactly, and
    "Epoch: [2]" trains epoch 2's batches (finding 3);
  - 2 processes under mp.spawn (--multiprocessing-distributed, one process
    per launcher, explicit ranks, no RANK/WORLD_SIZE: finding 4) and 2
    processes launched as torchrun does (RANK/WORLD_SIZE, env://): each rank
    gets its shard, the ranks together every sample once per epoch;
  - a seerd started by hand with [job] epochs = 1 and the script's --epochs 2
    (finding 1): the script fails at once naming both values.

Which samples each rank got is recorded by a sitecustomize.py the test puts
on PYTHONPATH (it wraps TorchLoader's iteration; the script is unchanged).
Runs the cases concurrently (each its own socket); waits on processes, never
on time."""

import json
import os
import socket
import subprocess
import sys

from seertest import (LONG, ROOT, Daemon, catalog, check, cleanup, log, run_tests, seer,
                      tmpdir, wait_for)
from seer import _daemon

SCRIPT = os.path.join(ROOT, "examples", "imagenet_main.py")
CLASSES, PER_CLASS, BATCH, SEED = 3, 8, 4, 3

SITE = r'''
import json, os
if os.environ.get("PORT_TRACE"):
    import torch.nn as nn
    import torchvision.models as models

    def tiny(pretrained=False, num_classes=1000, **kw):
        return nn.Sequential(nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(12, num_classes))
    models.tiny = tiny

    from seer.torch import TorchLoader
    _orig = TorchLoader._iterate

    def _traced(self, gen, skip_end):
        for x, y in _orig(self, gen, skip_end):
            b = self.last_batch
            rec = {"epoch": b.epoch, "step": b.step, "ids": b.ids.tolist(),
                   "labels": y.tolist(), "shape": list(x.shape), "world": self.world_size}
            with open(os.path.join(os.environ["PORT_TRACE"], "rank-%d.jsonl" % self.rank),
                      "a") as f:
                f.write(json.dumps(rec) + "\n")
            yield x, y
    TorchLoader._iterate = _traced
'''


def jpeg_folder(root):
    from PIL import Image
    import random
    rnd = random.Random(5)
    for split, n in (("train", PER_CLASS), ("val", 2)):
        for c in range(CLASSES):
            d = os.path.join(root, split, "c%d" % c)
            os.makedirs(d)
            for i in range(n):
                img = Image.new("RGB", (24 + rnd.randrange(16), 24 + rnd.randrange(16)),
                                tuple(rnd.randrange(256) for _ in range(3)))
                img.save(os.path.join(d, "%03d.jpg" % i), quality=90)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Case:
    """One launch of the script: its own socket, trace folder and cache."""

    def __init__(self, tmp, name, data):
        self.dir = os.path.join(tmp, name)
        self.trace = os.path.join(self.dir, "trace")
        os.makedirs(self.trace)
        self.data = data
        self.sock = os.path.join(self.dir, "job.sock")
        self.procs = []

    def env(self, extra=None):
        e = dict(os.environ)
        for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                  "SEER_RANK", "SEER_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                  "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
            e.pop(v, None)
        e.update({"PYTHONPATH": os.pathsep.join([os.path.join(self.dir, "..", "site"),
                                                 os.path.join(ROOT, "client", "python")]),
                  "PORT_TRACE": self.trace, "SEER_SOCKET": self.sock,
                  "XDG_CACHE_HOME": os.path.join(self.dir, "cache"),
                  "SEER_SEERD_SET": "prefetch.io_threads=2 cache.ram=8MiB cache.staging=8MiB",
                  "OMP_NUM_THREADS": "1"})
        e.update(extra or {})
        return e

    def start(self, args, extra=None):
        n = len(self.procs)
        out = open(os.path.join(self.dir, "out-%d.txt" % n), "w")
        p = subprocess.Popen([sys.executable, SCRIPT, self.data, "-a", "tiny", "-b", str(BATCH),
                              "-j", "0", "--seed", str(SEED), "-p", "1"] + args,
                             cwd=self.dir, env=self.env(extra), stdout=out,
                             stderr=subprocess.STDOUT)
        self.procs.append((p, out))
        return p

    def wait(self):
        outs = []
        for p, out in self.procs:
            try:
                p.wait(LONG)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            out.close()
            with open(out.name) as f:
                outs.append((p.returncode, f.read()))
        self.procs = []
        return outs

    def trace_of(self, rank):
        path = os.path.join(self.trace, "rank-%d.jsonl" % rank)
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [json.loads(line) for line in f]


def check_ranks(case, cat, world, epochs, what, skip=0):
    """Every batch of each rank is the sampler's for (seed, epoch, rank,
    step), its labels the folder's; per epoch the ranks cover every sample."""
    sampler = seer.Sampler(len(cat), SEED, world, BATCH)
    per = sampler.batches_per_epoch
    seen = {}
    for r in range(world):
        got = case.trace_of(r)[skip:]
        want = [(e, s) for e in epochs for s in range(per)]
        check([(b["epoch"], b["step"]) for b in got] == want,
              "%s rank %d: positions %s, want %s" %
              (what, r, [(b["epoch"], b["step"]) for b in got], want))
        for b in got:
            w = sampler.batch(b["epoch"], r, b["step"])
            check(b["ids"] == w, "%s rank %d %d:%d: ids %s, the sampler's %s" %
                  (what, r, b["epoch"], b["step"], b["ids"], w))
            check(b["labels"] == [cat[i][1] for i in b["ids"]],
                  "%s rank %d: labels %s, the folder's %s" %
                  (what, r, b["labels"], [cat[i][1] for i in b["ids"]]))
            check(b["shape"] == [len(w), 3, 224, 224] and b["world"] == world,
                  "%s rank %d: x %s, world %s" % (what, r, b["shape"], b["world"]))
            seen.setdefault(b["epoch"], []).extend(b["ids"])
    for e in epochs:
        check(sorted(set(seen.get(e, []))) == list(range(len(cat))),
              "%s epoch %d: the ranks got %s, not every sample" % (what, e, sorted(seen.get(e, []))))
    return per


def test_port():
    tmp = tmpdir("seer-port-")
    try:
        data = os.path.join(tmp, "data")
        jpeg_folder(data)
        cat = catalog(os.path.join(data, "train"))
        os.makedirs(os.path.join(tmp, "site"))
        with open(os.path.join(tmp, "site", "sitecustomize.py"), "w") as f:
            f.write(SITE)
        single = Case(tmp, "single", data)
        spawn = Case(tmp, "spawn", data)
        trun = Case(tmp, "torchrun", data)
        bad = Case(tmp, "mismatch", data)
        # the mismatch: seerd started by hand for the job with 1 epoch
        hand = Daemon(bad.dir, {"dataset.path": os.path.join(data, "train"), "job.epochs": 1,
                                "daemon.socket": bad.sock, "cache.ram": "8MiB",
                                "cache.staging": "8MiB", "prefetch.io_threads": 1})
        try:
            single.start(["--epochs", "2"])
            init = os.path.join(spawn.dir, "init")
            for r in range(2):
                spawn.start(["--epochs", "1", "--multiprocessing-distributed", "--world-size",
                             "2", "--rank", str(r), "--dist-url", "file://" + init,
                             "--dist-backend", "gloo"])
            port = str(free_port())
            for r in range(2):
                trun.start(["--epochs", "1", "--dist-url", "env://", "--dist-backend", "gloo"],
                           {"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r),
                            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
            bad.start(["--epochs", "2"])
            (rc, out), = bad.wait()
            check(rc != 0 and "JobError" in out and "job.epochs: seerd's config says 1" in out
                  and "asks 2" in out, "mismatch: rc %d, output:\n%s" % (rc, out[-2000:]))
            check(bad.trace_of(0) == [], "mismatch: batches were delivered")
            line = [x for x in out.splitlines() if "job.epochs" in x][0]
            log("mismatch: %s" % line.strip())
        finally:
            hand.stop()
        def finished(case, world, epochs, what):
            for rc, out in case.wait():
                check(rc == 0, "%s: exit %d:\n%s" % (what, rc, out[-3000:]))
            per = check_ranks(case, cat, world, epochs, what)
            log("%s: %d rank(s) x %d epoch(s) x %d batches, each the sampler's" %
                (what, world, len(epochs), per))
            # seerd ended with the job: nothing serves the socket any more
            wait_for(lambda: not _daemon.serving(case.sock), LONG,
                     "%s: the loader's seerd to end with the job" % what)

        finished(single, 1, [0, 1], "single")
        # --resume from the script's own checkpoint, one more epoch (while
        # the distributed cases still run)
        single.start(["--epochs", "3", "--resume", "checkpoint.pth.tar"])
        finished(spawn, 2, [0], "mp.spawn")
        finished(trun, 2, [0], "torchrun")
        (rc, out), = single.wait()
        check(rc == 0 and "=> loaded checkpoint 'checkpoint.pth.tar' (epoch 2)" in out and
              "Epoch: [2]" in out, "resume: rc %d:\n%s" % (rc, out[-3000:]))
        per = check_ranks(single, cat, 1, [2], "resume", skip=2 * (len(cat) // BATCH))
        log("resume: epoch 2's %d batches exactly, from the script's checkpoint" % per)
    finally:
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_port])
