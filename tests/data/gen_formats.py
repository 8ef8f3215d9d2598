#!/usr/bin/python3
"""Write datasets in every format seer reads, as their real writers lay them out,
with the samples each must deliver.

    /usr/bin/python3 tests/data/gen_formats.py OUT
        unit-test datasets (small, a few seconds at most)
    /usr/bin/python3 tests/data/gen_formats.py --bench OUT [--samples 4096]
            [--dims 256x256] [--per-file 16]
        the same bytes in every format, DLIO layout, for tools/seer-fmtbench

numpy (np.savez, np.savez_compressed, np.save, np.lib.format.write_array) and
h5py write the arrays; TFRecord files come from the small writer below (its
own CRC32C); indexed-binary files follow DLIO's indexed_binary generator.

Unit mode: every dataset OUT/<name>/ comes with OUT/<name>.expect, the samples
in catalog order (files sorted bytewise by relative path, samples in file
order) as numpy/h5py read them, little-endian:
    b"SEEREXP1", u64 count, then per sample
    u32 dtype, u32 ndim, u64 dims[8], i64 label, u64 length, bytes[length]
dtype codes are enum seer_dtype (proto/seer_proto.h). OUT/bad_*/ hold damaged
copies; tests/unit/test_formats.c knows the error each must give.

Run with Debian's /usr/bin/python3 (it has numpy and h5py)."""

import argparse
import io
import os
import struct
import sys
import time
import warnings
import zipfile
import zlib

import h5py
import numpy as np

# enum seer_dtype
DT_BYTES = 0
DT = {"u1": 1, "i1": 2, "u2": 3, "i2": 4, "u4": 5, "i4": 6, "u8": 7, "i8": 8,
      "f2": 9, "f4": 10, "f8": 11, "b1": 12}


def dtype_code(dt):
    dt = np.dtype(dt)
    return DT["%s%d" % (dt.kind if dt.kind != "b" else "b", dt.itemsize)]


def le_bytes(a):
    """C-order little-endian bytes of array a."""
    a = np.asarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return np.ascontiguousarray(a).tobytes(order="C")


class Expect:
    """Samples per file, written in catalog order."""

    def __init__(self, root):
        self.root = root
        self.files = {}

    def arr(self, path, a, label=-1):
        a = np.asarray(a)
        self.add(path, dtype_code(a.dtype), a.shape, label, le_bytes(a))

    def raw(self, path, data):
        self.add(path, DT_BYTES, (), -1, bytes(data))

    def add(self, path, dtype, shape, label, data):
        rel = os.path.relpath(path, self.root)
        self.files.setdefault(rel, []).append((dtype, tuple(shape), int(label), data))

    def write(self, path):
        out = [b"SEEREXP1"]
        n = 0
        for rel in sorted(self.files, key=lambda r: r.encode()):
            for dtype, shape, label, data in self.files[rel]:
                dims = list(shape) + [0] * (8 - len(shape))
                out.append(struct.pack("<II8QqQ", dtype, len(shape), *dims, label, len(data)))
                out.append(data)
                n += 1
        out.insert(1, struct.pack("<Q", n))
        with open(path, "wb") as f:
            f.write(b"".join(out))


def mkdirs(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


# ---- CRC32C and TFRecord ---------------------------------------------------

def _crc_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        t.append(c)
    return t


CRC_T = _crc_table()
CRC_NP = np.array(CRC_T, dtype=np.uint32)


def crc32c(data):
    crc = 0xFFFFFFFF
    t = CRC_T
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def crc32c_rows(rows):
    """CRC32C of every row of a 2-D uint8 array, vectorized across rows."""
    crc = np.full(rows.shape[0], 0xFFFFFFFF, dtype=np.uint32)
    for j in range(rows.shape[1]):
        crc = CRC_NP[(crc ^ rows[:, j]) & 0xFF] ^ (crc >> 8)
    return crc ^ np.uint32(0xFFFFFFFF)


assert crc32c(b"123456789") == 0xE3069283, "CRC32C check value"


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord_bytes(payloads, crcs=None):
    """The framed records and their (offset, size) for a DALI index."""
    out, index, pos = [], [], 0
    for i, p in enumerate(payloads):
        p = bytes(p)
        head = struct.pack("<Q", len(p))
        crc = crcs[i] if crcs is not None else crc32c(p)
        rec = head + struct.pack("<I", masked(crc32c(head))) + p + struct.pack("<I", masked(int(crc)))
        out.append(rec)
        index.append((pos, len(rec)))
        pos += len(rec)
    return b"".join(out), index


def write_tfrecord(path, payloads, index_path=None, crcs=None):
    data, index = tfrecord_bytes(payloads, crcs)
    with open(mkdirs(path), "wb") as f:
        f.write(data)
    if index_path:
        with open(mkdirs(index_path), "w") as f:
            for off, size in index:
                f.write("%d %d\n" % (off, size))
    return index


def write_indexed(path, data, offsets, sizes):
    with open(mkdirs(path), "wb") as f:
        f.write(bytes(data))
    with open(path + ".off.idx", "wb") as f:
        f.write(struct.pack("<%dQ" % len(offsets), *offsets))
    with open(path + ".sz.idx", "wb") as f:
        f.write(struct.pack("<%dQ" % len(sizes), *sizes))


# ---- zip64 npz written by hand ---------------------------------------------

def write_zip64(path, members):
    """A zip whose every size and offset sits in zip64 extra fields and whose
    directory ends with zip64 records; members are (name, bytes, deflate)."""
    out = io.BytesIO()
    central = []
    for name, data, deflate in members:
        nm = name.encode()
        crc = zlib.crc32(data)
        if deflate:
            c = zlib.compressobj(6, zlib.DEFLATED, -15)
            body = c.compress(data) + c.flush()
        else:
            body = data
        off = out.tell()
        extra = struct.pack("<HHQQ", 1, 16, len(data), len(body))
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 8 if deflate else 0, 0, 0x21,
                              crc, 0xFFFFFFFF, 0xFFFFFFFF, len(nm), len(extra)))
        out.write(nm + extra + body)
        central.append((nm, crc, len(body), len(data), off, deflate))
    cd_off = out.tell()
    for nm, crc, csize, usize, off, deflate in central:
        extra = struct.pack("<HHQQQ", 1, 24, usize, csize, off)
        out.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 8 if deflate else 0,
                              0, 0x21, crc, 0xFFFFFFFF, 0xFFFFFFFF, len(nm), len(extra), 0, 0,
                              0, 0, 0xFFFFFFFF))
        out.write(nm + extra)
    cd_size = out.tell() - cd_off
    z64 = out.tell()
    out.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(central),
                          len(central), cd_size, cd_off))
    out.write(struct.pack("<IIQI", 0x07064B50, 0, z64, 1))
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFFFFFF,
                          0xFFFFFFFF, 0))
    with open(mkdirs(path), "wb") as f:
        f.write(out.getvalue())


def npy_bytes(a, version=None):
    b = io.BytesIO()
    np.lib.format.write_array(b, a, version=version)
    return b.getvalue()


def patch(path, old, new, count=1):
    with open(path, "rb") as f:
        data = f.read()
    assert data.count(old) >= 1 and len(old) == len(new), (path, old)
    with open(path, "wb") as f:
        f.write(data.replace(old, new, count))


def flip(path, off):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x5A]))


def truncate(path, drop):
    os.truncate(path, os.path.getsize(path) - drop)


def member_span(path, name):
    """(offset of the member's data, stored bytes) inside a zip."""
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(name)
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        h = f.read(30)
    nlen, xlen = struct.unpack("<HH", h[26:30])
    return info.header_offset + 30 + nlen + xlen, info.compress_size


# ---- unit-test datasets ------------------------------------------------------

def gen_npz(out, rng):
    root = os.path.join(out, "npz_dlio", "train")
    ex = Expect(root)
    specs = [(5, 8, 6, False), (7, 5, 9, True), (1, 4, 4, False), (1, 3, 7, True),
             (16, 16, 16, False)]
    for i, (n, d1, d2, comp) in enumerate(specs):
        p = mkdirs(os.path.join(root, str(i % 2), "img_%d_of_%d.npz" % (i, len(specs))))
        x = rng.integers(0, 255, size=(d1, d2, n), dtype=np.uint8)
        y = rng.integers(0, 1000, size=n)
        (np.savez_compressed if comp else np.savez)(p, x=x, y=y)
        for k in range(n):
            ex.arr(p, x[:, :, k], y[k])
    ex.write(os.path.join(out, "npz_dlio.expect"))

    # sample axis first, other names, byte orders, Fortran order, dtypes
    root = os.path.join(out, "npz_first")
    ex = Expect(root)
    arrays = [
        ("a.npz", rng.standard_normal((6, 3, 4)).astype(np.float32),
         rng.integers(-50, 50, 6).astype(np.int32), False),
        ("b.npz", np.asfortranarray(rng.integers(-1 << 30, 1 << 30, (4, 2, 5)).astype(">i4")),
         rng.integers(0, 255, 4).astype(np.uint8), True),
        ("c.npz", rng.standard_normal((3, 7)).astype(np.float16),
         np.array([5, -3, 7], dtype=np.int16), False),
        ("d.npz", rng.integers(0, 2, (5, 2, 2)).astype(bool), rng.integers(0, 9, 5), True),
        ("e.npz", rng.standard_normal(2), np.array([3.0, 7.0]), False),
        ("f.npz", np.asfortranarray(rng.integers(0, 60000, (3, 4, 2)).astype(">u2")),
         np.array([1, 2, 3], dtype=">i8"), False),
    ]
    for name, x, y, comp in arrays:
        p = mkdirs(os.path.join(root, name))
        (np.savez_compressed if comp else np.savez)(p, images=x, lab=y, other=np.arange(3))
        for k in range(x.shape[0]):
            ex.arr(p, x[k], y[k])
    ex.write(os.path.join(out, "npz_first.expect"))

    # no labels, sample axis last, Fortran and big-endian arrays, a zip64 archive
    root = os.path.join(out, "npz_nolabel")
    ex = Expect(root)
    xa = np.asfortranarray(rng.standard_normal((3, 4, 5)))
    xb = rng.integers(0, 65535, (2, 3, 4)).astype(">u2")
    xc = rng.integers(0, 255, (4, 3, 1), dtype=np.uint8)
    np.savez(mkdirs(os.path.join(root, "a.npz")), x=xa)
    np.savez_compressed(os.path.join(root, "b.npz"), x=xb)
    np.savez(os.path.join(root, "c.npz"), z=np.zeros(3), x=xc)
    xd = rng.integers(0, 255, (3, 2, 6), dtype=np.uint8)
    xe = np.asfortranarray(rng.integers(0, 1000, (2, 2, 3)).astype(np.int16))
    write_zip64(os.path.join(root, "d.npz"), [("x.npy", npy_bytes(xd), False)])
    write_zip64(os.path.join(root, "e.npz"), [("w.npy", npy_bytes(np.arange(4)), True),
                                              ("x.npy", npy_bytes(xe), True)])
    xf = rng.standard_normal((2, 3, 5)).astype(np.float32)  # interleaved 4- and 8-byte items
    xg = rng.integers(-1 << 60, 1 << 60, (70, 3))
    np.savez(os.path.join(root, "f.npz"), x=xf)
    np.savez_compressed(os.path.join(root, "g.npz"), x=xg)
    for name, x in (("a.npz", xa), ("b.npz", xb), ("c.npz", xc), ("d.npz", xd), ("e.npz", xe),
                    ("f.npz", xf), ("g.npz", xg)):
        p = os.path.join(root, name)
        got = np.load(p)["x"]  # numpy itself must read what we wrote
        assert np.array_equal(got, x), p
        for k in range(x.shape[-1]):
            ex.arr(p, x[..., k])
    ex.write(os.path.join(out, "npz_nolabel.expect"))

    # many small files: the per-reader cache's map and eviction
    root = os.path.join(out, "npz_many")
    ex = Expect(root)
    for i in range(300):
        p = mkdirs(os.path.join(root, "f%03d.npz" % i))
        x = rng.integers(0, 255, size=(3, 5, 4), dtype=np.uint8)
        y = rng.integers(0, 1000, size=4)
        (np.savez_compressed if i % 2 else np.savez)(p, x=x, y=y)
        for k in range(4):
            ex.arr(p, x[:, :, k], y[k])
    ex.write(os.path.join(out, "npz_many.expect"))

    # DLIO npy: (d1, d2, n), header versions 1.0, 2.0, 3.0
    root = os.path.join(out, "npy_dlio", "train")
    ex = Expect(root)
    for i, (ver, n) in enumerate((((1, 0), 4), ((2, 0), 3), ((3, 0), 1))):
        p = mkdirs(os.path.join(root, "img_%d_of_3.npy" % i))
        x = rng.integers(0, 255, (5, 6, n), dtype=np.uint8)
        with open(p, "wb") as f:
            np.lib.format.write_array(f, x, version=ver)
        assert np.array_equal(np.load(p), x)
        for k in range(n):
            ex.arr(p, x[:, :, k])
    ex.write(os.path.join(out, "npy_dlio.expect"))

    root = os.path.join(out, "npy_first")
    ex = Expect(root)
    for name, x in (("a.npy", rng.standard_normal((4, 3))),
                    ("b.npy", np.asfortranarray(rng.integers(-999, 999, (3, 3, 2)).astype(">i2"))),
                    ("c.npy", np.arange(5, dtype=np.uint16))):
        p = mkdirs(os.path.join(root, name))
        np.save(p, x)
        for k in range(x.shape[0]):
            ex.arr(p, x[k])
    ex.write(os.path.join(out, "npy_first.expect"))


def gen_hdf5(out, rng):
    root = os.path.join(out, "hdf5_dlio", "train")
    ex = Expect(root)
    specs = [(8, 6, 5, {}), (1, 7, 7, {}), (3, 4, 9, {"userblock_size": 512}),
             (2, 3, 3, {"libver": "latest"})]
    for i, (n, d1, d2, kw) in enumerate(specs):
        p = mkdirs(os.path.join(root, "img_%d_of_%d.hdf5" % (i, len(specs))))
        x = rng.integers(0, 255, (n, d1, d2), dtype=np.uint8)
        y = rng.integers(0, 100, n)
        with h5py.File(p, "w", **kw) as f:
            f.create_dataset("records", data=x)
            f.create_dataset("labels", data=y)
        for k in range(n):
            ex.arr(p, x[k], y[k])
    ex.write(os.path.join(out, "hdf5_dlio.expect"))

    root = os.path.join(out, "hdf5_chunked")
    ex = Expect(root)
    files = [
        ("a.h5", rng.integers(0, 255, (6, 4, 4), dtype=np.uint8), dict(chunks=(1, 3, 3))),
        ("b.h5", rng.integers(-9, 9, (10, 3, 5)).astype(np.int16),
         dict(compression="gzip", compression_opts=4, shuffle=True)),
        ("c.h5", rng.standard_normal((5, 2, 3)).astype(">f4"), {}),
        ("d.h5", rng.integers(0, 2, (4, 3)).astype(bool), dict(compression="gzip")),
        ("e.h5", rng.standard_normal(3), {}),
        ("f.h5", rng.standard_normal((4, 2, 2)).astype(np.float16), {}),
        ("g.h5", rng.integers(-1 << 40, 1 << 40, (3, 2)).astype(">i8"), dict(chunks=(2, 1))),
    ]
    for name, x, kw in files:
        p = mkdirs(os.path.join(root, name))
        y = rng.integers(0, 50, x.shape[0])
        with h5py.File(p, "w") as f:
            f.create_dataset("records", data=x, **kw)
            f.create_dataset("labels", data=y.astype(np.float64) if name == "e.h5" else y)
        with h5py.File(p, "r") as f:
            got = f["records"][()]
        assert np.array_equal(got, x) and got.dtype == x.dtype, p
        for k in range(x.shape[0]):
            ex.arr(p, x[k], y[k])
    ex.write(os.path.join(out, "hdf5_chunked.expect"))

    # DLIO num_dset_per_record: records_0..k-1, sample i = their rows i, stacked
    root = os.path.join(out, "hdf5_split")
    ex = Expect(root)
    files = [("a.h5", 3, rng.integers(0, 255, (3, 5, 4, 5), dtype=np.uint8), {}),
             ("b.h5", 5, rng.integers(-99, 99, (5, 3, 2, 3)).astype(np.int16), {}),
             ("c.h5", 2, rng.standard_normal((2, 4, 3, 3)).astype(np.float32),
              dict(compression="gzip"))]
    for name, k, x, kw in files:
        p = mkdirs(os.path.join(root, name))
        n = x.shape[1]
        y = rng.integers(0, 10, n)
        with h5py.File(p, "w", libver="latest") as f:
            for j in range(k):
                f.create_dataset("records_%d" % j, data=x[j], **kw)
            f.create_dataset("labels", data=y)
        for i in range(n):
            ex.arr(p, x[:, i], y[i])
    ex.write(os.path.join(out, "hdf5_split.expect"))

    root = os.path.join(out, "hdf5_custom")
    ex = Expect(root)
    p = mkdirs(os.path.join(root, "a.h5"))
    x = rng.integers(0, 255, (3, 2, 2), dtype=np.uint8)
    with h5py.File(p, "w") as f:
        f.create_group("grp").create_dataset("images", data=x)
        f.create_dataset("images", data=np.zeros(7))
    for k in range(3):
        ex.arr(p, x[k])
    ex.write(os.path.join(out, "hdf5_custom.expect"))


def gen_tfrecord(out, rng):
    data = os.path.join(out, "tfrecord")
    root = os.path.join(data, "train")
    ex = Expect(root)
    sizes = [[10, 300, 1, 2500], [77] * 6, [5, 1200 * 1024, 33], [100, 200, 300, 400]]
    for i, sz in enumerate(sizes):
        name = "img_%d_of_%d.tfrecord" % (i, len(sizes))
        p = os.path.join(root, str(i % 2), name)
        payloads = [rng.integers(0, 256, s, dtype=np.uint8).tobytes() for s in sz]
        index = os.path.join(data, "index", "train", name + ".idx") if i != 1 else None
        write_tfrecord(p, payloads, index)
        if i == 3:  # a stale index: the reader must notice and scan the file
            with open(index, "w") as f:
                f.write("0 20\n20 300\n")
        for pl in payloads:
            ex.raw(p, pl)
    ex.write(os.path.join(out, "tfrecord.expect"))


def gen_indexed(out, rng):
    root = os.path.join(out, "indexed", "train")
    ex = Expect(root)
    # DLIO: fixed-size samples back to back
    p = os.path.join(root, "img_0_of_3.indexed_binary")
    blob = rng.integers(0, 255, 5 * 64, dtype=np.uint8).tobytes()
    write_indexed(p, blob, [64 * i for i in range(5)], [64] * 5)
    for i in range(5):
        ex.raw(p, blob[64 * i:64 * i + 64])
    # variable sizes, gaps, and an order that is not the file's
    for name, offs, szs in (("img_1_of_3.indexed_binary", [0, 50, 400], [10, 300, 77]),
                            ("img_2_of_3.indexed_binary", [900, 10, 500, 0], [100, 490, 1, 5])):
        p = os.path.join(root, name)
        blob = rng.integers(0, 255, max(o + s for o, s in zip(offs, szs)) + 3,
                            dtype=np.uint8).tobytes()
        write_indexed(p, blob, offs, szs)
        for o, s in zip(offs, szs):
            ex.raw(p, blob[o:o + s])
    ex.write(os.path.join(out, "indexed.expect"))


def gen_bad(out, rng):
    def path(ds, name):
        return mkdirs(os.path.join(out, ds, name))

    x = rng.integers(0, 255, (4, 4, 5), dtype=np.uint8)
    y = np.arange(5)
    for ds in ("bad_npz_trunc", "bad_npz_method", "bad_npz_header", "bad_npz_size",
               "bad_npz_flip"):
        np.savez(path(ds, "a.npz"), x=x, y=y)
    truncate(os.path.join(out, "bad_npz_trunc", "a.npz"), 40)
    p = os.path.join(out, "bad_npz_method", "a.npz")
    with open(p, "rb") as f:
        data = f.read()
    at = data.index(b"PK\x01\x02")  # x.npy's central directory entry: method := bzip2
    while data[at + 46:at + 51] != b"x.npy":
        at = data.index(b"PK\x01\x02", at + 4)
    with open(p, "r+b") as f:
        f.seek(at + 10)
        f.write(struct.pack("<H", 12))
    patch(os.path.join(out, "bad_npz_header", "a.npz"), b"'shape'", b"'shapf'")
    patch(os.path.join(out, "bad_npz_size", "a.npz"), b"(4, 4, 5)", b"(4, 4, 6)")
    p = os.path.join(out, "bad_npz_flip", "a.npz")
    off, size = member_span(p, "x.npy")
    flip(p, off + size - 7)  # array data of sample 3 or 4, not the header
    np.savez(path("bad_npz_object", "a.npz"), x=np.array([{"a": 1}, None, 3], dtype=object),
             y=np.arange(3))
    np.savez(path("bad_npz_labels", "a.npz"), x=x, y=np.arange(6))
    np.savez(path("bad_npz_nox", "a.npz"), a=x, b=y)
    # two members named x.npy: numpy reads the last copy, other readers the first
    p = path("bad_npz_dup", "a.npz")
    np.savez(p, x=x, y=y)
    second = io.BytesIO()
    np.save(second, x + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile: "Duplicate name"
        with zipfile.ZipFile(p, "a") as z:
            z.writestr("x.npy", second.getvalue())
    with zipfile.ZipFile(p) as z:
        assert [i.filename for i in z.infolist()].count("x.npy") == 2
    p = path("bad_npz_deflate", "a.npz")
    np.savez_compressed(p, x=np.tile(np.arange(64, dtype=np.uint8), (64, 1))[:, :, None]
                        .repeat(4, axis=2), y=np.arange(4))
    off, size = member_span(p, "x.npy")
    flip(p, off + size - 3)

    for ds in ("bad_npy_trunc", "bad_npy_magic", "bad_npy_header"):
        np.save(path(ds, "a.npy"), x)
    truncate(os.path.join(out, "bad_npy_trunc", "a.npy"), 10)
    flip(os.path.join(out, "bad_npy_magic", "a.npy"), 0)
    patch(os.path.join(out, "bad_npy_header", "a.npy"), b"'descr'", b"'descx'")
    np.save(path("bad_npy_dtype", "a.npy"), np.zeros((3, 2), dtype=np.complex64))

    with h5py.File(path("bad_h5_nodset", "a.hdf5"), "w") as f:
        f.create_dataset("foo", data=x)
    p = path("bad_h5_trunc", "a.hdf5")
    with h5py.File(p, "w") as f:
        f.create_dataset("records", data=rng.integers(0, 255, (8, 16, 16), dtype=np.uint8))
        f.create_dataset("labels", data=np.arange(8))
    truncate(p, 1000)
    with open(path("bad_h5_magic", "a.hdf5"), "wb") as f:
        f.write(rng.integers(0, 255, 4096, dtype=np.uint8).tobytes())
    with h5py.File(path("bad_h5_labels", "a.hdf5"), "w") as f:
        f.create_dataset("records", data=x.transpose(2, 0, 1))
        f.create_dataset("labels", data=np.arange(6))
    p = path("bad_h5_chunk", "a.h5")
    with h5py.File(p, "w") as f:
        d = f.create_dataset("records", data=rng.integers(0, 4, (4, 8, 8), dtype=np.uint8),
                             chunks=(1, 8, 8), compression="gzip")
        f.create_dataset("labels", data=np.arange(4))
        info = d.id.get_chunk_info(1)
    with open(p, "r+b") as f:
        f.seek(info.byte_offset + info.size // 2)
        f.write(b"\xff" * 6)

    payloads = [bytes(range(i, i + 40)) for i in range(4)]
    for ds in ("bad_tfr_len", "bad_tfr_payload", "bad_tfr_trunc"):
        write_tfrecord(path(ds, "a.tfrecord"), payloads)
    rec = 12 + 40 + 4
    flip(os.path.join(out, "bad_tfr_len", "a.tfrecord"), 2 * rec)  # length of record 2
    flip(os.path.join(out, "bad_tfr_payload", "a.tfrecord"), rec + 12 + 5)  # payload of 1
    truncate(os.path.join(out, "bad_tfr_trunc", "a.tfrecord"), 5)
    with open(path("bad_tfr_notfr", "a.tfrecord"), "w") as f:
        f.write("hello, this is a text file and not a TFRecord\n")

    blob = bytes(range(200))
    write_indexed(path("bad_idx_missing", "a.indexed_binary"), blob, [0, 100], [100, 100])
    os.unlink(os.path.join(out, "bad_idx_missing", "a.indexed_binary.sz.idx"))
    write_indexed(path("bad_idx_range", "a.indexed_binary"), blob, [0, 150], [100, 100])
    write_indexed(path("bad_idx_mismatch", "a.indexed_binary"), blob, [0, 50, 100],
                  [50, 50, 50, 50])


def gen_unit(out):
    rng = np.random.default_rng(20261121)
    os.makedirs(out, exist_ok=True)
    gen_npz(out, rng)
    gen_hdf5(out, rng)
    gen_tfrecord(out, rng)
    gen_indexed(out, rng)
    gen_bad(out, rng)


# ---- benchmark datasets ------------------------------------------------------

def gen_bench(out, nsamples, d1, d2, per_file, only=()):
    """The same sample bytes (uint8 d1 x d2, label = index % 1000) in every
    format, DLIO's layout: <fmt>/train/img_<i>_of_<N>.<ext>. only: also
    ("hdf5_dlio"), or only that ("hdf5_dlio" alone): DLIO's gzip HDF5."""
    rng = np.random.default_rng(7)
    nfiles = (nsamples + per_file - 1) // per_file
    marker = os.path.join(out, ".params")
    params = repr((nsamples, d1, d2, per_file, tuple(only)))
    if os.path.exists(marker) and open(marker).read() == params:
        print("bench datasets in %s already generated" % out)
        return
    allx = rng.integers(0, 255, (nsamples, d1, d2), dtype=np.uint8)  # DLIO: randint(255)
    allcrc = crc32c_rows(allx.reshape(nsamples, -1))
    for i in range(nfiles):
        lo, hi = i * per_file, min(nsamples, (i + 1) * per_file)
        n = hi - lo
        x = allx[lo:hi]
        y = np.arange(lo, hi) % 1000
        stem = "img_%d_of_%d" % (i, nfiles)

        def p(fmt, ext):
            return mkdirs(os.path.join(out, fmt, "train", stem + ext))
        for k in range(n if list(only) != ["hdf5_dlio"] else 0):
            with open(mkdirs(os.path.join(out, "files", "train", "img_%07d.bin" % (lo + k))),
                      "wb") as f:
                f.write(x[k].tobytes())
        if list(only) == ["hdf5_dlio"]:
            with h5py.File(p("hdf5_dlio", ".hdf5"), "w") as f:
                f.create_dataset("records", data=x, compression="gzip", compression_opts=4)
                f.create_dataset("labels", data=y)
            continue
        xl = np.ascontiguousarray(x.transpose(1, 2, 0))  # DLIO npz/npy: (d1, d2, n)
        np.savez(p("npz", ".npz"), x=xl, y=y)
        np.savez_compressed(p("npz_deflate", ".npz"), x=xl, y=y)
        np.save(p("npy", ".npy"), xl)
        with h5py.File(p("hdf5", ".hdf5"), "w") as f:
            f.create_dataset("records", data=x)
            f.create_dataset("labels", data=y)
        if "hdf5_dlio" in only:  # DLIO's hdf5 generator, compression: gzip (level 4),
            # no chunking asked: h5py picks the chunks, (8, 64, 64) for 64 x 256 x 256
            with h5py.File(p("hdf5_dlio", ".hdf5"), "w") as f:
                f.create_dataset("records", data=x, compression="gzip", compression_opts=4)
                f.create_dataset("labels", data=y)
        with h5py.File(p("hdf5_gzip", ".hdf5"), "w") as f:
            f.create_dataset("records", data=x, chunks=(1, d1, d2), compression="gzip",
                             compression_opts=1)
            f.create_dataset("labels", data=y)
        rows = x.reshape(n, -1)
        name = stem + ".tfrecord"
        write_tfrecord(os.path.join(out, "tfrecord", "train", name), list(rows),
                       os.path.join(out, "tfrecord", "index", "train", name + ".idx"),
                       crcs=allcrc[lo:hi])
        sz = d1 * d2
        write_indexed(p("indexed", ".indexed_binary"), x.tobytes(), [sz * k for k in range(n)],
                      [sz] * n)
    with open(marker, "w") as f:
        f.write(params)
    print("bench datasets: %d samples of %dx%d bytes, %d per file, in %s"
          % (nsamples, d1, d2, per_file, out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--dims", default="256x256")
    ap.add_argument("--per-file", type=int, default=16)
    ap.add_argument("--only", default="", help="hdf5_dlio: only DLIO's gzip HDF5 (h5py's "
                    "chunks)")
    a = ap.parse_args()
    if a.bench:
        d1, d2 = (int(v) for v in a.dims.lower().split("x"))
        gen_bench(a.out, a.samples, d1, d2, a.per_file, [v for v in a.only.split(",") if v])
    else:
        gen_unit(a.out)
    # a real dataset's directories were written long before a job reads them:
    # age them out of the catalog's racy window (2 s), so caches are reused
    old = time.time() - 3600
    for d, _, _ in os.walk(a.out):
        os.utime(d, (old, old))


if __name__ == "__main__":
    sys.exit(main())
