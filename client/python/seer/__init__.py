"""seer: mini-batches from the node's seerd, as zero-copy numpy views.

    import seer
    with seer.Loader() as loader:          # rank/world from the launcher's environment
        for epoch in range(loader.epochs):
            for batch in loader:           # one epoch per `for`
                for x, y in zip(batch.samples, batch.labels):
                    train(x, y)

Lifetime: a batch's sample arrays are read-only views of the daemon's shared
memory. They are valid until the batch is released: explicitly with
``batch.release()`` (or leaving ``with batch:``), or implicitly when the
iterator moves to the next batch (``for batch in loader`` releases the batch
it yielded before when you ask for the next). Copy (``np.array(x)``) what you
keep longer. Writing to a view raises (numpy) or faults (raw pointer).

Uses Debian's numpy (/usr/bin/python3). Finds libseer through $SEER_LIB, the
path recorded by `make install`, the source tree's lib/ directory, or the
system library path.
"""

import ctypes
import ctypes.util
import os

import numpy as np

__all__ = ["Loader", "Batch", "SeerError", "Sampler", "EndOfEpoch", "EndOfJob"]

EEPOCH = -30801
EEND = -30802
ESHUTDOWN = -30803
EBATCH = -30806
OPT_START_AT = 1
SAMPLER_DROP_LAST = 1
SAMPLER_NO_SHUFFLE = 2

# enum seer_dtype_code -> numpy dtype (BYTES is opaque uint8)
_DTYPES = {
    0: np.uint8, 1: np.uint8, 2: np.int8, 3: np.uint16, 4: np.int16, 5: np.uint32,
    6: np.int32, 7: np.uint64, 8: np.int64, 9: np.float16, 10: np.float32,
    11: np.float64, 12: np.bool_,
}


class SeerError(RuntimeError):
    """A seer call failed; .code is the seer/errno code, str() the daemon's reason."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class EndOfEpoch(Exception):
    pass


class EndOfJob(Exception):
    pass


class _Options(ctypes.Structure):
    _fields_ = [
        ("socket_path", ctypes.c_char_p),
        ("job_id", ctypes.c_char_p),
        ("rank", ctypes.c_int),
        ("world_size", ctypes.c_int),
        ("flags", ctypes.c_uint),
        ("start_epoch", ctypes.c_uint64),
        ("start_step", ctypes.c_uint64),
        ("connect_timeout_ms", ctypes.c_int),
    ]


_lib = None


def _find_lib():
    env = os.environ.get("SEER_LIB")
    if env:
        return env
    try:  # written by `make install`
        from ._libpath import LIB
        if os.path.exists(LIB):
            return LIB
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(here, "..", "..", "..", "lib", "libseer.so.0"),
                 os.path.join(here, "..", "..", "..", "lib", "libseer.so")):
        if os.path.exists(cand):
            return os.path.normpath(cand)
    found = ctypes.util.find_library("seer")
    if found:
        return found
    raise OSError("libseer not found: build it with `make`, or set SEER_LIB to libseer.so")


def _load():
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(_find_lib())
    P, U64, I64, U32, I = (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int64,
                           ctypes.c_uint32, ctypes.c_int)
    sigs = {
        "seer_connect": (I, [ctypes.POINTER(_Options), ctypes.POINTER(P)]),
        "seer_close": (None, [P]),
        "seer_next": (I, [P, I, ctypes.POINTER(P)]),
        "seer_release": (I, [P, P]),
        "seer_seek": (I, [P, U64, U64]),
        "seer_batch_len": (U32, [P]),
        "seer_batch_epoch": (U64, [P]),
        "seer_batch_step": (U64, [P]),
        "seer_batch_error": (ctypes.c_char_p, [P]),
        "seer_batch_export": (I, [P, P, P, P, P, P]),
        "seer_arena_base": (P, [P]),
        "seer_arena_size": (U64, [P]),
        "seer_type_count": (U32, [P]),
        "seer_type_info": (I, [P, U32, ctypes.POINTER(I), ctypes.POINTER(U64), I]),
        "seer_rank": (I, [P]),
        "seer_world_size": (I, [P]),
        "seer_num_samples": (U64, [P]),
        "seer_epochs": (U64, [P]),
        "seer_batches_per_epoch": (U64, [P]),
        "seer_batch_size": (U32, [P]),
        "seer_seed": (U64, [P]),
        "seer_strerror": (ctypes.c_char_p, [I]),
        "seer_errmsg": (ctypes.c_char_p, []),
        "seer_sampler_new": (P, [U64, U64, U32, U32, ctypes.c_uint]),
        "seer_sampler_free": (None, [P]),
        "seer_sampler_batches_per_epoch": (U64, [P]),
        "seer_sampler_batch": (I, [P, U64, U32, U64, ctypes.POINTER(U64)]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    _lib = lib
    return lib


def _error(code):
    lib = _load()
    msg = lib.seer_errmsg().decode(errors="replace")
    if not msg:
        msg = lib.seer_strerror(code).decode(errors="replace")
    return SeerError(code, msg)


class Batch:
    """One mini-batch. ``samples[i]`` is a read-only numpy view (dtype and
    shape from the dataset format; uint8 bytes for opaque samples), valid
    until the batch is released. ``labels`` and ``ids`` are numpy int64 /
    uint64 copies and stay valid."""

    __slots__ = ("_loader", "_ptr", "epoch", "step", "ids", "labels", "sizes", "_offsets",
                 "_types", "_samples", "error")

    def __init__(self, loader, ptr):
        lib = loader._lib
        self._loader = loader
        self._ptr = ptr
        self.epoch = lib.seer_batch_epoch(ptr)
        self.step = lib.seer_batch_step(ptr)
        n = lib.seer_batch_len(ptr)
        self._offsets = np.empty(n, np.uint64)
        self.sizes = np.empty(n, np.uint64)
        self.labels = np.empty(n, np.int64)
        self.ids = np.empty(n, np.uint64)
        self._types = np.empty(n, np.uint32)
        lib.seer_batch_export(ptr, self._offsets.ctypes.data, self.sizes.ctypes.data,
                              self.labels.ctypes.data, self.ids.ctypes.data,
                              self._types.ctypes.data)
        err = lib.seer_batch_error(ptr)
        self.error = err.decode(errors="replace") if err else None
        self._samples = None

    def __len__(self):
        return len(self.ids)

    @property
    def released(self):
        return self._ptr is None

    @property
    def samples(self):
        """List of read-only numpy views, one per sample."""
        if self._ptr is None:
            raise SeerError(-1, "batch already released: its views are gone")
        if self._samples is None:
            arena = self._loader._arena
            types = self._loader._types
            out = []
            for off, size, t in zip(self._offsets.tolist(), self.sizes.tolist(),
                                    self._types.tolist()):
                v = arena[off:off + size]
                dt, shape = types[t]
                if dt is not None:
                    v = v.view(dt).reshape(shape)
                out.append(v)
            self._samples = out
        return self._samples

    def __getitem__(self, i):
        return self.samples[i]

    def release(self):
        """Give the batch back; its sample views must not be used afterwards."""
        if self._ptr is not None:
            self._samples = None
            rc = self._loader._lib.seer_release(self._loader._c, self._ptr)
            self._ptr = None
            if rc < 0:
                raise _error(rc)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False


class Loader:
    """Connection of one trainer rank to its node's seerd.

    Arguments (all optional): socket (else $SEER_SOCKET or derived from the
    job id), job_id (else $SEER_JOB_ID / $SLURM_JOB_ID), rank and world_size
    (else from the launcher's environment), start=(epoch, step) to start
    there instead of where this rank left off, timeout in seconds for each
    batch (None: wait forever), connect_timeout in seconds.
    """

    def __init__(self, socket=None, job_id=None, rank=None, world_size=None, start=None,
                 timeout=None, connect_timeout=30.0):
        self._lib = _load()
        self._c = None
        self._held = None
        self._timeout_ms = -1 if timeout is None else int(timeout * 1000)
        o = _Options()
        o.socket_path = socket.encode() if socket else None
        o.job_id = job_id.encode() if job_id else None
        if world_size is not None:
            if rank is None:
                raise ValueError("rank is required with world_size")
            o.rank, o.world_size = int(rank), int(world_size)
        if start is not None:
            o.flags |= OPT_START_AT
            o.start_epoch, o.start_step = int(start[0]), int(start[1])
        o.connect_timeout_ms = int(connect_timeout * 1000)
        c = ctypes.c_void_p()
        rc = self._lib.seer_connect(ctypes.byref(o), ctypes.byref(c))
        if rc < 0:
            raise _error(rc)
        self._c = c
        lib = self._lib
        base, size = lib.seer_arena_base(c), lib.seer_arena_size(c)
        buf = (ctypes.c_uint8 * size).from_address(base)
        self._arena = np.frombuffer(buf, dtype=np.uint8)
        self._arena.flags.writeable = False
        self._types = []
        dims = (ctypes.c_uint64 * 8)()
        dt = ctypes.c_int()
        for t in range(lib.seer_type_count(c)):
            nd = lib.seer_type_info(c, t, ctypes.byref(dt), dims, 8)
            if dt.value == 0 or dt.value not in _DTYPES:
                self._types.append((None, None))
            else:
                self._types.append((np.dtype(_DTYPES[dt.value]), tuple(dims[i] for i in range(nd))))
        self.rank = lib.seer_rank(c)
        self.world_size = lib.seer_world_size(c)
        self.num_samples = lib.seer_num_samples(c)
        self.epochs = lib.seer_epochs(c)
        self.batches_per_epoch = lib.seer_batches_per_epoch(c)
        self.batch_size = lib.seer_batch_size(c)
        self.seed = lib.seer_seed(c)

    def next_batch(self, timeout=None):
        """The next batch (you release it). Raises EndOfEpoch once after each
        epoch's last batch, EndOfJob after the job's last, SeerError on
        failure (a batch that failed to load is returned with .error set)."""
        ms = self._timeout_ms if timeout is None else int(timeout * 1000)
        p = ctypes.c_void_p()
        rc = self._lib.seer_next(self._c, ms, ctypes.byref(p))
        if rc == EEPOCH:
            raise EndOfEpoch()
        if rc == EEND:
            raise EndOfJob()
        if rc < 0 and rc != EBATCH:
            raise _error(rc)
        return Batch(self, p.value)

    def __iter__(self):
        """Iterate one epoch. Each batch yielded is released when the next is
        requested or the loop ends."""
        try:
            while True:
                if self._held is not None:
                    self._held.release()
                    self._held = None
                try:
                    b = self.next_batch()
                except (EndOfEpoch, EndOfJob):
                    return
                if b.error is not None:
                    msg = b.error
                    b.release()
                    raise SeerError(EBATCH, "batch %d:%d failed: %s" % (b.epoch, b.step, msg))
                self._held = b
                yield b
        finally:
            if self._held is not None:
                self._held.release()
                self._held = None

    def seek(self, epoch, step):
        """Restart this rank's stream at (epoch, step); releases held batches."""
        if self._held is not None:
            self._held.release()
            self._held = None
        rc = self._lib.seer_seek(self._c, int(epoch), int(step))
        if rc < 0:
            raise _error(rc)

    def close(self):
        if self._c is not None:
            if self._held is not None:
                self._held._ptr = None  # seer_close releases it
                self._held = None
            self._arena = None
            self._lib.seer_close(self._c)
            self._c = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Sampler:
    """The access sequence as a pure function (same as seerd serves)."""

    def __init__(self, num_samples, seed, world_size, batch_size, drop_last=False, shuffle=True):
        self._lib = _load()
        flags = (SAMPLER_DROP_LAST if drop_last else 0) | (0 if shuffle else SAMPLER_NO_SHUFFLE)
        self._s = self._lib.seer_sampler_new(num_samples, seed, world_size, batch_size, flags)
        if not self._s:
            raise _error(-22)
        self.batch_size = batch_size
        self.batches_per_epoch = self._lib.seer_sampler_batches_per_epoch(self._s)

    def batch(self, epoch, rank, step):
        out = (ctypes.c_uint64 * self.batch_size)()
        n = self._lib.seer_sampler_batch(self._s, epoch, rank, step, out)
        if n < 0:
            raise _error(n)
        return list(out[:n])

    def __del__(self):
        if getattr(self, "_s", None):
            self._lib.seer_sampler_free(self._s)
            self._s = None


# ==== checkpoint records and elastic resume (docs/resume.md) ================
# A record says where a job stands: its fingerprint and, for the current
# epoch, the segments that delivered part of it (the world size of each and
# the batches each rank consumed). Its dict form (what state_dict() returns)
# holds only ints, bools, None, str and lists, so torch.save / torch.load
# (weights_only too) and json keep it; record_encode / record_decode convert
# to the versioned, CRC-32 checked byte form libseer reads. Merging,
# validation and the resumed order are libseer's (one implementation).
#
# The Loader will use them as torchdata's StatefulDataLoader does:
#     sd = loader.state_dict()      # this rank's record: ranks move in lockstep,
#                                   # so rank 0's alone resumes the whole job
#     torch.save({"model": ..., "loader": sd}, path)
#     loader = seer.Loader(state=torch.load(path)["loader"])   # any world size
# state_dict() is the record of this rank having consumed the batches the
# iterator yielded in the current epoch; load_state_dict(sd) checks it against
# the job (record_check) and hands its bytes to seerd, which resumes there.
# Until seerd accepts a record, ElasticSampler computes the same order.

import errno as _errno
import struct as _struct
import zlib as _zlib

__all__ += ["ElasticSampler", "record_encode", "record_decode", "record_merge", "record_check",
            "RECORD_ALL_RANKS"]

RECORD_FORMAT = "seer.position"
RECORD_VERSION = 1
RECORD_ALL_RANKS = 0xFFFFFFFF
_REC_MAGIC = b"SEERPOS\0"
_REC_HDR = _struct.Struct("<8sHHIQQQQIIIIII")  # 72 bytes, see src/sampler_record.h
_REC_DROP_LAST, _REC_SHUFFLE = 1, 2
_REC_MAX_SEGS, _REC_MAX_WORLD = 64, 1 << 20
_U32, _U64 = (1 << 32) - 1, (1 << 64) - 1

_rec_lib = None


def _load_records():
    global _rec_lib
    if _rec_lib is not None:
        return _rec_lib
    lib = _load()
    P, PP, U64, U32, I = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64,
                          ctypes.c_uint32, ctypes.c_int)
    sigs = {
        "seer_sampler_resume": (I, [U64, U64, U32, U32, ctypes.c_uint, U64, P, PP]),
        "seer_sampler_start": (None, [P, ctypes.POINTER(U64), ctypes.POINTER(U64)]),
        "seer_sampler_epoch_batches": (U64, [P, U64]),
        "seer_sampler_record": (I, [P, U32, U64, U64, PP]),
        "seer_record_check": (I, [P, P]),
        "seer_record_encode": (ctypes.c_int64, [P, P, ctypes.c_size_t]),
        "seer_record_decode": (I, [ctypes.c_char_p, ctypes.c_size_t, PP]),
        "seer_record_merge": (I, [PP, ctypes.c_size_t, PP]),
        "seer_record_free": (None, [P]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    _rec_lib = lib
    return lib


def _bad(msg):
    return SeerError(-_errno.EBADMSG, "checkpoint record: " + msg)


def _field(state, key, top):
    if key not in state:
        raise _bad("the state has no %r (not a seer loader state?)" % key)
    v = state[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > top:
        raise _bad("%r is %r, want an integer in [0, %d]" % (key, v, top))
    return v


def record_encode(state):
    """The byte form of a record dict (state_dict()). Raises SeerError
    (-EBADMSG) naming the field when the dict is not a record."""
    if not isinstance(state, dict) or state.get("format") != RECORD_FORMAT:
        raise _bad("not a seer position state (format %r)" %
                   (state.get("format") if isinstance(state, dict) else type(state).__name__))
    if state.get("version") != RECORD_VERSION:
        raise _bad("state version %r; this seer reads version %d" % (state.get("version"),
                                                                     RECORD_VERSION))
    rank = state.get("rank")
    rank = RECORD_ALL_RANKS if rank is None else _field(state, "rank", _U32 - 1)
    for key in ("drop_last", "shuffle"):
        if not isinstance(state.get(key), bool):
            raise _bad("%r is %r, want True or False" % (key, state.get(key)))
    segs = state.get("segments")
    if not isinstance(segs, list) or not 1 <= len(segs) <= _REC_MAX_SEGS:
        raise _bad("'segments' must be a list of 1 to %d segments" % _REC_MAX_SEGS)
    body = []
    for k, seg in enumerate(segs):
        w = _field(seg, "world_size", _REC_MAX_WORLD) if isinstance(seg, dict) else -1
        steps = seg.get("steps") if isinstance(seg, dict) else None
        if w < 1 or not isinstance(steps, list) or len(steps) not in (1, w) or any(
                isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= _U64
                for s in steps):
            raise _bad("segment %d must be {'world_size': W, 'steps': [1 or W counts]}" % k)
        body.append(_struct.pack("<II%dQ" % len(steps), w, len(steps), *steps))
    body = b"".join(body)
    flags = (_REC_DROP_LAST if state["drop_last"] else 0) | (_REC_SHUFFLE if state["shuffle"]
                                                             else 0)
    head = _REC_HDR.pack(_REC_MAGIC, RECORD_VERSION, _REC_HDR.size, _REC_HDR.size + len(body) + 4,
                         _field(state, "num_samples", _U32), _field(state, "seed", _U64),
                         _field(state, "dataset_hash", _U64), _field(state, "epoch", _U64),
                         _field(state, "batch_size", _U32), _field(state, "world_size", _U32),
                         rank, flags, len(segs), 0)
    data = head + body
    return data + _struct.pack("<I", _zlib.crc32(data))


def record_decode(data):
    """The dict form of a record's bytes; raises SeerError (-EBADMSG) when they
    are not a whole, intact record of this version."""
    data = bytes(data)
    if len(data) < 8 or data[:8] != _REC_MAGIC:
        raise _bad("not a seer position record (no \"SEERPOS\" magic in its %d bytes)"
                   % len(data))
    if len(data) < _REC_HDR.size + 4:
        raise _bad("truncated: %d bytes" % len(data))
    (_, version, hsize, size, n, seed, dhash, epoch, batch, world, rank, flags, nseg,
     reserved) = _REC_HDR.unpack_from(data)
    if version != RECORD_VERSION:
        raise _bad("format version %d; this seer reads version %d%s" % (
            version, RECORD_VERSION,
            " (the record comes from a newer seer: upgrade)" if version > RECORD_VERSION else ""))
    if hsize != _REC_HDR.size or size != len(data):
        raise _bad("%d bytes, its header says %d (truncated or padded)" % (len(data), size))
    want = _struct.unpack_from("<I", data, len(data) - 4)[0]
    if want != _zlib.crc32(data[:-4]):
        raise _bad("checksum mismatch: the record is corrupt")
    if flags & ~(_REC_DROP_LAST | _REC_SHUFFLE) or reserved or not 1 <= nseg <= _REC_MAX_SEGS:
        raise _bad("unknown flags, reserved field or %d segments" % nseg)
    segs, off, end = [], _REC_HDR.size, len(data) - 4
    for k in range(nseg):
        if end - off < 8:
            raise _bad("segment list ends early")
        w, ns = _struct.unpack_from("<II", data, off)
        off += 8
        if w < 1 or ns not in (1, w) or end - off < 8 * ns:
            raise _bad("segment %d: %d trainers with %d step counts" % (k, w, ns))
        segs.append({"world_size": w, "steps": list(_struct.unpack_from("<%dQ" % ns, data, off))})
        off += 8 * ns
    if off != end:
        raise _bad("%d bytes after the last segment" % (end - off))
    return {"format": RECORD_FORMAT, "version": RECORD_VERSION, "num_samples": n, "seed": seed,
            "dataset_hash": dhash, "batch_size": batch, "world_size": world,
            "drop_last": bool(flags & _REC_DROP_LAST), "shuffle": bool(flags & _REC_SHUFFLE),
            "epoch": epoch, "rank": None if rank == RECORD_ALL_RANKS else rank,
            "segments": segs}


def _c_record(state):
    lib = _load_records()
    data = record_encode(state)
    p = ctypes.c_void_p()
    rc = lib.seer_record_decode(data, len(data), ctypes.byref(p))
    if rc < 0:
        raise _error(rc)
    return p


def _py_record(p):
    lib = _load_records()
    try:
        n = lib.seer_record_encode(p, None, 0)
        buf = ctypes.create_string_buffer(n)
        lib.seer_record_encode(p, buf, n)
        return record_decode(buf.raw)
    finally:
        lib.seer_record_free(p)


def record_merge(states):
    """One record from the records of several ranks (each DDP rank saves its
    own). Raises SeerError when they are not of one job and one moment, or
    when ranks disagree and some ranks' records are missing."""
    lib = _load_records()
    ptrs = []
    try:
        for st in states:
            ptrs.append(_c_record(st))
        arr = (ctypes.c_void_p * max(1, len(ptrs)))(*[p.value for p in ptrs])
        out = ctypes.c_void_p()
        rc = lib.seer_record_merge(arr, len(ptrs), ctypes.byref(out))
        if rc < 0:
            raise _error(rc)
        return _py_record(out)
    finally:
        for p in ptrs:
            lib.seer_record_free(p)


def _flags(drop_last, shuffle):
    return (SAMPLER_DROP_LAST if drop_last else 0) | (0 if shuffle else SAMPLER_NO_SHUFFLE)


def record_check(state, num_samples, seed, batch_size, drop_last=False, shuffle=True,
                 dataset_hash=0, world_size=None):
    """Raises SeerError naming the field and both values when `state` cannot
    resume this job (another dataset, seed, batch size, drop_last, shuffle);
    another world size is allowed (elastic resume)."""
    lib = _load_records()
    rec = _c_record(state)
    s = ctypes.c_void_p()
    try:
        w = state["world_size"] if world_size is None else world_size
        rc = lib.seer_sampler_resume(num_samples, seed, w, batch_size,
                                     _flags(drop_last, shuffle), dataset_hash, None,
                                     ctypes.byref(s))
        if rc == 0:
            rc = lib.seer_record_check(rec, s)
        if rc < 0:
            raise _error(rc)
    finally:
        lib.seer_record_free(rec)
        if s:
            lib.seer_sampler_free(s)


class ElasticSampler(Sampler):
    """The access sequence of a job resumed from a record (state=None: a fresh
    job), with any world size: the interrupted epoch's unconsumed samples
    re-sharded over world_size ranks, then plain epochs. ``start`` is the
    (epoch, step) the job starts at; batch(epoch, rank, step) answers for it
    and later epochs."""

    def __init__(self, num_samples, seed, world_size, batch_size, drop_last=False, shuffle=True,
                 dataset_hash=0, state=None):
        self._lib = lib = _load_records()
        self._s = None
        rec = _c_record(state) if state is not None else None
        out = ctypes.c_void_p()
        try:
            rc = lib.seer_sampler_resume(num_samples, seed, world_size, batch_size,
                                         _flags(drop_last, shuffle), dataset_hash, rec,
                                         ctypes.byref(out))
        finally:
            if rec is not None:
                lib.seer_record_free(rec)
        if rc < 0:
            raise _error(rc)
        self._s = out.value
        self.batch_size = batch_size
        self.world_size = world_size
        self.batches_per_epoch = lib.seer_sampler_batches_per_epoch(self._s)
        e, st = ctypes.c_uint64(), ctypes.c_uint64()
        lib.seer_sampler_start(self._s, ctypes.byref(e), ctypes.byref(st))
        self.start = (e.value, st.value)

    def epoch_batches(self, epoch):
        """Batches per rank in `epoch` (the remainder's count for a re-sharded
        epoch; 0 before the start)."""
        return self._lib.seer_sampler_epoch_batches(self._s, epoch)

    def state_dict(self, rank, epoch, steps):
        """The record of `rank` (None: every rank) having consumed `steps`
        batches of `epoch`, as a dict for torch.save."""
        out = ctypes.c_void_p()
        r = RECORD_ALL_RANKS if rank is None else rank
        rc = self._lib.seer_sampler_record(self._s, r, epoch, steps, ctypes.byref(out))
        if rc < 0:
            raise _error(rc)
        return _py_record(out)
# ==== end of checkpoint records and elastic resume ==========================
