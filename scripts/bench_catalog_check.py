#!/usr/bin/python3
"""The start-up check of a cached catalog against a full rescan (issue 32, item 4).

Writes a dataset of N small files (the files format: class directories),
aged an hour, optionally mounts it through the PFS emulator with a metadata
latency (a stat, an open: one round trip each), and times `seerd --check`:

  scan     the first start: walk + open/fstat/close of every file
  check    the next start, nothing changed: a stat per file (in parallel)
  rebuild  dataset.rebuild_catalog = true: a full rescan again
  rewrite  K files rewritten in place (same names): check + rescan of those K

Prints seconds per phase (seerd's own log lines and the process's wall
time). Never fails on timing.

  scripts/bench_catalog_check.py [--files 20000] [--dirs 100] [--meta-latency-ms 1]
                                 [--rewrite 20] [--io-threads 16]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("BIN", "bin"))


def seerd_check(path, state, threads, extra=()):
    args = [os.path.join(BIN, "seerd"), "--check", "--set", "dataset.path=" + path,
            "--set", "dataset.format=files", "--set", "daemon.state_dir=" + state,
            "--set", "prefetch.io_threads=%d" % threads]
    for kv in extra:
        args += ["--set", kv]
    t0 = time.time()
    out = subprocess.run(args, capture_output=True, text=True, timeout=3600)
    wall = time.time() - t0
    if out.returncode != 0:
        sys.exit("seerd --check failed: %s" % out.stderr)
    return wall, out.stderr + out.stdout


def phase_line(log):
    keep = []
    for line in log.splitlines():
        if re.search(r"catalog: .*(listed|scanned in|checked|changed since|loaded from)", line):
            keep.append(re.sub(r"^\S+ \S+ \S+ \S+\s+", "", line)[:200])
    return keep


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--dirs", type=int, default=100)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--meta-latency-ms", type=float, default=1.0,
                    help="through seer-pfsemu with this metadata latency (0: local files)")
    ap.add_argument("--rewrite", type=int, default=20)
    ap.add_argument("--io-threads", type=int, default=16)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="seer-catcheck-")
    mnt = None
    try:
        src = os.path.join(tmp, "data")
        per = (a.files + a.dirs - 1) // a.dirs
        names = []
        for d in range(a.dirs):
            os.makedirs(os.path.join(src, "c%04d" % d))
            for i in range(min(per, a.files - d * per)):
                p = os.path.join(src, "c%04d" % d, "%06d.bin" % i)
                with open(p, "wb") as f:
                    f.write(os.urandom(a.size))
                names.append(p)
        past = time.time() - 3600
        for d, _, fs in os.walk(src):
            for f in fs:
                os.utime(os.path.join(d, f), (past, past))
            os.utime(d, (past, past))
        path = src
        if a.meta_latency_ms > 0:
            mnt = os.path.join(tmp, "pfs")
            out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-mount.sh"), src,
                                  mnt, "--meta-latency-ms", str(a.meta_latency_ms),
                                  "--attr-timeout", "0"], capture_output=True, text=True,
                                 timeout=60)
            if out.returncode != 0:
                sys.exit("pfsemu mount failed: %s %s" % (out.stdout, out.stderr))
            path = mnt
        state = os.path.join(tmp, "state")
        print("%d files in %d directories, %s, prefetch.io_threads = %d (%d scan/check "
              "threads), load %s" % (len(names), a.dirs,
                                     "seer-pfsemu --meta-latency-ms %g --attr-timeout 0" %
                                     a.meta_latency_ms if mnt else "local files",
                                     a.io_threads, 2 * a.io_threads,
                                     " ".join("%.1f" % x for x in os.getloadavg())))
        runs = [("scan", ()), ("check", ()), ("rebuild", ("dataset.rebuild_catalog=true",)),
                ("check", ()), ("rewrite", ())]
        for name, extra in runs:
            if name == "rewrite":
                step = max(1, len(names) // max(1, a.rewrite))
                for p in names[::step][:a.rewrite]:
                    with open(p, "wb") as f:  # in place: truncated and rewritten
                        f.write(os.urandom(a.size))
            wall, log = seerd_check(path, state, a.io_threads, extra)
            print("%-8s seerd --check %6.2f s wall" % (name, wall))
            for line in phase_line(log):
                print("         " + line)
    finally:
        if mnt:
            subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-umount.sh"), mnt],
                           capture_output=True, text=True, timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
