#!/usr/bin/python3
"""Benchmark suite: the PyTorch DataLoader, a NoPFS-like seer, seer and a threaded
file reader, side by side, on the same files through the same emulated PFS, with
the sequential read of the files through that PFS as the physical bound.

    make bench                                  # = /usr/bin/python3 scripts/bench/run.py
    make bench BENCH_ARGS="--quick --only bert-lustre"   # one scenario's cold epoch, < 1 min
    /usr/bin/python3 scripts/bench/run.py [--only unet3d,bert] [--rounds 2] [--quick]
        [--systems torch,nopfs,seer-plain,seer,files,seq] [--torch-configs 2x2,4x2] [--nodes 2]
        [--trainers-per-node 2] [--epochs E] [--provider 'tcp;ofi_rxm'] [--full] [--dry-run]

Per scenario (scripts/bench/workloads.py) and round: the dataset is generated once
into $SEER_BENCH_DIR (default data/bench/) and mounted through the PFS emulator
(bin/seer-pfsemu) with the scenario's bandwidth, latency and in-flight limit; then
every system runs the same job (same files, seed, batch size, epochs, compute time
per step, number of trainers), the emulator's counters reset before each run:

  torch   scripts/bench/torch_loader.py: DataLoader + DistributedSampler, each
          --torch-configs entry WxP = num_workers x prefetch_factor, persistent
          workers; round 1 runs every entry, later rounds only the best one
  nopfs   seerd with cache.policy = nopfs (skipped with a note when the key is absent)
  seer    N seerd under mpirun (one per "node", own RAM budget and socket) and
          mpirun -np T bin/seer-bench --source seer
  seer-plain  the same with prefetch.coalesce = off: one PFS read per sample,
          the plan by first reader (seer before coalesced reads, for a
          comparison in the same run)
  files   mpirun -np T bin/seer-bench --source files (threads + prefetch per trainer)
  seq     `cat` of the dataset's files, one process, through the same mount: the
          physical bound of an epoch that reads every byte once (pfs_probe.py)

The *-lustre scenarios (every packed format: TFRecord, HDF5 and NPZ with many
samples per file, indexed binary) run on the emulator's lustre preset (8 read
RPCs in flight, 2 ms each, 2 GB/s, readahead) with torch, seer and seq only;
their DataLoader reads each record with one pread located by an index, and the
best configuration is chosen by the cold epoch.
The order of the systems rotates from round to round (interleaving against drift
of the machine's load). Outputs: results/bench-<ts>/ (every run's JSON, logs, seerd
stats, the emulator's counters, summary.json, PNG plots) and the report
results/bench-<ts>.md. Timings never fail the run: the exit status is non-zero only
when a run could not be completed. --full uses DLIO's real-hardware sizes (hours
on a real machine); --dry-run prints the plan without running anything."""

import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import hugepages  # noqa: E402
import pfs_probe as P  # noqa: E402
import workloads as W  # noqa: E402

BIN = os.path.join(ROOT, "bin")
# the trainer binary (an instrumented build can be substituted for profiling)
SEER_BENCH = os.environ.get("SEER_BENCH", os.path.join(BIN, "seer-bench"))
PY = "/usr/bin/python3"
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def log(msg):
    print("[bench %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


# ---- process and mount bookkeeping: everything started is stopped on every exit ----

class Resources:
    def __init__(self):
        self.procs = []       # Popen objects, each leading its own process group
        self.mounts = []

    def popen(self, args, **kw):
        p = subprocess.Popen(args, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def stop(self, p, grace=10.0):
        """SIGTERM the process group p leads, then SIGKILL after grace seconds."""
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        else:
            # the leader is gone; its group may still have members (mpirun's ranks)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if p in self.procs:
            self.procs.remove(p)

    def mount(self, src, mnt, opts, logfile):
        if is_mounted(mnt):
            log("unmounting a stale emulator mount at %s" % mnt)
            umount(mnt)
        os.makedirs(mnt, exist_ok=True)
        env = dict(os.environ, PFSEMU_LOG=logfile, PFSEMU=os.path.join(BIN, "seer-pfsemu"))
        out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-mount.sh"), src, mnt]
                             + opts, capture_output=True, text=True, env=env, timeout=60)
        if out.returncode != 0:
            raise RuntimeError("PFS emulator mount failed: %s%s" % (out.stdout, out.stderr))
        self.mounts.append(mnt)
        return int(out.stdout.strip().splitlines()[-1])

    def umount(self, mnt):
        umount(mnt)
        if mnt in self.mounts:
            self.mounts.remove(mnt)

    def cleanup(self):
        for p in list(self.procs):
            try:
                self.stop(p, grace=5.0)
            except Exception as e:  # keep going: the mounts must go too
                print("cleanup: %s" % e, file=sys.stderr)
        for m in list(self.mounts):
            try:
                self.umount(m)
            except Exception as e:
                print("cleanup: %s" % e, file=sys.stderr)


def is_mounted(mnt):
    real = os.path.realpath(mnt)
    try:
        with open("/proc/self/mounts") as f:
            return any(line.split()[1] == real for line in f)
    except OSError:
        return False


def umount(mnt):
    subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-umount.sh"), mnt],
                   capture_output=True, text=True, timeout=60)
    if is_mounted(mnt):
        subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True, timeout=30)


def pfs_stats(mnt):
    with open(os.path.join(mnt, ".pfsemu", "stats")) as f:
        return json.load(f)


def pfs_reset(mnt):
    with open(os.path.join(mnt, ".pfsemu", "reset")) as f:
        f.read()


# the emulator's counters attributed to epochs (stats format 1 has no RPCs:
# there each read request was one); busy_s = time with a request in flight
PFS_KEYS = ("bytes", "reads", "rpcs", "rpc_bytes", "busy_s")


def pfs_counts(totals):
    return {k: totals.get(k, totals["reads"] if k == "rpcs" else totals["bytes"])
            for k in PFS_KEYS}


class PfsPoller:
    """Samples the emulator's counters every `period` s (CLOCK_MONOTONIC times),
    so that bytes and requests can be attributed to the epochs by when they
    were read. A sample is (t, bytes, {counter: value})."""

    def __init__(self, mnt, period=0.02):
        import threading
        self.path = os.path.join(mnt, ".pfsemu", "stats")
        self.period = period
        self.samples = []
        self.stop_ev = threading.Event()
        self.th = threading.Thread(target=self.loop, daemon=True)
        self.th.start()

    def loop(self):
        while not self.stop_ev.is_set():
            try:
                with open(self.path) as f:
                    c = pfs_counts(json.load(f)["totals"])
                self.samples.append((time.monotonic(), c["bytes"], c))
            except (OSError, ValueError, KeyError):
                pass
            self.stop_ev.wait(self.period)

    def stop(self):
        self.stop_ev.set()
        self.th.join()
        return self.samples


def bytes_at(samples, t, key="bytes"):
    """The emulator's count of `key` at time t, interpolated between samples."""
    if not samples:
        return 0
    v = [(x[0], x[2][key] if len(x) > 2 else x[1]) for x in samples]
    if t <= v[0][0]:
        return 0 if t < v[0][0] - 0.1 else v[0][1]
    for (t0, b0), (t1, b1) in zip(v, v[1:]):
        if t0 <= t <= t1:
            return b0 + (b1 - b0) * (t - t0) / max(t1 - t0, 1e-9)
    return v[-1][1]


def epochs_by_time(samples, ends, walls, key="bytes"):
    """The emulator's `key` counted while each epoch ran: in [end - wall, end] of
    every epoch; and the count before the first epoch began."""
    out = [max(0, bytes_at(samples, t, key) - bytes_at(samples, t - w, key))
           for t, w in zip(ends, walls)]
    pre = bytes_at(samples, ends[0] - walls[0], key) if ends else 0
    return out, pre


def seer_epoch_ends(stats, epochs):
    """Absolute (CLOCK_MONOTONIC) times at which each epoch's last step was released
    by every trainer, from the seerd stats files' per-step series (relative to the
    daemon's start, which the file's mtime and uptime_s place on the clock)."""
    ends = [0.0] * epochs
    for st in stats:
        path = st.get("_path")
        if not path or not st.get("steps"):
            return None
        mono_of_real = time.monotonic() - time.time()
        t_start = os.stat(path).st_mtime + mono_of_real - st["uptime_s"]
        bpe, stride = st["batches_per_epoch"], st.get("step_stride", 1)
        done = {g: t for g, t, _ in st["steps"]}
        for e in range(epochs):
            g = ((e + 1) * bpe - 1) // stride * stride
            if g not in done:
                return None
            ends[e] = max(ends[e], t_start + done[g])
    return ends


# ---- CPU accounting: how much of the machine other processes took during a run ----

def cpu_busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    idle = v[3] + v[4]
    return (sum(v[:8]) - idle) / hz


def proc_cpu(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            v = f.read().rsplit(")", 1)[1].split()
        return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


class CpuMeter:
    def __init__(self, emu_pid):
        self.emu_pid = emu_pid
        self.t = time.monotonic()
        self.busy = cpu_busy()
        self.ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.emu = proc_cpu(emu_pid)
        self.load = os.getloadavg()[0]

    def done(self):
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.monotonic() - self.t
        busy = cpu_busy() - self.busy
        ours = (ru.ru_utime + ru.ru_stime) - (self.ru.ru_utime + self.ru.ru_stime)
        emu = proc_cpu(self.emu_pid) - self.emu
        ncpu = os.cpu_count() or 1
        return dict(wall_s=round(wall, 3), busy_cpu_s=round(busy, 3), ours_cpu_s=round(ours, 3),
                    emulator_cpu_s=round(emu, 3),
                    foreign_cpu_s=round(max(0.0, busy - ours - emu), 3),
                    foreign_cores=round(max(0.0, busy - ours - emu) / max(wall, 1e-9), 2),
                    util=round(busy / max(wall, 1e-9) / ncpu, 3),
                    loadavg_start=self.load, loadavg_end=os.getloadavg()[0])


# ---- the systems ---------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seerd_has_nopfs():
    try:
        out = subprocess.run([os.path.join(BIN, "seerd"), "--help"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "policy" and "nopfs" in line:
            return True
    return False


class Job:
    """One scenario's job parameters, shared by every system."""

    def __init__(self, sc, data_dir, mnt, info, args):
        self.sc = sc
        self.mnt = mnt
        self.data = os.path.join(mnt, "train")
        self.fmt = sc["fmt"]
        self.info = info
        self.nodes = sc["nodes"]
        self.tpn = sc["tpn"]
        self.world = self.nodes * self.tpn
        self.batch = sc["batch"]
        self.epochs = args.epochs or sc["epochs"]
        self.seed = args.seed
        self.compute_ms = sc["compute_ms"]
        self.D = info["bytes"]
        self.n = info["nsamples"]
        self.steps = -(-self.n // (self.world * self.batch))
        self.compute_epoch_s = self.steps * self.compute_ms / 1000.0
        self.bw = sc["pfs"]["bandwidth"]
        slot = (info["max_len"] + 63) // 64 * 64
        ram = sc["ram_frac"] * info["ram_bytes"] / self.nodes
        if sc["ram_frac"] < 1.0:
            # smaller than the dataset: a whole number of the largest slots, so the
            # capacity the optimum assumes is the capacity the plan can fill
            ram = int(ram // slot * slot)
        self.ram = int(ram)
        self.state_dir = os.path.join(data_dir, "state")
        self.provider = args.provider
        self.scan_bytes = None    # see files_scan_bytes
        self.timeout = 120 + 20 * self.epochs * max(self.compute_epoch_s, self.D / self.bw)


def run_torch(res, job, rd, w, p, env):
    jpath = os.path.join(rd, "trainers.json")
    args = [PY, os.path.join(HERE, "torch_loader.py"), "--spawn", str(job.world),
            "--data", job.data, "--format", job.fmt, "--batch", str(job.batch),
            "--epochs", str(job.epochs), "--seed", str(job.seed),
            "--compute-ms", str(job.compute_ms), "--num-workers", str(w),
            "--prefetch-factor", str(p), "--json", jpath,
            "--pfs-stats", os.path.join(job.mnt, ".pfsemu", "stats")]
    e = dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    return run_trainers(res, job, rd, args, e, jpath)


def run_files(res, job, rd, env, threads, prefetch):
    jpath = os.path.join(rd, "trainers.json")
    args = mpirun(job.world) + [SEER_BENCH, "--source", "files",
                                "--data", job.data, "--format", job.fmt,
                                "--seed", str(job.seed), "--epochs", str(job.epochs),
                                "--batch", str(job.batch), "--threads", str(threads),
                                "--prefetch", str(prefetch), "--compute-ms", str(job.compute_ms),
                                "--json", jpath]
    return run_trainers(res, job, rd, args, env, jpath)


def files_scan_bytes(res, job, rd, env):
    """Bytes one seer-bench --source files trainer reads from the PFS before its
    first epoch (it opens the catalog without a cache: a full scan, which for
    TFRecord reads every record), measured with --epochs 0."""
    os.makedirs(rd, exist_ok=True)
    pfs_reset(job.mnt)
    jpath = os.path.join(rd, "scan.json")
    args = mpirun(1) + [SEER_BENCH, "--source", "files", "--data", job.data, "--format", job.fmt,
                        "--epochs", "0", "--batch", str(job.batch), "--json", jpath, "--quiet"]
    with open(os.path.join(rd, "scan.log"), "w") as lf:
        p = res.popen(args, stdout=lf, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        try:
            p.wait(job.timeout)
        finally:
            res.stop(p)
    return pfs_stats(job.mnt)["totals"]["bytes"]


def mpirun(n, extra_env=()):
    a = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(n)]
    for k in list(MPI_ENV) + ["SEER_JOB_ID"] + list(extra_env):
        a += ["-x", k]
    return a


def run_trainers(res, job, rd, args, env, jpath):
    with open(os.path.join(rd, "trainers.log"), "w") as lf:
        lf.write("$ %s\n" % " ".join(shlex.quote(x) for x in args))
        lf.flush()
        p = res.popen(args, stdout=lf, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        try:
            rc = p.wait(job.timeout)
        except subprocess.TimeoutExpired:
            res.stop(p)
            raise RuntimeError("trainers did not finish within %.0f s" % job.timeout)
        res.stop(p)
    if rc != 0 or not os.path.exists(jpath):
        raise RuntimeError("trainers exited %d (see %s)" % (rc, os.path.join(rd, "trainers.log")))
    with open(jpath) as f:
        return json.load(f)


def seer_settings(job, rd, sockdir, policy, args, extra=None):
    sc = job.sc
    s = {
        "dataset.path": job.data,
        "dataset.format": job.fmt,
        "job.seed": job.seed,
        "job.epochs": job.epochs,
        "job.batch_size": job.batch,
        "job.drop_last": "false",
        "cache.ram": job.ram,
        "cache.staging": sc["staging"],
        "prefetch.io_threads": args.io_threads or sc["io_threads"],
        "prefetch.lookahead": args.lookahead or sc["lookahead"],
        "daemon.socket": os.path.join(sockdir, "s-%n.sock"),
        "daemon.stats_file": os.path.join(rd, "seerd-stats-%n.json"),
        "daemon.state_dir": job.state_dir,
        "daemon.connect_timeout_s": 120,
    }
    if job.provider:
        s["net.provider"] = job.provider
    if args.peer_timeout_ms:
        s["net.peer_timeout_ms"] = args.peer_timeout_ms
    if policy:
        s["cache.policy"] = policy
    for kv in args.seer_set or []:
        k, _, v = kv.partition("=")
        s[k] = v
    s.update(extra or {})  # the system's own settings (seer-plain: coalescing off) last
    return s


def run_seer(res, job, rd, env, policy, args, extra=None):
    sockdir = tempfile.mkdtemp(prefix="seer-bench-")
    try:
        s = seer_settings(job, rd, sockdir, policy, args, extra)
        dargs = mpirun(job.nodes, ["OMPI_MCA_btl", "OMPI_MCA_pml"]) + [os.path.join(BIN, "seerd")]
        for k, v in s.items():
            dargs += ["--set", "%s=%s" % (k, v)]
        denv = dict(env, OMPI_MCA_btl="self,tcp", OMPI_MCA_pml="ob1")
        dlog = open(os.path.join(rd, "seerd.log"), "w")
        dlog.write("$ %s\n" % " ".join(shlex.quote(x) for x in dargs))
        dlog.flush()
        d = res.popen(dargs, stdout=dlog, stderr=subprocess.STDOUT, env=denv, cwd=ROOT)
        try:
            socks = [os.path.join(sockdir, "s-%d.sock" % k) for k in range(job.nodes)]
            t0 = time.monotonic()
            # the sockets answer from before the catalog scan: serving from
            # every node's "serving job" line
            while (not all(os.path.exists(x) for x in socks) or
                   open(os.path.join(rd, "seerd.log")).read().count("serving job '") < job.nodes):
                if d.poll() is not None:
                    raise RuntimeError("seerd exited %d before listening (see %s)" %
                                       (d.returncode, os.path.join(rd, "seerd.log")))
                if time.monotonic() - t0 > 300:
                    raise RuntimeError("seerd not listening after 300 s")
                time.sleep(0.05)
            jpath = os.path.join(rd, "trainers.json")
            tenv = dict(env, SEER_SOCKET_PATTERN=os.path.join(sockdir, "s-%n.sock"),
                        SEER_TRAINERS_PER_NODE=str(job.tpn))
            targs = mpirun(job.world, ["SEER_SOCKET_PATTERN", "SEER_TRAINERS_PER_NODE"]) + [
                os.path.join(HERE, "node-socket.sh"), SEER_BENCH,
                "--source", "seer", "--compute-ms", str(job.compute_ms), "--json", jpath]
            out = run_trainers(res, job, rd, targs, tenv, jpath)
            try:
                d.wait(60)
            except subprocess.TimeoutExpired:
                log("  seerd still running 60 s after the trainers: stopping it")
            res.stop(d)
        finally:
            res.stop(d)
            dlog.close()
        stats = []
        for k in range(job.nodes):
            p = os.path.join(rd, "seerd-stats-%d.json" % k)
            if os.path.exists(p):
                with open(p) as f:
                    stats.append(json.load(f))
                stats[-1]["_path"] = p
        return out, stats
    finally:
        shutil.rmtree(sockdir, ignore_errors=True)


def seer_epoch_bytes(stats, key, epochs):
    """Per-epoch sum over nodes of a seerd per-epoch counter."""
    out = [0] * epochs
    for st in stats:
        for e in st.get("epochs", []):
            if e["epoch"] < epochs:
                out[e["epoch"]] += e.get(key, 0)
    return out


def seq_read(res, job, rd):
    """The physical bound: `cat` of every data file of the dataset, one process,
    in catalog order, through the same mount (scripts/bench/pfs_probe.py)."""
    q = P.sequential_read(job.mnt)
    with open(os.path.join(rd, "seq.json"), "w") as f:
        json.dump(q, f)
    return q


def run_one(res, job, rd, system, args, emu_pid):
    """Run one system once; returns a result record (never raises for a failed run)."""
    os.makedirs(rd, exist_ok=True)
    env = dict(os.environ, **MPI_ENV)
    env["SEER_JOB_ID"] = "bench-%d" % os.getpid()   # the daemons' and trainers' job id
    rec = dict(system=system, ok=False, dir=os.path.relpath(rd, ROOT))
    pfs_reset(job.mnt)
    meter = CpuMeter(emu_pid)
    t0 = time.monotonic()
    poller = None
    ends = None
    try:
        if system.startswith("torch:"):
            w, p = (int(x) for x in system.split(":")[1].split("x"))
            poller = PfsPoller(job.mnt)
            out = run_torch(res, job, rd, w, p, env)
            xp = os.path.join(rd, "trainers.json.extra.json")
            if os.path.exists(xp):
                with open(xp) as f:
                    x = json.load(f)
                rec["pfs_epoch_bytes_rank0"] = [e.get("pfs_bytes") for e in x["epochs"]]
                # exact: rank 0 read the counters at the epoch boundaries
                if all(e.get("pfs_rpcs") is not None for e in x["epochs"]):
                    rec["pfs_epoch"] = {k: [e["pfs_" + k] for e in x["epochs"]]
                                        for k in PFS_KEYS}
                ends = [e["t1"] for e in x["epochs"]]
        elif system == "files":
            if job.scan_bytes is None:
                job.scan_bytes = files_scan_bytes(res, job, os.path.join(rd, "scan"), env)
                pfs_reset(job.mnt)
                meter = CpuMeter(emu_pid)
                t0 = time.monotonic()
            poller = PfsPoller(job.mnt)
            rec["scan_bytes_per_trainer"] = job.scan_bytes
            out = run_files(res, job, rd, env, args.files_threads, args.files_prefetch)
        elif system == "seq":
            rec["seq"] = seq_read(res, job, rd)
            out = dict(epochs=[])
        elif system in ("seer", "nopfs", "seer-plain"):
            poller = PfsPoller(job.mnt)
            out, stats = run_seer(res, job, rd, env, "nopfs" if system == "nopfs" else None, args,
                                  {"prefetch.coalesce": "off"} if system == "seer-plain" else None)
            rec["pfs_epoch_bytes_daemon"] = seer_epoch_bytes(stats, "pfs_bytes", job.epochs)
            ends = seer_epoch_ends(stats, job.epochs)
            rec["peer_epoch_bytes"] = seer_epoch_bytes(stats, "peer_bytes", job.epochs)
            rec["ram_epoch_bytes"] = seer_epoch_bytes(stats, "ram_bytes", job.epochs)
            rec["seer_nodes"] = [dict(node=s.get("node"), cache=s.get("cache"),
                                      sources=s.get("sources"), io=s.get("io"),
                                      coalescing=s.get("coalescing"))
                                 for s in stats]
        else:
            raise RuntimeError("unknown system " + system)
        rec["epochs"] = out["epochs"]
        rec["ok"] = True
    except Exception as e:   # a failed run is reported, the suite goes on
        rec["error"] = str(e)
        log("  %s FAILED: %s" % (system, e))
    rec["duration_s"] = round(time.monotonic() - t0, 3)
    rec["cpu"] = meter.done()
    if poller:
        series = poller.stop()
        with open(os.path.join(rd, "pfs_series.json"), "w") as f:
            json.dump(series, f)
        if rec["ok"] and ends and series:
            # bytes read from the PFS while each epoch ran (by the emulator's clock)
            walls = [e["wall_s"] for e in rec["epochs"]]
            rec["pfs_epoch_bytes"], rec["pfs_before_epoch1"] = epochs_by_time(series, ends,
                                                                              walls)
            rec["epoch_ends"] = ends
            if "pfs_epoch" not in rec:
                rec["pfs_epoch"] = {k: epochs_by_time(series, ends, walls, k)[0]
                                    for k in PFS_KEYS}
    try:
        st = pfs_stats(job.mnt)
        rec["pfs"] = st["totals"]
    except (OSError, ValueError, KeyError):
        rec["pfs"] = None
    if rec["ok"] and rec.get("pfs") and "pfs_epoch_bytes" not in rec:
        # no per-epoch counter (seer-bench --source files reads every epoch
        # alike, without a cache): the run's total less the trainers' catalog
        # scans, split evenly
        scan = job.world * (job.scan_bytes or 0)
        rec["pfs_epoch_bytes"] = [max(0, rec["pfs"]["bytes"] - scan) / job.epochs] * job.epochs
        rec["pfs_epoch_estimated"] = True
    if rec["ok"] and system == "seq":
        q = rec["seq"]
        log("  %-10s %5.3f s  (PFS busy %.3f s) %d files, %d requests, %d RPCs, %.2f D" % (
            system, q["wall_s"], q["busy_s"], q["files"], q["reads"], q["rpcs"],
            q["bytes"] / job.D))
    elif rec["ok"]:
        eps = rec["epochs"]
        log("  %-10s %5.1f s  samples/s per epoch %s  AU %s  PFS %.2f D" % (
            system, rec["duration_s"], " ".join("%.0f" % e["samples_per_s"] for e in eps),
            " ".join("%.0f%%" % (100 * e["au"]) for e in eps),
            (rec["pfs"]["bytes"] / job.D) if rec.get("pfs") else float("nan")))
    return rec


# ---- the suite -------------------------------------------------------------------------

def machine():
    m = dict(host=platform.node(), kernel=platform.release(), cpus=os.cpu_count())
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    m["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            m["mem_gib"] = round(int(f.readline().split()[1]) / (1 << 20), 1)
        with open("/etc/debian_version") as f:
            m["debian"] = f.read().strip()
    except OSError:
        pass
    try:
        m["torch"] = subprocess.run([PY, "-c", "import torch; print(torch.__version__)"],
                                    capture_output=True, text=True, timeout=60).stdout.strip()
        m["mpirun"] = subprocess.run(["mpirun", "--version"], capture_output=True, text=True,
                                     timeout=30).stdout.splitlines()[0]
        m["virt"] = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True,
                                   timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired, IndexError):
        pass
    m["loadavg_start"] = os.getloadavg()
    return m


def plan_nopfs(job):
    """What seer-plan predicts for the NoPFS-like policy (and seer, the optimum)."""
    sz = job.D // job.n
    args = [os.path.join(BIN, "seer-plan"), "--samples", str(job.n), "--sample-size", str(sz),
            "--nodes", str(job.nodes), "--trainers-per-node", str(job.tpn),
            "--epochs", str(job.epochs), "--batch", str(job.batch), "--seed", str(job.seed),
            "--ram", str(job.ram), "--policies", "seer,nopfs,optimum", "--totals", "--json"]
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=120)
        return dict(cmd=" ".join(args), result=json.loads(out.stdout))
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        return dict(cmd=" ".join(args), error=str(e))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma list of scenarios (default: all)")
    ap.add_argument("--systems", default="torch,nopfs,seer-plain,seer,files,seq",
                    help="seq = cat of the dataset's files through the mount (the bound)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--torch-configs", default=None,
                    help="DataLoader num_workers x prefetch_factor per trainer to try, the best "
                    "one kept (default 2x2,4x2; with --full 4x2,8x2: DLIO's read_threads)")
    ap.add_argument("--files-threads", type=int, default=8)
    ap.add_argument("--files-prefetch", type=int, default=2)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--trainers-per-node", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=0, help="override every scenario's epochs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--io-threads", type=int, default=0, help="override seer's prefetch.io_threads")
    ap.add_argument("--lookahead", type=int, default=0, help="override prefetch.lookahead")
    ap.add_argument("--peer-timeout-ms", type=int, default=0,
                    help="override net.peer_timeout_ms (default: seerd's own, 2000)")
    ap.add_argument("--seer-set", action="append", metavar="SECTION.KEY=VALUE",
                    help="an extra seerd setting for every seer system (repeatable), e.g. "
                    "daemon.log_level=debug")
    ap.add_argument("--huge-pages-mib", type=int, default=4096,
                    help="reserve this much in 2 MiB huge pages for seerd's arenas during the "
                    "run, when root (scripts/bench/hugepages.py; 0: none, seerd then uses "
                    "4 KiB pages)")
    ap.add_argument("--provider", default="", help="libfabric provider for seerd (default: "
                    "seerd's own, tcp;ofi_rxm)")
    ap.add_argument("--data", default=os.environ.get("SEER_BENCH_DIR",
                                                     os.path.join(ROOT, "data", "bench")))
    ap.add_argument("--out", default=os.path.join(ROOT, "results"))
    ap.add_argument("--full", action="store_true", help="DLIO's real-hardware sizes")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="one round of the cold epoch only, one DataLoader configuration "
                    "(2x2), no plots: a scenario in well under a minute (with --only)")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.epochs, a.no_plots = 1, a.epochs or 1, True

    t_start = time.monotonic()
    scen = W.scenarios(full=a.full, nodes=a.nodes, tpn=a.trainers_per_node)
    if a.only:
        want = set(a.only.split(","))
        unknown = want - {s["name"] for s in scen}
        if unknown:
            sys.exit("unknown scenario(s) %s; known: %s" % (
                ",".join(sorted(unknown)), ",".join(s["name"] for s in scen)))
        scen = [s for s in scen if s["name"] in want]
    systems = a.systems.split(",")
    if a.torch_configs is None:
        a.torch_configs = "4x2,8x2" if a.full else "2x2" if a.quick else "2x2,4x2"
    tcfg = ["torch:" + c for c in a.torch_configs.split(",") if c]
    has_nopfs = seerd_has_nopfs()
    notes = []
    if "nopfs" in systems and not has_nopfs:
        notes.append("nopfs skipped: `seerd --help` lists no cache.policy key with a nopfs value "
                     "(the NoPFS-like mode is not in this build); seer-plan's simulation of it "
                     "is shown instead")
        log("NOTE: " + notes[-1])
        systems.remove("nopfs")
    dsets = W.datasets(a.full)

    if a.dry_run:
        print(json.dumps(dict(scenarios=scen, datasets={k: dsets[k] for k in
                                                         {s["dataset"] for s in scen}},
                              systems=systems, torch_configs=tcfg, rounds=a.rounds,
                              nopfs_available=has_nopfs), indent=1, default=str))
        return 0
    for b in ("seerd", "seer-bench", "seer-pfsemu", "seer-plan"):
        if not os.access(os.path.join(BIN, b), os.X_OK):
            sys.exit("bench: %s missing: run make first" % os.path.join(BIN, b))
    if not os.path.exists("/dev/fuse"):
        sys.exit("bench: /dev/fuse is missing: the PFS emulator needs FUSE")

    ts = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    outdir = os.path.join(a.out, "bench-" + ts)
    os.makedirs(outdir, exist_ok=True)
    os.makedirs(a.data, exist_ok=True)
    res = Resources()

    def on_signal(sig, _frame):
        raise KeyboardInterrupt("signal %d" % sig)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)

    huge = hugepages.reserve(a.huge_pages_mib, log)
    summary = dict(timestamp=ts, command="make bench" + (" BENCH_ARGS=%s" % shlex.quote(
        " ".join(sys.argv[1:])) if sys.argv[1:] else ""), argv=sys.argv[1:],
        machine=dict(machine(), huge_pages=huge), notes=notes, systems=systems,
        torch_configs=tcfg, rounds=a.rounds, nopfs_available=has_nopfs, args=vars(a), scenarios=[], runs=[])
    failed = 0
    try:
        for d in {s["dataset"] for s in scen}:
            t = time.monotonic()
            W.generate(dsets[d], a.data)
            if time.monotonic() - t > 1:
                log("dataset %s ready in %.1f s" % (d, time.monotonic() - t))
        jobs = {}
        for s in scen:
            info = W.info(dsets[s["dataset"]], a.data)
            mnt = os.path.join(a.data, "mnt", s["dataset"])
            jobs[s["name"]] = Job(s, a.data, mnt, info, a)
            j = jobs[s["name"]]
            sd = dict(s, epochs=j.epochs, D=j.D, nsamples=j.n, steps_per_epoch=j.steps,
                      compute_epoch_s=j.compute_epoch_s, ram_per_node=j.ram,
                      aggregate_cache=j.ram * j.nodes, world=j.world,
                      pfs_read_s=j.D / j.bw)
            if s["ram_frac"] < 1.0:
                sd["plan"] = plan_nopfs(j)
            summary["scenarios"].append(sd)
        best_torch = {}
        for rnd in range(a.rounds):
            for s in scen:
                j = jobs[s["name"]]
                syss = []
                for x in systems:
                    if s.get("systems") and x not in s["systems"]:
                        continue
                    if x == "seq" and not s["baseline"]:
                        continue   # same files and PFS as the scenario it shares
                    if x == "torch":
                        if not s["baseline"]:
                            continue
                        if rnd == 0 or s["name"] not in best_torch:
                            syss += tcfg
                        else:
                            syss.append(best_torch[s["name"]])
                    elif x == "files" and not s["baseline"]:
                        continue
                    else:
                        syss.append(x)
                k = rnd % max(1, len(syss))
                syss = syss[k:] + syss[:k]
                log("round %d/%d, %s: D = %.0f MB, %d steps/epoch x %.0f ms, PFS %.0f MB/s "
                    "(reading D once: %.1f s), systems %s" % (
                        rnd + 1, a.rounds, s["name"], j.D / 1e6, j.steps, j.compute_ms,
                        j.bw / 1e6, j.D / j.bw, ",".join(syss)))
                src = os.path.join(a.data, s["dataset"])
                p = s["pfs"]
                emu = res.mount(src, j.mnt, W.emulator_args(p) + ["--label", s["name"]],
                                os.path.join(outdir, "pfsemu-%s.log" % s["name"]))
                try:
                    for x in syss:
                        rd = os.path.join(outdir, "r%d-%s-%s" % (rnd + 1, s["name"],
                                                                 x.replace(":", "-")))
                        rec = run_one(res, j, rd, x, a, emu)
                        rec.update(scenario=s["name"], round=rnd + 1)
                        summary["runs"].append(rec)
                        failed += not rec["ok"]
                finally:
                    res.umount(j.mnt)
                if rnd == 0 and len(tcfg) > 1 and s["baseline"] and "torch" in systems:
                    best_torch[s["name"]] = best_config(summary["runs"], s["name"], tcfg,
                                                        cold=s.get("packed", False))
                    log("  DataLoader: best of %s is %s" % (",".join(tcfg),
                                                            best_torch[s["name"]]))
            with open(os.path.join(outdir, "summary.json"), "w") as f:
                json.dump(summary, f, indent=1)
    except KeyboardInterrupt as e:
        log("interrupted (%s): cleaning up" % e)
        failed += 1
    finally:
        res.cleanup()
    summary["elapsed_s"] = round(time.monotonic() - t_start, 1)
    summary["machine"]["loadavg_end"] = os.getloadavg()
    with open(os.path.join(outdir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    import report
    md = report.write(summary, outdir, os.path.join(a.out, "bench-%s.md" % ts),
                      plots=not a.no_plots)
    log("report: %s (raw data and plots in %s); %.0f s in all" % (
        os.path.relpath(md, ROOT), os.path.relpath(outdir, ROOT), summary["elapsed_s"]))
    return 1 if failed else 0


def best_config(runs, scen, tcfg, cold=False):
    """The DataLoader configuration with the highest median samples/s after epoch 1
    (of epoch 1 itself with cold=True, or when only one epoch ran)."""
    import statistics
    best, bv = tcfg[0], -1.0
    for c in tcfg:
        eps = [r["epochs"] for r in runs if r["ok"] and r["scenario"] == scen
               and r["system"] == c]
        v = [e["samples_per_s"] for x in eps for e in (x[:1] if cold or len(x) < 2 else x[1:])]
        if v and statistics.median(v) > bv:
            best, bv = c, statistics.median(v)
    return best


if __name__ == "__main__":
    sys.exit(main())
