#!/usr/bin/python3
"""Issue 12's bar for the Python-transform path: images/s of the whole input
pipeline, seer.torch.TorchLoader(transform=tf, decode="pil", num_workers=N)
against torchvision ImageFolder + DataLoader(num_workers=N), the same JPEGs,
the same transform (RandomResizedCrop, RandomHorizontalFlip, ToTensor,
Normalize), the same cores, page cache warm. Not a test: it prints numbers.

    /usr/bin/python3 scripts/bench_transform_python.py [--images 1500] [--workers 2]
        [--batch 64] [--epochs 3] [--rounds 3] [--size 224] [--folder DIR]

The two pipelines alternate (DataLoader, seer, DataLoader, seer, ...) so a
shared machine's load hits both alike; every round prints images/s per epoch
of each, their ratio and the load average. Each pipeline runs in a fresh
trainer process (this script with --trainer) that only iterates: no model.
Beside images/s (wall clock, the bar) it prints images per CPU-second of the
whole pipeline (trainer, its workers and, for seer, seerd, from
/proc/<pid>/stat): on a machine shared with other work, a pipeline with more
runnable threads gets a larger share of the CPU, and the CPU-normalised ratio
shows whether a wall-clock difference is that or real work saved.
The DataLoader gets its best settings (persistent workers, the same
prefetch_factor 2). seerd (bin/seerd) runs beside it with the dataset in its
RAM cache; its I/O threads share the same cores.

scripts/bench_transform.py (seerd's native transform) imports measure(ctx)
from here and reports the Python path beside its own; ctx is a
SimpleNamespace with folder, images, cores, batch, epochs, seed, workdir and
seerd(sets) -> a context manager yielding the environment (SEER_SOCKET,
SEER_JOB_ID) of a started seerd on folder.
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import types

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BIN = os.path.join(ROOT, "bin")
PY = "/usr/bin/python3"
MiB = 1 << 20


def transform(size):
    import torchvision.transforms as T
    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


# ---- trainer processes ------------------------------------------------------

def _cpu(pid):
    """(utime + stime in seconds, minor page faults) of a live process ((0, 0)
    when gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK"), int(rest[7])
    except (OSError, IndexError, ValueError):
        return 0.0, 0


def _pipeline_pids():
    """{pid: role} of this trainer ("main"), its children ("workers") and,
    for seer, the seerd serving $SEER_SOCKET ("seerd"): every process the
    input pipeline runs in."""
    me, pids = os.getpid(), {os.getpid(): "main"}
    sock = os.environ.get("SEER_SOCKET")
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == me:
                pids[int(d)] = "workers"
            elif sock:
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    if ("daemon.socket=" + sock).encode() in f.read():
                        pids[int(d)] = "seerd"
        except (OSError, IndexError, ValueError):
            pass
    return pids


def _cpu_snapshot():
    return {p: (role, _cpu(p)) for p, role in _pipeline_pids().items()}


def trainer(a):
    """Iterate `epochs` epochs; print one JSON line per epoch: images, seconds."""
    import torch
    tf = transform(a.size)
    if a.trainer == "dataloader":
        from torchvision.datasets import ImageFolder
        ds = ImageFolder(a.folder, transform=tf)
        g = torch.Generator()
        g.manual_seed(a.seed)
        loader = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True,
                                             num_workers=a.workers, generator=g,
                                             persistent_workers=a.workers > 0,
                                             prefetch_factor=2 if a.workers else None)
        epochs = range(a.epochs)
    else:
        sys.path.insert(0, os.path.join(ROOT, "client", "python"))
        from seer.torch import TorchLoader
        loader = TorchLoader(rank=0, world_size=1, transform=tf, decode="pil",
                             num_workers=a.workers)
        epochs = range(loader.epochs)
    for e in epochs:
        n, c0, t0 = 0, _cpu_snapshot(), time.perf_counter()
        for x, y in loader:
            n += x.shape[0]
        dt = time.perf_counter() - t0
        c1 = _cpu_snapshot()
        roles = {"main": 0.0, "workers": 0.0, "seerd": 0.0}
        faults = dict.fromkeys(roles, 0)
        for p, (role, v) in c1.items():
            v0 = c0.get(p, (role, (0.0, 0)))[1]
            roles[role] += v[0] - v0[0]
            faults[role] += v[1] - v0[1]
        print(json.dumps({"epoch": e, "images": n, "seconds": dt,
                          "cpu_seconds": sum(roles.values()), "cpu": roles, "faults": faults}),
              flush=True)
    if a.trainer == "seer":
        loader.close()


def run_trainer(kind, ctx, workers, env=None):
    args = [PY, os.path.abspath(__file__), "--trainer", kind, "--folder", ctx.folder,
            "--workers", str(workers), "--batch", str(ctx.batch), "--epochs", str(ctx.epochs),
            "--seed", str(ctx.seed), "--size", str(getattr(ctx, "size", 224))]
    out = subprocess.run(args, capture_output=True, text=True, env=env or os.environ)
    if out.returncode != 0:
        raise SystemExit("%s trainer failed (%d):\n%s" % (kind, out.returncode, out.stderr))
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    ctx.last_cpu = [r["images"] / max(1e-9, r["cpu_seconds"]) for r in rows]
    ctx.last_split = [r["cpu"] for r in rows]
    ctx.last_faults = [r["faults"] for r in rows]
    return [r["images"] / r["seconds"] for r in rows]


def _seerd_sets(ctx):
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(ctx.folder)
               for f in fs if not f.startswith("."))
    return {"transform.decode": "none",  # file bytes: the transform is the trainer's
            "job.epochs": ctx.epochs, "job.batch_size": ctx.batch, "job.seed": ctx.seed,
            "cache.ram": "%dMiB" % (size * 2 // MiB + 16), "cache.staging": "128MiB",
            "prefetch.lookahead": 8}


def measure(ctx, workers=None):
    """images/s per epoch of TorchLoader(transform, decode='pil', num_workers)
    against a seerd started by ctx.seerd; workers defaults to ctx.cores."""
    w = ctx.cores if workers is None else workers
    with ctx.seerd(_seerd_sets(ctx)) as env:
        return run_trainer("seer", ctx, w, env)


def measure_dataloader(ctx, workers=None):
    w = ctx.cores if workers is None else workers
    return run_trainer("dataloader", ctx, w)


# ---- standalone -------------------------------------------------------------

@contextlib.contextmanager
def seerd(ctx, sets):
    """A seerd on ctx.folder; yields the trainers' environment."""
    d = tempfile.mkdtemp(prefix="seer-bench-", dir=ctx.workdir)
    sock = os.path.join(d, "seer.sock")
    args = [os.path.join(BIN, "seerd"), "--set", "dataset.path=" + ctx.folder,
            "--set", "daemon.socket=" + sock, "--set", "daemon.state_dir=" + d,
            "--set", "job.id=bench"]
    for k, v in sets.items():
        args += ["--set", "%s=%s" % (k, v)]
    log = open(os.path.join(d, "seerd.log"), "w")
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        t0 = time.time()
        # the socket answers from before the catalog scan: serving from this line
        while not os.path.exists(sock) or "serving job '" not in open(log.name).read():
            if p.poll() is not None or time.time() - t0 > 120:
                raise SystemExit("seerd did not start: see %s" % log.name)
            time.sleep(0.02)
        yield dict(os.environ, SEER_SOCKET=sock, SEER_JOB_ID="bench")
        p.wait(120)
    finally:
        if p.poll() is None:
            p.terminate()
            p.wait()
        log.close()
        subprocess.run(["rm", "-rf", d])


def warm(folder):
    n = 0
    for d, _, fs in os.walk(folder):
        for f in fs:
            with open(os.path.join(d, f), "rb") as fh:
                n += len(fh.read())
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainer", choices=["seer", "dataloader"], help=argparse.SUPPRESS)
    ap.add_argument("--folder", help="JPEG folder (default: generated under --workdir)")
    ap.add_argument("--images", type=int, default=1500)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cpu-split", action="store_true",
                    help="also print CPU seconds and minor page faults by process: trainer, "
                    "workers, seerd")
    ap.add_argument("--workdir", default=os.environ.get("SEER_BENCH_DIR",
                                                        os.path.join(ROOT, "data")))
    a = ap.parse_args()
    if a.trainer:
        return trainer(a)
    os.makedirs(a.workdir, exist_ok=True)
    if not a.folder:
        a.folder = os.path.join(a.workdir, "jpeg-%d" % a.images)
        subprocess.run([PY, os.path.join(ROOT, "examples", "make_jpeg_folder.py"), a.folder,
                        "--classes", "10", "--per-class", str(max(1, a.images // 10)),
                        "--size", "500x375", "--quality", "90"], check=True)
    ctx = types.SimpleNamespace(folder=a.folder, images=a.images, cores=a.workers,
                                batch=a.batch, epochs=a.epochs, seed=a.seed, size=a.size,
                                workdir=a.workdir)
    ctx.seerd = lambda sets: seerd(ctx, sets)
    nbytes = warm(a.folder)
    print("%s: %.1f MB of JPEGs, page cache warm; %d workers each, batch %d, %d epochs, "
          "crop %d; %d cores" % (a.folder, nbytes / 1e6, a.workers, a.batch, a.epochs, a.size,
                                 os.cpu_count()), flush=True)
    ratios, cratios = [], []
    fmt = " ".join
    for r in range(a.rounds):
        la0 = os.getloadavg()[0]
        dl = measure_dataloader(ctx, a.workers)
        dlc, dl_split, dl_faults = ctx.last_cpu, ctx.last_split, ctx.last_faults
        sr = measure(ctx, a.workers)
        src = ctx.last_cpu
        la1 = os.getloadavg()[0]
        rr = [s / d for s, d in zip(sr, dl)]
        cr = [s / d for s, d in zip(src, dlc)]
        ratios.append(rr)
        cratios.append(cr)
        print("round %d: DataLoader %s img/s (%s img/CPU-s), seer-python %s img/s (%s "
              "img/CPU-s); ratio %s (per CPU-s %s); load avg %.2f -> %.2f" %
              (r, fmt("%.0f" % x for x in dl), fmt("%.0f" % x for x in dlc),
               fmt("%.0f" % x for x in sr), fmt("%.0f" % x for x in src),
               fmt("%.2fx" % x for x in rr), fmt("%.2fx" % x for x in cr), la0, la1),
              flush=True)
        if a.cpu_split:
            print("  CPU s per epoch (main/workers/seerd): DataLoader %s; seer-python %s" %
                  (fmt("%.1f/%.1f/%.1f" % (c["main"], c["workers"], c["seerd"])
                       for c in dl_split),
                   fmt("%.1f/%.1f/%.1f" % (c["main"], c["workers"], c["seerd"])
                       for c in ctx.last_split)), flush=True)
            print("  minor page faults per epoch (main/workers/seerd): DataLoader %s; "
                  "seer-python %s" %
                  (fmt("%d/%d/%d" % (c["main"], c["workers"], c["seerd"]) for c in dl_faults),
                   fmt("%d/%d/%d" % (c["main"], c["workers"], c["seerd"])
                       for c in ctx.last_faults)), flush=True)
    for e in range(a.epochs):
        col = sorted(x[e] for x in ratios)
        cc = sorted(x[e] for x in cratios)
        print("epoch %d: seer-python / DataLoader images/s median %.2fx (min %.2fx, max "
              "%.2fx); per CPU-second (trainer + workers + seerd) median %.2fx (min %.2fx, max "
              "%.2fx); %d rounds" % (e, col[len(col) // 2], col[0], col[-1], cc[len(cc) // 2],
                                     cc[0], cc[-1], len(col)))


if __name__ == "__main__":
    main()
