#!/usr/bin/python3
"""Cross-check seer's sharding against the real PyTorch samplers.

For a matrix of (n, world, batch, drop_last), compares
seer_sampler_batch(..., SEER_SAMPLER_NO_SHUFFLE) from libseer with
torch.utils.data.DistributedSampler(shuffle=False, drop_last) followed by
BatchSampler(batch, drop_last), for every rank and batch, and the number of
batches per epoch. Shuffled orders cannot be compared (torch uses its own
generator); the sharding of any order is the same code in seer.

Usage: sampler_vs_torch.py [path/to/libseer.so]
  (default: $SEER_LIBSEER, else lib/libseer.so of this checkout).
Needs Debian's /usr/bin/python3 (torch); exits 0 when everything matches,
1 on a mismatch, 2 when it cannot run.
"""
import ctypes
import errno
import os
import sys

SEER_SAMPLER_DROP_LAST = 1
SEER_SAMPLER_NO_SHUFFLE = 2


def load_lib():
    if len(sys.argv) > 1:
        path = sys.argv[1]
    elif os.environ.get("SEER_LIBSEER"):
        path = os.environ["SEER_LIBSEER"]
    else:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = os.path.join(root, "lib", "libseer.so")
    lib = ctypes.CDLL(path)
    lib.seer_sampler_new.restype = ctypes.c_void_p
    lib.seer_sampler_new.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32,
                                     ctypes.c_uint32, ctypes.c_uint]
    lib.seer_sampler_free.restype = None
    lib.seer_sampler_free.argtypes = [ctypes.c_void_p]
    lib.seer_sampler_batches_per_epoch.restype = ctypes.c_uint64
    lib.seer_sampler_batches_per_epoch.argtypes = [ctypes.c_void_p]
    lib.seer_sampler_batch.restype = ctypes.c_int
    lib.seer_sampler_batch.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32,
                                       ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)]
    lib.seer_errmsg.restype = ctypes.c_char_p
    lib.seer_errmsg.argtypes = []
    return lib, path


class Sized:
    """The only thing DistributedSampler asks of a dataset is its length."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def torch_batches(n, world, batch, drop_last):
    from torch.utils.data import BatchSampler, DistributedSampler
    out = []
    for rank in range(world):
        ds = DistributedSampler(Sized(n), num_replicas=world, rank=rank, shuffle=False,
                                drop_last=drop_last)
        ds.set_epoch(0)
        bs = BatchSampler(ds, batch, drop_last=drop_last)
        out.append((len(bs), [list(b) for b in bs]))
    return out


def seer_batches(lib, n, world, batch, drop_last, epoch):
    flags = SEER_SAMPLER_NO_SHUFFLE | (SEER_SAMPLER_DROP_LAST if drop_last else 0)
    s = lib.seer_sampler_new(n, 1234, world, batch, flags)
    if not s:
        return None, lib.seer_errmsg().decode(errors="replace")
    try:
        bpe = lib.seer_sampler_batches_per_epoch(s)
        ids = (ctypes.c_uint64 * batch)()
        out = []
        for rank in range(world):
            batches = []
            for step in range(bpe):
                k = lib.seer_sampler_batch(s, epoch, rank, step, ids)
                if k <= 0:
                    raise AssertionError("seer_sampler_batch(n=%d W=%d B=%d drop=%s rank=%d "
                                         "step=%d) = %d" % (n, world, batch, drop_last, rank,
                                                            step, k))
                batches.append([ids[i] for i in range(k)])
            out.append((bpe, batches))
        # one past the end of either range is -ERANGE
        if lib.seer_sampler_batch(s, epoch, world, 0, ids) != -errno.ERANGE:
            raise AssertionError("rank == world not rejected")
        if lib.seer_sampler_batch(s, epoch, 0, bpe, ids) != -errno.ERANGE:
            raise AssertionError("step == batches_per_epoch not rejected")
        return out, None
    finally:
        lib.seer_sampler_free(s)


def cases():
    # awkward sizes: n not divisible by W nor B, n < W, n < W*B, W = 1, exact fits
    ns = [1, 2, 3, 5, 7, 10, 16, 17, 31, 64, 100, 101, 257, 1000]
    worlds = [1, 2, 3, 4, 7, 8, 16]
    batches = [1, 2, 3, 5, 8, 32]
    for n in ns:
        for w in worlds:
            for b in batches:
                for drop in (False, True):
                    yield n, w, b, drop


def main():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print("sampler_vs_torch: cannot import torch (%s); run it with /usr/bin/python3" % e,
              file=sys.stderr)
        return 2
    try:
        lib, path = load_lib()
    except OSError as e:
        print("sampler_vs_torch: cannot load libseer: %s" % e, file=sys.stderr)
        return 2
    checked = failed = 0
    for n, w, b, drop in cases():
        want = torch_batches(n, w, b, drop)
        empty = all(nb == 0 for nb, _ in want)
        for epoch in (0, 3):
            got, err = seer_batches(lib, n, w, b, drop, epoch)
            checked += 1
            what = "n=%d world=%d batch=%d drop_last=%s epoch=%d" % (n, w, b, drop, epoch)
            if got is None:
                if not empty:
                    failed += 1
                    print("MISMATCH %s: seer refused (%s), torch gives %d batches per rank"
                          % (what, err, want[0][0]))
                continue
            if empty:
                failed += 1
                print("MISMATCH %s: torch gives no batch, seer %d" % (what, got[0][0]))
                continue
            for rank in range(w):
                if got[rank] != want[rank]:
                    failed += 1
                    print("MISMATCH %s rank %d:\n  seer  %d batches %s\n  torch %d batches %s"
                          % (what, rank, got[rank][0], got[rank][1][:4], want[rank][0],
                             want[rank][1][:4]))
                    break
    print("sampler_vs_torch: %d cases against torch %s (%s): %d mismatches"
          % (checked, torch.__version__, path, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
