#!/usr/bin/python3
"""One-node benchmark (issue 2's figures). Not a test: it prints numbers.

    /usr/bin/python3 scripts/bench_node.py [--quick] [--out results/node.md]

1. warm-cache delivery: 4 trainers (mpirun, bin/seer-bench) reading every byte
   of every sample, no compute, dataset inside the RAM cache; epochs after the
   first: GB/s and samples/s for 4 KiB, 128 KiB and 2 MiB samples;
2. first epoch through an emulated PFS (bin/seer-pfsemu: bandwidth, latency,
   requests in flight) against the threaded baseline reading the same files in
   the same order (seer-bench --source files: N threads per trainer, a few
   batches ahead, as a DataLoader);
3. every epoch against its lower bound max(compute time, PFS bytes / PFS
   bandwidth measured alone) with a cache half the dataset;
4. the daemon's peak resident memory against RAM cache + staging + 64 MiB.
Data goes to $SEER_BENCH_DIR (default data/bench-node), reused across runs."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BIN = os.path.join(ROOT, "bin")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl="self,vader", OMPI_MCA_pml="ob1")
MiB = 1 << 20


def sh(args, **kw):
    return subprocess.run(args, env=ENV, check=True, **kw)


def gen(path, size, count, classes=8):
    sh(["/usr/bin/python3", os.path.join(ROOT, "scripts", "gen_dataset.py"), path,
        "--classes", str(classes), "--per-class", str(count // classes),
        "--min-size", str(size), "--max-size", str(size)], stdout=subprocess.DEVNULL)


class Daemon:
    def __init__(self, tmp, data, **kw):
        self.sock = os.path.join(tmp, "seer.sock")
        self.stats = os.path.join(tmp, "stats.json")
        args = [os.path.join(BIN, "seerd"), "--set", "dataset.path=" + data,
                "--set", "daemon.socket=" + self.sock, "--set", "daemon.stats_file=" + self.stats,
                "--set", "daemon.state_dir=" + os.path.join(tmp, "state")]
        for k, v in kw.items():
            args += ["--set", "%s=%s" % (k.replace("__", "."), v)]
        self.log = open(os.path.join(tmp, "seerd.log"), "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=ENV)
        t0 = time.time()
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None or time.time() - t0 > 60:
                raise SystemExit("seerd did not start: see %s" % self.log.name)
            time.sleep(0.02)
        self.rss = 0
        self.sampler = threading.Thread(target=self._sample, daemon=True)
        self.sampler.start()

    def _sample(self):
        # the kernel's high-water mark (VmHWM), read until the daemon exits
        while self.proc.poll() is None:
            self.rss = max(self.rss, self.peak_rss() or 0)
            time.sleep(0.02)

    def peak_rss(self):
        try:
            with open("/proc/%d/status" % self.proc.pid) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def finish(self):
        self.proc.wait()
        self.sampler.join()
        self.log.close()
        with open(self.stats) as f:
            return json.load(f), self.rss or None


def bench(tmp, trainers, args, name):
    out = os.path.join(tmp, name + ".json")
    sh(["mpirun", "--oversubscribe", "-np", str(trainers), os.path.join(BIN, "seer-bench"),
        "--json", out, "--quiet"] + args)
    with open(out) as f:
        return json.load(f)


def mount(src, mnt, bw, lat, inflight):
    os.makedirs(mnt, exist_ok=True)
    sh(["bash", os.path.join(ROOT, "scripts", "pfsemu-mount.sh"), src, mnt, "--bandwidth", bw,
        "--latency-ms", str(lat), "--max-inflight", str(inflight)], stdout=subprocess.DEVNULL)


def umount(mnt):
    subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-umount.sh"), mnt], env=ENV,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def pfs_alone(mnt, threads):
    """Bytes/s reading every file of the mount once with `threads` readers."""
    files = []
    for d, _, fs in os.walk(mnt):
        if "/.pfsemu" in d:
            continue
        files += [os.path.join(d, f) for f in fs]
    t0 = time.time()
    sh(["bash", "-c", "printf '%s\\0' \"$@\" | xargs -0 -P " + str(threads) +
        " -n 16 cat > /dev/null", "x"] + files)
    dt = time.time() - t0
    return sum(os.path.getsize(f) for f in files) / dt


def warm(tmp, base, quick):
    rows = []
    cases = [("4 KiB", 4096, 16384 if quick else 65536, 256),
             ("128 KiB", 128 << 10, 1024 if quick else 4096, 64),
             ("2 MiB", 2 << 20, 64 if quick else 256, 8)]
    for label, size, count, batch in cases:
        data = os.path.join(base, "warm-%d" % size)
        gen(data, size, count)
        t = tempfile.mkdtemp(dir=tmp)
        d = Daemon(t, data, job__epochs=4, job__batch_size=batch, cache__ram="2GiB",
                   cache__staging="256MiB", prefetch__lookahead=8)
        res = bench(t, 4, ["--source", "seer", "--socket", d.sock], "warm")
        st, rss = d.finish()
        ep = res["epochs"][1:]
        rows.append((label, count * size / MiB, min(e["mb_per_s"] for e in ep) / 1e3,
                     max(e["mb_per_s"] for e in ep) / 1e3,
                     min(e["samples_per_s"] for e in ep), max(e["samples_per_s"] for e in ep),
                     res["epochs"][0]["mb_per_s"] / 1e3, rss))
    return rows


def cold(tmp, base, quick, bw, lat, inflight, compute_ms):
    size, count, batch = 128 << 10, 1024 if quick else 3072, 32
    data = os.path.join(base, "cold-%d" % count)
    gen(data, size, count)
    D = count * size
    mnt = os.path.join(tmp, "pfs")
    out = {}
    try:
        mount(data, mnt, bw, lat, inflight)
        out["pfs_bps"] = pfs_alone(mnt, inflight)
        # the baseline: each of 4 trainers reads its own batches with 8 threads,
        # 2 batches ahead (DataLoader num_workers=8, prefetch_factor=2)
        base_runs = []
        for _ in range(2):
            r = bench(tmp, 4, ["--source", "files", "--data", mnt, "--seed", "7", "--epochs", "1",
                               "--batch", str(batch), "--threads", "8", "--prefetch", "2",
                               "--compute-ms", str(compute_ms)], "baseline")
            base_runs.append(r["epochs"][0])
        out["baseline"] = min(base_runs, key=lambda e: e["wall_s"])
        # seer, cache half the dataset, 3 epochs
        t = tempfile.mkdtemp(dir=tmp)
        d = Daemon(t, mnt, job__seed=7, job__epochs=3, job__batch_size=batch,
                   cache__ram=str(D // 2), cache__staging="128MiB", prefetch__io_threads=inflight,
                   prefetch__lookahead=16)
        r = bench(t, 4, ["--source", "seer", "--socket", d.sock, "--compute-ms", str(compute_ms)],
                  "seer")
        st, rss = d.finish()
        out["seer"] = r["epochs"]
        out["seer_stats"] = st
        out["seer_rss"] = rss
        out["budget"] = D // 2 + 128 * MiB + 64 * MiB
        out["D"] = D
        out["steps"] = len(st["steps"])
    finally:
        umount(mnt)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "node.md"))
    ap.add_argument("--bandwidth", default="300MB/s")
    ap.add_argument("--latency-ms", type=float, default=2.0)
    ap.add_argument("--inflight", type=int, default=32)
    ap.add_argument("--compute-ms", type=float, default=30.0)
    a = ap.parse_args()
    base = os.environ.get("SEER_BENCH_DIR", os.path.join(ROOT, "data", "bench-node"))
    os.makedirs(base, exist_ok=True)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="seer-bench-node-")
    lines = []
    try:
        host = subprocess.run(["bash", "-c", "nproc; grep -m1 'model name' /proc/cpuinfo; "
                               "free -g | awk '/Mem/{print $2\" GiB\"}'; uname -r"],
                              capture_output=True, text=True).stdout.split("\n")
        lines.append("machine: %s cores, %s, %s RAM, Linux %s; load during the run: %s" %
                     (host[0], host[1].split(":")[-1].strip(), host[2], host[3],
                      open("/proc/loadavg").read().split()[0]))
        lines.append("\n## Warm cache: 4 trainers, every byte read, no compute\n")
        lines.append("| sample | dataset MiB | GB/s (epochs 2-4) | samples/s (epochs 2-4) | "
                     "epoch 1 GB/s | seerd peak RSS MiB |")
        lines.append("|---|---|---|---|---|---|")
        for lab, mib, g0, g1, s0, s1, e1, rss in warm(tmp, base, a.quick):
            lines.append("| %s | %.0f | %.2f - %.2f | %.0f - %.0f | %.2f | %s |" %
                         (lab, mib, g0, g1, s0, s1, e1, "%.0f" % (rss / MiB) if rss else "?"))
            print(lines[-1], flush=True)
        c = cold(tmp, base, a.quick, a.bandwidth, a.latency_ms, a.inflight, a.compute_ms)
        bw = c["pfs_bps"]
        lines.append("\n## Through the emulated PFS (%s, %.1f ms per request, %d in flight; "
                     "measured alone: %.0f MB/s); 4 trainers, 128 KiB samples, batch 32, "
                     "compute %.0f ms/step\n" % (a.bandwidth, a.latency_ms, a.inflight, bw / 1e6,
                                                 a.compute_ms))
        b = c["baseline"]
        lines.append("| run | epoch | wall s | samples/s | PFS MB | lower bound s | wall / bound |")
        lines.append("|---|---|---|---|---|---|---|")
        steps = b["samples"] / 4 / 32
        comp = steps * a.compute_ms / 1000
        lb = max(comp, c["D"] / bw)
        lines.append("| threaded baseline (8 threads x 4 trainers) | 1 | %.2f | %.0f | %.0f | %.2f | "
                     "%.2f |" % (b["wall_s"], b["samples_per_s"], c["D"] / 1e6, lb, b["wall_s"] / lb))
        eps = c["seer_stats"]["epochs"]
        for e, r in enumerate(c["seer"]):
            pfs = eps[e]["pfs_bytes"] if e < len(eps) else 0
            lbe = max(comp, pfs / bw)
            lines.append("| seer (cache = half the dataset) | %d | %.2f | %.0f | %.0f | %.2f | %.2f |"
                         % (e + 1, r["wall_s"], r["samples_per_s"], pfs / 1e6, lbe,
                            r["wall_s"] / lbe))
        lines.append("\nfirst epoch: seer %.2f s vs baseline %.2f s: **%.2fx**" %
                     (c["seer"][0]["wall_s"], b["wall_s"], b["wall_s"] / c["seer"][0]["wall_s"]))
        total = sum(e["pfs_bytes"] for e in eps)
        C = c["seer_stats"]["cache"]["ram_planned_bytes"]
        opt = c["D"] + (c["D"] - C) * 2
        lines.append("PFS bytes over 3 epochs: %d, optimum D + (D - C)(E - 1) = %d (%.3fx)" %
                     (total, opt, total / opt))
        rss = c["seer_rss"]
        lines.append("seerd peak RSS %.0f MiB, budget RAM cache + staging + 64 MiB = %.0f MiB" %
                     ((rss or 0) / MiB, c["budget"] / MiB))
        print("\n".join(lines[-14:]))
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")
        print("wrote", a.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
