#!/usr/bin/python3
"""Generate an ImageNet-style dataset of random bytes: OUT/<class>/img_<i>.bin.

    /usr/bin/python3 scripts/gen_dataset.py OUT --classes 10 --per-class 100 \
        --min-size 4KiB --max-size 64KiB [--seed 1]

Sizes take K/M/G suffixes (binary). Idempotent: an existing OUT with the same
parameters (recorded in OUT/.params) is left alone."""

import argparse
import os
import random
import sys


def size(s):
    s = s.strip().lower().replace("ib", "").replace("b", "")
    mul = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "kmg" else s) * mul)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--per-class", type=int, default=100)
    ap.add_argument("--min-size", type=size, default=4096)
    ap.add_argument("--max-size", type=size, default=65536)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.min_size > a.max_size or a.classes < 1 or a.per_class < 1:
        sys.exit("gen_dataset: need classes, per-class >= 1 and min-size <= max-size")
    params = repr(vars(a))
    marker = os.path.join(a.out, ".params")
    if os.path.exists(marker) and open(marker).read() == params:
        print("dataset %s already generated" % a.out)
        return
    rnd = random.Random(a.seed)
    total = 0
    for c in range(a.classes):
        d = os.path.join(a.out, "class_%03d" % c)
        os.makedirs(d, exist_ok=True)
        for i in range(a.per_class):
            n = rnd.randint(a.min_size, a.max_size)
            with open(os.path.join(d, "img_%06d.bin" % i), "wb") as f:
                f.write(rnd.randbytes(n))
            total += n
    with open(marker, "w") as f:
        f.write(params)
    print("generated %s: %d samples, %.1f MB" % (a.out, a.classes * a.per_class, total / 1e6))


if __name__ == "__main__":
    main()
