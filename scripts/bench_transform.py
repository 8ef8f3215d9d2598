#!/usr/bin/python3
"""Images/s of the whole input pipeline, decoded and augmented, on the same
JPEG folder (issue 12's bars): seer's native transform vs torchvision's
ImageFolder + DataLoader.

    /usr/bin/python3 scripts/bench_transform.py [--images 1500] [--epochs 3]
        [--rounds 2] [--batch 64] [--workers CORES] [--dir /tmp/seer-bench-xf]

The folder: --images ImageNet-like JPEGs (crops of a real photo resized to
500x375 or 375x500, quality 90) in 10 class directories, generated once; the
page cache is warmed by reading every file before the runs. Each round runs,
in alternating order:

  dataloader  ImageFolder + DataLoader(num_workers=--workers, shuffle) with
              RandomResizedCrop(224), RandomHorizontalFlip, ToTensor,
              Normalize(ImageNet) -- the transform a new user writes
  seer        seerd, [transform] decode = image with the same transform
              (float32 NCHW, ImageNet normalisation), transform.threads
              automatic (the machine's cores: the trainer here does no
              work), cache = encoded: every epoch decodes
  seer-dec    the same with transform.cache = decoded: epoch 1 decodes each
              image once into the RAM cache, later epochs only crop, resize,
              flip and normalise
  python      scripts/bench_transform_python.py's measure(ctx), when that
              file exists (seer.torch.TorchLoader with Python transform
              workers; see below)

The consumer only iterates (no model), so the numbers are the input
pipeline's own rate. Epoch 1 and the mean of epochs 2+ are reported per
system, the median over rounds, their ratios to the DataLoader, and the load
average around each run: the machine may be shared, so compare the ratios of
one run, not absolute numbers across runs. Prints numbers; never fails on a
timing (the exit status is non-zero only when a run could not complete).

scripts/bench_transform_python.py (optional) defines measure(ctx) -> a list
of images/s, one per epoch; ctx has folder, images, cores, batch, epochs,
seed, workdir, and seerd(sets) -> a context manager that starts seerd on the
folder with `sets` ({"transform.decode": "none", ...} added to the defaults
above) and yields the environment (SEER_SOCKET, SEER_JOB_ID) for trainers."""

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
os.environ.setdefault("SEER_LIB", os.path.join(ROOT, "lib", "libseer.so.0"))
PHOTO = "/usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg"
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def make_folder(root, n, classes=10):
    marker = os.path.join(root, ".done-%d" % n)
    if os.path.exists(marker):
        return
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    photo = Image.open(PHOTO).convert("RGB")
    W, H = photo.size
    for k in range(n):
        d = os.path.join(root, "class%02d" % (k % classes))
        os.makedirs(d, exist_ok=True)
        cw, ch = int(W * rng.uniform(0.5, 1)), int(H * rng.uniform(0.5, 1))
        x0, y0 = int(rng.integers(0, W - cw + 1)), int(rng.integers(0, H - ch + 1))
        size = (500, 375) if k % 3 else (375, 500)
        photo.crop((x0, y0, x0 + cw, y0 + ch)).resize(size, Image.BICUBIC).save(
            os.path.join(d, "%06d.jpg" % k), quality=90)
    open(marker, "w").close()


def warm(root):
    total = 0
    for d, _, files in os.walk(root):
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                total += len(fh.read())
    return total


def load():
    return os.getloadavg()[0]


def run_dataloader(a):
    import torch
    import torchvision.datasets as dsets
    import torchvision.transforms as T
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize(MEAN, STD)])
    ds = dsets.ImageFolder(a.data, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True,
                                     num_workers=a.workers)
    rates = []
    for _ in range(a.epochs):
        t0, n = time.perf_counter(), 0
        for x, y in dl:
            n += x.shape[0]
        rates.append(n / (time.perf_counter() - t0))
    return rates


@contextlib.contextmanager
def seerd(a, sets, name):
    """seerd on the folder with the benchmark's transform and `sets`."""
    sock = os.path.join(a.dir, name + ".sock")
    stats = os.path.join(a.dir, name + "-stats.json")
    s = {"dataset.path": a.data, "job.batch_size": a.batch, "job.epochs": a.epochs,
         "job.seed": 1, "daemon.socket": sock, "daemon.stats_file": stats,
         "daemon.state_dir": os.path.join(a.dir, "state"), "cache.ram": "3GiB",
         "cache.staging": a.staging, "transform.decode": "image",
         "transform.crop": "random_resized", "transform.size": 224,
         "transform.output": "float32_chw", "transform.normalize": "imagenet"}
    s.update(sets)
    args = [os.path.join(ROOT, "bin", "seerd")]
    for k, v in s.items():
        args += ["--set", "%s=%s" % (k, v)]
    logf = open(os.path.join(a.dir, name + ".log"), "w")
    p = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT)
    try:
        t0 = time.time()
        # the socket answers from before the catalog scan: serving from this line
        while not os.path.exists(sock) or "serving job '" not in open(logf.name).read():
            if p.poll() is not None or time.time() - t0 > 120:
                raise RuntimeError("seerd did not start: see %s" % logf.name)
            time.sleep(0.02)
        yield dict(os.environ, SEER_SOCKET=sock, SEER_JOB_ID="default"), stats
        p.wait(120)
    finally:
        if p.poll() is None:
            p.terminate()
            p.wait(30)
        logf.close()


def run_seer(a, cache, name):
    import seer
    with seerd(a, {"transform.cache": cache}, name) as (env, stats):
        rates = []
        with seer.Loader(socket=env["SEER_SOCKET"], rank=0, world_size=1) as ld:
            for _ in range(a.epochs):
                t0, n = time.perf_counter(), 0
                for b in ld:
                    n += len(b)
                rates.append(n / (time.perf_counter() - t0))
    with open(stats) as f:
        xf = json.load(f)["transform"]
    return rates, xf


def python_path(a):
    path = os.path.join(ROOT, "scripts", "bench_transform_python.py")
    if not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location("bench_transform_python", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ctx = types.SimpleNamespace(folder=a.data, images=a.images, cores=a.workers, batch=a.batch,
                                epochs=a.epochs, seed=1, workdir=a.dir,
                                seerd=lambda sets: _env_only(a, sets))
    return lambda: mod.measure(ctx)


@contextlib.contextmanager
def _env_only(a, sets):
    with seerd(a, sets, "python") as (env, _):
        yield env


def summary(rates):
    return rates[0], statistics.mean(rates[1:]) if len(rates) > 1 else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=1500)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--dir", default=os.environ.get("SEER_BENCH_XF", "/tmp/seer-bench-xf"))
    ap.add_argument("--staging", default=None,
                    help="seerd's cache.staging (default: 4 batches of tensors and files; "
                    "fresh memory is costly to fault in, a ring that wraps sooner reuses "
                    "its pages)")
    a = ap.parse_args()
    if a.staging is None:
        a.staging = "%dMiB" % (4 * a.batch * (3 * 224 * 224 * 4 + (256 << 10)) // (1 << 20))
    a.data = os.path.join(a.dir, "jpeg-%d" % a.images)
    os.makedirs(a.dir, exist_ok=True)
    t0 = time.time()
    make_folder(a.data, a.images)
    mb = warm(a.data) / 1e6
    print("folder %s: %d JPEGs (500x375 q90), %.1f MB, page cache warmed (%.0f s); %d cores, "
          "batch %d, %d epochs, %d rounds" % (a.data, a.images, mb, time.time() - t0,
                                              os.cpu_count(), a.batch, a.epochs, a.rounds),
          flush=True)
    systems = {"dataloader": lambda: (run_dataloader(a), None),
               "seer": lambda: run_seer(a, "encoded", "seer"),
               "seer-dec": lambda: run_seer(a, "decoded", "seer-dec")}
    py = python_path(a)
    if py:
        systems["python"] = lambda: (py(), None)
    results = {k: [] for k in systems}
    order = list(systems)
    for r in range(a.rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            l0 = load()
            rates, xf = systems[name]()
            l1 = load()
            e1, later = summary(rates)
            results[name].append((e1, later))
            extra = ""
            if xf:
                t = xf["total"]
                extra = ("; transform %d threads, decode %.1f s, crop/resize %.1f s, "
                         "decoded-cache fills %.1f s" % (xf["threads"], t["decode_s"],
                                                          t["resize_s"], t["cache_decode_s"]))
            print("round %d %-10s epoch 1 %7.1f img/s, epochs 2+ %7.1f img/s (per epoch: %s); "
                  "load %.1f -> %.1f%s" % (r + 1, name, e1, later,
                                            " ".join("%.0f" % x for x in rates), l0, l1, extra),
                  flush=True)
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
           for k, v in results.items()}
    base = med["dataloader"]
    print("\nmedian over %d rounds (images/s; ratio to the DataLoader):" % a.rounds)
    for k, (e1, later) in med.items():
        print("  %-10s epoch 1 %7.1f (%.2fx)   epochs 2+ %7.1f (%.2fx)" %
              (k, e1, e1 / base[0], later, later / base[1]))
    print("bars (issue 12): seer epoch 1 >= 2x: %.2fx; seer-dec epochs 2+ >= 4x: %.2fx" %
          (med["seer"][0] / base[0], med["seer-dec"][1] / base[1]))


if __name__ == "__main__":
    main()
