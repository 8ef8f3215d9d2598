#!/usr/bin/python3
"""Per-core speed of seer's transform against PIL + torchvision and djpeg,
on the same JPEG files, in the same run.

    /usr/bin/python3 tools/xform_bench.py [--make N | DIR] [--seconds S] [--rounds R]
        [--spec SPEC]

  --make N   generate N ImageNet-like JPEGs (500x375 / 375x500, quality 90,
             crops of matplotlib's sample photo) in a temporary directory
  DIR        use the *.jpg files of DIR instead

All lines run on one core, one after the other, files read into memory
first (page cache warm), each for S CPU seconds, the whole set R times; the
median of the rounds is printed. Rates are images per CPU second (the
per-core rate; steadier than wall time on a shared machine): seer's thread
CPU time, this process's CPU time for PIL, djpeg's CPU time (children).

  seer (bin/seer-xform bench): decode + crop + resize + normalise into a
      float32 CHW tensor, for each decode path, and the same library's
      full-size decode alone (the work djpeg does);
  PIL + torchvision: Image.open + convert("RGB") + RandomResizedCrop(224) +
      RandomHorizontalFlip + ToTensor + Normalize, one process, one torch
      thread (what one DataLoader worker does per image);
  djpeg: `djpeg -outfile /dev/null` per file (PPM out), and the same less
      the CPU cost of starting djpeg (measured on an 8x8 JPEG). The "x decode"
      column compares with seer-xform's full-size decode alone by the same
      libjpeg-turbo (djpeg's work without process start and output): the
      limit of this CPU for a full-size decode.
A benchmark: it prints numbers and never fails on a timing.
"""
import argparse
import glob
import io
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHOTO = "/usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg"


def make_jpegs(d, n):
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    photo = Image.open(PHOTO).convert("RGB")
    W, H = photo.size
    for k in range(n):
        cw, ch = int(W * rng.uniform(0.5, 1)), int(H * rng.uniform(0.5, 1))
        x0, y0 = int(rng.integers(0, W - cw + 1)), int(rng.integers(0, H - ch + 1))
        size = (500, 375) if k % 3 else (375, 500)
        photo.crop((x0, y0, x0 + cw, y0 + ch)).resize(size, Image.BICUBIC).save(
            os.path.join(d, "%05d.jpg" % k), quality=90)
    return sorted(glob.glob(os.path.join(d, "*.jpg")))


def seer_lines(files, seconds, spec):
    tool = os.path.join(ROOT, "bin", "seer-xform")
    cmd = [tool, "bench", "-d", str(seconds)] + (["-s", spec] if spec else []) + files
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rates = {}
    for line in out.splitlines():
        if "images/s" in line:
            name, rest = line.split("  ", 1)
            rates[name.strip()] = float(rest.split()[0])
    return rates


def pil_torchvision(blobs, seconds):
    import torch
    from PIL import Image
    from torchvision import transforms as T
    torch.set_num_threads(1)
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    n, t0 = 0, time.process_time()
    while time.process_time() - t0 < seconds:
        for b in blobs:
            tf(Image.open(io.BytesIO(b)).convert("RGB"))
            n += 1
    return n / (time.process_time() - t0)


def pil_decode(blobs, seconds):
    from PIL import Image
    n, t0 = 0, time.process_time()
    while time.process_time() - t0 < seconds:
        for b in blobs:
            Image.open(io.BytesIO(b)).convert("RGB")
            n += 1
    return n / (time.process_time() - t0)


def djpeg(files, tiny):
    def cpu():
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    def run(paths):
        t0 = cpu()
        for p in paths:
            subprocess.run(["djpeg", "-outfile", "/dev/null", p], check=True)
        return cpu() - t0
    total = run(files * 2)
    start = run([tiny] * (2 * len(files)))
    n = 2 * len(files)
    # a start cost near the total leaves no decode time to speak of
    net = total - start if total - start > 0.2 * total else float("nan")
    return n / total, n / net


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", nargs="?")
    ap.add_argument("--make", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--spec", default="")
    a = ap.parse_args()
    tmp = tempfile.TemporaryDirectory()
    if a.make or not a.dir:
        files = make_jpegs(tmp.name, a.make or 200)
    else:
        files = sorted(glob.glob(os.path.join(a.dir, "*.jpg")))
    if not files:
        print("no JPEG files")
        return 2
    from PIL import Image
    tiny = os.path.join(tmp.name, "tiny8x8.jpeg")
    Image.new("RGB", (8, 8)).save(tiny)
    blobs = [open(f, "rb").read() for f in files]
    rounds = []
    for r in range(a.rounds):
        row = dict(seer_lines(files, a.seconds, a.spec))
        row["PIL + torchvision (RandomResizedCrop..Normalize)"] = pil_torchvision(blobs, a.seconds)
        row["PIL decode + convert(RGB) only"] = pil_decode(blobs, a.seconds)
        raw, net = djpeg(files, tiny)
        row["djpeg per file (process start included)"] = raw
        row["djpeg per file, less process start"] = net
        rounds.append(row)
        print("round %d done" % (r + 1), file=sys.stderr)
    ok = lambda k: [r[k] for r in rounds if r[k] == r[k]]  # without NaN
    med = {k: statistics.median(ok(k)) if ok(k) else float("nan") for k in rounds[0]}
    best = {k: max(ok(k)) if ok(k) else float("nan") for k in rounds[0]}
    pil = "PIL + torchvision (RandomResizedCrop..Normalize)"
    dj = "decode only (libjpeg-turbo, full size)"
    sizes = sorted({Image.open(f).size for f in files})
    print("# %d JPEG files (%s), one core, images per CPU second, %d rounds of %.0f s; "
          "load average %.1f" % (len(files), " ".join("%dx%d" % s for s in sizes[:4]),
                                 a.rounds, a.seconds, os.getloadavg()[0]))
    print("%-48s %9s %9s %9s %9s" % ("pipeline", "median", "best", "x PIL+tv", "x decode"))
    for k in med:
        print("%-48s %9.1f %9.1f %9.2f %9.2f" % (k, med[k], best[k], med[k] / med[pil],
                                                   med[k] / med[dj]))
    print("# ratios of medians; x decode: against the full-size decode alone by the same "
          "library (djpeg's work without its process start and PPM output); nan: djpeg's "
          "start cost left no measurable decode time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
