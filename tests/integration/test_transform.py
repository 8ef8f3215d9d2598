"""seerd's transform stage end to end, asserting on delivered tensors
(xf_trainer.py reads every batch's tensor through seer_batch_tensor and the
shim, logs a CRC per (epoch, sample), and compares sampled tensors with
seer.xform.Transform.reference: PIL decode + the exported crop/flip +
torchvision):

- reference: ImageNet-sized JPEGs at 224 (never DCT-scaled) are bit-identical
  to PIL + torchvision, float32 NCHW and uint8 NHWC; large images made at a
  small size (DCT-scaled) stay within docs/transform.md's tolerance;
- seeds and epochs: other seed or epoch, other crops;
- resume: a job restarted at job.resume = 1:2 delivers the same tensors;
- 1 vs 2 nodes (mpirun): the same tensors, peers serving decoded images;
- a non-image and a truncated JPEG: on_corrupt = fail fails their batches
  naming the file, skip substitutes them (file bytes and decoded caches);
- transform.cache = decoded: tensors identical to encoded, the second epoch
  decodes nothing (when everything fits) or only what is not cached, the
  daemon's peak memory within cache.ram + staging + a fixed allowance.
"""

import os

from seertest import check, cleanup, log, run_tests, tmpdir
from xf_common import make_images, run, same_tensors

IMAGENET = {"decode": "image", "crop": "random_resized", "size": "224",
            "output": "float32_chw", "normalize": "imagenet"}


def test_reference():
    tmp = tmpdir("seer-xf-")
    try:
        data = os.path.join(tmp, "data")
        make_images(data, classes=2, per_class=6, seed=1)
        for name, spec in (("f32", IMAGENET),
                           ("u8", {"decode": "image", "crop": "center", "resize": "256",
                                   "size": "224", "output": "uint8_hwc", "normalize": "none"})):
            job = run(tmp, data, spec, name, ref_every=1)
            check(not job.errors, "%s: failed batches %s" % (name, job.errors[:3]))
            check(len(job.refs) == len(job.samples) == 24,
                  "%s: %d references for %d samples" % (name, len(job.refs), len(job.samples)))
            worst = max(r[2] for r in job.refs)
            check(worst == 0, "%s: a tensor differs from PIL + torchvision by up to %.4f "
                  "(ImageNet-sized images are never DCT-scaled: must be identical)" % (name, worst))
            log("%s: %d tensors bit-identical to PIL + torchvision" % (name, len(job.refs)))
        # large images at a small size: decoded at a DCT scale, within tolerance
        big = os.path.join(tmp, "big")
        make_images(big, classes=2, per_class=5, seed=2, big=True)
        spec = dict(IMAGENET, size="96x128", output="float16_chw")
        job = run(tmp, big, spec, "dct", ref_every=1)
        check(not job.errors, "dct: failed batches %s" % job.errors[:3])
        mads = [r[3] for r in job.refs]
        mean = sum(mads) / len(mads)
        log("DCT-scaled: mean absolute difference %.3f (max %.3f) over %d tensors" %
            (mean, max(mads), len(mads)))
        # docs/transform.md: photos mean <= 1.0, any photo <= 2.5 (0-255 units)
        check(mean <= 1.0 and max(mads) <= 2.5, "DCT-scaled tensors outside the documented "
              "tolerance: mean %.3f, max %.3f" % (mean, max(mads)))
    finally:
        cleanup(tmp)


def test_seeds_epochs_and_resume():
    tmp = tmpdir("seer-xf-")
    try:
        data = os.path.join(tmp, "data")
        make_images(data, classes=2, per_class=10, seed=4)
        spec = {"decode": "image", "size": "40x56"}
        s3 = {"job.epochs": 3}
        a = run(tmp, data, spec, "seed7", settings=s3)
        b = run(tmp, data, spec, "seed8", settings=dict(s3, **{"job.seed": 8}))
        ids = sorted({k[1] for k in a.samples})
        other_seed = sum(a.samples[(0, i)] != b.samples[(0, i)] for i in ids)
        other_epoch = sum(a.samples[(0, i)] != a.samples[(1, i)] for i in ids)
        log("other seed: %d of %d tensors differ; other epoch: %d of %d" %
            (other_seed, len(ids), other_epoch, len(ids)))
        check(other_seed >= 0.9 * len(ids) and other_epoch >= 0.9 * len(ids),
              "crops must change with the seed and the epoch")
        # restarted at epoch 1, step 2: every later tensor as in the first run
        r = run(tmp, data, spec, "resumed", settings=dict(s3, **{"job.resume": "1:2"}))
        check(min(k[1:] for k in r.batches) == (1, 2), "resumed run started at %s" %
              (min(k[1:] for k in r.batches),))
        n = same_tensors(a, r, "before/after a resume", keys=set(r.samples))
        log("resume at 1:2: %d tensors identical to the uninterrupted run" % n)
    finally:
        cleanup(tmp)


def test_two_nodes():
    tmp = tmpdir("seer-xf-")
    try:
        data = os.path.join(tmp, "data")
        make_images(data, classes=3, per_class=8, seed=5)
        one = run(tmp, data, IMAGENET, "one", world=1)
        # two daemons, each caching half as decoded images: the remote half comes
        # from the peer as decoded images, each file is decoded once
        dec = dict(IMAGENET, cache="decoded")
        two = run(tmp, data, dec, "two", world=2, nodes=2,
                  settings={"cache.ram": "12MiB", "cache.staging": "64MiB"})
        check(not two.errors, "failed batches: %s" % two.errors[:3])
        n = same_tensors(one, two, "1 node (files) vs 2 nodes (decoded images, peers)")
        # epoch 1's remote samples come from the peer (decoded) or from the
        # replicas filled from it; under load the lookahead fetches them while
        # epoch 0 still runs, so they are counted in either epoch: count the job
        ep = [e for st in two.stats for e in st["epochs"]]
        peer = sum(e["peer_bytes"] for e in ep)
        peer_n = sum(e["peer_samples"] for e in ep)
        largest = max(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data)
                      for f in fs)
        log("2 nodes: %d tensors identical to 1 node; %d B from peers in %d samples "
            "(largest file %d B)" % (n, peer, peer_n, largest))
        check(peer_n > 0, "no decoded image came from the peer")
        # a decoded 3-channel image is larger than any of these JPEG files
        check(peer >= peer_n * largest, "the peer sent %d B for %d samples: files, not "
              "decoded images (largest file %d B)" % (peer, peer_n, largest))
    finally:
        cleanup(tmp)


def corrupt_dataset(root):
    make_images(root, classes=2, per_class=8, seed=6)
    with open(os.path.join(root, "c0", "004.jpg"), "w") as f:
        f.write("these are notes, not an image\n" * 20)
    p = os.path.join(root, "c1", "002.jpg")
    with open(p, "rb") as f:
        b = f.read()
    sos = b.index(b"\xff\xda")
    with open(p, "wb") as f:
        f.write(b[:sos + 80]) # the scan cut after 80 bytes: no crop survives
    return {4: "c0/004.jpg", 10: "c1/002.jpg"}


def test_corrupt_samples():
    tmp = tmpdir("seer-xf-")
    try:
        data = os.path.join(tmp, "data")
        bad = corrupt_dataset(data)
        spec = {"decode": "image", "size": "64"}
        for cache in ("encoded", "decoded"):
            sp = dict(spec, cache=cache)
            f = run(tmp, data, sp, "fail-" + cache, settings={"dataset.on_corrupt": "fail"})
            named = {p: [e for e in f.errors if p in e[2]] for p in bad.values()}
            for p, errs in named.items():
                check(len(errs) == 2, "%s: %s failed %d batches, expected one per epoch: %s" %
                      (cache, p, len(errs), f.errors))
            check(any("not a JPEG or PNG image" in e[2] for e in named["c0/004.jpg"]) and
                  any("JPEG" in e[2] for e in named["c1/002.jpg"]),
                  "%s: reasons %s" % (cache, f.errors))
            check(len(f.errors) == 4, "%s: failed batches %s" % (cache, f.errors))
            log("%s, fail: %s" % (cache, named["c0/004.jpg"][0][2][:150]))
            s = run(tmp, data, sp, "skip-" + cache, settings={"dataset.on_corrupt": "skip"})
            check(not s.errors, "%s, skip: failed batches %s" % (cache, s.errors))
            got = {k[1] for k in s.samples}
            check(not (got & set(bad)), "%s, skip: delivered %s" % (cache, got & set(bad)))
            per_epoch = [sum(len(v) for k, v in s.batches.items() if k[1] == ep)
                         for ep in (0, 1)]
            check(per_epoch == [16, 16], "%s, skip: %s samples per epoch" % (cache, per_epoch))
            skipped = sum(e["skipped"] for e in s.stats[0]["epochs"])
            check(skipped >= 2, "%s, skip: %d skips counted" % (cache, skipped))
            log("%s, skip: substitutes delivered, %d skips counted" % (cache, skipped))
    finally:
        cleanup(tmp)


def test_decoded_cache():
    tmp = tmpdir("seer-xf-")
    try:
        data = os.path.join(tmp, "data")
        make_images(data, classes=3, per_class=10, seed=7)
        N = 30
        budget = {"cache.staging": "48MiB"}
        enc = run(tmp, data, IMAGENET, "enc", settings=budget)
        dec = run(tmp, data, dict(IMAGENET, cache="decoded"), "dec", settings=budget)
        n = same_tensors(enc, dec, "encoded vs decoded caching")
        check(n == 2 * N, "%d tensors compared" % n)
        ep = dec.stats[0]["transform"]["epochs"]
        log("decoded: epoch 0 decoded %d images into the cache (%.2f s), epoch 1 decoded %d, "
            "%d from decoded images" % (ep[0]["cache_decodes"], ep[0]["cache_decode_s"],
                                       ep[1]["decoded"] + ep[1]["cache_decodes"],
                                       ep[1]["from_decoded_cache"]))
        check(ep[0]["cache_decodes"] == N and ep[1]["cache_decodes"] == 0 and
              ep[1]["decoded"] == 0 and ep[1]["from_decoded_cache"] == N,
              "the second epoch must decode nothing: %s" % ep)
        e_ep = enc.stats[0]["transform"]["epochs"]
        check(all(e["decoded"] == N for e in e_ep), "encoded: %s" % e_ep)
        # a RAM budget for a third of the decoded images: the plan keeps to
        # it, epoch 1 decodes exactly the files not cached, memory stays put
        cap = 8 << 20
        part = run(tmp, data, dict(IMAGENET, cache="decoded"), "part",
                   settings=dict(budget, **{"cache.ram": cap}))
        same_tensors(enc, part, "encoded vs decoded caching, partly cached")
        st = part.stats[0]
        planned = st["cache"]["ram_planned_samples"]
        check(0 < planned < N and st["cache"]["ram_planned_bytes"] <= cap,
              "plan: %d samples, %d B for %d B" % (planned, st["cache"]["ram_planned_bytes"], cap))
        p1 = st["transform"]["epochs"][1]
        check(p1["from_decoded_cache"] == planned and p1["decoded"] == N - planned,
              "epoch 1 with %d cached: %s" % (planned, p1))
        rss = st["transform"]["max_rss_bytes"]
        allowance = 96 << 20 # code, libraries (MPI, HDF5, libfabric), threads' buffers
        bound = cap + (48 << 20) + allowance
        log("partly cached: %d of %d planned (%d B); epoch 1 decoded %d files; peak RSS %.1f MiB "
            "(bound %.1f MiB = RAM %d MiB + staging 48 MiB + %d MiB)" %
            (planned, N, st["cache"]["ram_planned_bytes"], p1["decoded"], rss / 2**20,
             bound / 2**20, cap >> 20, allowance >> 20))
        check(0 < rss <= bound, "seerd's peak RSS %d B exceeds %d B" % (rss, bound))
        # the NVMe tier holds decoded images too: epoch 1 decodes nothing
        nv = run(tmp, data, dict(IMAGENET, cache="decoded"), "nvme",
                 settings=dict(budget, **{"cache.ram": 4 << 20, "cache.nvme": "64MiB",
                                          "cache.nvme_dir": os.path.join(tmp, "nvme")}))
        same_tensors(enc, nv, "encoded vs decoded caching on RAM + NVMe")
        st = nv.stats[0]
        n1 = st["transform"]["epochs"][1]
        nvme1 = sum(e["nvme_samples"] for e in st["epochs"] if e["epoch"] == 1)
        log("RAM + NVMe: %d in RAM, %d on NVMe; epoch 1: %d NVMe reads, %d decoded" %
            (st["cache"]["ram_planned_samples"], st["cache"]["nvme_planned_samples"], nvme1,
             n1["decoded"]))
        check(st["cache"]["nvme_planned_samples"] > 0 and nvme1 > 0 and n1["decoded"] == 0 and
              n1["from_decoded_cache"] == N, "RAM + NVMe decoded: %s" % n1)
    finally:
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_reference, test_seeds_epochs_and_resume, test_two_nodes, test_corrupt_samples,
               test_decoded_cache])
