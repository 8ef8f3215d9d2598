#!/usr/bin/python3
"""Checkpoint records through the Python shim, as a trainer would use them.

- Each rank's state dict (and the merged one) survives torch.save /
  torch.load (weights_only) unchanged, and its bytes are exactly libseer's.
- A job checkpointed with W ranks mid-epoch (equal and unequal counts) and
  resumed with W' ranks from the loaded dict: the shim's batches equal
  libseer's seer_sampler_batch called directly on the record's bytes; every
  sample of the interrupted epoch is delivered (repeats only as padding, none
  with drop_last); later epochs equal a fresh W' job's.
- The byte form equals the golden bytes test_sampler_record.c pins;
  corruption and truncation raise; a record of another job names both values.

Usage: sampler_resume.py [path/to/libseer.so]  (default: $SEER_LIB, else lib/
of this checkout). Needs Debian's /usr/bin/python3 (torch). Exits 0 when
everything holds, 1 on a failure, 2 when it cannot run.
"""
import ctypes
import io
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

GOLDEN = bytes.fromhex(
    "53454552504f530001004800a4000000e8030000000000002a00000000000000"
    "efcdab896745230107000000000000000800000004000000ffffffff02000000"
    "0200000000000000080000000800000003000000000000000300000000000000"
    "0200000000000000030000000000000003000000000000000300000000000000"
    "0300000000000000030000000000000004000000010000000500000000000000"
    "765ebc8b")

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def torch_roundtrip(obj):
    import torch
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    try:
        return torch.load(buf, weights_only=True)
    except TypeError:  # a torch without weights_only
        buf.seek(0)
        return torch.load(buf)


def c_batches(seer, state, n, seed, W, B, drop, dhash, epoch):
    """libseer's batches of `epoch` for every rank, from the record's bytes,
    without the shim's sampler class."""
    lib = seer._load_records()
    data = seer.record_encode(state)
    rec = ctypes.c_void_p()
    assert lib.seer_record_decode(data, len(data), ctypes.byref(rec)) == 0
    s = ctypes.c_void_p()
    rc = lib.seer_sampler_resume(n, seed, W, B, 1 if drop else 0, dhash, rec, ctypes.byref(s))
    lib.seer_record_free(rec)
    assert rc == 0, lib.seer_errmsg()
    ids = (ctypes.c_uint64 * B)()
    out = []
    for r in range(W):
        mine = []
        for st in range(lib.seer_sampler_epoch_batches(s, epoch)):
            k = lib.seer_sampler_batch(s, epoch, r, st, ids)
            assert k > 0
            mine.append(list(ids[:k]))
        out.append(mine)
    lib.seer_sampler_free(s)
    return out


def elastic_case(seer, n, W, W2, B, drop, counts, epoch=2, seed=42, dhash=0xfeedbeef):
    what = "n=%d W=%d->%d B=%d drop=%s counts=%s" % (n, W, W2, B, drop, counts)
    old = seer.ElasticSampler(n, seed, W, B, drop_last=drop, dataset_hash=dhash)
    delivered = {}
    for r in range(W):
        for st in range(counts[r]):
            for i in old.batch(epoch, r, st):
                delivered[i] = delivered.get(i, 0) + 1
    per_rank = [old.state_dict(r, epoch, counts[r]) for r in range(W)]
    saved = per_rank[:1] if len(set(counts)) == 1 else per_rank  # rank 0 alone in lockstep
    merged = seer.record_merge(saved)
    loaded = torch_roundtrip({"model": {"w": 1}, "loader": merged})["loader"]
    check(loaded == merged, what + ": torch.save/load changed the state dict")
    check(torch_roundtrip(per_rank) == per_rank, what + ": per-rank states changed")
    new = seer.ElasticSampler(n, seed, W2, B, drop_last=drop, dataset_hash=dhash, state=loaded)
    e0, s0 = new.start
    want = c_batches(seer, loaded, n, seed, W2, B, drop, dhash, e0)
    got = [[new.batch(e0, r, st) for st in range(new.epoch_batches(e0))] for r in range(W2)]
    check(got == want, what + ": shim batches differ from libseer's")
    nb = new.epoch_batches(e0)
    if e0 == epoch:
        for r in range(W2):
            for st in range(s0, nb):
                for i in new.batch(e0, r, st):
                    delivered[i] = delivered.get(i, 0) + 1
        for r in range(W2):  # equal batch counts
            try:
                new.batch(e0, r, nb)
                check(False, what + ": rank %d has a batch past %d" % (r, nb))
            except seer.SeerError:
                pass
    if drop:
        check(max(delivered.values()) == 1, what + ": a sample delivered twice with drop_last")
        check(n - len(delivered) < max(W, W2) * (B + 1), what + ": too many samples dropped")
    else:
        check(len(delivered) == n, what + ": %d samples never delivered" % (n - len(delivered)))
        extra = sum(delivered.values()) - n
        check(extra < 2 * max(W, W2), what + ": %d repeats, more than padding" % extra)
    fresh = seer.ElasticSampler(n, seed, W2, B, drop_last=drop, dataset_hash=dhash)
    for e in (epoch + 1, epoch + 2):
        same = all(new.batch(e, r, st) == fresh.batch(e, r, st)
                   for r in range(W2) for st in range(fresh.batches_per_epoch))
        check(same and new.epoch_batches(e) == fresh.batches_per_epoch,
              what + ": epoch %d differs from a fresh W' job" % e)


def main():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print("sampler_resume: cannot import torch (%s); run it with /usr/bin/python3" % e,
              file=sys.stderr)
        return 2
    if len(sys.argv) > 1:
        os.environ["SEER_LIB"] = os.path.abspath(sys.argv[1])
    elif not os.environ.get("SEER_LIB"):
        os.environ["SEER_LIB"] = os.path.join(ROOT, "lib", "libseer.so")
    sys.path.insert(0, os.path.join(ROOT, "client", "python"))
    import seer
    try:
        seer._load_records()
    except OSError as e:
        print("sampler_resume: cannot load libseer: %s" % e, file=sys.stderr)
        return 2

    # the byte form, pinned
    golden = {"format": "seer.position", "version": 1, "num_samples": 1000, "seed": 42,
              "dataset_hash": 0x0123456789abcdef, "batch_size": 8, "world_size": 4,
              "drop_last": False, "shuffle": True, "epoch": 7, "rank": None,
              "segments": [{"world_size": 8, "steps": [3, 3, 2, 3, 3, 3, 3, 3]},
                           {"world_size": 4, "steps": [5]}]}
    check(seer.record_encode(golden) == GOLDEN, "golden bytes")
    check(seer.record_decode(GOLDEN) == golden, "golden decode")
    check(seer.record_merge([golden]) == golden, "libseer round trip of the golden record")
    for i in range(len(GOLDEN)):
        bad = bytearray(GOLDEN)
        bad[i] ^= 0x40
        try:
            seer.record_decode(bytes(bad))
            check(False, "byte %d flipped accepted" % i)
        except seer.SeerError:
            pass
    for k in range(len(GOLDEN)):
        try:
            seer.record_decode(GOLDEN[:k])
            check(False, "%d bytes accepted" % k)
        except seer.SeerError:
            pass

    # another job: a clear error naming both values
    st = seer.ElasticSampler(1000, 42, 4, 8, dataset_hash=5).state_dict(0, 1, 3)
    for kw, words in (({"seed": 43}, ("seed 42", "seed 43")),
                      ({"dataset_hash": 6}, ("0000000000000005", "0000000000000006")),
                      ({"batch_size": 16}, ("batch size 8", "batch size 16"))):
        args = {"num_samples": 1000, "seed": 42, "batch_size": 8, "dataset_hash": 5}
        args.update(kw)
        try:
            seer.record_check(st, **args)
            check(False, "record accepted for %s" % kw)
        except seer.SeerError as e:
            check(all(w in str(e) for w in words), "message for %s: %s" % (kw, e))
    seer.record_check(st, 1000, 42, 8, dataset_hash=5, world_size=7)  # another world is fine

    cases = 0
    for n in (5, 17, 100, 1000):
        for W, W2 in ((4, 2), (2, 3), (3, 4), (1, 4), (4, 1), (8, 3), (4, 4)):
            for B in (1, 3, 8):
                for drop in (False, True):
                    try:
                        bpe = seer.ElasticSampler(n, 42, W, B, drop_last=drop).batches_per_epoch
                        seer.ElasticSampler(n, 42, W2, B, drop_last=drop)
                    except seer.SeerError:
                        continue  # a job that cannot run
                    for counts in ([bpe // 2] * W, [(r * 7 + 1) % (bpe + 1) for r in range(W)],
                                   [bpe] * W, [0] * W):
                        elastic_case(seer, n, W, W2, B, drop, counts)
                        cases += 1
    print("sampler_resume: %d elastic cases through torch.save/load: %d failures"
          % (cases, len(failures)))
    return 1 if failures or cases < 100 else 0


if __name__ == "__main__":
    sys.exit(main())
