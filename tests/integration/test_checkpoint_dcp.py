#!/usr/bin/env python3
"""torch.distributed.checkpoint through seerd (issue 31, docs/checkpoint.md
"DCP"), against a real seerd: the storage layer (seer.checkpoint.layout /
save_items / read_ranges: one seer checkpoint per rank file, byte ranges read
back from seerd's memory, its NVMe copy, a peer's copy or the PFS file, a
missing file named), the item layer (seer._dcp.write_rank_file / read_rank_file: tensors
of every dtype, strided and narrowed, bytes items, slices read back into
destinations), and the DCP adapter with scripts/bench_dcp.py: run on torch
>= 2, refused naming the version on older torch (the skip says which).

Every wait is for a state (a level, a file), never for a sleep."""

import io
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from seertest import (LONG, ROOT, Daemon, Fail, check, cleanup, log, make_classes,  # noqa: E402
                      run_tests, tmpdir)

import torch  # noqa: E402
import seer  # noqa: E402
import seer.checkpoint as sc  # noqa: E402
from seer import _dcp  # noqa: E402

JOB = "ckpt-dcp-test"
TORCH2 = int(torch.__version__.split(".")[0]) >= 2


def settings(tmp, nvme=True, **kw):
    root = os.path.join(tmp, "data")
    make_classes(root, ["a"], 4, 100, 200, seed=3)
    s = {"dataset.path": root, "job.id": JOB, "cache.ram": "1MiB", "cache.staging": "4MiB",
         "daemon.stop_grace_s": 5}
    if nvme:
        s["cache.nvme_dir"] = os.path.join(tmp, "nvme")
    s.update(kw)
    return s


def blobs(sizes, seed):
    r = random.Random(seed)
    return [r.randbytes(n) for n in sizes]


def put(view_items):
    def fill(i, view):
        view[:] = view_items[i]
    return fill


def test_storage_layer_ranges():
    """layout's offsets; save_items' bytes at those offsets on the PFS, read
    back by read_ranges from NVMe, memory and the PFS; sub-ranges; a missing
    file and a range past the end named; a failing fill leaves no file."""
    offs, total = sc.layout([5, 0, 1, 64, 3], align=64)
    check(offs == [0, 64, 64, 128, 192] and total == 195, "layout: %s %d" % (offs, total))
    offs, total = sc.layout([3, 3], align=1)
    check(offs == [0, 3] and total == 6, "layout align 1: %s %d" % (offs, total))
    tmp = tmpdir("seer-dcp-")
    try:
        ck = os.path.join(tmp, "pfs", "step1")
        os.makedirs(ck)
        sizes = [5, 0, (1 << 20) + 3, 64, 7777, 1]
        items = blobs(sizes, 1)
        with Daemon(tmp, settings(tmp, **{"checkpoint.keep": 4})) as d:
            kw = {"socket": d.sock, "job_id": JOB}
            f0 = os.path.join(ck, "__0_0.seer")
            h, offs = sc.save_items(f0, sizes, put(items), **kw)
            check(all(o % sc.ALIGN == 0 for o in offs), "offsets not aligned: %s" % offs)
            check(all(offs[i] + sizes[i] <= offs[i + 1] for i in range(len(offs) - 1)),
                  "items overlap: %s" % offs)
            h.wait("local", timeout=LONG)
            got, level = sc.read_ranges(f0, [(o, n) for o, n in zip(offs, sizes)], **kw)
            check(level == "local", "read from %s, not seerd's NVMe copy" % level)
            check([bytes(g) for g in got] == items, "items read from NVMe differ")
            # ranges that cut across items, and the whole file
            big = b"".join(b"\0" * (o - (offs[i - 1] + sizes[i - 1]) if i else 0) + items[i]
                           for i, o in enumerate(offs))
            cuts = [(3, 70), (offs[2] + 1000, 5000), (offs[4] - 10, 20),
                    (total_of(offs, sizes) - 1, 1)]
            got, _ = sc.read_ranges(f0, cuts, **kw)
            check([bytes(g) for g in got] == [big[o:o + n] for o, n in cuts],
                  "sub-ranges differ from the laid-out bytes")
            (whole,), _ = sc.read_ranges(f0, None, **kw)
            check(bytes(whole) == big, "whole file: %d bytes, laid out %d" % (len(whole), len(big)))
            h.wait("pfs", timeout=LONG)
            with open(f0, "rb") as f:
                check(f.read() == big, "the PFS file differs from the laid-out items")
            # a file seerd never saw: read from the PFS
            other = os.path.join(ck, "__1_0.seer")
            with open(other, "wb") as f:
                f.write(b"x" * 100 + b"seer" + b"y" * 10)
            got, level = sc.read_ranges(other, [(100, 4)], **kw)
            check(level == "pfs" and bytes(got[0]) == b"seer", "PFS read: %s %r" % (level, got))
            # a missing file is named; a range past the end names the size
            missing = os.path.join(ck, "__7_0.seer")
            try:
                sc.read_ranges(missing, [(0, 1)], **kw)
                raise Fail("a missing file read without error")
            except FileNotFoundError as ex:
                check(missing in str(ex) and "no copy" in str(ex), "missing file: %s" % ex)
            try:
                sc.read_ranges(f0, [(len(big) - 2, 3)], **kw)
                raise Fail("a range past the end read without error")
            except seer.SeerError as ex:
                check(str(len(big)) in str(ex) and f0 in str(ex), "past the end: %s" % ex)
            # a fill that fails abandons the checkpoint: nothing at its path
            bad = os.path.join(ck, "__2_0.seer")

            def boom(i, view):
                if i == 1:
                    raise ValueError("fill failed")
                view[:] = b"z" * len(view)
            try:
                sc.save_items(bad, [10, 10], boom, **kw)
                raise Fail("a failing fill was committed")
            except ValueError:
                pass
            h2, _ = sc.save_items(os.path.join(ck, "after"), [3], put([b"abc"]), **kw)
            h2.wait("pfs", timeout=LONG)
            check(not os.path.exists(bad), "an abandoned checkpoint reached %s" % bad)
        # seerd's memory while it is the only copy (no NVMe, drain capped)
        tmp2 = os.path.join(tmp, "mem")
        os.makedirs(os.path.join(tmp2, "pfs"))
        with Daemon(tmp2, settings(tmp2, nvme=False, **{"checkpoint.drain_rate": 1024})) as d:
            f1 = os.path.join(tmp2, "pfs", "__0_0.seer")
            h, offs = sc.save_items(f1, sizes, put(items), socket=d.sock, job_id=JOB)
            got, level = sc.read_ranges(f1, [(offs[4], sizes[4]), (offs[2], sizes[2])],
                                        socket=d.sock, job_id=JOB)
            check(level == "memory" and [bytes(g) for g in got] == [items[4], items[2]],
                  "read from seerd's memory: %s" % level)
            check(not os.path.exists(f1), "the capped drain finished already")
        log("items of %s bytes: equal from NVMe, memory and the PFS; sub-ranges equal" % sizes)
    finally:
        cleanup(tmp)


def total_of(offs, sizes):
    return offs[-1] + sizes[-1]


def items_and_reqs():
    """DCP-shaped write items (what a SavePlanner hands write_data) and the
    tensors they resolve to: every common dtype, a transposed (strided)
    tensor, a chunk narrowed out of a larger one, an empty one, a bytes item."""
    g = torch.Generator().manual_seed(7)
    big = torch.randn(64, 48, generator=g)
    ts = {"f32": torch.randn(300, 37, generator=g),
          "bf16": torch.randn(1001, generator=g).to(torch.bfloat16),
          "f16": torch.randn(17, 3, generator=g).to(torch.float16),
          "i64": torch.randint(-2**40, 2**40, (513,), generator=g),
          "i8": torch.randint(-128, 127, (9, 9), generator=g).to(torch.int8),
          "bool": torch.randint(0, 2, (77,), generator=g).to(torch.bool),
          "strided": torch.randn(40, 30, generator=g).t(),
          "chunk": big.narrow(0, 16, 32).narrow(1, 8, 20),
          "empty": torch.empty(0, 5),
          "scalar": torch.tensor(2.5, dtype=torch.float64)}
    obj = {"step": 12, "lr": [0.1, 0.01], "name": "seer"}
    items = []
    for k, t in ts.items():
        items.append(types.SimpleNamespace(
            index=k, kind="tensor", tensor=t,
            tensor_data=types.SimpleNamespace(
                chunk=types.SimpleNamespace(sizes=torch.Size(t.shape)),
                properties=types.SimpleNamespace(dtype=t.dtype))))
    items.append(types.SimpleNamespace(index="extra", kind="bytes", obj=obj))
    return ts, obj, items


def resolve(it):
    if it.kind == "bytes":
        b = io.BytesIO()
        torch.save(it.obj, b)
        b.seek(0)
        return b
    return it.tensor


def test_item_layer_tensors():
    """write_rank_file / read_rank_file (the DCP adapter's logic, without
    DCP): every tensor equal after the round trip through seerd's NVMe copy
    and through the PFS file with no seerd, slices land where asked, bytes
    items come back, DcpItem survives pickle."""
    ts, obj, items = items_and_reqs()
    tmp = tmpdir("seer-dcp-")
    try:
        ck = os.path.join(tmp, "pfs", "step2")
        os.makedirs(ck)
        path = os.path.join(ck, "__0_0.seer")
        with Daemon(tmp, settings(tmp)) as d:
            kw = {"socket": d.sock, "job_id": JOB}
            h, where = _dcp.write_rank_file(path, items, resolve, lambda it: it.kind == "bytes",
                                            **kw)
            by = {it.index: m for it, m in zip(items, where)}
            check(by["f32"].dtype == "float32" and by["f32"].shape == (300, 37) and
                  by["f32"].length == 300 * 37 * 4 and by["extra"].dtype is None,
                  "DcpItem: %s" % by)
            check(pickle.loads(pickle.dumps(by["bf16"])) == by["bf16"], "DcpItem pickle")
            h.wait("local", timeout=LONG)
            first = read_all(path, items, by, kw)
            check(first[0] == "local", "read from %s, not NVMe" % first[0])
            h.wait("pfs", timeout=LONG)
            sock = d.sock
        # seerd gone: the same items from the PFS file
        second = read_all(path, items, by, {"socket": sock, "job_id": JOB})
        check(second[0] == "pfs", "read from %s with no seerd" % second[0])
        for level, got, extra, part in (first, second):
            for k, t in ts.items():
                check(got[k].dtype == t.dtype and torch.equal(got[k], t),
                      "%s (%s): tensor differs after the round trip" % (k, level))
            check(extra == obj, "bytes item (%s): %r" % (level, extra))
            check(torch.equal(part, ts["f32"][100:250, 5:12]), "slice (%s) differs" % level)
        log("%d tensors (%s) and a bytes item equal from NVMe and from the PFS file" %
            (len(ts), ", ".join(str(t.dtype).split(".")[1] for t in ts.values())))
    finally:
        cleanup(tmp)


def test_item_layer_peer_copy():
    """Two seerd under mpirun, [checkpoint] peers = 1, the drain capped so no
    file reaches the PFS: node 0's rank file is read back through node 1
    (its peer copy) while node 0 is stopped, every tensor equal."""
    from seertest import MpiDaemons
    ts, obj, items = items_and_reqs()
    tmp = tmpdir("seer-dcp-")
    cl = None
    try:
        ck = os.path.join(tmp, "pfs", "step3")
        os.makedirs(ck)
        path = os.path.join(ck, "__0_0.seer")
        s = settings(tmp, **{"checkpoint.drain_rate": "4KiB", "checkpoint.peers": 1,
                             "daemon.stop_grace_s": 1})
        s["cache.nvme_dir"] = os.path.join(tmp, "nvme-%n")
        cl = MpiDaemons(tmp, 2, s)
        h, where = _dcp.write_rank_file(path, items, resolve, lambda it: it.kind == "bytes",
                                        socket=cl.socket(0), job_id=JOB)
        by = {it.index: m for it, m in zip(items, where)}
        h.wait("peer", timeout=LONG)
        check(not os.path.exists(path), "the file reached the PFS: the test needs it absent")
        p0 = cl.pid(0)
        os.kill(p0, signal.SIGSTOP)
        try:
            level, got, extra, part = read_all(path, items, by,
                                               {"socket": cl.socket(1), "job_id": JOB})
        finally:
            os.kill(p0, signal.SIGCONT)
        check(level == "peer", "read from %s, not node 1's peer copy" % level)
        for k, t in ts.items():
            check(torch.equal(got[k], t), "%s differs, read from the peer copy" % k)
        check(extra == obj and torch.equal(part, ts["f32"][100:250, 5:12]),
              "bytes item or slice differs from the peer copy")
        log("node 0 stopped: its rank file (%d bytes) read from node 1's copy, every item "
            "equal" % h.size)
    finally:
        if cl:
            cl.stop()
        cleanup(tmp)


def read_all(path, items, by, kw):
    """Every item back, plus the f32 rows 100..250, columns 5..12 as a slice
    read (storage_offsets / lengths, as DCP asks when resharding)."""
    got, extra = {}, {}
    reqs = []
    for it in items:
        reqs.append(types.SimpleNamespace(key=it.index, kind=it.kind,
                                          storage_offsets=[0] * (0 if it.kind == "bytes" else
                                                                 it.tensor.dim()),
                                          lengths=[] if it.kind == "bytes" else
                                          list(it.tensor.shape)))
    reqs.append(types.SimpleNamespace(key="f32", kind="slice", storage_offsets=[100, 5],
                                      lengths=[150, 7]))
    part = torch.zeros(150, 7)

    resolved, committed = [], []

    def resolve_tensor(r):
        resolved.append(r.key)
        if r.kind == "slice":
            return part
        t = next(it.tensor for it in items if it.index == r.key)
        if r.key == "strided":  # a strided destination: read, then copied into
            got[r.key] = torch.zeros(tuple(reversed(t.shape)), dtype=t.dtype).t()
        else:  # contiguous: read straight into it
            got[r.key] = torch.zeros_like(t, memory_format=torch.contiguous_format)
        return got[r.key]

    def load_bytes(r, b):
        extra["obj"] = torch.load(b)

    def commit_tensor(r, t):
        # DCP's readers commit the resolved tensor detached: same memory
        want = part if r.kind == "slice" else got[r.key]
        check(t.data_ptr() == want.data_ptr() and t.shape == want.shape,
              "%s: committed a tensor not resolved" % r.key)
        committed.append(r.key)

    level = _dcp.read_rank_file(path, reqs, lambda r: by[r.key], lambda r: r.kind == "bytes",
                                load_bytes, resolve_tensor, commit_tensor, **kw)
    tensors = [r.key for r in reqs if r.kind != "bytes"]
    check(sorted(resolved) == sorted(tensors) == sorted(committed),
          "resolved %s, committed %s" % (resolved, committed))
    return level, got, extra["obj"], part


def test_dcp_adapter():
    """On torch >= 2: dcp.save / dcp.async_save with seer's StorageWriter and
    dcp.load with its StorageReader, every tensor equal. On older torch:
    seer.checkpoint imports, and both classes refuse naming the torch
    version needed and the one found."""
    if not TORCH2:
        for cls in ("StorageWriter", "StorageReader"):
            try:
                getattr(sc, cls)()
                raise Fail("%s constructed on torch %s" % (cls, torch.__version__))
            except RuntimeError as ex:
                check("torch >= 2.0" in str(ex) and torch.__version__ in str(ex),
                      "%s's refusal: %s" % (cls, ex))
        log("SKIP dcp.save/async_save/load: torch %s has no torch.distributed.checkpoint "
            "(needs torch >= 2.0); checked that both classes refuse naming it" %
            torch.__version__)
        return
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    tmp = tmpdir("seer-dcp-")
    try:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "pg"),
                                rank=0, world_size=1)
        ts, _, _ = items_and_reqs()
        sd = {k: v.contiguous() for k, v in ts.items()}
        sd["extra"] = {"step": 3, "name": "seer"}
        with Daemon(tmp, settings(tmp)) as d:
            kw = {"socket": d.sock, "job_id": JOB}
            for how in ("save", "async_save"):
                cid = os.path.join(tmp, "pfs", how)
                w = sc.StorageWriter(**kw)
                if how == "save":
                    dcp.save(sd, checkpoint_id=cid, storage_writer=w)
                else:
                    dcp.async_save(sd, checkpoint_id=cid, storage_writer=w).result()
                w.wait("local", timeout=LONG)
                out = {k: torch.zeros_like(v) for k, v in sd.items() if torch.is_tensor(v)}
                out["extra"] = {"step": 0, "name": ""}
                r = sc.StorageReader(**kw)
                dcp.load(out, checkpoint_id=cid, storage_reader=r)
                for k, v in sd.items():
                    ok = torch.equal(out[k], v) if torch.is_tensor(v) else out[k] == v
                    check(ok, "%s: %s differs after dcp.load" % (how, k))
                w.wait("pfs", timeout=LONG)
                check(set(os.listdir(cid)) == {".metadata", "__0_0.seer"},
                      "%s: files %s" % (how, os.listdir(cid)))
                log("%s: equal after dcp.load (read from %s)" % (how, r.levels))
            # a writer saved twice without a checkpoint_id (torch 2.3 calls no
            # reset(), 2.0/2.1 have none): wait() is about the last save only
            cid = os.path.join(tmp, "pfs", "twice")
            w = sc.StorageWriter(path=cid, **kw)
            dcp.save(sd, storage_writer=w)
            dcp.save(sd, storage_writer=w)
            check(len(w.checkpoints) == 2, "the writer holds %d files after two saves of one "
                  "rank file and .metadata each" % len(w.checkpoints))
            w.wait("local", timeout=LONG)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        cleanup(tmp)


def test_bench_dcp():
    """scripts/bench_dcp.py: runs (small) on torch >= 2 and exits 0 (no wrong
    byte); on older torch it refuses with a message naming the version."""
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "bench_dcp.py"), "--gib", "0.02",
           "--tensors", "6", "--reps", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=LONG * 4)
    if not TORCH2:
        check(p.returncode == 2 and "torch >= 2" in p.stderr and torch.__version__ in p.stderr,
              "bench_dcp.py on torch %s: rc %d\n%s%s" % (torch.__version__, p.returncode,
                                                         p.stdout, p.stderr))
        log("SKIP running scripts/bench_dcp.py: torch %s found, it needs torch >= 2.0 "
            "(refused as it should: %s)" % (torch.__version__, p.stderr.strip().splitlines()[-1]))
        return
    check(p.returncode == 0, "bench_dcp.py failed (rc %d):\n%s%s" % (p.returncode, p.stdout,
                                                                     p.stderr))
    check("equal" in p.stdout, "bench_dcp.py printed no check:\n" + p.stdout)
    log(p.stdout)


def test_wait_peer_through_retries():
    """Storage layer, two seerd, node 1 stopped (SIGSTOP) while node 0's rank
    file is saved: wait("peer") raises at once with seerd's "tries again",
    wait("peer", retrying=True) (what StorageWriter(level="peer") uses) goes
    on through two failed tries and returns once node 1 runs again and its
    copy is complete; the bytes then read through node 1 are the saved ones."""
    import threading
    from seertest import BIN, MpiDaemons, wait_for
    tmp = tmpdir("seer-dcp-")
    cl = None
    try:
        ck = os.path.join(tmp, "pfs", "step5")
        os.makedirs(ck)
        path = os.path.join(ck, "__0_0.seer")
        s = settings(tmp, **{"checkpoint.drain_rate": "4KiB", "checkpoint.peers": 1,
                             "daemon.stop_grace_s": 1})
        s["cache.nvme_dir"] = os.path.join(tmp, "nvme-%n")
        cl = MpiDaemons(tmp, 2, s)
        blobs = [bytes(random.Random(i).getrandbits(8) for _ in range(n))
                 for i, n in enumerate((70000, 123457))]

        def fill(i, view):
            view[:] = blobs[i]
        p1 = cl.pid(1)
        os.kill(p1, signal.SIGSTOP)
        out = {}
        try:
            h, offs = sc.save_items(path, [len(b) for b in blobs], fill,
                                    socket=cl.socket(0), job_id=JOB)
            h.wait("local", timeout=LONG)
            wait_for(lambda: h.state()["peer"] == "failed" or None, LONG,
                     "the copy to the stopped node 1 to fail", step=0.05)
            try:
                h.wait("peer", timeout=LONG)
                raise Fail("wait('peer') returned with node 1 stopped")
            except seer.SeerError as ex:
                check("tries again" in str(ex), "wait('peer') while retried: %s" % ex)

            def waiter():
                try:
                    h.wait("peer", timeout=LONG, retrying=True)
                    out["ok"] = True
                except BaseException as ex:  # noqa: B902 (reported by the test)
                    out["ex"] = ex
            def fails():
                st = subprocess.run([os.path.join(BIN, "seerctl"), "--socket", cl.socket(0),
                                     "--json", "checkpoints"], capture_output=True, text=True,
                                    timeout=LONG)
                why = [c.get("peer_why", "") for c in json.loads(st.stdout)["checkpoints"]
                       if c["path"] == path][0]
                return int(why.split(" failed)")[0].rsplit("(", 1)[1]) if " failed)" in why else 0
            n0 = fails()
            th = threading.Thread(target=waiter)
            th.start()
            wait_for(lambda: fails() > n0 or None, LONG, "another failed try", step=0.05)
            check(th.is_alive() and not out, "wait('peer', retrying=True) returned or raised "
                  "while node 1 is stopped: %s" % out)
        finally:
            os.kill(p1, signal.SIGCONT)
        th.join(LONG)
        check(out.get("ok") and "ex" not in out, "wait('peer', retrying=True): %s" % out)
        check(h.state()["peer"] == "done", "peer after the wait: %s" % h.state())
        got, level = sc.read_ranges(path, [(offs[1], len(blobs[1])), (offs[0], len(blobs[0]))],
                                    socket=cl.socket(1), job_id=JOB)
        check(level == "peer" and [bytes(g) for g in got] == [blobs[1], blobs[0]],
              "read through node 1: %s" % level)
        log("wait('peer', retrying=True) returned after node 1 ran again; read back from %s"
            % level)
    finally:
        if cl:
            cl.stop()
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_storage_layer_ranges, test_item_layer_tensors, test_item_layer_peer_copy,
               test_wait_peer_through_retries, test_dcp_adapter,
               test_bench_dcp])
