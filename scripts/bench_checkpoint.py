#!/usr/bin/python3
"""Trainer blocking time of seer.checkpoint.save vs torch.save, same path.

    scripts/bench_checkpoint.py [--mib 512] [--reps 3] [--dir DIR] [--nvme DIR]
                                [--drain-rate BYTES_PER_S] [--pfsemu RATE]

Starts a seerd of its own (a tiny dataset, job id bench-ckpt), with its
NVMe tier at --nvme (default: a folder under --dir), and saves a state dict
of --mib MiB of float32 tensors to --dir (the "PFS": a local folder unless
you point it at a mount, e.g. scripts/pfsemu-mount.sh's) --reps times each
way (--pfsemu RATE: the "PFS" is seer-pfsemu in write mode over a folder,
--write-bandwidth RATE, and its count of bytes written is printed):
  torch.save        torch.save(obj, path) (page cache; no fsync, as torch does)
  torch.save+fsync  the same, then fsync: durable like seer's "pfs" level
  seer save         seer.checkpoint.save(obj, path): the trainer's stall
  seer local/pfs    from save's return until wait("local") / wait("pfs")
and times load: seer.checkpoint.load (from seerd's NVMe copy) vs torch.load
of the PFS file. Prints numbers; never fails on a timing.

    scripts/bench_checkpoint.py --beside N [--mib 128] [--every 2] [--pfsemu 100MB/s]
                                [--data-mib 96] [--warm] [--epochs E] [--compute-ms MS]
                                [--window S] [--share F]

The issue's second bar: N trainers (seer-trainer) read a dataset through
seerd from seer-pfsemu (--bandwidth RATE --write-shares-bandwidth: reads and
writes share one link) for 2 epochs with a small RAM cache, once alone and
once while this process saves a --mib state with seer.checkpoint.save every
--every seconds; prints each run's samples/s and the difference, seerd's
samples/s per epoch, and each drain's time from seerd's log (and its bytes
by pace: full, plan, yield). The checkpoints start once every trainer has
taken its second batch (cold) or paused at epoch 1 (--warm); --epochs sets
the epochs (default 2 cold, 4 warm). --warm: an NVMe tier holds the dataset, so
epoch 0 reads the PFS and the others (--epochs, default 4) are served from
NVMe and RAM; the trainers pause at epoch 1 and the checkpoints start there.
--window S sets [checkpoint] drain_window_s, --share F drain_share.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
os.environ.setdefault("SEER_LIB", os.path.join(ROOT, "lib", "libseer.so.0"))

import torch  # noqa: E402
import seer.checkpoint as sc  # noqa: E402
from seertest import Daemon, make_classes  # noqa: E402


def fsync_path(p):
    fd = os.open(p, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--nvme", default=None)
    ap.add_argument("--drain-rate", default="0")
    ap.add_argument("--pfsemu", default=None, metavar="RATE")
    ap.add_argument("--beside", type=int, default=0, metavar="N")
    ap.add_argument("--every", type=float, default=2.0)
    ap.add_argument("--data-mib", type=int, default=96)
    ap.add_argument("--warm", action="store_true")
    ap.add_argument("--epochs", type=int, default=0)
    ap.add_argument("--compute-ms", type=float, default=0)
    ap.add_argument("--window", default=None, metavar="S")
    ap.add_argument("--share", default=None, metavar="F")
    a = ap.parse_args()
    if a.beside:
        return beside(a)
    work = tempfile.mkdtemp(prefix="seer-bench-ckpt-")
    pfs = a.dir or os.path.join(work, "pfs")
    os.makedirs(pfs, exist_ok=True)
    emu_mnt = None
    if a.pfsemu:
        emu_mnt = os.path.join(work, "pfs-mnt")
        os.makedirs(emu_mnt)
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-mount.sh"), pfs, emu_mnt,
                        "--write-bandwidth", a.pfsemu], check=True, capture_output=True)
        pfs = emu_mnt
    nvme = a.nvme or os.path.join(work, "nvme")
    data = os.path.join(work, "data")
    make_classes(data, ["a"], 8, 100, 200)
    n = a.mib * (1 << 20) // 4
    obj = {"layer%d" % i: torch.randn(n // 8) for i in range(8)}
    obj["step"] = 1
    s = {"dataset.path": data, "job.id": "bench-ckpt", "cache.nvme_dir": nvme,
         "checkpoint.memory": "%dMiB" % (2 * a.mib + 64),
         "checkpoint.nvme": "%dMiB" % ((a.reps + 2) * a.mib + 64),
         "checkpoint.drain_rate": a.drain_rate, "daemon.stop_grace_s": 600}
    rows = {"torch.save": [], "torch.save+fsync": [], "seer save": [], "seer local": [],
            "seer pfs": []}
    try:
        with Daemon(work, s) as d:
            kw = {"socket": d.sock, "job_id": "bench-ckpt"}
            for r in range(a.reps):
                p = os.path.join(pfs, "torch_%d.pt" % r)
                t0 = time.perf_counter()
                torch.save(obj, p)
                t1 = time.perf_counter()
                fsync_path(p)
                t2 = time.perf_counter()
                rows["torch.save"].append(t1 - t0)
                rows["torch.save+fsync"].append(t2 - t0)
                p = os.path.join(pfs, "seer_%d.pt" % r)
                t0 = time.perf_counter()
                h = sc.save(obj, p, **kw)
                t1 = time.perf_counter()
                h.wait("local")
                t2 = time.perf_counter()
                h.wait("pfs")
                t3 = time.perf_counter()
                rows["seer save"].append(t1 - t0)
                rows["seer local"].append(t2 - t1)
                rows["seer pfs"].append(t3 - t1)
                h.close()
            last = os.path.join(pfs, "seer_%d.pt" % (a.reps - 1))
            t0 = time.perf_counter()
            sc.load(last, **kw)
            t_nvme = time.perf_counter() - t0
            where = sc.where(last, **kw)
            subprocess.run(["sync"])
            t0 = time.perf_counter()
            torch.load(last)
            t_pfs = time.perf_counter() - t0
            written = None
            if emu_mnt:
                import json
                with open(os.path.join(emu_mnt, ".pfsemu", "stats")) as f:
                    written = json.load(f)["totals"]["write"]["bytes"]
                seer_bytes = a.reps * os.path.getsize(last)
    finally:
        if emu_mnt:
            subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-umount.sh"), emu_mnt],
                           capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    size = a.mib
    print("state %d MiB, %d reps, PFS %s%s, NVMe %s, drain cap %s, load %s" %
          (size, a.reps, "seer-pfsemu --write-bandwidth %s over " % a.pfsemu if a.pfsemu else "",
           a.dir or "(tmp folder)", nvme, a.drain_rate,
           open("/proc/loadavg").read().split()[:3]))
    for k, v in rows.items():
        print("%-18s median %7.3f s  (%s)  %s" % (k, sorted(v)[len(v) // 2],
                                                  " ".join("%.3f" % x for x in v),
                                                  "%.0f MiB/s" % (size / max(sorted(v)[len(v) // 2], 1e-9))))
    ts, ss = sorted(rows["torch.save"])[a.reps // 2], sorted(rows["seer save"])[a.reps // 2]
    tf = sorted(rows["torch.save+fsync"])[a.reps // 2]
    print("blocking: torch.save / seer save = %.2fx; torch.save+fsync / seer save = %.2fx" %
          (ts / ss, tf / ss))
    print("load: seer.checkpoint.load (%s) %.3f s, torch.load of the PFS file %.3f s" %
          (where, t_nvme, t_pfs))
    if written is not None:
        print("pfsemu (--write-bandwidth %s): bytes written %d = torch.save's %d + seer's %d "
              "(%s)" % (a.pfsemu, written, written - seer_bytes, seer_bytes,
                        "torch + seer bytes" if written == 2 * seer_bytes else "differs"))


def trainer_rates(procs):
    rates = []
    for p in procs:
        out, err = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise SystemExit("trainer failed: %s" % err)
        m = re.search(r"([0-9.]+) samples/s", out)
        rates.append(float(m.group(1)))
    return rates


DRAIN_RE = re.compile(r"checkpoint (\S+) \(([^)]*)\) on the PFS in ([0-9.]+) s \(([0-9.]+) MB/s"
                      r"(?:; at full rate ([^,]+), in the gaps between the plan's PFS reads ([^,]+), "
                      r"yielding to queued reads ([^)]+))?")


def drains(log_text):
    """[(path, seconds, MB/s, (full, plan, yield) or None)] from seerd's log."""
    return [(m.group(1), float(m.group(3)), float(m.group(4)),
             (m.group(5), m.group(6), m.group(7)) if m.group(5) else None)
            for m in DRAIN_RE.finditer(log_text)]


def wait_paused(sync, ranks, point, procs):
    """Until every rank holds its batch at point (seer-trainer --pause-at)."""
    names = [os.path.join(sync, "paused-%d-%d-%d" % (r, point[0], point[1])) for r in ranks]
    while not all(os.path.exists(n) for n in names):
        for p in procs:
            if p.poll() is not None:
                raise SystemExit("a trainer exited before its pause: %s" % p.stderr.read())
        time.sleep(0.01)


def beside(a):
    rate = a.pfsemu or "100MB/s"
    epochs = a.epochs or (4 if a.warm else 2)
    work = tempfile.mkdtemp(prefix="seer-bench-ckpt-")
    src = os.path.join(work, "pfs")
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt)
    per = 256 * 1024
    make_classes(os.path.join(src, "data"), ["c%d" % i for i in range(8)],
                 max(1, a.data_mib * (1 << 20) // per // 8), per - 4096, per + 4096)
    subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-mount.sh"), src, mnt,
                    "--bandwidth", rate, "--write-shares-bandwidth"], check=True,
                   capture_output=True)
    n = a.mib * (1 << 20) // 4
    obj = {"layer%d" % i: torch.randn(n // 8) for i in range(8)}
    out, ep_raw = {}, {}
    try:
        for run in ("alone", "with checkpoints"):
            wd = os.path.join(work, run.replace(" ", "-"))
            os.makedirs(wd)
            s = {"dataset.path": os.path.join(mnt, "data"), "job.id": "bench-beside",
                 "job.epochs": epochs, "job.batch_size": 16, "job.world_size": a.beside,
                 "cache.ram": "8MiB", "cache.nvme_dir": os.path.join(wd, "nvme"),
                 "checkpoint.memory": "%dMiB" % (4 * a.mib + 64)}
            if a.warm:  # the NVMe tier holds the dataset: epochs after the first are warm
                s["cache.nvme"] = "%dMiB" % (2 * a.data_mib + 64)
            if a.window is not None:
                s["checkpoint.drain_window_s"] = a.window
            if a.share is not None:
                s["checkpoint.drain_share"] = a.share
            sync = os.path.join(wd, "sync")
            os.makedirs(sync)
            with Daemon(wd, s) as d:
                env = dict(os.environ, SEER_JOB_ID="bench-beside")
                extra = ["--compute-ms", str(a.compute_ms)] if a.compute_ms else []
                # checkpoints start once every trainer reads: from the first
                # warm epoch on, or (cold) from each one's second batch
                pause = (1, 0) if a.warm else (0, 1)
                extra += ["--sync", sync, "--pause-at", "%d:%d" % pause]
                procs = [subprocess.Popen([os.path.join(ROOT, "bin", "seer-trainer"), "--rank",
                                           str(r), "--world", str(a.beside), "--socket",
                                           d.sock] + extra,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, env=env) for r in range(a.beside)]
                saved, waiters, stop = [], [], threading.Event()

                def waiter(h, t_ret, rec):
                    try:  # seerd drains what it holds before it exits at the job's end
                        h.wait("pfs", timeout=120)
                    except Exception:  # noqa: BLE001 (seer.SeerError, TimeoutError)
                        return
                    rec.append((h.path, time.perf_counter() - t_ret, time.perf_counter()))

                pfs_at = []

                def saver():
                    k = 0
                    while not stop.is_set():
                        t0 = time.perf_counter()
                        try:  # the job (and seerd) may end meanwhile
                            h = sc.save(obj, os.path.join(mnt, "ck_%d.pt" % k), socket=d.sock,
                                        job_id="bench-beside", timeout=60, connect_timeout=2)
                        except Exception:  # noqa: BLE001 (seer.SeerError: seerd went away)
                            return
                        t1 = time.perf_counter()
                        saved.append((t1 - t0, h))
                        w = threading.Thread(target=waiter, args=(h, t1, pfs_at), daemon=True)
                        w.start()
                        waiters.append(w)
                        k += 1
                        stop.wait(a.every)
                wait_paused(sync, range(a.beside), pause, procs)
                th = None
                if run != "alone":
                    th = threading.Thread(target=saver)
                    th.start()
                open(os.path.join(sync, "go-%d-%d" % pause), "w").close()
                rates = trainer_rates(procs)
                t_end = time.perf_counter()
                stop.set()
                if th:
                    th.join()
                t_give_up = time.perf_counter() + 120
                for w in waiters:  # a checkpoint seerd did not drain before it exited
                    w.join(max(0.0, t_give_up - time.perf_counter()))
                with open(os.path.join(mnt, ".pfsemu", "stats")) as f:
                    tot = json.load(f)["totals"]
            with open(d.stats_file) as f:
                ep_raw[run] = json.load(f)["epochs"]
            ep = [(x["epoch"], x["samples"] / max(x["seconds"], 1e-9), x["pfs_samples"])
                  for x in ep_raw[run]]
            dr = drains(d.log())
            during = [x for x in pfs_at if x[2] <= t_end]
            out[run] = (rates, len(saved), sum(x[0] for x in saved) / max(1, len(saved)),
                        tot["bytes"], tot["write"]["bytes"], ep, dr, during)
            for (_, h), w in zip(saved, waiters):
                if not w.is_alive():
                    h.close()
    finally:
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-umount.sh"), mnt],
                       capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    print("%d trainers, dataset %d MiB via seer-pfsemu --bandwidth %s --write-shares-bandwidth, "
          "%d epochs (%s), state %d MiB every %.1f s%s, load %s" %
          (a.beside, a.data_mib, rate, epochs,
           "warm: epoch 0 fills the NVMe tier, checkpoints from epoch 1 on" if a.warm
           else "cold: 8 MiB RAM cache, every epoch reads the PFS", a.mib, a.every,
           (", drain_window_s %s" % a.window if a.window is not None else "") +
           (", drain_share %s" % a.share if a.share is not None else ""),
           open("/proc/loadavg").read().split()[:3]))
    base = sum(out["alone"][0])
    for run, (rates, k, blk, rd, wr, ep, dr, during) in out.items():
        print("%-17s samples/s %s (sum %.0f, %+.1f%%); checkpoints %d (save blocked %.3f s "
              "each); PFS read %d B, written %d B (cumulative)" %
              (run, " ".join("%.0f" % x for x in rates), sum(rates),
               100.0 * (sum(rates) - base) / base, k, blk, rd, wr))
        print("  per epoch (seerd): %s" % "; ".join(
            "%d %s %.0f" % (e, "cold" if p else "warm", r) for e, r, p in ep))
        for kind in ("cold", "warm"):
            sel = [x for x in ep_raw[run] if (x["pfs_samples"] > 0) == (kind == "cold")]
            if sel:
                print("  %s epochs: %.0f samples/s (%d samples in %.2f s)" %
                      (kind, sum(x["samples"] for x in sel) / sum(x["seconds"] for x in sel),
                       sum(x["samples"] for x in sel), sum(x["seconds"] for x in sel)))
        if dr:
            secs = sorted(x[1] for x in dr)
            print("  drains: %d, seconds each: median %.2f, min %.2f, max %.2f; %d reached the "
                  "PFS while the trainers ran (save -> pfs %s s)" %
                  (len(dr), secs[len(secs) // 2], secs[0], secs[-1], len(during),
                   " ".join("%.2f" % x[1] for x in sorted(during, key=lambda x: x[2]))))
            for path, sec, mbs, modes in dr:
                print("    %s: %.2f s, %.1f MB/s%s" % (os.path.basename(path), sec, mbs,
                                                    "; full %s, plan %s, yield %s" % modes
                                                    if modes else ""))


if __name__ == "__main__":
    main()
