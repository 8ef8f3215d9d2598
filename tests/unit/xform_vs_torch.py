#!/usr/bin/python3
"""Cross-check seer's image transform against PIL + torchvision themselves.

1. Draws: seer_xform_draw equals the formula of docs/transform.md written in
   Python.
2. Crop boxes: seer_xform_crop equals a Python transcription of torchvision
   0.14's RandomResizedCrop.get_params driven by the same draws, bit for bit
   (fallback included), and CenterCrop-after-Resize offsets; and the
   distribution of boxes matches torchvision's real get_params (its own RNG):
   area fraction, aspect ratio, position and the fallback rate, within
   sampling error.
3. Tensors: `seer-xform apply` on ImageNet-like JPEGs and PNGs made here with
   PIL (500x375 and other sizes, quality 90, grayscale, CMYK, progressive,
   4:4:4, PNG with alpha, palette, gray+alpha) against PIL decode + the
   exported crop + torchvision resized_crop(BILINEAR) / resize + center_crop,
   hflip, to_tensor, normalize:
     exact mode (no DCT scaling): bit-identical, every output layout, and
     through a decoded blob (cache = decoded);
     default (DCT scaling): mean absolute difference within the documented
     tolerance, measured and printed (0-255 units);
   1 vs 2 threads identical; another epoch gives other crops; a text file
   and a truncated JPEG fail with their reason.

Usage: xform_vs_torch.py [path/to/libseer.so [path/to/seer-xform]]
  (default: lib/libseer.so and bin/seer-xform of this checkout).
Needs Debian's /usr/bin/python3 (numpy, PIL, torch, torchvision); exits 0 when
everything holds, 1 on a mismatch, 2 when it cannot run.
"""
import io
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "lib", "libseer.so")
TOOL = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "bin", "seer-xform")
PHOTO = "/usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg"
M64 = (1 << 64) - 1

# Tolerances of the DCT-scaled path, mean absolute difference in 0-255 units
# (docs/transform.md gives the measured values they bound).
TOL_MEAN_PHOTO = 1.0   # mean over the photo-derived images
TOL_SAMPLE_PHOTO = 2.5 # any one photo
TOL_NOISE = 12.0       # full-amplitude white noise (the worst case for any resampler)
TOL_CACHE_MEAN = 3.0   # decoded cache resized to cache_size=256: a lower-resolution source

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


# ---- 1. draws ------------------------------------------------------------------

def mix(z):
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def doc_draw(seed, epoch, sid, index):
    g = 0x9e3779b97f4a7c15
    k = mix(seed ^ 0x7866726d5eed0001)
    k = mix((k + (epoch + 1) * g) & M64)
    k = mix((k + (sid + 1) * g) & M64)
    return mix((k + (index + 1) * g) & M64)


# ---- 2. crop boxes -------------------------------------------------------------

def unit(x):
    return (x >> 11) * 2.0 ** -53


def below(draws, idx, n):
    m = draws(idx) * n
    idx += 1
    lo = m & M64
    if lo < n:
        t = ((1 << 64) - n) % n
        while lo < t:
            m = draws(idx) * n
            idx += 1
            lo = m & M64
    return m >> 64, idx


def torchvision_get_params(draws, width, height, scale, ratio):
    """RandomResizedCrop.get_params of torchvision 0.14, line by line, with
    seer's draws in place of torch's generator (double precision)."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for t in range(10):
        target_area = area * (scale[0] + (scale[1] - scale[0]) * unit(draws(1 + 2 * t)))
        aspect_ratio = math.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * unit(draws(2 + 2 * t)))
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            i, idx = below(draws, 21, height - h + 1)
            j, idx = below(draws, idx, width - w + 1)
            return i, j, h, w, t + 1
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w = width
        h = height
    # seer's one deliberate difference: never an empty box (torchvision's
    # would be, for a 1-pixel side under an extreme ratio, and then fail)
    h, w = max(h, 1), max(w, 1)
    return (height - h) // 2, (width - w) // 2, h, w, 0


def center_params(width, height, resize, size):
    """Resize([resize]) then CenterCrop(size), torchvision 0.14's arithmetic."""
    from torchvision.transforms.functional import _compute_resized_output_size
    rh, rw = (height, width) if resize == 0 else _compute_resized_output_size((height, width), [resize])
    ch, cw = size

    def off(img, crop):
        if crop > img:
            return -((crop - img) // 2)
        return int(round((img - crop) / 2.0))
    return off(rh, ch), off(rw, cw), rh, rw


def check_boxes(xf):
    import random
    rnd = random.Random(5)
    specs = ["", "scale=0.25,0.5 ratio=0.5,2", "scale=1.5,2", "scale=0.9,1 ratio=3,4"]
    n = 0
    for spec in specs:
        t = xf.Transform(spec)
        scale = [float(v) for v in t.params["scale"].split(",")]
        ratio = [float(v) for v in t.params["ratio"].split(",")]
        for _ in range(1500):
            W, H = rnd.choice([(500, 375), (375, 500), (1000, 10), (10, 1000), (1, 1)]) \
                if rnd.random() < 0.5 else (rnd.randint(1, 3000), rnd.randint(1, 3000))
            seed, epoch, sid = rnd.getrandbits(64), rnd.randint(0, 100), rnd.getrandbits(32)
            c = t.crop(seed, epoch, sid, W, H)
            want = torchvision_get_params(lambda i: doc_draw(seed, epoch, sid, i), W, H, scale, ratio)
            got = (c.top, c.left, c.height, c.width, c.tries)
            n += 1
            if got != want:
                check(False, "crop '%s' %dx%d (%d,%d,%d): seer %s, torchvision rules %s"
                      % (spec, W, H, seed, epoch, sid, got, want))
                return
            check(c.flip == (unit(doc_draw(seed, epoch, sid, 0)) < 0.5), "flip draw")
    t = xf.Transform("crop=center resize=256 size=224")
    for W, H in [(500, 375), (375, 500), (500, 333), (257, 1000), (100, 100), (224, 224)]:
        c = t.crop(1, 2, 3, W, H)
        check((c.top, c.left, c.resized_height, c.resized_width) == center_params(W, H, 256, (224, 224)),
              "center crop %dx%d: %s vs %s" % (W, H, c, center_params(W, H, 256, (224, 224))))
    t = xf.Transform("crop=center resize=0 size=300x120")
    c = t.crop(0, 0, 0, 100, 200)
    check((c.top, c.left) == center_params(100, 200, 0, (300, 120))[:2], "center crop padding")
    print("crop boxes: %d random_resized boxes bit-identical to torchvision's rules, center crops too" % n)


def check_distribution(xf):
    """seer's boxes vs torchvision's real get_params (torch's own RNG)."""
    import torch
    from torchvision.transforms import RandomResizedCrop
    torch.manual_seed(0)
    cases = [((500, 375), (0.08, 1.0), (3 / 4, 4 / 3)), ((1000, 100), (0.08, 1.0), (3 / 4, 4 / 3)),
             ((100, 1000), (0.08, 1.0), (3 / 4, 4 / 3)), ((300, 300), (0.5, 1.5), (3 / 4, 4 / 3))]
    N = 3000
    for (W, H), scale, ratio in cases:
        t = xf.Transform("scale=%r,%r ratio=%r,%r" % (scale + ratio))
        fb = torchvision_get_params(lambda i: 0, W, H, (2.0, 2.0), ratio)[:4]  # the fallback box
        img = torch.empty(1, H, W)

        def stats(boxes):
            a = [h * w / (W * H) for i, j, h, w in boxes]
            r = [math.log(w / h) for i, j, h, w in boxes]
            f = [b == fb for b in boxes]
            mean = lambda v: sum(v) / len(v)
            sd = lambda v: math.sqrt(max(mean([x * x for x in v]) - mean(v) ** 2, 1e-12))
            return (mean(a), sd(a)), (mean(r), sd(r)), mean(f)
        ours = [t.crop(7, 0, k, W, H)[:4] for k in range(N)]
        theirs = [tuple(RandomResizedCrop.get_params(img, list(scale), list(ratio))) for _ in range(N)]
        (sa, ssd), (sr, srd), sf = stats(ours)
        (ta, tsd), (tr, trd), tf = stats(theirs)
        se = lambda sd: 5 * sd * math.sqrt(2.0 / N) + 1e-3
        ok = abs(sa - ta) < se(tsd) and abs(sr - tr) < se(trd) and abs(sf - tf) < 5 * math.sqrt(
            max(tf * (1 - tf), 1e-4) * 2 / N) + 0.005
        check(ok, "distribution %dx%d scale %s: seer area %.4f ratio %.4f fallback %.3f, "
              "torchvision %.4f %.4f %.3f" % (W, H, scale, sa, sr, sf, ta, tr, tf))
        print("distribution %4dx%-4d scale %-11s area %.3f/%.3f  log-ratio %+.3f/%+.3f  "
              "fallback %.3f/%.3f (seer/torchvision, %d boxes)" % (W, H, "%g,%g" % scale, sa, ta,
                                                                  sr, tr, sf, tf, N))


# ---- 3. tensors --------------------------------------------------------------------

def make_images(d):
    """ImageNet-like files: crops of a real photo at usual sizes, re-encoded."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(12)
    if os.path.exists(PHOTO):
        photo = Image.open(PHOTO).convert("RGB")
    else:  # smooth synthetic stand-in
        y, x = np.mgrid[0:600, 0:512]
        photo = Image.fromarray(np.stack([x % 256, y % 256, (x + y) % 256], -1).astype(np.uint8))
    sizes = [(500, 375), (375, 500), (500, 333), (640, 480), (400, 400), (1024, 683), (300, 450),
             (250, 188), (160, 120), (1200, 900), (500, 375), (333, 500)]
    files = []

    def sample(k, size):
        W, H = photo.size
        cw, ch = int(W * rng.uniform(0.5, 1)), int(H * rng.uniform(0.5, 1))
        x0, y0 = int(rng.integers(0, W - cw + 1)), int(rng.integers(0, H - ch + 1))
        return photo.crop((x0, y0, x0 + cw, y0 + ch)).resize(size, Image.BICUBIC)

    for k, size in enumerate(sizes):
        p = os.path.join(d, "photo%02d.jpg" % k)
        sample(k, size).save(p, quality=90)
        files.append((p, "photo"))
    variants = [("prog.jpg", lambda im: im, dict(quality=90, progressive=True)),
                ("444.jpg", lambda im: im, dict(quality=90, subsampling=0)),
                ("422.jpg", lambda im: im, dict(quality=90, subsampling=1)),
                ("gray.jpg", lambda im: im.convert("L"), dict(quality=90)),
                ("cmyk.jpg", lambda im: im.convert("CMYK"), dict(quality=90)),
                ("rgb.png", lambda im: im, {}), ("rgba.png", lambda im: im.convert("RGBA"), {}),
                ("pal.png", lambda im: im.convert("P"), dict(transparency=5)),
                ("la.png", lambda im: im.convert("LA"), {}), ("l.png", lambda im: im.convert("L"), {})]
    for k, (name, conv, kw) in enumerate(variants):
        p = os.path.join(d, name)
        conv(sample(100 + k, (500, 375) if k % 2 else (375, 500))).save(p, **kw)
        files.append((p, "photo"))
    noise = rng.normal(128, 60, (375, 500, 3)).clip(0, 255).astype(np.uint8)
    p = os.path.join(d, "noise.jpg")
    Image.fromarray(noise).save(p, quality=90)
    files.append((p, "noise"))
    return files


def apply(files, spec, *flags, epoch=0, ids=None):
    ids = ids if ids is not None else range(len(files))
    out = tempfile.mktemp(suffix=".bin")
    lines = "".join("%d %s\n" % (i, f) for i, f in zip(ids, files))
    r = subprocess.run([TOOL, "apply", "-s", spec, "-S", "1234", "-e", str(epoch), "-o", out]
                       + list(flags) + ["-"], input=lines, capture_output=True, text=True)
    data = open(out, "rb").read() if os.path.exists(out) else b""
    if os.path.exists(out):
        os.unlink(out)
    return r.returncode, r.stdout.splitlines(), r.stderr, data


def to_255(x, t):
    """Differences in 0-255 pixel units: undo the normalisation's division."""
    import numpy as np
    x = x.astype(np.float64)
    if t.params["output"] == "uint8_hwc":
        return x
    norm = t.params["normalize"]
    std = [1.0, 1.0, 1.0] if norm == "none" else [float(v) for v in norm.split("/")[1].split(",")]
    return x * np.array(std).reshape(3, 1, 1) * 255.0


def compare(xf, files, kinds, spec, flags=(), exact=False, label=None, tol_mean=TOL_MEAN_PHOTO,
            tol_photo=TOL_SAMPLE_PHOTO):
    import numpy as np
    from PIL import Image
    t = xf.Transform(spec)
    rc, lines, err, data = apply([f for f in files], spec, *flags)
    if rc != 0:
        check(False, "seer-xform apply %s %s: %s %s" % (spec, flags, err, lines[-3:]))
        return None
    dt = {"uint8_hwc": np.uint8, "float16_chw": np.float16, "float32_chw": np.float32}[t.params["output"]]
    got = np.frombuffer(data, dt).reshape(len(files), -1)
    mads = {"photo": [], "noise": []}
    for i, (f, kind) in enumerate(zip(files, kinds)):
        v = lines[i].split()
        im = Image.open(f)
        c = t.crop(1234, 0, i, im.width, im.height)
        check([int(x) for x in v[4:10]] == [c.top, c.left, c.height, c.width, c.flip, c.tries],
              "%s: seer-xform box %s, libseer %s" % (f, v[4:10], c))
        ref = t.reference(im, 1234, 0, i).numpy().reshape(-1)
        g = got[i]
        if exact:
            check(np.array_equal(g.view(np.uint8), ref.astype(dt).view(np.uint8)),
                  "%s exact %s: differs from PIL+torchvision (max %s)" % (
                      os.path.basename(f), spec, np.abs(g.astype(float) - ref.astype(float)).max()))
        dims = (3, -1) if t.params["output"] != "uint8_hwc" else (-1,)
        d = np.abs(to_255(g.reshape(dims)[..., None], t) - to_255(ref.reshape(dims)[..., None], t))
        mads[kind].append((float(d.mean()), float(d.max()), os.path.basename(f), v[10]))
    photo = [m[0] for m in mads["photo"]]
    scaled = [m[0] for m in mads["photo"] if m[3] != "8"]
    worst = max(mads["photo"] + mads["noise"])
    print("%-50s MAD photos mean %.3f max %.3f, DCT-scaled %d: mean %.3f | noise %.3f (%s/8) | "
          "max abs %.0f" % (
              label or spec + " " + " ".join(flags), sum(photo) / len(photo), max(photo),
              len(scaled), sum(scaled) / max(len(scaled), 1),
              mads["noise"][0][0] if mads["noise"] else 0,
              mads["noise"][0][3] if mads["noise"] else "-",
              max(m[1] for m in mads["photo"] + mads["noise"])))
    if not exact:
        noise = [m[0] for m in mads["noise"]]
        check(sum(photo) / len(photo) <= tol_mean, "%s: mean MAD %.3f > %.1f" % (
            spec, sum(photo) / len(photo), tol_mean))
        check(max(photo) <= tol_photo, "%s: a photo's MAD %.3f > %.1f" % (spec, max(photo), tol_photo))
        check(max(noise) <= TOL_NOISE, "%s: noise MAD %.3f > %.1f" % (spec, max(noise), TOL_NOISE))
    return data


def check_tensors(xf, d):
    made = make_images(d)
    files, kinds = [f for f, k in made], [k for f, k in made]
    print("%d images: %s" % (len(files), ", ".join(os.path.basename(f) for f in files)))
    specs = ["crop=random_resized", "crop=center output=float16_chw",
             "crop=none size=160x200 output=uint8_hwc normalize=none hflip=1",
             "crop=random_resized size=96x128 normalize=0.5,0.5,0.5/0.25,0.25,0.25 hflip=0.3",
             "crop=center resize=0 size=400x520 output=float32_chw"]
    for spec in specs:
        exact = compare(xf, files, kinds, spec, ("-x",), exact=True, label=spec + " (exact)")
        compare(xf, files, kinds, spec)
        for fl in (("-x", "-b"), ("-x", "-T")):
            again = apply(files, spec, *fl)[3]
            check(exact is not None and again == exact, "%s %s: not identical to exact mode" % (spec, fl))
    spec = "crop=random_resized cache=decoded cache_size=256"
    compare(xf, files, kinds, spec, ("-b",), label=spec + " (decoded blob)", tol_mean=TOL_CACHE_MEAN,
            tol_photo=2 * TOL_CACHE_MEAN)
    one = apply(files, "", "-t", "1")[3]
    two = apply(files, "", "-t", "2")[3]
    check(one == two and len(one) > 0, "1 vs 2 threads differ")
    b0 = [l.split()[4:8] for l in apply(files, "")[1]]
    b1 = [l.split()[4:8] for l in apply(files, "", epoch=1)[1]]
    check(sum(x != y for x, y in zip(b0, b1)) >= len(files) - 1, "epoch 1 repeats epoch 0's crops")
    print("threads 1 vs 2: identical; epoch 0 vs 1: %d of %d crops differ"
          % (sum(x != y for x, y in zip(b0, b1)), len(files)))
    bad_txt = os.path.join(d, "notes.jpg")
    open(bad_txt, "w").write("not an image\n")
    bad_jpg = os.path.join(d, "cut.jpg")
    open(bad_jpg, "wb").write(open(files[0], "rb").read()[:20000])
    rc, lines, _, _ = apply([files[1], bad_txt, bad_jpg], "crop=none")
    check(rc == 1 and "ERROR" not in lines[0], "bad inputs: status %d" % rc)
    check("ERROR %s: not a JPEG or PNG image" % bad_txt in lines[1], "text file: %s" % lines[1])
    check("ERROR %s: truncated JPEG" % bad_jpg in lines[2], "cut JPEG: %s" % lines[2])
    print("bad inputs:", lines[1].split(": ", 1)[1], "|", lines[2].split(": ", 1)[1])


def main():
    try:
        sys.path.insert(0, os.path.join(ROOT, "client", "python"))
        os.environ["SEER_LIB"] = LIB
        import seer.xform as xf
        import numpy  # noqa: F401
        import torchvision  # noqa: F401
    except (ImportError, OSError) as e:
        print("cannot run:", e)
        return 2
    if not os.access(TOOL, os.X_OK):
        print("cannot run: no", TOOL)
        return 2
    for seed, epoch, sid, idx in [(0, 0, 0, 0), (1, 2, 3, 4), (M64, 99, 2 ** 32 - 1, 21), (42, 7, 123456, 30)]:
        check(xf.draw(seed, epoch, sid, idx) == doc_draw(seed, epoch, sid, idx), "draw formula")
    check_boxes(xf)
    check_distribution(xf)
    with tempfile.TemporaryDirectory() as d:
        check_tensors(xf, d)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("xform vs PIL+torchvision: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
