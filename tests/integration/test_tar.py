"""WebDataset tar shards (dataset.format = tar, src/fmt/tar.c) end to end.

Shards are written by Python's tarfile (GNU, PAX and USTAR formats) and by
GNU tar (--format=gnu, --format=posix), with member names over 100 bytes
(GNU long names, pax paths, the ustar prefix), extra members (.json, .txt),
WebDataset meta members, directories and priority between extensions. The
expectation is rebuilt here from what Python's tarfile reads, with
WebDataset's own grouping rule (a regular expression, not seer's code): every
delivered sample's bytes and label must equal it.

- one node (Python Loader: bytes and labels of every view), two nodes
  (mpirun, seer-trainer per node: length, CRC and label of every sample, every
  sample once per epoch);
- labels: the cls member wins; without one, the shard's class directory;
- the transform stage on jpg members: tensors identical to the same JPEGs
  served as an image folder (encoded and decoded-image caches);
- a RAM cache smaller than the dataset plus an NVMe tier, coalesced reads on;
- damaged shards: truncated, a bad header checksum, a sample without a data
  member, a label that is not an integer: seerd refuses to start naming the
  shard and the member; with dataset.on_corrupt = skip they are left out and
  every other sample is delivered exactly;
- test_pfs_cold_epoch: a cold epoch through the emulator's lustre preset
  against `cat` of the shards (printed; never fails on timing).
"""

import io
import json
import os
import random
import re
import subprocess
import tarfile
import time
import zlib

import numpy as np

from seertest import (BIN, LONG, ROOT, Daemon, MpiDaemons, check, cleanup, log, read_log, run_tests, seer,
                      tmpdir)

EXTS = ["jpg", "jpeg", "png", "webp"]
WDS_RE = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's base_plus_ext


def expected(root, label_ext="cls", exts=EXTS, only=None):
    """[(shard, key, bytes, label)] in seer's catalog order, from tarfile reads
    grouped as WebDataset groups them."""
    shards = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        shards += [os.path.relpath(os.path.join(d, f), root) for f in files
                   if f.endswith(".tar") and not f.startswith(".")]
    shards.sort(key=lambda p: p.encode())
    nested = any("/" in s for s in shards)
    classes = sorted((e.name for e in os.scandir(root) if e.is_dir()),
                     key=lambda c: c.encode()) if nested else []
    out = []
    for s in shards:
        if only and s != only:
            continue
        dirlabel = classes.index(s.split("/")[0]) if "/" in s else -1
        groups = []
        with tarfile.open(os.path.join(root, s)) as tf:
            for m in tf:
                if not m.isreg():
                    continue
                if "/" not in m.name and m.name.startswith("__") and m.name.endswith("__"):
                    continue
                g = WDS_RE.match(m.name)
                if not g:
                    continue
                key, ext = g.group(1), g.group(2).lower()
                if not groups or groups[-1][0] != key:
                    groups.append((key, {}))
                groups[-1][1][ext] = tf.extractfile(m).read()
        for key, mem in groups:
            data = next(mem[e] for e in exts if e in mem)
            label = int(mem[label_ext].decode()) if label_ext in mem else dirlabel
            out.append((s, key, data, label))
    return out


def sample_set(rng, n, prefix, long_names=False, extras=True):
    """[(member name, bytes)] of n samples: a data member (mostly jpg, some
    png, some with both), a cls label, sometimes json/txt. long_names: two of
    three samples in directories of 90-130 bytes, consecutive ones with the
    same base name (only the full path tells them apart)."""
    members = []
    for i in range(n):
        d, base = "", i
        if long_names and i % 3 < 2:  # pairs: the same base name in two long directories
            d = "dir_" + ("x" if i % 3 == 0 else "y") * (90 + i % 40) + "/"
            base = i - i % 3
        key = "%s%s%05d" % (d, prefix, base)
        size = rng.randint(1, 20000)
        if i % 7 == 3:
            members.append((key + ".png", rng.randbytes(size)))
        elif i % 7 == 5:  # both: jpg comes first in dataset.tar_extensions
            members.append((key + ".png", rng.randbytes(size)))
            members.append((key + ".jpg", rng.randbytes(size // 2 + 1)))
        elif i % 11 == 6:
            members.append((key + ".JPEG", rng.randbytes(size)))
        else:
            members.append((key + ".jpg", rng.randbytes(size)))
        members.append((key + ".cls", b"%d\n" % rng.randint(0, 999)))
        if extras and i % 4 == 1:
            members.append((key + ".json", json.dumps({"i": i}).encode()))
            members.append((key + ".txt", b"a caption " * rng.randint(1, 30)))
    return members


def write_tarfile(path, members, fmt, meta=True):
    with tarfile.open(path, "w", format=fmt) as tf:
        if meta:
            add_member(tf, "__meta__", b"{}")
        dirs = set()
        for name, data in members:
            d = name.rsplit("/", 1)[0] if "/" in name else None
            if d and d not in dirs:
                dirs.add(d)
                ti = tarfile.TarInfo(d)
                ti.type = tarfile.DIRTYPE
                tf.addfile(ti)
            add_member(tf, name, data)


def add_member(tf, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 1700000000
    tf.addfile(ti, io.BytesIO(data))


def write_gnutar(path, members, fmt, stage):
    """GNU tar from files in stage, in the members' order (-T list)."""
    os.makedirs(stage)
    for name, data in members:
        p = os.path.join(stage, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
    lst = stage + ".list"
    with open(lst, "w") as f:
        f.write("".join(n + "\n" for n, _ in members))
    subprocess.run(["tar", "--format=" + fmt, "--no-recursion", "-cf", path, "-C", stage,
                    "-T", lst], check=True)


def make_writers(root, seed=1, n=40):
    """Five shards, one per writer; returns their names. Names over 100
    bytes become GNU long names (tarfile GNU, GNU tar gnu), pax paths (tarfile
    PAX, GNU tar posix) or the ustar prefix field (tarfile USTAR)."""
    rng = random.Random(seed)
    os.makedirs(root)
    out = []
    for fmt, name in ((tarfile.GNU_FORMAT, "a-py-gnu"), (tarfile.PAX_FORMAT, "b-py-pax"),
                      (tarfile.USTAR_FORMAT, "c-py-ustar")):
        m = sample_set(rng, n, "s", long_names=True)
        if fmt == tarfile.PAX_FORMAT:  # non-ASCII names: pax path records
            m = [(x.replace("s000", "\u00e9t\u00e9_") if "s0001" in x else x, d) for x, d in m]
        write_tarfile(os.path.join(root, name + ".tar"), m, fmt)
        out.append(name)
    for fmt in ("gnu", "posix"):
        m = sample_set(rng, n, "g", long_names=True)
        name = "d-gnutar-" + fmt
        write_gnutar(os.path.join(root, name + ".tar"), m, fmt,
                     os.path.join(root, "..", "stage-" + fmt))
        out.append(name)
    return out


def loader_check(sock, exp, rank=0, world=1):
    """Every view of every batch: bytes and label as expected."""
    checked = 0
    with seer.Loader(socket=sock, rank=rank, world_size=world) as ld:
        for _ in range(ld.epochs):
            for b in ld:
                for sid, x, y in zip(b.ids.tolist(), b.samples, b.labels.tolist()):
                    shard, key, data, label = exp[sid]
                    check(x.dtype == np.uint8 and x.tobytes() == data,
                          "sample %d (%s: %s): %d bytes delivered differ from tarfile's %d" %
                          (sid, shard, key, x.size, len(data)))
                    check(y == label, "sample %d (%s: %s): label %d, tarfile says %d" %
                          (sid, shard, key, y, label))
                    checked += 1
    return checked


def c_check(logpath, exp, epochs, world_rows=None):
    """A seer-trainer log: every row's length, CRC and label as expected;
    returns {epoch: [ids]}."""
    ids = {}
    for (e, _), rows in read_log(logpath).items():
        check(not isinstance(rows, str), "batch of epoch %d failed: %s" % (e, rows))
        for (_, sid, label, length, crc) in rows:
            shard, key, data, wl = exp[sid]
            check(length == len(data) and crc == zlib.crc32(data) and label == wl,
                  "sample %d (%s: %s): %d bytes crc %08x label %d delivered, tarfile has %d "
                  "bytes crc %08x label %d" % (sid, shard, key, length, crc, label, len(data),
                                               zlib.crc32(data), wl))
            ids.setdefault(e, []).append(sid)
    check(sorted(ids) == list(range(epochs)), "epochs delivered: %s" % sorted(ids))
    return ids


def trainer(sock, rank, world, logpath):
    return subprocess.Popen([os.path.join(BIN, "seer-trainer"), "--rank", str(rank), "--world",
                             str(world), "--socket", sock, "--log", logpath, "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_writers_one_node():
    """tarfile (GNU, PAX, USTAR) and GNU tar (gnu, posix) shards, long names:
    bytes and labels as tarfile reads them, two epochs (the second from the
    cache), the samples read both alone and coalesced."""
    tmp = tmpdir("seer-tar-")
    try:
        root = os.path.join(tmp, "data")
        make_writers(root)
        exp = expected(root)
        long_keys = sum(len(k) > 100 for _, k, _, _ in exp)
        check(len(exp) == 200 and long_keys >= 20, "%d samples, %d long keys" %
              (len(exp), long_keys))
        for coalesce in ("off", "on"):
            s = {"dataset.path": root, "dataset.format": "tar", "job.epochs": 2,
                 "job.batch_size": 7, "cache.ram": "1MiB", "prefetch.coalesce": coalesce}
            with Daemon(tmp, s, name="one-" + coalesce) as d:
                n = loader_check(d.sock, exp)
                check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
                st = d.stats()
            check(n == 2 * len(exp), "%d samples checked" % n)
            ext = st["coalescing"]["extents"]
            check(coalesce == "off" or ext > 0, "coalesced reads were not used")
            log("coalesce %s: %d samples from 5 shards (%d keys > 100 bytes), bytes and labels "
                "equal to tarfile's over 2 epochs; %d extents" % (coalesce, n, long_keys, ext))
    finally:
        cleanup(tmp)


def test_labels_from_directories():
    """Shards in class directories: a sample's cls member wins, a sample
    without one takes its directory's index; dataset.tar_label = "" ignores
    every cls member; dataset.tar_extensions = png picks the png."""
    tmp = tmpdir("seer-tar-")
    try:
        root = os.path.join(tmp, "data")
        rng = random.Random(3)
        for c in ("ant", "bee"):
            os.makedirs(os.path.join(root, c))
            m = []
            for i in range(6):
                key = "%s%03d" % (c, i)
                m.append((key + ".jpg", rng.randbytes(100 + i)))
                m.append((key + ".png", rng.randbytes(200 + i)))
                if i == 2:
                    m.append((key + ".cls", b"7"))
            write_tarfile(os.path.join(root, c, "shard-0.tar"), m, tarfile.PAX_FORMAT)
        for label, exts, lab_ext, ext_list in (("cls", None, "cls", EXTS),
                                               ("", "png", "none", ["png"])):
            exp = expected(root, label_ext=lab_ext, exts=ext_list)
            labels = [x[3] for x in exp]
            s = {"dataset.path": root, "dataset.format": "tar", "job.batch_size": 4,
                 "dataset.tar_label": label}
            if exts:
                s["dataset.tar_extensions"] = exts
            else:
                check(labels == [0, 0, 7, 0, 0, 0, 1, 1, 7, 1, 1, 1], "expectation: %s" % labels)
            with Daemon(tmp, s, name="dirs" + label) as d:
                n = loader_check(d.sock, exp)
                check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
            log("tar_label=%r tar_extensions=%s: labels %s, %d samples exact" %
                (label, exts or "default", labels, n))
    finally:
        cleanup(tmp)


def test_two_nodes():
    """Two seerd under mpirun, one seer-trainer on each: every sample's
    length, CRC and label as tarfile reads it, each exactly once per epoch."""
    tmp = tmpdir("seer-tar-")
    try:
        root = os.path.join(tmp, "data")
        make_writers(root, seed=2, n=24)
        exp = expected(root)
        s = {"dataset.path": root, "dataset.format": "tar", "job.epochs": 2,
             "job.batch_size": 5, "job.drop_last": "true", "cache.ram": "512KiB",
             "cache.staging": "16MiB"}
        cl = MpiDaemons(tmp, 2, dict({"net.peer_timeout_ms": 60000}, **s), name="two")
        try:
            logs = [os.path.join(tmp, "t%d.log" % r) for r in range(2)]
            ps = [trainer(cl.socket(r), r, 2, logs[r]) for r in range(2)]
            for p in ps:
                out, err = p.communicate(timeout=300)
                check(p.returncode == 0, "trainer failed: %s\n%s" % (err, cl.log()))
            check(cl.wait() == 0, "mpirun seerd failed:\n" + cl.log())
        finally:
            cl.kill()
        per = [c_check(lg, exp, 2) for lg in logs]
        for e in range(2):
            ids = per[0][e] + per[1][e]
            check(len(ids) == len(set(ids)) and len(ids) == len(exp) // 10 * 10,
                  "epoch %d: %d samples, %d distinct, of %d" % (e, len(ids), len(set(ids)),
                                                              len(exp)))
        st = [json.load(open(cl.stats_path(k))) for k in range(2)]
        peer = sum(e["peer_samples"] for x in st for e in x["epochs"])
        log("2 nodes: %d samples per epoch exact on both ranks; %d served by the peer" %
            (len(per[0][0]) + len(per[1][0]), peer))
    finally:
        cleanup(tmp)


def test_transform_jpg():
    """transform.decode = image on jpg members: the tensors equal those of the
    same JPEGs served as an image folder (same order, same crops)."""
    from xf_common import make_images, run, same_tensors
    tmp = tmpdir("seer-tar-")
    try:
        folder = os.path.join(tmp, "folder")
        make_images(folder, classes=2, per_class=6, seed=3)
        shards = os.path.join(tmp, "shards")
        os.makedirs(shards)
        files = sorted((os.path.relpath(os.path.join(d, f), folder) for d, _, fs in
                        os.walk(folder) for f in fs), key=lambda p: p.encode())
        for k in range(2):  # 12 images: two shards of 6, in catalog order
            m = []
            for rel in files[6 * k:6 * k + 6]:
                key = rel.replace("/", "_")[:-4]
                m.append((key + ".jpg", open(os.path.join(folder, rel), "rb").read()))
                m.append((key + ".cls", b"%d" % int(rel[1])))
            write_tarfile(os.path.join(shards, "train-%d.tar" % k), m, tarfile.GNU_FORMAT)
        spec = {"decode": "image", "crop": "random_resized", "size": "64",
                "output": "uint8_hwc", "normalize": "none"}
        a = run(tmp, folder, spec, "folder")
        b = run(tmp, shards, spec, "shards", settings={"dataset.format": "tar"})
        check(not a.errors and not b.errors, "failed batches: %s %s" % (a.errors, b.errors))
        n = same_tensors(a, b, "image folder vs tar shards")
        check(n == 24, "%d tensors compared" % n)
        # decoded images cached (their sizes probed from the members at start;
        # stored at a reduced size, so compared with the folder's decoded run)
        dec = dict(spec, cache="decoded")
        fd = run(tmp, folder, dec, "folder-decoded")
        c = run(tmp, shards, dec, "decoded", settings={"dataset.format": "tar"})
        check(not c.errors and not fd.errors, "decoded: failed batches %s" % c.errors)
        same_tensors(fd, c, "image folder vs tar shards, decoded-image cache")
        log("transform on jpg members: %d tensors identical to the image folder's (encoded "
            "and decoded caches)" % n)
    finally:
        cleanup(tmp)


def test_ram_and_nvme_tiers():
    """cache.ram far smaller than the dataset plus an NVMe tier, coalesced
    reads on, three epochs: every sample exact; the NVMe tier serves."""
    tmp = tmpdir("seer-tar-")
    try:
        root = os.path.join(tmp, "data")
        make_writers(root, seed=4, n=40)
        exp = expected(root)
        total = sum(len(x[2]) for x in exp)
        s = {"dataset.path": root, "dataset.format": "tar", "job.epochs": 3,
             "job.batch_size": 8, "cache.ram": "256KiB", "cache.nvme_dir":
             os.path.join(tmp, "nvme"), "cache.nvme": "16MiB", "prefetch.coalesce": "on"}
        with Daemon(tmp, s, name="tiers") as d:
            lg = os.path.join(tmp, "tiers-trainer.log")
            p = trainer(d.sock, 0, 1, lg)
            out, err = p.communicate(timeout=300)
            check(p.returncode == 0, "trainer failed: %s\n%s" % (err, d.log()))
            check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
            st = d.stats()
        ids = c_check(lg, exp, 3)
        for e in range(3):
            check(sorted(set(ids[e])) == list(range(len(exp))), "epoch %d: not every sample" % e)
        ep = st["epochs"]
        nv = sum(e.get("nvme_samples", 0) + e.get("nvme_hits", 0) for e in ep[1:])
        pfs = [e["pfs_bytes"] for e in ep]
        check(nv > 0, "the NVMe tier served nothing: %s" % ep[1])
        log("RAM 256 KiB + NVMe 16 MiB, dataset %.1f MB: 3 epochs exact; PFS bytes per epoch "
            "%s; NVMe samples in epochs 1-2: %d" % (total / 1e6, pfs, nv))
    finally:
        cleanup(tmp)


def start_fail(root, tmp, extra=()):
    args = [os.path.join(BIN, "seerd"), "--set", "dataset.path=" + root, "--set",
            "dataset.format=tar", "--set", "daemon.state_dir=" + os.path.join(tmp, "st"),
            "--check"]
    for kv in extra:
        args += ["--set", kv]
    return subprocess.run(args, capture_output=True, text=True, timeout=LONG)


def test_damaged_shards():
    """Truncated, bad checksum, no data member, non-integer label: seerd
    refuses naming the shard and the member (on_corrupt = fail); with skip the
    other samples are delivered exactly and the damage is warned about."""
    tmp = tmpdir("seer-tar-")
    try:
        rng = random.Random(5)
        cases = {}
        for name in ("trunc", "cksum", "nodata", "label"):
            root = os.path.join(tmp, name)
            os.makedirs(root)
            good = sample_set(rng, 6, "ok", extras=False)
            write_tarfile(os.path.join(root, "a-good.tar"), good, tarfile.GNU_FORMAT)
            m = sample_set(rng, 6, "bad", extras=False)
            if name == "nodata":
                m = [x for x in m if x[0] != "bad00002.jpg" and x[0] != "bad00002.png"]
            if name == "label":
                m = [(x, b"seven\n" if x == "bad00004.cls" else d) for x, d in m]
            path = os.path.join(root, "b-bad.tar")
            write_tarfile(path, m, tarfile.GNU_FORMAT, meta=False)
            raw = bytearray(open(path, "rb").read())
            with tarfile.open(path) as tf:
                offs = {t.name: t.offset for t in tf}
            if name == "trunc":  # cut inside bad00004.jpg's data
                raw = raw[:offs["bad00004.jpg"] + 512 + 10]
            if name == "cksum":  # one byte of bad00003.cls's header name
                raw[offs["bad00003.cls"] + 2] ^= 0x20
            open(path, "wb").write(bytes(raw))
            cases[name] = root
        want = {"trunc": ["b-bad.tar", "bad00004.jpg", "truncated"],
                "cksum": ["b-bad.tar", "checksum", "after member 'bad00003.png'"],
                "nodata": ["b-bad.tar", "bad00002", "tar_extensions"],
                "label": ["b-bad.tar", "bad00004.cls", "seven", "not an integer"]}
        for name, root in cases.items():
            r = start_fail(root, tmp)
            msg = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
            check(r.returncode != 0 and all(w in r.stderr for w in want[name]),
                  "%s: seerd must refuse naming %s: rc %d, %s" % (name, want[name],
                                                                   r.returncode, r.stderr))
            check("on_corrupt = skip" in r.stderr, "%s: the message must say what to do" % name)
            log("%s: %s" % (name, msg[-260:]))
        # skip: the samples before a damaged header, and every other sample, exact
        for name, root in cases.items():
            s = {"dataset.path": root, "dataset.format": "tar", "job.batch_size": 4,
                 "dataset.on_corrupt": "skip"}
            with Daemon(tmp, s, name="skip-" + name) as d:
                # expectation: tarfile's view of what survives the damage
                exp = expected_skip(root, name)
                n = loader_check(d.sock, exp)
                check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
                check("on_corrupt = skip" in d.log(), "%s: no warning" % name)
            log("skip %s: %d samples delivered exactly (%d in the damaged shard)" %
                (name, n, sum(x[0] == "b-bad.tar" for x in exp)))
    finally:
        cleanup(tmp)


def expected_skip(root, name):
    """What on_corrupt = skip keeps: the good shard, and of the damaged one
    the complete samples before the damage (trunc: 0..3; cksum: 0..2, the
    sample whose cls header is damaged goes too), or all but the bad one."""
    exp = []
    exp += expected(root, only="a-good.tar")
    keep = {"trunc": lambda k: k < "bad00004", "cksum": lambda k: k < "bad00003",
            "nodata": lambda k: k != "bad00002", "label": lambda k: k != "bad00004"}[name]
    path = os.path.join(root, "b-bad.tar")
    raw = open(path, "rb").read()
    mem = {}
    with tarfile.open(fileobj=io.BytesIO(raw), ignore_zeros=False) as tf:
        try:
            for t in tf:
                g = WDS_RE.match(t.name)
                if g and t.isreg() and t.offset_data + t.size <= len(raw):
                    mem.setdefault(g.group(1), {})[g.group(2)] = raw[
                        t.offset_data:t.offset_data + t.size]
        except tarfile.TarError:
            pass
    for key in sorted(mem):
        if keep(key):
            m = mem[key]
            exp.append(("b-bad.tar", key, m.get("jpg", m.get("png")), int(m["cls"])))
    return exp


def test_rewritten_shard():
    """A shard rewritten in place with the same size and mtime. While seerd
    runs (its catalog made before the rewrite): the member header read with
    each sample no longer matches, and the sample fails naming the shard and
    saying to rescan, instead of delivering other bytes. At the next start the
    catalog's check sees the rewrite (ctime) and scans the shard again: the
    new bytes, exact."""
    tmp = tmpdir("seer-tar-")
    try:
        root = os.path.join(tmp, "data")
        os.makedirs(root)
        rng = random.Random(8)
        a, b = rng.randbytes(1000), rng.randbytes(1600)
        path = os.path.join(root, "s.tar")
        write_tarfile(path, [("k0.jpg", a), ("k0.cls", b"0"), ("k1.jpg", b), ("k1.cls", b"1")],
                      tarfile.GNU_FORMAT, meta=False)
        past = time.time() - 3600
        os.utime(path, (past, past))
        os.utime(root, (past, past))
        s = {"dataset.path": root, "dataset.format": "tar", "job.batch_size": 1,
             "job.shuffle": "false", "cache.ram": "0", "prefetch.coalesce": "off"}
        with Daemon(tmp, s, name="first") as d:
            # serving, nothing read yet (no trainer, no RAM cache to fill)
            st = os.stat(path)
            # the two images' sizes swapped: the same padded size, other offsets
            write_tarfile(path, [("k0.jpg", b), ("k0.cls", b"0"), ("k1.jpg", a),
                                 ("k1.cls", b"1")], tarfile.GNU_FORMAT, meta=False)
            check(os.path.getsize(path) == st.st_size, "the rewrite changed the size")
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
            os.utime(root, (past, past))
            try:
                with seer.Loader(socket=d.sock, rank=0, world_size=1) as ld:
                    for bt in ld:
                        pass
                raise AssertionError("the rewritten shard delivered its samples")
            except seer.SeerError as ex:
                msg = str(ex)
            d.stop()
        check("s.tar" in msg and "rescan" in msg, "the error must name the shard and say to "
              "rescan: %s" % msg)
        with Daemon(tmp, s, name="second") as d:
            n = loader_check(d.sock, expected(root))
            check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
            check("changed" in d.log(), "the start did not see the rewrite:\n" + d.log())
        log("while seerd ran: %s; at the next start: rescanned, %d samples exact" %
            (msg[-160:], n))
    finally:
        cleanup(tmp)


# ---- the PFS bar: a cold epoch through the lustre preset against cat ------------------

def pfsemu_ok():
    return (os.path.exists(os.path.join(BIN, "seer-pfsemu")) and os.path.exists("/dev/fuse"))


def test_pfs_cold_epoch():
    """A cold epoch of tar shards through seer-pfsemu --preset lustre against
    `cat` of the same shards through the same mount (catalog built first, the
    counters reset). Prints the ratio; fails only when a sample is wrong or
    the run fails. TAR_BENCH_MB (default 24) sets the dataset size,
    TAR_BENCH_ROUNDS the rounds (1), TAR_BENCH_COALESCE prefetch.coalesce (auto)."""
    check(pfsemu_ok(), "this test needs bin/seer-pfsemu and /dev/fuse")
    mb = int(os.environ.get("TAR_BENCH_MB", "24"))
    tmp = tmpdir("seer-tar-")
    mnt = os.path.join(tmp, "pfs")
    try:
        src = os.path.join(tmp, "src")
        os.makedirs(src)
        rng = random.Random(9)
        per_shard = 64
        n = mb * 10  # ~100 KB samples
        for k in range(n // per_shard + (n % per_shard > 0)):
            m = []
            for i in range(k * per_shard, min(n, (k + 1) * per_shard)):
                m.append(("%08d.jpg" % i, rng.randbytes(rng.randint(60000, 140000))))
                m.append(("%08d.cls" % i, b"%d" % (i % 1000)))
                m.append(("%08d.json" % i, b'{"w": 500}'))
            write_tarfile(os.path.join(src, "shard-%05d.tar" % k), m, tarfile.GNU_FORMAT)
        past = time.time() - 3600
        os.utime(src, (past, past))
        size = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src))
        os.environ["PFSEMU_LOG"] = os.path.join(tmp, "pfsemu.log")
        out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-mount.sh"), src, mnt,
                              "--preset", "lustre"], capture_output=True, text=True, timeout=60)
        check(out.returncode == 0, "mount failed: %s %s" % (out.stdout, out.stderr))
        files = sorted(os.path.join(mnt, f) for f in os.listdir(mnt) if f.endswith(".tar"))
        exp = None
        cats, epochs = [], []
        for rnd in range(int(os.environ.get("TAR_BENCH_ROUNDS", "1"))):
            open(os.path.join(mnt, ".pfsemu", "reset")).read()
            t0 = time.monotonic()
            subprocess.run(["cat"] + files, stdout=subprocess.DEVNULL, check=True)
            cats.append(time.monotonic() - t0)
            s = {"dataset.path": mnt, "dataset.format": "tar", "job.epochs": 1,
                 "job.batch_size": 32, "cache.ram": "1GiB", "cache.staging": "256MiB",
                 "prefetch.coalesce": os.environ.get("TAR_BENCH_COALESCE", "auto")}
            open(os.path.join(mnt, ".pfsemu", "reset")).read()
            t0 = time.monotonic()
            with Daemon(tmp, s, name="cold%d" % rnd) as d:
                scan_s = time.monotonic() - t0
                with open(os.path.join(mnt, ".pfsemu", "stats")) as f:
                    scan = json.load(f)["totals"]
                open(os.path.join(mnt, ".pfsemu", "reset")).read()
                lg = os.path.join(tmp, "cold%d-trainer.log" % rnd)
                t0 = time.monotonic()
                p = trainer(d.sock, 0, 1, lg)
                _, err = p.communicate(timeout=600)
                epochs.append(time.monotonic() - t0)
                check(p.returncode == 0, "trainer failed: %s\n%s" % (err, d.log()))
                check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
                st = d.stats()
                probe = [x.split("PFS probe", 1)[1][:160] for x in d.log().splitlines()
                         if "PFS probe" in x]
                with open(os.path.join(mnt, ".pfsemu", "stats")) as f:
                    emu = json.load(f)["totals"]
            if exp is None:
                exp = expected(src)
            c_check(lg, exp, 1)
            log("round %d: seerd start (walk, catalog scan or cache, probe) %.3f s, %.1f MB read "
                "from the shards in %s reads" % (rnd, scan_s, scan["bytes"] / 1e6,
                                                 scan.get("requests", scan.get("reads"))))
            log("round %d: cat %.3f s, seer cold epoch %.3f s (ratio %.2f); %d samples, "
                "%.1f MB of shards; PFS bytes %.1f MB, emulator reads %s; coalesced extents %d; "
                "load %s; probe%s" % (rnd, cats[-1], epochs[-1], epochs[-1] / cats[-1],
                                      len(exp), size / 1e6, st["epochs"][0]["pfs_bytes"] / 1e6,
                                      emu.get("requests", emu.get("reads")),
                                      st["coalescing"]["extents"],
                                      open("/proc/loadavg").read().split()[:3],
                                      probe[0] if probe else ": none"))
    finally:
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "pfsemu-umount.sh"), mnt],
                       capture_output=True, timeout=60)
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_writers_one_node, test_labels_from_directories, test_two_nodes,
               test_transform_jpg, test_ram_and_nvme_tiers, test_damaged_shards,
               test_rewritten_shard, test_pfs_cold_epoch])
