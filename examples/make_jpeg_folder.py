#!/usr/bin/python3
"""Generate a small ImageNet-like folder of JPEGs: OUT/<class>/<class>_<i>.JPEG.

    /usr/bin/python3 examples/make_jpeg_folder.py OUT --classes 10 --per-class 50 \\
        --size 500x375 --quality 90 [--seed 1]

Each image is smooth random structure (a few low-resolution random fields
upsampled, with a class-dependent colour cast and fine noise), so JPEG sizes
and decode costs are those of photos (~30-60 KB at 500x375, q90), and the
classes are learnable. --size WxH is the size of every image; --size
300x200-500x400 draws each image's width and height from those ranges.
Idempotent: an OUT generated with the same parameters (OUT/.params) is left
alone. Needs numpy and PIL (Debian: python3-numpy, python3-pil).
"""

import argparse
import os
import sys

import numpy as np
from PIL import Image


def parse_size(s):
    def wh(t):
        w, h = t.lower().split("x")
        return int(w), int(h)
    lo, _, hi = s.partition("-")
    lo = wh(lo)
    hi = wh(hi) if hi else lo
    if min(lo + hi) < 8 or hi[0] < lo[0] or hi[1] < lo[1]:
        raise argparse.ArgumentTypeError("size %r: want WxH or WxH-WxH, at least 8x8" % s)
    return lo, hi


def image(rng, w, h, cls, classes):
    """One RGB image (uint8 HxWx3)."""
    out = np.zeros((h, w, 3), np.float32)
    for cells in (4, 12, 40):
        field = rng.random((cells * h // max(w, h) + 2, cells + 2, 3), dtype=np.float32)
        small = Image.fromarray((field * 255).astype(np.uint8))
        out += np.asarray(small.resize((w, h), Image.BILINEAR), np.float32) / cells ** 0.5
    out /= out.max() + 1e-6
    hue = np.array([np.cos(2 * np.pi * (cls / classes + k / 3)) for k in range(3)], np.float32)
    out = 0.75 * out + 0.25 * (0.5 + 0.5 * hue)
    out += rng.normal(0, 0.03, out.shape).astype(np.float32)
    return (np.clip(out, 0, 1) * 255).astype(np.uint8)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--per-class", type=int, default=50)
    ap.add_argument("--size", type=parse_size, default=parse_size("500x375"))
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.classes < 1 or a.per_class < 1 or not 1 <= a.quality <= 100:
        sys.exit("make_jpeg_folder: need --classes, --per-class >= 1 and --quality in 1..100")
    params = repr(sorted(vars(a).items()))
    marker = os.path.join(a.out, ".params")
    if os.path.exists(marker) and open(marker).read() == params:
        print("%s already generated" % a.out)
        return
    (w0, h0), (w1, h1) = a.size
    rng = np.random.default_rng(a.seed)
    total = 0
    for c in range(a.classes):
        d = os.path.join(a.out, "n%08d" % c)
        os.makedirs(d, exist_ok=True)
        for i in range(a.per_class):
            w, h = int(rng.integers(w0, w1 + 1)), int(rng.integers(h0, h1 + 1))
            path = os.path.join(d, "n%08d_%d.JPEG" % (c, i))
            Image.fromarray(image(rng, w, h, c, a.classes)).save(path, quality=a.quality)
            total += os.path.getsize(path)
    with open(marker, "w") as f:
        f.write(params)
    n = a.classes * a.per_class
    print("generated %s: %d JPEGs in %d classes, %.1f MB (%.0f KB each)" %
          (a.out, n, a.classes, total / 1e6, total / 1e3 / n))


if __name__ == "__main__":
    main()
