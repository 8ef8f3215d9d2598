#!/usr/bin/python3
"""Train a torchvision model with PyTorch DDP on an image folder, fed by the
DataLoader or by seer: one flag switches.

    # a small ImageNet-like folder of JPEGs
    /usr/bin/python3 examples/make_jpeg_folder.py data/jpeg --classes 10 --per-class 100
    # one process
    /usr/bin/python3 examples/train_ddp.py --data data/jpeg --loader seer-python
    # two ranks on this machine (CPU, gloo)
    mpirun -np 2 /usr/bin/python3 examples/train_ddp.py --data data/jpeg --loader seer-python
    # Slurm: one seerd per node first (README "Running a job"), then
    srun -n 8 /usr/bin/python3 examples/train_ddp.py --data /lustre/jpeg --loader seer \\
        --seerd external

--loader:
  dataloader    torchvision ImageFolder + DistributedSampler + DataLoader(num_workers)
  seer-python   seer.torch.TorchLoader(transform=the same torchvision transform,
                decode="pil", num_workers): the transform in worker processes
                reading the samples in seerd's shared memory
  seer          seerd decodes, crops, flips and normalises itself ([transform]
                section) and TorchLoader yields one zero-copy batch tensor

seer shards and batches as DistributedSampler does (padding included, the
same number of steps on every rank), but its shuffle is its own
counter-based permutation of (seed, epoch), so the DataLoader run sees the
samples in another order. The random crops of the DataLoader depend on
num_workers; seer's are a pure function of (seed, epoch, sample id).

seerd: with --seerd spawn (the default when every rank is on this node) the
first rank of the node starts bin/seerd for the job (socket, state and log
under --out) and stops it at the end; --seerd external uses a seerd you
started (SEER_SOCKET, or --socket, or the default from the job id), as on a
multi-node Slurm job.

Every epoch prints the loss (mean over ranks), images/s (all ranks) and the
share of time spent waiting for data. Rank 0 saves --out/checkpoint.pt at
every epoch's end and every --checkpoint-every steps: model, optimizer and the
loader position (epoch, batches consumed, and the seer.position record of
seer.ElasticSampler, a portable dict). --resume continues from it with the
same world size: seer loaders connect with start=(epoch, step) (a spawned
seerd's job.resume=epoch:step does the same for a whole job; resuming on
another world size needs seerd to accept the record at connect, which is not
there yet), the DataLoader skips the consumed batches of DistributedSampler's
order.

Rank and world size come from the launcher (RANK/WORLD_SIZE,
OMPI_COMM_WORLD_*, SLURM_PROCID/SLURM_NTASKS); the gloo rendezvous from
MASTER_ADDR/MASTER_PORT (default: the first host of the Slurm job or
127.0.0.1, port 29500).
"""

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision
import torchvision.transforms as T

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def env_int(*names, default=None):
    for n in names:
        if os.environ.get(n, "") != "":
            return int(os.environ[n])
    return default


def launcher():
    """(rank, world, local_rank, local_world) from the launcher's environment."""
    rank = env_int("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK", default=0)
    world = env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "PMI_SIZE", default=1)
    local = env_int("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", default=rank)
    lworld = env_int("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", default=None)
    if lworld is None:
        nodes = env_int("SLURM_JOB_NUM_NODES", "SLURM_NNODES", default=1)
        lworld = -(-world // nodes)
    return rank, world, local, lworld


def master_addr():
    if os.environ.get("MASTER_ADDR"):
        return os.environ["MASTER_ADDR"]
    nodes = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if nodes:
        out = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True,
                             text=True)
        if out.returncode == 0 and out.stdout.split():
            return out.stdout.split()[0]
    return "127.0.0.1"


def build_model(arch, classes):
    if arch == "tiny":  # for tests: a few convolutions
        return nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 16, 3, 2, 1),
                             nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(16, classes))
    return getattr(torchvision.models, arch)(num_classes=classes)


def train_transform(size):
    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(MEAN, STD)])


# ---- seerd for this job -----------------------------------------------------

def seerd_settings(a, world):
    s = {"dataset.path": os.path.abspath(a.data), "job.seed": a.seed, "job.epochs": a.epochs,
         "job.batch_size": a.batch, "job.id": a.job_id, "cache.ram": a.cache_ram,
         "cache.staging": a.staging, "prefetch.lookahead": max(8, 2 * a.workers + 2),
         "prefetch.io_threads": 4,
         "daemon.state_dir": os.path.join(a.out, "seerd-state"),
         "daemon.socket": a.socket}
    if a.loader == "seer":
        s.update({"transform.decode": "image", "transform.crop": "random_resized",
                  "transform.size": a.image_size, "transform.hflip": 0.5,
                  "transform.normalize": "imagenet", "transform.output": "float32_chw"})
    return s


def start_seerd(a, world):
    """bin/seerd for this one-node job, outside the launcher's MPI (the
    OMPI_/PMIX_/PMI_ variables would make it join the trainers' MPI job)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
    args = [os.path.join(ROOT, "bin", "seerd")]
    for k, v in seerd_settings(a, world).items():
        args += ["--set", "%s=%s" % (k, v)]
    log = open(os.path.join(a.out, "seerd.log"), "a")
    print("[train_ddp] starting seerd (log %s)" % log.name, flush=True)
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


# ---- loaders ----------------------------------------------------------------

class SkipSampler(torch.utils.data.Sampler):
    """DistributedSampler's order for one epoch, from batch `skip` on (resume)."""

    def __init__(self, base, skip_samples):
        self.base, self.skip = base, skip_samples

    def __iter__(self):
        return iter(list(self.base)[self.skip:])

    def __len__(self):
        return max(0, len(self.base) - self.skip)


def make_dataloader(a, rank, world):
    from torchvision.datasets import ImageFolder
    ds = ImageFolder(a.data, transform=train_transform(a.image_size))
    sampler = torch.utils.data.distributed.DistributedSampler(
        ds, num_replicas=world, rank=rank, shuffle=True, seed=a.seed, drop_last=False)

    def loader(s, persistent):
        return torch.utils.data.DataLoader(ds, batch_size=a.batch, sampler=s,
                                           num_workers=a.workers, pin_memory=a.pin_memory,
                                           persistent_workers=persistent and a.workers > 0,
                                           prefetch_factor=2 if a.workers else None)
    whole = loader(sampler, True)

    def epoch_iter(epoch, skip_batches):
        sampler.set_epoch(epoch)
        if skip_batches:  # the rest of an interrupted epoch
            return iter(loader(SkipSampler(sampler, skip_batches * a.batch), False))
        return iter(whole)
    return len(ds), len(ds.classes), epoch_iter, None


def make_seer(a, rank, world, start):
    from seer.torch import TorchLoader
    kw = {"rank": rank, "world_size": world, "socket": a.socket or None, "job_id": a.job_id,
          "pin_memory": a.pin_memory, "start": start}
    if a.loader == "seer-python":
        loader = TorchLoader(transform=train_transform(a.image_size), decode="pil",
                             num_workers=a.workers, **kw)
    else:
        loader = TorchLoader(**kw)
    # seer numbers classes as torchvision's find_classes: every directory of the root
    classes = sorted(e.name for e in os.scandir(a.data) if e.is_dir())

    def epoch_iter(epoch, skip_batches):
        for x, y in loader:
            if not isinstance(x, torch.Tensor):
                raise SystemExit("--loader seer: seerd delivered file bytes, not a batch "
                                 "tensor: it needs the [transform] stage (decode = image)")
            yield x, y
    return loader.num_samples, len(classes), epoch_iter, loader


# ---- checkpoint -------------------------------------------------------------

def save_checkpoint(a, model, opt, epoch, steps, world, nsamples):
    import seer
    rec = seer.ElasticSampler(nsamples, a.seed, world, a.batch).state_dict(None, epoch, steps)
    state = {"model": model.module.state_dict(), "optimizer": opt.state_dict(),
             "epoch": epoch, "step": steps, "world_size": world, "loader": rec,
             "args": {k: v for k, v in vars(a).items() if k not in ("resume",)}}
    path = os.path.join(a.out, "checkpoint.pt")
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)


def load_checkpoint(a, world):
    ck = torch.load(a.resume)
    if ck["world_size"] != world:
        raise SystemExit("--resume %s: saved with %d ranks, running %d: resuming on another "
                         "world size needs seerd to accept the position record at connect "
                         "(not there yet); run with %d ranks" % (a.resume, ck["world_size"],
                                                                 world, ck["world_size"]))
    return ck


# ---- main -------------------------------------------------------------------

def parse():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="image folder: root/<class>/<image>")
    ap.add_argument("--loader", choices=["dataloader", "seer", "seer-python"],
                    default="seer-python")
    ap.add_argument("--arch", default="resnet18", help="torchvision model name, or tiny")
    ap.add_argument("--image-size", type=int, default=112)
    ap.add_argument("--batch", type=int, default=32, help="per rank")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2, help="transform workers per rank "
                    "(dataloader, seer-python)")
    ap.add_argument("--pin-memory", action="store_true")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads per rank (0: cores / ranks on the node)")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps")
    ap.add_argument("--print-every", type=int, default=0, help="also print every N steps")
    ap.add_argument("--out", default="runs/train_ddp", help="checkpoint, seerd log and state")
    ap.add_argument("--checkpoint-every", type=int, default=0)
    ap.add_argument("--resume", help="a checkpoint.pt to continue from")
    ap.add_argument("--seerd", choices=["spawn", "external"], default=None,
                    help="start seerd here (default when every rank is on this node)")
    ap.add_argument("--socket", help="seerd's socket (default: under --out when spawned)")
    ap.add_argument("--job-id", default=None)
    ap.add_argument("--cache-ram", default="1GiB")
    ap.add_argument("--staging", default="256MiB")
    ap.add_argument("--dump-first-batch", help="write each rank's first batch labels to "
                    "PATH.rank<r>.json (tests)")
    return ap.parse_args()


def main():
    a = parse()
    rank, world, local, lworld = launcher()
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(a.threads or max(1, (os.cpu_count() or 1) // max(1, lworld)))
    torch.manual_seed(a.seed)  # the same initial weights on every rank
    os.environ.setdefault("MASTER_ADDR", master_addr())
    os.environ.setdefault("MASTER_PORT", "29500")
    dist.init_process_group("gloo", rank=rank, world_size=world)

    seerd = None
    if a.loader != "dataloader":
        a.job_id = a.job_id or os.environ.get("SEER_JOB_ID") or os.environ.get(
            "SLURM_JOB_ID") or "train_ddp"
        mode = a.seerd or ("spawn" if lworld == world and not os.environ.get("SEER_SOCKET")
                           else "external")
        if mode == "spawn":
            if lworld != world:
                raise SystemExit("--seerd spawn: ranks on several nodes need one seerd per "
                                 "node joined by MPI; start them (README) and use --seerd "
                                 "external")
            a.socket = a.socket or os.path.join(os.path.abspath(a.out), "seerd.sock")
            if local == 0:
                if os.path.exists(a.socket):
                    os.unlink(a.socket)  # a stale one from a killed run
                seerd = start_seerd(a, world)
    ck = load_checkpoint(a, world) if a.resume else None
    start = (ck["epoch"], ck["step"]) if ck else (0, 0)
    if a.loader == "dataloader":
        nsamples, classes, epoch_iter, loader = make_dataloader(a, rank, world)
        epochs = a.epochs
    else:
        nsamples, classes, epoch_iter, loader = make_seer(a, rank, world, start)
        epochs = loader.epochs
    model = nn.parallel.DistributedDataParallel(build_model(a.arch, classes))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=1e-4)
    if ck:
        model.module.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
    crit = nn.CrossEntropyLoss()
    if rank == 0:
        print("[train_ddp] %s, %d ranks, loader %s, %d images of %d classes, batch %d/rank, "
              "%dx%d, epochs %d, start %d:%d" % (a.arch, world, a.loader, nsamples, classes,
                                                 a.batch, a.image_size, a.image_size, epochs,
                                                 start[0], start[1]), flush=True)
    total_steps, stop, ok = 0, False, False
    try:
        for epoch in range(start[0], epochs):
            skip = start[1] if epoch == start[0] else 0
            steps, images, loss_sum, wait = skip, 0, 0.0, 0.0
            t0 = t_data = time.perf_counter()
            for x, y in epoch_iter(epoch, skip):
                wait += time.perf_counter() - t_data
                if a.dump_first_batch and total_steps == 0:
                    with open("%s.rank%d.json" % (a.dump_first_batch, rank), "w") as f:
                        json.dump({"epoch": epoch, "step": steps, "labels": y.tolist(),
                                   "shape": list(x.shape)}, f)
                loss = crit(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                steps += 1
                total_steps += 1
                images += x.shape[0]
                loss_sum += loss.item()
                if a.print_every and rank == 0 and steps % a.print_every == 0:
                    print("[train_ddp] epoch %d step %d loss %.4f" % (epoch, steps, loss.item()),
                          flush=True)
                if rank == 0 and a.checkpoint_every and steps % a.checkpoint_every == 0:
                    save_checkpoint(a, model, opt, epoch, steps, world, nsamples)
                if a.max_steps and total_steps >= a.max_steps:
                    stop = True
                    break
                t_data = time.perf_counter()
            dt = time.perf_counter() - t0
            done = steps - skip
            stats = torch.tensor([loss_sum, float(done), float(images), wait, dt],
                                 dtype=torch.float64)
            dist.all_reduce(stats)
            mean_loss = stats[0].item() / max(1.0, stats[1].item())
            if rank == 0:
                save_checkpoint(a, model, opt, epoch if stop else epoch + 1, steps if stop else 0,
                                world, nsamples)
                print("[train_ddp] epoch %d: %d steps, loss %.4f, %.1f images/s, data wait "
                      "%.0f%%%s" % (epoch, done, mean_loss, stats[2].item() / (stats[4].item()
                                                                              / world),
                                    100 * stats[3].item() / stats[4].item(),
                                    " (stopped: --max-steps)" if stop else ""), flush=True)
                if not math.isfinite(mean_loss):
                    raise SystemExit("[train_ddp] the loss is not finite")
            if stop:
                break
        ok = True
    finally:
        if loader is not None:
            loader.close()
        if ok:
            dist.barrier()  # every rank is done with seerd
        if seerd is not None:
            if seerd.poll() is None and (stop or not ok):
                seerd.send_signal(signal.SIGTERM)  # it saves every rank's position
            try:
                seerd.wait(60)
            except subprocess.TimeoutExpired:
                seerd.kill()
                seerd.wait()
        if ok:
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
