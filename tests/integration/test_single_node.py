"""One node end to end: a real seerd, C and Python trainers, real files.

Asserts on delivered bytes, labels and order (against files and the sampler
function), exactly-once per epoch with DistributedSampler padding/drop rules,
PFS bytes equal to the optimum, determinism across runs, a SIGKILLed trainer
(others unharmed, its staging reclaimed, it reconnects and resumes), seek,
and clear errors for bad input."""

import os
import signal
import subprocess
import time

from seertest import (BIN, LONG, RECLAIM_BOUND_S, Daemon, Fail, Gate, catalog, check, cleanup,
                      finish, log, make_classes, read_log, run_tests, seer, start_trainer,
                      tmpdir, verify_exactly_once, verify_rank)

CLASSES = ["ant", "bee", "Cat", "cat", "cat0", "dog", "eel"]


def dataset(tmp, per_class=37, lo=1000, hi=30000, seed=7):
    root = os.path.join(tmp, "data")
    make_classes(root, CLASSES, per_class, lo, hi, seed)
    return root, catalog(root)


def base_settings(root, **kw):
    s = {
        "dataset.path": root,
        "job.seed": 42,
        "job.epochs": 3,
        "job.batch_size": 8,
        "cache.ram": "1MiB",
        "cache.staging": "2MiB",
        "prefetch.io_threads": 4,
        "prefetch.lookahead": 4,
    }
    s.update(kw)
    return s


def run_job(tmp, root, cat, settings, kinds, tag="run", extra=None):
    """Start a daemon and len(kinds) trainers; wait; return (daemon, logs)."""
    world = len(kinds)
    with Daemon(tmp, settings, name="seerd-" + tag) as d:
        logs = [os.path.join(tmp, "%s-r%d.log" % (tag, r)) for r in range(world)]
        procs = [start_trainer(k, r, world, d.sock, logs[r], (extra or {}).get(r, ()))
                 for r, k in enumerate(kinds)]
        res = finish(procs)
        for r, (rc, _, err) in enumerate(res):
            check(rc == 0, "trainer %d (%s) exited %d: %s\n%s" % (r, kinds[r], rc, err, d.log()))
        rc = d.wait(LONG)
        check(rc == 0, "seerd exited %d:\n%s" % (rc, d.log()))
    return d, [read_log(p) for p in logs]


def test_four_trainers_three_epochs():
    tmp = tmpdir("seer-it-")
    try:
        root, cat = dataset(tmp, per_class=36)  # 252 samples: 4 ranks, no padding
        D = sum(c[2] for c in cat)
        check(D > 3 * 1024 * 1024, "dataset must exceed the 1 MiB RAM cache")
        s = base_settings(root)
        d, logs = run_job(tmp, root, cat, s, ["c", "py", "c", "py"],
                          extra={0: ["--compute-ms", "1"], 1: ["--compute-ms", "1"]})
        sampler = seer.Sampler(len(cat), 42, 4, 8, drop_last=False)
        for r in range(4):
            n = verify_rank(cat, sampler, r, logs[r], 3)
            check(n == 3 * sampler.batches_per_epoch, "rank %d: %d batches" % (r, n))
        verify_exactly_once(cat, logs, 3, 4, 8, drop_last=False)
        st = d.stats()
        C = st["cache"]["ram_planned_bytes"]
        check(0 < C <= 1024 * 1024, "planned cache bytes %d" % C)
        pfs = sum(e["pfs_bytes"] for e in st["epochs"])
        optimum = D + (D - C) * 2
        log("dataset %d B, cache %d B, PFS read %d B, optimum %d B" % (D, C, pfs, optimum))
        check(pfs == optimum, "PFS bytes %d != optimum D + (D - C)(E - 1) = %d" % (pfs, optimum))
        hits = [e["ram_samples"] for e in st["epochs"]]
        check(all(h > 0 for h in hits[1:]), "no RAM hits after the first epoch: %s" % hits)
    finally:
        cleanup(tmp)


def test_pacing():
    """prefetch.pace: with trainers that compute (20 ms a step) and the dataset
    in the RAM cache, the daemon defers preparing a batch off the trainer's
    take while that trainer holds a ready one (counted in the stats'
    pacing.deferred); with pace = false it never does. Batches are the same
    bytes and order either way."""
    tmp = tmpdir("seer-it-")
    try:
        root, cat = dataset(tmp, per_class=36)
        deferred = {}
        for pace in ("true", "false"):
            s = base_settings(root, **{"cache.ram": "16MiB", "prefetch.pace": pace})
            d, logs = run_job(tmp, root, cat, s, ["c", "py"], tag="pace-" + pace,
                              extra={0: ["--compute-ms", "20"], 1: ["--compute-ms", "20"]})
            sampler = seer.Sampler(len(cat), 42, 2, 8, drop_last=False)
            for r in range(2):
                n = verify_rank(cat, sampler, r, logs[r], 3)
                check(n == 3 * sampler.batches_per_epoch, "pace %s rank %d: %d batches"
                      % (pace, r, n))
            st = d.stats()
            check(st["pacing"]["on"] == (pace == "true"), "pacing.on: %s" % st["pacing"])
            deferred[pace] = st["pacing"]["deferred"]
        log("prepares deferred: pace on %d, off %d" % (deferred["true"], deferred["false"]))
        check(deferred["true"] > 0, "pace = true deferred no prepare")
        check(deferred["false"] == 0, "pace = false deferred %d prepares" % deferred["false"])
    finally:
        cleanup(tmp)


def test_wakeups():
    """ring_below: with the dataset in the RAM cache and trainers that compute
    (5 ms a step), a trainer wakes the daemon once its ring is half drained,
    not after every take and release (seerd counts the eventfd writes:
    stats trainers[].rings). 8 epochs of 16 batches per trainer: the old
    protocol rang about twice a batch in every warm epoch; now at most a few
    times an epoch, the cold one aside. Same bytes and order either way."""
    tmp = tmpdir("seer-it-")
    try:
        root, cat = dataset(tmp, per_class=36)  # 252 samples, 2 ranks: 16 batches each
        s = base_settings(root, **{"cache.ram": "16MiB", "job.epochs": 8,
                                   "prefetch.lookahead": 8})
        d, logs = run_job(tmp, root, cat, s, ["c", "py"], tag="wake",
                          extra={0: ["--compute-ms", "5"], 1: ["--compute-ms", "5"]})
        sampler = seer.Sampler(len(cat), 42, 2, 8, drop_last=False)
        for r in range(2):
            n = verify_rank(cat, sampler, r, logs[r], 8)
            check(n == 8 * sampler.batches_per_epoch, "rank %d: %d batches" % (r, n))
        st = d.stats()
        tr = st["trainers"]
        batches = sum(t["batches"] for t in tr)
        rings = sum(t["rings"] for t in tr)
        log("trainers took %d batches and rang the daemon %d times (%s)"
            % (batches, rings, [t["rings"] for t in tr]))
        check(batches == 2 * 8 * sampler.batches_per_epoch, "batches %d" % batches)
        check(rings < 0.75 * batches, "%d rings for %d batches: the trainers rang "
              "after (nearly) every take and release" % (rings, batches))
    finally:
        cleanup(tmp)


def test_nopfs_policy():
    """The NoPFS-like comparison mode delivers the same batches and reads more
    from the PFS than seer's plan (per-trainer copies, no sharing)."""
    tmp = tmpdir("seer-it-")
    try:
        root, cat = dataset(tmp, per_class=36)
        D = sum(c[2] for c in cat)
        res = {}
        for policy in ("seer", "nopfs"):
            s = base_settings(root, **{"cache.policy": policy})
            d, logs = run_job(tmp, root, cat, s, ["c", "c", "py", "c"], tag=policy)
            sampler = seer.Sampler(len(cat), 42, 4, 8)
            for r in range(4):
                verify_rank(cat, sampler, r, logs[r], 3)
            st = d.stats()
            res[policy] = (sum(e["pfs_bytes"] for e in st["epochs"]),
                           st["cache"]["ram_planned_bytes"])
        log("PFS bytes over 3 epochs: seer %d (cache holds %d B), nopfs %d (copies %d B), "
            "dataset %d" % (res["seer"][0], res["seer"][1], res["nopfs"][0], res["nopfs"][1], D))
        check(res["seer"][0] == D + (D - res["seer"][1]) * 2, "seer must read the optimum")
        check(res["nopfs"][0] > res["seer"][0], "nopfs should read more than seer's plan")
    finally:
        cleanup(tmp)


def test_padding():
    tmp = tmpdir("seer-it-")
    try:
        root, cat = dataset(tmp, per_class=11)  # 77 samples over 3 ranks: 1 padded per epoch
        s = base_settings(root, **{"job.batch_size": 4, "job.epochs": 3, "cache.ram": "300KiB"})
        d, logs = run_job(tmp, root, cat, s, ["c", "py", "c"])
        sampler = seer.Sampler(len(cat), 42, 3, 4)
        for r in range(3):
            verify_rank(cat, sampler, r, logs[r], 3)
        verify_exactly_once(cat, logs, 3, 3, 4, drop_last=False)
        st = d.stats()
        D = sum(c[2] for c in cat)
        C = st["cache"]["ram_planned_bytes"]
        optimum = D + (D - C) * 2
        # the padded duplicate (first sample of each epoch's order) costs a
        # second read when it is not cached
        pad = 0
        for e in range(3):
            counts = {}
            for lg in logs:
                for (ep, _), b in lg.items():
                    if ep == e:
                        for x in b:
                            counts[x[1]] = counts.get(x[1], 0) + 1
            pad += sum(cat[i][2] for i, c in counts.items() if c > 1)
        pfs = sum(e["pfs_bytes"] for e in st["epochs"])
        log("PFS %d B, optimum %d B, padded duplicates %d B" % (pfs, optimum, pad))
        check(optimum <= pfs <= optimum + pad,
              "PFS bytes %d outside [optimum %d, optimum + padding %d]" % (pfs, optimum,
                                                                           optimum + pad))
    finally:
        cleanup(tmp)


def test_same_seed_same_batches():
    tmp = tmpdir("seer-it-")
    try:
        root, cat = dataset(tmp, per_class=12)
        s = base_settings(root, **{"job.epochs": 2})
        _, a = run_job(tmp, root, cat, s, ["c", "c"], tag="a")
        _, b = run_job(tmp, root, cat, s, ["py", "c"], tag="b")
        check(a == b, "two runs with the same seed delivered different batches")
        s["job.seed"] = 43
        _, c = run_job(tmp, root, cat, s, ["c", "c"], tag="c")
        check(a != c, "a different seed delivered the same batches")
    finally:
        cleanup(tmp)


def test_drop_last():
    tmp = tmpdir("seer-it-")
    try:
        root, cat = dataset(tmp, per_class=11)  # 77 samples over 3 trainers of batch 5
        s = base_settings(root, **{"job.batch_size": 5, "job.drop_last": "true", "job.epochs": 2})
        _, logs = run_job(tmp, root, cat, s, ["c", "py", "c"])
        sampler = seer.Sampler(len(cat), 42, 3, 5, drop_last=True)
        check(sampler.batches_per_epoch == 5, "77 // 3 = 25 -> 5 batches of 5")
        for r in range(3):
            verify_rank(cat, sampler, r, logs[r], 2)
        verify_exactly_once(cat, logs, 2, 3, 5, drop_last=True)
    finally:
        cleanup(tmp)


def wait_for(pred, timeout, what):
    t0 = time.time()
    while True:
        v = pred()
        if v:
            return time.time() - t0
        if time.time() - t0 > timeout:
            raise Fail("timed out after %.1f s waiting for %s" % (timeout, what))
        time.sleep(0.01)


def test_killed_trainer():
    tmp = tmpdir("seer-it-")
    try:
        root, cat = dataset(tmp)
        s = base_settings(root, **{"job.epochs": 2})
        world = 4
        sampler = seer.Sampler(len(cat), 42, world, 8)
        with Daemon(tmp, s) as d:
            logs = [os.path.join(tmp, "r%d.log" % r) for r in range(world)]
            victim = 2
            procs = []
            for r in range(world):
                extra = ["--compute-ms", "20"]
                if r == victim:
                    extra = ["--kill-after", "3"]
                procs.append(start_trainer("c" if r % 2 == 0 else "py", r, world, d.sock,
                                           logs[r], extra))
            procs[victim].wait(LONG)
            check(procs[victim].returncode == -signal.SIGKILL, "victim was not SIGKILLed")
            t_kill = time.time()

            def reclaimed():
                st = d.status()
                t = [x for x in st["trainers"] if x["rank"] == victim][0]
                return (not t["attached"]) and t["staging_used"] == 0 and t["inflight"] == 0
            dt = wait_for(reclaimed, LONG, "the killed trainer's staging to be reclaimed")
            log("killed trainer's arena space reclaimed %.0f ms after its death" %
                ((time.time() - t_kill) * 1000))
            check(dt < RECLAIM_BOUND_S, "reclaim took %.2f s (> %.0f s)" % (dt, RECLAIM_BOUND_S))
            check(d.proc.poll() is None, "seerd died with the trainer")
            first = read_log(logs[victim])
            held = max(first)  # it died holding its third batch
            check(held == (0, 2), "victim logged up to %s" % (held,))
            # the same rank reconnects and resumes where it stopped
            relog = os.path.join(tmp, "r%d-again.log" % victim)
            again = start_trainer("c", victim, world, d.sock, relog)
            res = finish([again] + [p for r, p in enumerate(procs) if r != victim])
            for rc, _, err in res:
                check(rc == 0, "a trainer failed after the kill: %s\n%s" % (err, d.log()))
            check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
        # the victim: batches 0..2 before, then from its unreleased batch to the end
        verify_rank(cat, sampler, victim, first, 2, last=(0, 3))
        second = read_log(relog)
        check(min(second) == held, "resumed at %s, expected the held batch %s" % (min(second), held))
        verify_rank(cat, sampler, victim, second, 2, first=held)
        for r in range(world):
            if r != victim:
                verify_rank(cat, sampler, r, read_log(logs[r]), 2)
    finally:
        cleanup(tmp)


def test_seek_and_start():
    tmp = tmpdir("seer-it-")
    try:
        root, cat = dataset(tmp, per_class=10)
        s = base_settings(root, **{"job.epochs": 3, "job.batch_size": 4})
        with Daemon(tmp, s) as d:
            la, lb = os.path.join(tmp, "a.log"), os.path.join(tmp, "b.log")
            p = [start_trainer("c", 0, 2, d.sock, la, ["--seek", "1:3"]),
                 start_trainer("c", 1, 2, d.sock, lb, ["--start", "2:1"])]
            for rc, _, err in finish(p):
                check(rc == 0, "trainer failed: " + err)
        sampler = seer.Sampler(len(cat), 42, 2, 4)
        verify_rank(cat, sampler, 0, read_log(la), 3, first=(1, 3))
        verify_rank(cat, sampler, 1, read_log(lb), 3, first=(2, 1))
    finally:
        cleanup(tmp)


def test_torch_adapter():
    tmp = tmpdir("seer-it-")
    try:
        root, cat = dataset(tmp, per_class=6)
        s = base_settings(root, **{"job.epochs": 1})
        _, logs = run_job(tmp, root, cat, s, ["py"], extra={0: ["--torch"]})
        verify_rank(cat, seer.Sampler(len(cat), 42, 1, 8), 0, logs[0], 1)
    finally:
        cleanup(tmp)


def seerd_error(args, want):
    out = subprocess.run([os.path.join(BIN, "seerd")] + args, capture_output=True, text=True,
                         timeout=LONG)
    check(out.returncode != 0, "seerd %s succeeded" % args)
    for w in want:
        check(w in out.stderr, "seerd %s: message lacks %r:\n%s" % (args, w, out.stderr))
    return out.stderr


def test_bad_input():
    tmp = tmpdir("seer-it-")
    try:
        st = os.path.join(tmp, "state")
        seerd_error(["--set", "dataset.path=%s/nope" % tmp, "--set", "daemon.state_dir=" + st],
                    ["%s/nope" % tmp, "dataset.path"])
        os.makedirs(os.path.join(tmp, "empty"))
        seerd_error(["--set", "dataset.path=%s/empty" % tmp, "--set", "daemon.state_dir=" + st],
                    ["holds no", "empty"])
        ini = os.path.join(tmp, "bad.ini")
        with open(ini, "w") as f:
            f.write("[dataset]\npath = /x\n\n[cache]\nram = 12XB\n")
        seerd_error(["-c", ini], [ini + ":5", "ram", "12XB"])
        with open(ini, "w") as f:
            f.write("[job]\nbatchsize = 3\n")
        seerd_error(["-c", ini], [ini + ":2", "batchsize"])
        seerd_error(["--set", "job.epochs=zero"], ["job.epochs", "zero"])
        # trainer-side refusals come back as messages
        root, cat = dataset(tmp, per_class=4)
        gate, at = Gate(tmp), (0, 0)
        with Daemon(tmp, base_settings(root, **{"job.epochs": 1})) as d:
            # rank 0 is attached (it holds its first batch) while the others try
            p0 = start_trainer("c", 0, 2, d.sock, os.path.join(tmp, "x0.log"),
                               ["--compute-ms", "200"] + gate.args(at))
            gate.wait([0], at, [p0])
            dup = subprocess.run([os.path.join(BIN, "seer-trainer"), "--rank", "0", "--world",
                                  "2", "--socket", d.sock], capture_output=True, text=True,
                                 timeout=LONG)
            check(dup.returncode != 0 and "already connected" in dup.stderr,
                  "second connection for rank 0: %s" % dup.stderr)
            bad = subprocess.run([os.path.join(BIN, "seer-trainer"), "--rank", "1", "--world",
                                  "3", "--socket", d.sock], capture_output=True, text=True,
                                 timeout=LONG)
            check(bad.returncode != 0 and "world size" in bad.stderr,
                  "world size mismatch: %s" % bad.stderr)
            env = dict(os.environ, SEER_JOB_ID="other")
            job = subprocess.run([os.path.join(BIN, "seer-trainer"), "--rank", "1", "--world",
                                  "2", "--socket", d.sock], capture_output=True, text=True,
                                 timeout=LONG, env=env)
            check(job.returncode != 0 and "job id" in job.stderr, "job mismatch: %s" % job.stderr)
            p1 = start_trainer("c", 1, 2, d.sock, os.path.join(tmp, "x1.log"))
            gate.go(at)
            for rc, _, err in finish([p0, p1]):
                check(rc == 0, "trainer failed: " + err)
        nosock = subprocess.run([os.path.join(BIN, "seer-trainer"), "--socket",
                                 os.path.join(tmp, "none.sock")], capture_output=True, text=True,
                                timeout=60, env=dict(os.environ, SEER_CONNECT_TIMEOUT_MS="100"))
        check(nosock.returncode != 0 and "no seerd at" in nosock.stderr,
              "missing daemon: %s" % nosock.stderr)
    finally:
        cleanup(tmp)


def test_labels_match_torchvision():
    """Class labels are torchvision's find_classes' (issue 28): a/, b/ (empty),
    c/ (only *.txt, emptied by dataset.extensions = bin), d/. seerd refuses
    the tree at scan naming b and c, as ImageFolder does; with
    dataset.allow_empty_classes = true every delivered label is the index
    find_classes gives the sample's folder (d is 3, seer once said 1), the
    label ImageFolder gives that class in a validation tree with no class
    empty, and the bytes are the file's."""
    from torchvision.datasets import ImageFolder
    from torchvision.datasets.folder import find_classes
    tmp = tmpdir("seer-it-")
    try:
        root, val = os.path.join(tmp, "train"), os.path.join(tmp, "val")
        make_classes(root, ["a", "d"], 9, 100, 2000, seed=5)
        os.makedirs(os.path.join(root, "b"))
        os.makedirs(os.path.join(root, "c"))
        for i in range(3):
            with open(os.path.join(root, "c", "note%d.txt" % i), "w") as f:
                f.write("not a sample %d" % i)
        make_classes(val, ["a", "b", "c", "d"], 2, 100, 400, seed=6)
        is_bin = lambda p: p.endswith(".bin")  # noqa: E731
        try:
            ImageFolder(root, is_valid_file=is_bin)
            raise Fail("ImageFolder accepted a tree with empty classes")
        except FileNotFoundError as ex:
            check("classes b, c" in str(ex), "ImageFolder: %s" % ex)
        val_idx = ImageFolder(val, is_valid_file=is_bin).class_to_idx
        tv_idx = find_classes(root)[1]
        check(tv_idx == val_idx == {"a": 0, "b": 1, "c": 2, "d": 3},
              "torchvision: %s, %s" % (tv_idx, val_idx))
        st = os.path.join(tmp, "state")
        seerd_error(["--set", "dataset.path=" + root, "--set", "dataset.extensions=bin",
                     "--set", "daemon.state_dir=" + st],
                    ["2 of 4 class directories", "'b', 'c'", "dataset.extensions = bin",
                     "dataset.allow_empty_classes = true"])
        log("empty classes refused at scan, as ImageFolder refuses them")
        cat = [x for x in catalog(root) if x[0].endswith(".bin")]
        for p, label, _, _ in cat:
            check(label == tv_idx[p.split("/")[0]], "oracle: %s label %d" % (p, label))
        s = base_settings(root, **{"dataset.extensions": "bin",
                                   "dataset.allow_empty_classes": "true", "job.epochs": 2,
                                   "job.batch_size": 3})
        d, logs = run_job(tmp, root, cat, s, ["c", "py"])
        check("2 of 4 class directories hold" in d.log() and "'b', 'c'" in d.log(),
              "no warning about the empty classes:\n" + d.log())
        sampler = seer.Sampler(len(cat), 42, 2, 3)
        seen = set()
        for r in range(2):
            verify_rank(cat, sampler, r, logs[r], 2)
            for b in logs[r].values():
                for (_, sid, label, _, _) in b:
                    cls = cat[sid][0].split("/")[0]
                    check(label == tv_idx[cls] == val_idx[cls],
                          "sample %d (%s): label %d, torchvision %d" % (sid, cat[sid][0], label,
                                                                       tv_idx[cls]))
                    seen.add((cls, label))
        check(seen == {("a", 0), ("d", 3)}, "labels delivered: %s" % sorted(seen))
        log("labels delivered = find_classes' = ImageFolder's on the validation tree: %s" %
            sorted(seen))
    finally:
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_four_trainers_three_epochs, test_pacing, test_wakeups, test_nopfs_policy,
               test_padding,
               test_same_seed_same_batches,
               test_drop_last,
               test_killed_trainer, test_seek_and_start, test_torch_adapter, test_bad_input,
               test_labels_match_torchvision])
