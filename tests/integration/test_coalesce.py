"""Coalesced reads (issue 13): several samples of a file read as one extent.

Every packed format (TFRecord, contiguous HDF5 with a big-endian part,
indexed binary, npz in DLIO's interleaved layout stored and compressed, npz
with samples on the first axis), written by numpy/h5py/an independent
TFRecord writer, is served by seerd through the PFS emulator with
prefetch.coalesce on and off, on one node and on two (mpirun), with a cache
smaller and larger than the dataset. Asserted:

- the trainers receive the same batches, in the same order, with the same
  bytes and labels, coalescing on and off (their logs are equal), and those
  are the bytes numpy/h5py wrote;
- the emulator's request count falls by the expected factor when the cache
  holds the dataset (one request per extent instead of one per sample), and
  never rises otherwise (npz in DLIO's layout: by at most a file's member,
  read by an extent for the cached part of a file and whole again for the
  rest);
- the bytes it served stay within the amplification bound:
  <= 1.05 D + (D - C)(E - 1), and the amplification seerd reports is
  <= prefetch.max_amplification;
- seerd's PFS bytes equal the emulator's, byte for byte.

Resident memory with coalescing on is test_formats_e2e.py's (the RSS test).
The catalog is built first (seerd --check) and the emulator's counters reset,
so the job's reads are all it counts. Trainers hold nothing open: each run
ends when its trainers have read every epoch."""

import json
import os
import struct
import subprocess
import zlib

import h5py
import numpy as np

from seertest import (BIN, LONG, ROOT, Daemon, check, cleanup, finish, log, read_log,
                      run_tests, start_trainer, tmpdir)
import test_multi_node
from test_formats_e2e import age_tree, write_tfrecord
from test_multi_node import Cluster, mount_pfs, pfsemu_available, umount_pfs

test_multi_node.NODES = 2  # Cluster's daemons: two nodes here

FORMATS = ("tfrecord", "hdf5", "indexed", "npz", "npz_deflate", "npz_first")
EPOCHS = 2
BATCH = 8


def make(root, kind, rng):
    """Six files of a packed format under root/train; returns (settings,
    [(bytes, label)] in catalog order)."""
    train = os.path.join(root, "train")
    os.makedirs(train)
    exp = []
    for i in range(6):
        base = os.path.join(train, "img_%d_of_6" % i)
        if kind == "tfrecord":
            ps = [rng.bytes(int(rng.integers(300, 3000))) for _ in range(120)]
            write_tfrecord(base + ".tfrecord", ps)
            exp += [(p, -1) for p in ps]
        elif kind == "indexed":
            ps = [rng.bytes(int(rng.integers(100, 4000))) for _ in range(120)]
            offs, blob = [], b""
            for p in ps:
                offs.append(len(blob))
                blob += p
            open(base, "wb").write(blob)
            np.array(offs, dtype="<u8").tofile(base + ".off.idx")
            np.array([len(p) for p in ps], dtype="<u8").tofile(base + ".sz.idx")
            exp += [(p, -1) for p in ps]
        elif kind == "hdf5":  # contiguous; one file big-endian float32 (swapped on delivery)
            n = 100
            if i == 3:
                rec = rng.standard_normal((n, 16, 8)).astype(">f4")
            else:
                rec = rng.integers(0, 255, size=(n, 24, 24), dtype=np.uint8)
            lab = rng.integers(0, 50, size=n).astype(np.int64)
            with h5py.File(base + ".h5", "w") as h:
                h.create_dataset("records", data=rec)
                h.create_dataset("labels", data=lab)
            exp += [(rec[k].astype(rec.dtype.newbyteorder("<")).tobytes(), int(lab[k]))
                    for k in range(n)]
        else:  # npz: DLIO's (d1, d2, n) stored or compressed, or samples on the first axis
            n = 96
            x = rng.integers(0, 255, size=(20, 16, n), dtype=np.uint8)
            y = rng.integers(0, 1000, size=n)
            if kind == "npz_first":
                x = np.ascontiguousarray(np.moveaxis(x, 2, 0))
                np.savez(base + ".npz", x=x, y=y)
                exp += [(x[k].tobytes(), int(y[k])) for k in range(n)]
            else:
                (np.savez_compressed if kind == "npz_deflate" else np.savez)(base + ".npz",
                                                                            x=x, y=y)
                exp += [(np.ascontiguousarray(x[:, :, k]).tobytes(), int(y[k]))
                        for k in range(n)]
    fmt = {"npz_deflate": "npz", "npz_first": "npz"}.get(kind, kind)
    s = {"dataset.format": fmt}
    if kind == "npz_first":
        s["dataset.npz_sample_axis"] = "first"
    return s, exp


def check_logs(logs, exp, what):
    """Every delivered sample carries the writer's bytes and label."""
    n = 0
    for lg in logs:
        for key, rows in lg.items():
            check(not isinstance(rows, str), "%s: batch %s failed: %s" % (what, key, rows))
            for (_, sid, label, length, crc) in rows:
                raw, lab = exp[sid]
                check(length == len(raw) and crc == zlib.crc32(raw) and label == lab,
                      "%s: sample %d differs from what the writer wrote" % (what, sid))
                n += 1
    return n


def emu(mnt):
    with open(os.path.join(mnt, ".pfsemu", "stats")) as f:
        return json.load(f)["totals"]


def build_catalog(settings):
    args = [os.path.join(BIN, "seerd"), "--check"]
    for k, v in settings.items():
        args += ["--set", "%s=%s" % (k, v)]
    c = subprocess.run(args, capture_output=True, text=True, timeout=LONG)
    check(c.returncode == 0, "seerd --check: %s" % c.stderr)


def reset(mnt):
    with open(os.path.join(mnt, ".pfsemu", "reset")) as f:
        check(f.read().strip() == "ok", "pfsemu reset")


def run_job(work, mnt, base, coalesce, ram, nodes, name):
    """One job: `nodes` daemons (mpirun when 2), two trainers per node (C
    and Python alternating). Returns (trainer logs, per-node stats, emulator
    totals)."""
    s = dict(base)
    mode = coalesce if isinstance(coalesce, str) else "on" if coalesce else "off"
    s.update({"cache.ram": ram, "prefetch.coalesce": mode,
              "daemon.state_dir": os.path.join(work, "state")})
    build_catalog(dict(s, **{"daemon.socket": os.path.join(work, "chk.sock")}))
    reset(mnt)
    world = 2 * nodes
    logs = [os.path.join(work, "%s-r%d.log" % (name, r)) for r in range(world)]
    if nodes == 1:
        with Daemon(work, s, name=name) as d:
            procs = [start_trainer("c" if r == 0 else "py", r, world, d.sock, logs[r])
                     for r in range(world)]
            for r, (rc, _, err) in enumerate(finish(procs)):
                check(rc == 0, "%s: trainer %d failed: %s\n%s" % (name, r, err, d.log()))
            check(d.wait(LONG) == 0, "%s: seerd failed:\n%s" % (name, d.log()))
            stats = [d.stats()]
    else:
        cl = Cluster(work, dict(s, **{"net.peer_timeout_ms": 60000}), name=name)
        try:
            procs = [start_trainer("c" if r % 2 == 0 else "py", r, world, cl.socket(r // 2),
                                   logs[r]) for r in range(world)]
            for r, (rc, _, err) in enumerate(finish(procs)):
                check(rc == 0, "%s: trainer %d failed: %s\n%s" % (name, r, err, cl.log()))
            check(cl.wait() == 0, "%s: seerd failed:\n%s" % (name, cl.log()))
        finally:
            cl.kill()
        stats = [cl.node_stats(k) for k in range(nodes)]
    return [read_log(p) for p in logs], stats, emu(mnt)


def totals(stats):
    pfs = sum(e["pfs_bytes"] for st in stats for e in st["epochs"])
    reads = sum(e.get("pfs_reads", 0) for st in stats for e in st["epochs"])
    cached = sum(st["cache"]["ram_planned_bytes"] for st in stats)
    return pfs, reads, cached


def compare(kind, nodes, ram_frac, tmp, rng):
    """A dataset of `kind` served with coalescing on and off: same batches,
    writer's bytes, fewer requests, bounded bytes, counts that agree."""
    work = os.path.join(tmp, "%s-%d-%g" % (kind, nodes, ram_frac))
    data = os.path.join(work, "data")
    os.makedirs(data)
    settings, exp = make(data, kind, rng)
    age_tree(data)  # the catalog cache is trusted: the scan is not in the counts
    D = sum(len(raw) for raw, _ in exp)
    mnt = os.path.join(work, "pfs")
    os.environ["PFSEMU_LOG"] = os.path.join(work, "pfsemu.log")
    mount_pfs(data, mnt)
    try:
        base = dict(settings, **{"dataset.path": os.path.join(mnt, "train"),
                                 "job.epochs": EPOCHS, "job.batch_size": BATCH, "job.seed": 3,
                                 "cache.staging": "4MiB"})
        # per node: the aggregate RAM is ram_frac x the dataset (64-byte slots)
        ram = int(ram_frac * (D + 64 * len(exp)) / nodes)
        runs = {}
        for co in (False, True):
            runs[co] = run_job(work, mnt, base, co, ram, nodes, "co" if co else "plain")
        (logs_off, st_off, emu_off), (logs_on, st_on, emu_on) = runs[False], runs[True]
        check(logs_on == logs_off, "%s: the trainers' batches differ with coalescing on" % kind)
        n = check_logs(logs_on, exp, kind)
        per = -(-len(exp) // (2 * nodes))  # DistributedSampler pads to equal shares
        check(n == EPOCHS * per * 2 * nodes, "%s: %d samples delivered" % (kind, n))
        pfs_on, reads_on, C = totals(st_on)
        pfs_off, reads_off, _ = totals(st_off)
        amp = max(st["coalescing"]["amplification"] for st in st_on)
        extents = sum(st["coalescing"]["extents"] for st in st_on)
        log("%-11s %d node(s), cache %.1f D: requests %5d -> %4d (%.1fx fewer, %d extents), "
            "bytes %.3f D -> %.3f D, extent amplification %.3f; seerd %d = emulator %d B" %
            (kind, nodes, ram_frac, emu_off["reads"], emu_on["reads"],
             emu_off["reads"] / max(emu_on["reads"], 1), extents, emu_off["bytes"] / D,
             emu_on["bytes"] / D, amp, pfs_on, emu_on["bytes"]))
        for name, pfs, em in (("on", pfs_on, emu_on), ("off", pfs_off, emu_off)):
            check(pfs == em["bytes"], "%s (coalescing %s): seerd reports %d PFS bytes, the "
                  "emulator served %d" % (kind, name, pfs, em["bytes"]))
        # npz in DLIO's layout is read by whole members either way (the format
        # memory keeps decoded members): a file split between the cache and the
        # rest may be read once more, by its extent and for its uncached samples
        slack = 6 if kind in ("npz", "npz_deflate") and ram_frac < 1 else 0
        check(emu_on["reads"] <= emu_off["reads"] + slack, "%s: more requests with coalescing "
              "(%d > %d)" % (kind, emu_on["reads"], emu_off["reads"]))
        check(amp <= 1.25 + 1e-9, "%s: extent amplification %.3f > 1.25" % (kind, amp))
        bound = 1.05 * D + max(D - C, 0) * (EPOCHS - 1)
        check(emu_on["bytes"] <= bound, "%s: %d bytes read, bound 1.05 D + (D - C)(E - 1) = %d"
              % (kind, emu_on["bytes"], bound))
        if ram_frac >= 1:
            # every sample cached: each file read in a few extents in the first
            # epoch (at most 1 MiB per request through FUSE), nothing after
            files = 6
            want = files * (1 + max(1, D // files // (1 << 20) + 1)) * nodes
            check(emu_on["reads"] <= want, "%s: %d requests with coalescing, expected at most %d "
                  "(%d samples)" % (kind, emu_on["reads"], want, len(exp)))
            if kind not in ("npz", "npz_deflate"):
                # one request per sample without coalescing (npz in DLIO's layout
                # decodes whole members through the format memory instead)
                check(emu_off["reads"] >= len(exp), "%s: %d requests without coalescing" %
                      (kind, emu_off["reads"]))
            check(reads_on == extents, "%s: seerd counted %d PFS reads, %d extents" %
                  (kind, reads_on, extents))
        return emu_off["reads"], emu_on["reads"]
    finally:
        umount_pfs(mnt)
        cleanup(work)


def test_single_node_every_format():
    check(pfsemu_available(), "this test needs bin/seer-pfsemu and /dev/fuse")
    tmp = tmpdir("seer-co-")
    rng = np.random.default_rng(13)
    try:
        for kind in FORMATS:
            for frac in (1.5, 0.4):
                compare(kind, 1, frac, tmp, rng)
    finally:
        cleanup(tmp)


def test_two_nodes_every_format():
    """Two daemons: each packed file read by one node, the other's trainers
    served over the network; with a smaller cache for TFRecord as well."""
    check(pfsemu_available(), "this test needs bin/seer-pfsemu and /dev/fuse")
    tmp = tmpdir("seer-co-")
    rng = np.random.default_rng(17)
    try:
        for kind in FORMATS:
            compare(kind, 2, 1.5, tmp, rng)
        compare("tfrecord", 2, 0.4, tmp, rng)
    finally:
        cleanup(tmp)


def test_auto_probe_decides():
    """prefetch.coalesce = auto (the default): node 0 times the PFS before the
    job and every node plans with its verdict. On a PFS bound by bandwidth
    (400 KB/s, 32 reads in flight) one read per sample, in the order of need;
    on one bound by requests (4 ms a read, 4 in flight, no bandwidth cap)
    coalesced reads. Either way the trainers get the writer's bytes, and the
    PFS bytes seerd reports (the probe's included, counted on node 0 only)
    equal the emulator's."""
    check(pfsemu_available(), "this test needs bin/seer-pfsemu and /dev/fuse")
    tmp = tmpdir("seer-co-")
    rng = np.random.default_rng(23)
    try:
        data = os.path.join(tmp, "data")
        train = os.path.join(data, "train")
        os.makedirs(train)
        exp = []
        # 7,680 records of ~400 B: 1/64 of the bytes lets the probe take
        # 8 reads at once, 3 rounds
        for i in range(8):
            ps = [rng.bytes(int(rng.integers(300, 500))) for _ in range(960)]
            write_tfrecord(os.path.join(train, "part_%d.tfrecord" % i), ps)
            exp += [(p, -1) for p in ps]
        age_tree(data)
        D = sum(len(raw) for raw, _ in exp)
        mnt = os.path.join(tmp, "pfs")
        base = {"dataset.format": "tfrecord", "dataset.path": os.path.join(mnt, "train"),
                "job.epochs": 1, "job.batch_size": 64, "job.seed": 5,
                "cache.staging": "4MiB"}
        ram = int(1.5 * (D + 64 * len(exp)) / 2)
        cases = (("bandwidth", ["--bandwidth", "400KB/s", "--latency-ms", "0.05",
                                "--max-inflight", "32"], 2, False),
                 ("requests", ["--latency-ms", "4", "--max-inflight", "4"], 1, True))
        logs = {}
        for name, opts, nodes, want in cases:
            os.environ["PFSEMU_LOG"] = os.path.join(tmp, "pfsemu-%s.log" % name)
            mount_pfs(data, mnt, *opts)
            try:
                lg, stats, em = run_job(tmp, mnt, base, "auto", ram, nodes, name)
            finally:
                umount_pfs(mnt)
            logs[name] = lg
            pr = stats[0]["coalescing"]["probe"]
            log("auto, PFS bound by %s: %s" % (name, pr["why"]))
            check(pr["measured"] and pr["reads_at_once"] >= 4 and pr["rounds"] >= 1,
                  "%s: the probe did not measure: %s" % (name, pr))
            for k, st in enumerate(stats):
                co = st["coalescing"]
                check(co["mode"] == "auto" and co["on"] == want and
                      co["probe"]["coalesce"] == want,
                      "%s: node %d coalesces %s (probe %s), expected %s" %
                      (name, k, co["on"], co["probe"]["coalesce"], want))
                check(k == 0 or co["probe"]["pfs_bytes"] == 0,
                      "%s: node %d counted the probe's bytes" % (name, k))
                check((co["extents"] > 0) == want, "%s: node %d read %d extents" %
                      (name, k, co["extents"]))
            check(pr["pfs_bytes"] <= D // 64 + 4096 and pr["pfs_bytes"] > 0,
                  "%s: the probe read %d bytes of a %d-byte dataset" % (name, pr["pfs_bytes"], D))
            pfs, _, _ = totals(stats)
            check(pfs == em["bytes"], "%s: seerd counted %d PFS bytes, the emulator served %d"
                  % (name, pfs, em["bytes"]))
            check(check_logs(lg, exp, "auto (%s)" % name) == len(exp),
                  "%s: not every sample was delivered once" % name)
    finally:
        cleanup(tmp)


def fault_settings(work, mnt):
    return {"dataset.path": os.path.join(mnt, "train"), "dataset.format": "tfrecord",
            "job.epochs": 1, "job.batch_size": BATCH, "job.seed": 3, "cache.ram": "8MiB",
            "cache.staging": "4MiB", "daemon.state_dir": os.path.join(work, "state"),
            "prefetch.retry_backoff_ms": 1}


def fault_job(work, mnt, exp, name):
    """One node, two C trainers, the cache holding the dataset (every sample
    read by an extent), the catalog built before; returns (logs, trainer
    return codes, stats)."""
    s = fault_settings(work, mnt)
    reset(mnt)
    logs = [os.path.join(work, "%s-r%d.log" % (name, r)) for r in range(2)]
    with Daemon(work, s, name=name) as d:
        procs = [start_trainer("c", r, 2, d.sock, logs[r]) for r in range(2)]
        rcs = [rc for rc, _, _ in finish(procs)]
        check(d.wait(LONG) == 0, "%s: seerd failed:\n%s" % (name, d.log()))
        st = d.stats()
    return [read_log(p) for p in logs], rcs, st


def test_faults_in_extents():
    """PFS errors under extents: transient ones (EIO, short reads) are retried
    and every sample arrives intact, counted byte for byte; a file that always
    fails falls back to reading its samples one by one, whose batches then fail
    naming it, and every other batch arrives intact."""
    check(pfsemu_available(), "this test needs bin/seer-pfsemu and /dev/fuse")
    tmp = tmpdir("seer-co-")
    try:
        data = os.path.join(tmp, "data")
        os.makedirs(data)
        _, exp = make(data, "tfrecord", np.random.default_rng(23))
        age_tree(data)
        mnt = os.path.join(tmp, "pfs")
        os.environ["PFSEMU_LOG"] = os.path.join(tmp, "pfsemu.log")
        mount_pfs(data, mnt)  # the catalog, scanned without faults
        try:
            build_catalog(fault_settings(tmp, mnt))
        finally:
            umount_pfs(mnt)
        mount_pfs(data, mnt, "--fault-rate", "0.3", "--fault-kinds", "eio,short",
                  "--fault-seed", "11")
        try:
            logs, rcs, st = fault_job(tmp, mnt, exp, "transient")
            em = emu(mnt)
            check(rcs == [0, 0], "trainers failed under transient faults: %s" % rcs)
            n = check_logs(logs, exp, "transient faults")
            pfs = sum(e["pfs_bytes"] for e in st["epochs"])
            log("30%% faulty requests (%s): %d samples intact, %d extents, %d retries; seerd "
                "%d = emulator %d B" % (em["faults"], n, st["coalescing"]["extents"],
                                        sum(e["retries"] for e in st["epochs"]), pfs, em["bytes"]))
            check(em["errors_injected"] > 0, "no fault was injected")
            check(st["coalescing"]["extents"] > 0, "no extent was read")
            check(pfs == em["bytes"], "seerd counted %d PFS bytes, the emulator served %d" %
                  (pfs, em["bytes"]))
        finally:
            umount_pfs(mnt)
        bad = "img_2_of_6.tfrecord"
        mount_pfs(data, mnt, "--fault-rate", "1", "--fault-kinds", "eio", "--fault-path", bad)
        try:
            logs, rcs, st = fault_job(tmp, mnt, exp, "always")
        finally:
            umount_pfs(mnt)
        check(rcs != [0, 0], "a file that always fails must fail the trainers' batches")
        first = 2 * 120  # the bad file's samples: ids 240..359 (six files of 120)
        failed = ok = 0
        for lg in logs:
            for key, rows in lg.items():
                if isinstance(rows, str):
                    failed += 1
                    check(bad in rows, "failed batch %s: '%s' must name %s" % (key, rows, bad))
                    continue
                for (_, sid, label, length, crc) in rows:
                    check(not first <= sid < first + 120, "sample %d of %s delivered" % (sid, bad))
                    raw, _ = exp[sid]
                    check(crc == zlib.crc32(raw), "sample %d differs" % sid)
                ok += 1
        log("%s always failing: %d batches failed naming it, %d intact" % (bad, failed, ok))
        check(failed > 0 and ok > 0, "failed %d, ok %d" % (failed, ok))
    finally:
        cleanup(tmp)


def test_corrupt_record_in_extent():
    """A damaged TFRecord record read by an extent: on_corrupt = fail fails
    exactly its batch with the CRC message naming the file; skip substitutes
    the next record and counts it once; the other records of the extent are
    delivered either way."""
    tmp = tmpdir("seer-co-")
    try:
        data = os.path.join(tmp, "data")
        os.makedirs(data)
        _, exp = make(data, "tfrecord", np.random.default_rng(29))
        path = os.path.join(data, "train", "img_1_of_6.tfrecord")
        blob = bytearray(open(path, "rb").read())
        h = 0
        for _ in range(5):  # the 6th record of the file: catalog id 120 + 5
            h += 16 + struct.unpack("<Q", bytes(blob[h:h + 8]))[0]
        blob[h + 12 + 3] ^= 0xff
        open(path, "wb").write(bytes(blob))
        bad = 125
        base = {"dataset.path": os.path.join(data, "train"), "dataset.format": "tfrecord",
                "job.epochs": 1, "job.batch_size": BATCH, "job.shuffle": "false",
                "cache.ram": "8MiB", "cache.staging": "4MiB"}
        for policy in ("fail", "skip"):
            s = dict(base, **{"dataset.on_corrupt": policy})
            logp = os.path.join(tmp, "trainer-%s.log" % policy)
            with Daemon(tmp, s, name=policy) as d:
                c = subprocess.run([os.path.join(BIN, "seer-trainer"), "--rank", "0", "--world",
                                    "1", "--socket", d.sock, "--log", logp, "--quiet"],
                                   capture_output=True, text=True, timeout=LONG)
                check(d.wait(LONG) == 0, "%s: seerd failed:\n%s" % (policy, d.log()))
                st = d.stats()
            lg = read_log(logp)
            check(st["coalescing"]["extents"] > 0, "%s: no extent was read" % policy)
            failed = {k: v for k, v in lg.items() if isinstance(v, str)}
            if policy == "fail":
                check(c.returncode != 0 and list(failed) == [(0, bad // BATCH)],
                      "exactly the batch of sample %d must fail: %s" % (bad, list(failed)))
                msg = failed[(0, bad // BATCH)]
                check("img_1_of_6.tfrecord" in msg and "CRC" in msg and str(bad) in msg,
                      "the message must name the file, the sample and the CRC: %s" % msg)
                log("on_corrupt = fail under extents: %s" % msg[:110])
            else:
                check(c.returncode == 0 and not failed, "skip: %s %s" % (c.stderr, failed))
                ids = [x[1] for k in sorted(lg) for x in sorted(lg[k])]
                check(bad not in ids and ids.count(bad + 1) == 2, "skip: %d must be replaced "
                      "by %d" % (bad, bad + 1))
                check(sum(e["skipped"] for e in st["epochs"]) == 1, "skip not counted once")
                log("on_corrupt = skip under extents: sample %d substituted by %d" %
                    (bad, bad + 1))
            check_logs([{k: v for k, v in lg.items() if not isinstance(v, str)}], exp,
                       "corrupt (%s)" % policy)
    finally:
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_single_node_every_format, test_two_nodes_every_format,
               test_auto_probe_decides, test_faults_in_extents, test_corrupt_record_in_extent])
