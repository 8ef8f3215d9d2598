"""Shared by the transform tests (test_transform.py, test_transform_threads.py):
an ImageNet-like JPEG folder, a job run end to end (seerd on one node, or
several under mpirun: seertest.MpiDaemons; xf_trainer.py per rank), and the
delivered tensors' CRCs keyed by (epoch, sample id) for comparisons between runs."""

import json
import os
import subprocess

from seertest import LONG, ROOT, Daemon, MpiDaemons, check, finish

PHOTO = "/usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg"
TRAINER = os.path.join(ROOT, "tests", "integration", "xf_trainer.py")


def make_images(root, classes=3, per_class=12, seed=0, quality=90, big=False):
    """root/c<k>/<i>.jpg: crops of a real photo resized to 500x375 or 375x500
    (ImageNet-like; big: 1024x768 or 768x1024), JPEG quality 90."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(seed)
    photo = Image.open(PHOTO).convert("RGB")
    W, H = photo.size
    for c in range(classes):
        os.makedirs(os.path.join(root, "c%d" % c), exist_ok=True)
        for k in range(per_class):
            cw, ch = int(W * rng.uniform(0.5, 1)), int(H * rng.uniform(0.5, 1))
            x0, y0 = int(rng.integers(0, W - cw + 1)), int(rng.integers(0, H - ch + 1))
            size = (500, 375) if (k + c) % 3 else (375, 500)
            if big:
                size = (size[0] * 1024 // 500, size[1] * 1024 // 500)
            photo.crop((x0, y0, x0 + cw, y0 + ch)).resize(size, Image.BICUBIC).save(
                os.path.join(root, "c%d" % c, "%03d.jpg" % k), quality=quality)


def spec_text(spec):
    return " ".join("%s=%s" % kv for kv in sorted(spec.items()))


def parse(path):
    """(samples {(epoch, id): crc}, batches {(epoch, step): [ids]}, errors, refs)."""
    samples, batches, errors, refs = {}, {}, [], []
    with open(path) as f:
        for line in f:
            p = line.split()
            if not p:
                continue
            if p[0] == "ERR":
                errors.append((int(p[1]), int(p[2]), " ".join(p[3:])))
            elif p[0] == "REF":
                refs.append((int(p[1]), int(p[2]), float(p[3]), float(p[4])))
            else:
                e, s, i, sid, label, n, crc = p
                key = (int(e), int(sid))
                crc = int(crc, 16)
                # padding repeats a sample within an epoch: same tensor
                check(samples.get(key, crc) == crc,
                      "%s: sample %s delivered twice in epoch %s with different tensors" %
                      (path, sid, e))
                samples[key] = crc
                batches.setdefault((int(e), int(s)), []).append(int(sid))
    return samples, batches, errors, refs


class Job:
    """A finished job: its trainers' logs merged, the daemons' stats and logs."""

    def __init__(self):
        self.samples, self.errors, self.refs, self.batches = {}, [], [], {}
        self.stats, self.logs = [], []

    def add(self, rank, path):
        s, b, e, r = parse(path)
        for k, v in s.items():
            check(self.samples.get(k, v) == v, "sample %s: ranks disagree on its tensor" % (k,))
            self.samples[k] = v
        for k, v in b.items():
            self.batches[(rank,) + k] = v
        self.errors += e
        self.refs += r


def run(tmp, data, spec, name, world=1, settings=None, ref_every=0, nodes=1, env=None):
    """Run a job to its end: seerd with `settings` and the [transform] keys of
    `spec` (a dict), `world` xf_trainer.py ranks (rank r on node r % nodes).
    Returns a Job; fails when a trainer or daemon fails."""
    s = {"dataset.path": data, "job.seed": 7, "job.epochs": 2,
         "job.batch_size": 4, "prefetch.io_threads": 4, "prefetch.lookahead": 4}
    s.update({"transform." + k: v for k, v in spec.items()})
    s.update(settings or {})
    job = Job()
    if nodes == 1:
        d = Daemon(tmp, s, name=name, env=env)
        socks = [d.sock]
        stats_paths = [d.stats_file]
    else:
        # (a peer answers within a minute however busy the machine is)
        d = MpiDaemons(tmp, nodes, dict({"net.peer_timeout_ms": 60000}, **s), name=name)
        socks = [d.socket(k) for k in range(nodes)]
        stats_paths = [d.stats_path(k) for k in range(nodes)]
    try:
        logs = [os.path.join(tmp, "%s-r%d.log" % (name, r)) for r in range(world)]
        procs = []
        for r in range(world):
            args = ["/usr/bin/python3", TRAINER, "--rank", str(r), "--world", str(world),
                    "--socket", socks[r % nodes], "--log", logs[r], "--spec", spec_text(spec),
                    "--dataset", data, "--ref-every", str(ref_every)]
            procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        for r, (rc, _, err) in enumerate(finish(procs, timeout=600)):
            check(rc == 0, "%s: trainer %d failed (%d): %s\n%s" % (name, r, rc, err, d.log()))
        rc = d.wait(LONG) if nodes == 1 else d.wait()
        check(rc == 0, "%s: seerd exited %s:\n%s" % (name, rc, d.log()))
    finally:
        d.stop()
    for r in range(world):
        job.add(r, logs[r])
    for p in stats_paths:
        with open(p) as f:
            job.stats.append(json.load(f))
    job.logs.append(d.log())
    return job


def same_tensors(a, b, what, keys=None):
    """Every (epoch, id) both jobs delivered (or `keys`) has the same tensor."""
    keys = keys if keys is not None else set(a.samples) & set(b.samples)
    check(keys, "%s: no sample in common" % what)
    diff = [k for k in sorted(keys) if a.samples[k] != b.samples[k]]
    check(not diff, "%s: %d of %d tensors differ, first (epoch, id) %s" %
          (what, len(diff), len(keys), diff[:5]))
    return len(keys)
