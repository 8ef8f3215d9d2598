"""A trainer for the transform tests (test_transform*.py): takes every batch
through the seer shim, checks each batch's tensor through the C API
(seer_batch_tensor, by ctypes: one block, the per-sample views inside it at
i * sample_bytes, dtype/layout/shape as configured), logs a CRC of every
sample's tensor, and for sampled (epoch, id) compares the tensor with
seer.xform.Transform.reference (PIL decode + the exported crop/flip +
torchvision). Failed batches are logged with their reason, not fatal.

Log lines:
  epoch step i id label nbytes crc32        one per delivered sample
  ERR epoch step reason                     a failed batch
  REF epoch id maxabs mad                   a reference check (0-255 units)
Run with /usr/bin/python3."""

import argparse
import ctypes
import os
import sys
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import numpy as np  # noqa: E402
import seer  # noqa: E402
from seer import EndOfEpoch, EndOfJob  # noqa: E402


def fail(msg):
    sys.stderr.write("xf_trainer: %s\n" % msg)
    sys.exit(3)


def catalog_paths(root):
    rels = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        rels += [os.path.relpath(os.path.join(d, f), root) for f in files if not f.startswith(".")]
    rels.sort(key=lambda p: p.encode())
    return rels


class Checker:
    """The batch tensor through seer_batch_tensor, against the per-sample views."""

    def __init__(self, loader, spec):
        lib = loader._lib
        f = lib.seer_batch_tensor
        f.restype = ctypes.c_int
        f.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                      ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int),
                      ctypes.POINTER(ctypes.c_uint64), ctypes.c_int]
        lib.seer_arena_base.restype = ctypes.c_void_p
        lib.seer_arena_base.argtypes = [ctypes.c_void_p]
        lib.seer_dtype_name.restype = ctypes.c_char_p
        lib.seer_dtype_name.argtypes = [ctypes.c_int]
        self.lib = lib
        self.loader = loader
        p = dict(item.split("=", 1) for item in spec.split())
        h, w = p["size"].split("x")  # the effective spec says HxW
        self.h, self.w = int(h), int(w)
        self.out = p["output"]

    def check(self, b):
        lib = self.lib
        data, dt, lay = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_int()
        dims = (ctypes.c_uint64 * 8)()
        nd = lib.seer_batch_tensor(b._ptr, ctypes.byref(data), ctypes.byref(dt),
                                   ctypes.byref(lay), dims, 8)
        if nd != 4:
            fail("batch %d:%d: seer_batch_tensor returned %d" % (b.epoch, b.step, nd))
        dims = [dims[k] for k in range(4)]
        name = lib.seer_dtype_name(dt.value).decode()
        if self.out == "uint8_hwc":
            want = ([len(b), self.h, self.w, 3], "uint8", 2)
        else:
            want = ([len(b), 3, self.h, self.w],
                    "float16" if self.out == "float16_chw" else "float32", 1)
        if (dims, name, lay.value) != want:
            fail("batch %d:%d: tensor %s %s layout %d, expected %s" %
                 (b.epoch, b.step, dims, name, lay.value, want))
        base = lib.seer_arena_base(self.loader._c)
        off = data.value - base
        one = int(np.prod(dims[1:])) * np.dtype(name).itemsize
        if off % 64:
            fail("batch tensor at arena offset %d: not 64-byte aligned" % off)
        for i in range(len(b)):
            if int(b._offsets[i]) != off + i * one or int(b.sizes[i]) != one:
                fail("batch %d:%d sample %d at %d (%d B), the tensor puts it at %d (%d B)" %
                     (b.epoch, b.step, i, b._offsets[i], b.sizes[i], off + i * one, one))
        arena = self.loader._arena
        whole = arena[off: off + len(b) * one].view(name).reshape(dims)
        views = b.samples
        for i, v in enumerate(views):
            if v.shape != tuple(dims[1:]) or v.dtype != np.dtype(name):
                fail("sample view %d: %s %s" % (i, v.shape, v.dtype))
            if not np.array_equal(whole[i], v):
                fail("batch %d:%d: the batch tensor's sample %d differs from its view" %
                     (b.epoch, b.step, i))
        return views


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket")
    ap.add_argument("--rank", type=int)
    ap.add_argument("--world", type=int)
    ap.add_argument("--log")
    ap.add_argument("--spec", required=True, help="the daemon's [transform] keys")
    ap.add_argument("--dataset", help="root, for reference checks")
    ap.add_argument("--ref-every", type=int, default=0,
                    help="check (epoch, id) against the reference when (id + epoch) %% N == 0")
    a = ap.parse_args()
    log = open(a.log, "w")
    kw = {"rank": a.rank, "world_size": a.world} if a.world else {}
    rels = catalog_paths(a.dataset) if a.dataset else None
    from seer.xform import Transform
    xf = Transform(a.spec)
    ref = xf if a.ref_every else None
    if ref is not None:
        from PIL import Image
    with seer.Loader(socket=a.socket, **kw) as loader:
        chk = Checker(loader, xf.spec)
        seed = loader.seed
        while True:
            try:
                b = loader.next_batch()
            except EndOfEpoch:
                continue
            except EndOfJob:
                break
            with b:
                if b.error is not None:
                    log.write("ERR %d %d %s\n" % (b.epoch, b.step, b.error.replace("\n", " ")))
                    continue
                views = chk.check(b)
                for i, (v, sid, label) in enumerate(zip(views, b.ids.tolist(),
                                                        b.labels.tolist())):
                    crc = zlib.crc32(v.reshape(-1).view("u1"))
                    log.write("%d %d %d %d %d %d %08x\n" % (b.epoch, b.step, i, sid, label,
                                                            v.nbytes, crc))
                    if ref is not None and (sid + b.epoch) % a.ref_every == 0:
                        r = ref.reference(Image.open(os.path.join(a.dataset, rels[sid])), seed,
                                          b.epoch, sid).numpy().astype(np.float64)
                        d = np.abs(r - v.astype(np.float64))
                        if ref.params["output"] != "uint8_hwc":
                            # back to 0-255 pixel units: x 255 x std per channel
                            std = [float(s) for s in ref.params["normalize"].split("/")[1]
                                   .split(",")] if ref.params["normalize"] != "none" else [1] * 3
                            d = d * 255.0 * np.array(std).reshape(3, 1, 1)
                        log.write("REF %d %d %.6f %.6f\n" % (b.epoch, sid, d.max(), d.mean()))
    log.close()


if __name__ == "__main__":
    main()
