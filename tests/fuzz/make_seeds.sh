#!/usr/bin/env bash
# Seed corpora for the fuzz harnesses, generated (nothing binary is kept in
# git): a config file, a catalog cache image, NPY and NPZ files from numpy, a
# TFRecord file and its DALI index, release rings, tar shards. Usage: make_seeds.sh OUTDIR
set -euo pipefail
out="$1"
root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$out"/{fuzz_config,fuzz_catalog,fuzz_npy,fuzz_zip,fuzz_npz,fuzz_tfrecord,fuzz_ctrl,fuzz_client,fuzz_image}
cp "$root/config/example.ini" "$out/fuzz_config/example.ini"
printf '[dataset]\npath = ${HOME:-/x}/d\n[job]\nseed=0x10\nepochs = 3\n[cache]\nram = 1.5GiB\n' \
  > "$out/fuzz_config/small.ini"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/data/a" "$tmp/data/b"
for i in 1 2 3; do head -c $((100 * i)) /dev/urandom > "$tmp/data/a/$i"; head -c 7 /dev/urandom > "$tmp/data/b/$i"; done
"$root/bin/seerd" --set dataset.path="$tmp/data" --set daemon.state_dir="$tmp/state" --check >/dev/null 2>&1
cp "$tmp"/state/catalog-*.bin "$out/fuzz_catalog/"
/usr/bin/python3 - "$out" <<'PY'
import io, os, struct, sys, zlib
import numpy as np
out = sys.argv[1]
def save(name, arr, **kw):
    b = io.BytesIO(); np.save(b, arr, **kw); open(os.path.join(out, "fuzz_npy", name), "wb").write(b.getvalue())
save("u8.npy", np.arange(24, dtype=np.uint8).reshape(2, 3, 4))
save("f32f.npy", np.asfortranarray(np.ones((3, 5), dtype=">f4")))
save("scalar.npy", np.array(7, dtype=np.int64))
for name, f in (("stored.npz", np.savez), ("deflated.npz", np.savez_compressed)):
    b = io.BytesIO(); f(b, x=np.zeros((4, 4, 3), np.uint8), y=np.arange(3)); open(os.path.join(out, "fuzz_zip", name), "wb").write(b.getvalue())
    b = io.BytesIO(); f(b, x=np.arange(4 * 5 * 6, dtype="<u2").reshape(4, 5, 6), y=np.arange(6)); open(os.path.join(out, "fuzz_npz", name), "wb").write(b.getvalue())
b = io.BytesIO(); np.savez(b, x=np.asfortranarray(np.arange(60, dtype=">i4").reshape(3, 4, 5)), y=np.arange(5)); open(os.path.join(out, "fuzz_npz", "fortran.npz"), "wb").write(b.getvalue())
def crc32c(data, crc=0):
    crc ^= 0xffffffff
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82f63b78 if crc & 1 else 0)
    return crc ^ 0xffffffff
mask = lambda c: (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff
rec, idx, off = b"", "", 0
for p in (b"", b"hello", bytes(range(256))):
    h = struct.pack("<Q", len(p))
    r = h + struct.pack("<I", mask(crc32c(h))) + p + struct.pack("<I", mask(crc32c(p)))
    idx += "%d %d\n" % (off, len(r)); off += len(r); rec += r
open(os.path.join(out, "fuzz_tfrecord", "three.tfrecord"), "wb").write(rec)
open(os.path.join(out, "fuzz_tfrecord", "three.idx"), "w").write(idx)
ring = bytes([3]) + struct.pack("<QII", 0b1011, 3, 0) + struct.pack("<8I", 0, 1, 3, 0, 0, 0, 0, 0)
open(os.path.join(out, "fuzz_ctrl", "three.bin"), "wb").write(ring)
# client API: a fake daemon with 4 slots, batch 2, then publish/next/read/release
ops = bytes([0, 2, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0]) + bytes([1, 0, 0, 2, 1, 0, 0, 0, 1, 2, 64, 0, 0, 1, 16, 0])
ops += bytes([2, 0, 0, 4, 0, 1, 3, 1, 0, 5, 1, 1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 1, 8])
open(os.path.join(out, "fuzz_client", "session.bin"), "wb").write(bytes([1]) + ops)
open(os.path.join(out, "fuzz_client", "nodaemon.bin"), "wb").write(bytes([0, 40, 1, 5, 0, 0, 0, 2, 0, 0, 0, 3, 1, 9]))
PY
# fuzz_image: small JPEGs and PNGs of each kind (the first byte picks the
# harness's parameters)
mkdir -p "$out/fuzz_image"
/usr/bin/python3 - "$out/fuzz_image" <<'PY'
import io, os, sys
import numpy as np
from PIL import Image
out = sys.argv[1]
rng = np.random.default_rng(3)
rgb = Image.fromarray(rng.integers(0, 255, (23, 37, 3), dtype=np.uint8))
def save(name, im, sel, **kw):
    b = io.BytesIO(); im.save(b, **kw); open(os.path.join(out, name), "wb").write(bytes([sel]) + b.getvalue())
save("420.jpg", rgb, 0, format="JPEG", quality=90)
save("prog.jpg", rgb, 9, format="JPEG", quality=80, progressive=True)
save("gray.jpg", rgb.convert("L"), 2, format="JPEG")
save("cmyk.jpg", rgb.convert("CMYK"), 132, format="JPEG")
save("444.jpg", rgb, 17, format="JPEG", subsampling=0)
save("rgba.png", rgb.convert("RGBA"), 1, format="PNG")
save("pal.png", rgb.convert("P"), 34, format="PNG", transparency=3)
save("gray.png", rgb.convert("L"), 128, format="PNG")
save("rgb.png", rgb, 5, format="PNG")
PY
# fuzz_tar: small shards from Python's tarfile in its three formats (GNU long
# names, pax path and size records, the ustar prefix)
mkdir -p "$out/fuzz_tar"
/usr/bin/python3 - "$out/fuzz_tar" <<'PY'
import io, os, sys, tarfile
out = sys.argv[1]
for fmt, name in ((tarfile.GNU_FORMAT, "gnu"), (tarfile.PAX_FORMAT, "pax"), (tarfile.USTAR_FORMAT, "ustar")):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=fmt) as tf:
        for key, data in (("d" * 110 + "/k0", b"\xff\xd8img"), ("k1\u00e9" if fmt == tarfile.PAX_FORMAT else "k1", b"x" * 700)):
            for ext, d in (("jpg", data), ("cls", b"3\n")):
                ti = tarfile.TarInfo(key + "." + ext)
                ti.size = len(d)
                tf.addfile(ti, io.BytesIO(d))
    open(os.path.join(out, name + ".tar"), "wb").write(b.getvalue())
PY
echo "seeds in $out"
