"""seer: mini-batches from the node's seerd, as zero-copy numpy views.

    import seer
    with seer.Loader() as loader:          # rank/world from the launcher's environment
        for epoch in range(loader.epochs):
            for batch in loader:           # one epoch per `for`
                for x, y in zip(batch.samples, batch.labels):
                    train(x, y)

Lifetime: a batch's sample arrays are read-only views of the daemon's shared
memory. Their bytes are the batch's until the batch is released: explicitly
with ``batch.release()`` (or leaving ``with batch:``), or implicitly when the
iterator moves to the next batch (``for batch in loader`` releases the batch
it yielded before when you ask for the next). Copy (``np.array(x)``) what you
keep longer. Writing to a view raises (numpy). A view never dangles: the
shim maps the shared memory itself and the mapping lives as long as any view
does, also after ``close()`` or after the Loader is garbage-collected (the
bytes of a released batch may then have been replaced by another batch).

After ``close()`` (from any thread; a thread waiting in ``next_batch()``
then gets a SeerError), every call raises SeerError instead of touching freed
memory. Nothing here mirrors a C layout: sizes, offsets, constants and dtype
codes come from libseer at load time, and a library that does not match the
shim is refused with an ImportError.

Uses Debian's numpy (/usr/bin/python3). Finds libseer through $SEER_LIB, the
path recorded by `make install`, the source tree's lib/ directory, or the
system library path.
"""

import ctypes
import ctypes.util
import errno
import mmap
import os
import re
import signal
import sys
import threading
import time
import weakref

import numpy as np

__all__ = ["Loader", "Batch", "SeerError", "JobError", "Sampler", "EndOfEpoch", "EndOfJob"]

_INT_MAX = 2**31 - 1
_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1


def _check_int(name, v, lo, hi):
    """v as an int in [lo, hi], or ValueError naming the argument (ctypes
    would silently truncate: 2**40 as a C int is 0)."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError("%s must be an integer, not %r" % (name, v))
    v = int(v)
    if not lo <= v <= hi:
        raise ValueError("%s=%d is out of range [%d, %d]" % (name, v, lo, hi))
    return v


class SeerError(RuntimeError):
    """A seer call failed; .code is the seer/errno code, str() the daemon's reason.
    seer.ESHUTDOWN: seerd stopped the job (SIGTERM, seerctl stop); seer.EDAEMON:
    seerd went away without stopping it (crashed, killed)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class JobError(SeerError, ValueError):
    """seerd refused the job this trainer declared (batch_size, shuffle,
    drop_last, seed, epochs, dataset): its config, or the job's first
    trainer, set another value; str() names both values and where each came
    from."""


class EndOfEpoch(Exception):
    pass


class EndOfJob(Exception):
    pass


class _Options(ctypes.Structure):
    # checked field by field against seer_options_offset() when loading
    _fields_ = [
        ("socket_path", ctypes.c_char_p),
        ("job_id", ctypes.c_char_p),
        ("rank", ctypes.c_int),
        ("world_size", ctypes.c_int),
        ("flags", ctypes.c_uint),
        ("start_epoch", ctypes.c_uint64),
        ("start_step", ctypes.c_uint64),
        ("connect_timeout_ms", ctypes.c_int),
        ("record", ctypes.c_char_p),
        ("record_len", ctypes.c_size_t),
        ("reconnect_ms", ctypes.c_int),
        ("max_held", ctypes.c_int),
        ("job", ctypes.c_uint),
        ("batch_size", ctypes.c_uint32),
        ("seed", ctypes.c_uint64),
        ("epochs", ctypes.c_uint64),
        ("shuffle", ctypes.c_int),
        ("drop_last", ctypes.c_int),
        ("dataset", ctypes.c_char_p),
    ]


class _Consts:
    """SEER_* values and dtypes, read from libseer by name."""


_C = _Consts()
_lib = None
_load_lock = threading.Lock()
_CONSTANTS = ("SEER_EEPOCH", "SEER_EEND", "SEER_ESHUTDOWN", "SEER_EBATCH", "SEER_ENOTHELD",
              "SEER_EDAEMON", "SEER_EREFUSED", "SEER_EDATASET", "SEER_ECONFIG",
              "SEER_OPT_START_AT", "SEER_OPT_RECONNECT", "SEER_OPT_TAKE_AHEAD",
              "SEER_JOB_BATCH_SIZE", "SEER_JOB_SHUFFLE", "SEER_JOB_DROP_LAST", "SEER_JOB_SEED",
              "SEER_JOB_EPOCHS", "SEER_JOB_DATASET",
              "SEER_SAMPLER_DROP_LAST",
              "SEER_SAMPLER_NO_SHUFFLE", "SEER_MAX_DIMS")


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


def _signatures():
    P, U64, I64, U32, I, S = (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int64,
                              ctypes.c_uint32, ctypes.c_int, ctypes.c_char_p)
    return {
        "seer_connect": (I, [ctypes.POINTER(_Options), ctypes.POINTER(P)]),
        "seer_close": (None, [P]),
        "seer_next": (I, [P, I, ctypes.POINTER(P)]),
        "seer_release": (I, [P, P]),
        "seer_handed": (I, [P, P]),
        "seer_alive": (I, [P]),
        "seer_seek": (I, [P, U64, U64]),
        "seer_batch_len": (U32, [P]),
        "seer_batch_epoch": (U64, [P]),
        "seer_batch_step": (U64, [P]),
        "seer_batch_error": (S, [P]),
        "seer_batch_export": (I, [P, P, P, P, P, P]),
        "seer_arena_fd": (I, [P]),
        "seer_arena_size": (U64, [P]),
        "seer_arena_reader": (I, [P, P]),
        "seer_type_count": (U32, [P]),
        "seer_type_info": (I, [P, U32, ctypes.POINTER(I), ctypes.POINTER(U64), I]),
        "seer_rank": (I, [P]),
        "seer_world_size": (I, [P]),
        "seer_num_samples": (U64, [P]),
        "seer_epochs": (U64, [P]),
        "seer_batches_per_epoch": (U64, [P]),
        "seer_batch_size": (U32, [P]),
        "seer_seed": (U64, [P]),
        "seer_state": (I64, [P, P, ctypes.c_size_t]),
        "seer_epoch_batches": (U64, [P, U64]),
        "seer_dataset_hash": (U64, [P]),
        "seer_reconnects": (U64, [P]),
        "seer_strerror": (S, [I]),
        "seer_errmsg": (S, []),
        "seer_options_size": (ctypes.c_size_t, []),
        "seer_options_offset": (I64, [S]),
        "seer_socket_path": (I, [S, ctypes.c_char_p, ctypes.c_size_t]),
        "seer_constant": (I, [S, ctypes.POINTER(I64)]),
        "seer_dtype_name": (S, [I]),
        "seer_sampler_new": (P, [U64, U64, U32, U32, ctypes.c_uint]),
        "seer_sampler_free": (None, [P]),
        "seer_sampler_batches_per_epoch": (U64, [P]),
        "seer_sampler_batch": (I, [P, U64, U32, U64, ctypes.POINTER(U64)]),
        # checkpoint records and elastic resume
        "seer_sampler_resume": (I, [U64, U64, U32, U32, ctypes.c_uint, U64, P,
                                    ctypes.POINTER(P)]),
        "seer_sampler_start": (None, [P, ctypes.POINTER(U64), ctypes.POINTER(U64)]),
        "seer_sampler_epoch_batches": (U64, [P, U64]),
        "seer_sampler_record": (I, [P, U32, U64, U64, ctypes.POINTER(P)]),
        "seer_record_check": (I, [P, P]),
        "seer_record_encode": (I64, [P, P, ctypes.c_size_t]),
        "seer_record_decode": (I, [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(P)]),
        "seer_record_merge": (I, [ctypes.POINTER(P), ctypes.c_size_t, ctypes.POINTER(P)]),
        "seer_record_free": (None, [P]),
    }


def _optional_signatures():
    """Exports a libseer may lack (older than the shim's optional features):
    their attribute is None then, and the feature reports itself absent."""
    P, I = ctypes.c_void_p, ctypes.c_int
    return {
        # the batch tensor of seerd's image transform ([transform] decode = image)
        "seer_batch_tensor": (I, [P, ctypes.POINTER(P), ctypes.POINTER(I), ctypes.POINTER(I),
                                  ctypes.POINTER(ctypes.c_uint64), I]),
        "seer_arena_base": (P, [P]),
    }


def _introspect(lib, path):
    """Constants and dtypes from libseer; refuse a library whose options
    layout differs from _Options."""
    want = lib.seer_options_size()
    if ctypes.sizeof(_Options) != want:
        raise ImportError("libseer at %s has a %d-byte seer_options_t, this shim %d: install "
                          "the shim that came with it" % (path, want, ctypes.sizeof(_Options)))
    for name, _ in _Options._fields_:
        off = lib.seer_options_offset(name.encode())
        if off != getattr(_Options, name).offset:
            raise ImportError("libseer at %s puts seer_options_t.%s at %d, this shim at %d: "
                              "install the shim that came with it" %
                              (path, name, off, getattr(_Options, name).offset))
    v = ctypes.c_int64()
    for name in _CONSTANTS:
        if lib.seer_constant(name.encode(), ctypes.byref(v)) != 0:
            raise ImportError("libseer at %s does not know %s: too old for this shim" %
                              (path, name))
        setattr(_C, name[len("SEER_"):], v.value)
    _C.DTYPES = {}  # dtype code -> numpy dtype (None: opaque bytes)
    code = 0
    while True:
        name = lib.seer_dtype_name(code)
        if name is None:
            break
        name = name.decode()
        _C.DTYPES[code] = None if name == "bytes" else np.dtype(name)
        code += 1


def _load():
    global _lib
    with _load_lock:
        if _lib is not None:
            return _lib
        path = _find_lib()
        lib = ctypes.CDLL(path)
        for name, (res, args) in _signatures().items():
            try:
                f = getattr(lib, name)
            except AttributeError:
                raise ImportError("libseer at %s lacks %s: too old for this shim" % (path, name))
            f.restype = res
            f.argtypes = args
        for name, (res, args) in _optional_signatures().items():
            f = getattr(lib, name, None)
            if f is not None:
                f.restype = res
                f.argtypes = args
            setattr(lib, "opt_" + name, f)
        _introspect(lib, path)
        _lib = lib
        return lib


def __getattr__(name):
    """seer.ESHUTDOWN, seer.EDAEMON, ...: libseer's codes (SeerError.code);
    seer.checkpoint (imported on first use: it needs torch)."""
    if name == "checkpoint":
        import importlib
        return importlib.import_module(".checkpoint", __name__)
    if name in ("EEPOCH", "EEND", "ESHUTDOWN", "EBATCH", "ENOTHELD", "EDAEMON", "EREFUSED",
                "EDATASET", "ECONFIG"):
        _load()
        return getattr(_C, name)
    raise AttributeError("module 'seer' has no attribute %r" % name)


def _error(code):
    lib = _load()
    msg = lib.seer_errmsg().decode(errors="replace")
    if not msg:
        msg = lib.seer_strerror(code).decode(errors="replace")
    return SeerError(code, msg)


def _closed(what):
    return SeerError(-errno.EBADF, "%s: the Loader is closed" % what)


class Batch:
    """One mini-batch. ``samples[i]`` is a read-only numpy view (dtype and
    shape from the dataset format; uint8 bytes for opaque samples) whose bytes
    are the batch's until it is released. ``labels`` and ``ids`` are numpy
    int64 / uint64 copies and stay valid."""

    __slots__ = ("_loader", "_ptr", "epoch", "step", "ids", "labels", "sizes", "_offsets",
                 "_types", "_samples", "error", "_arena", "_gen")

    def __init__(self, loader, ptr):
        lib = loader._lib
        self._loader = loader
        self._ptr = ptr
        # the arena this batch's offsets point into: a reconnect maps another
        # one for later batches, this batch keeps reading its own (issue 28)
        self._arena = loader._arena
        self._gen = loader._arena_gen
        self.epoch = lib.seer_batch_epoch(ptr)
        self.step = lib.seer_batch_step(ptr)
        n = lib.seer_batch_len(ptr)
        self._offsets = np.empty(n, np.uint64)
        self.sizes = np.empty(n, np.uint64)
        self.labels = np.empty(n, np.int64)
        self.ids = np.empty(n, np.uint64)
        self._types = np.empty(n, np.uint32)
        rc = lib.seer_batch_export(ptr, self._offsets.ctypes.data, self.sizes.ctypes.data,
                                   self.labels.ctypes.data, self.ids.ctypes.data,
                                   self._types.ctypes.data)
        if rc != n:  # closed by another thread meanwhile
            self._ptr = None
            raise _error(rc if rc < 0 else -errno.EBADF)
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
            raise SeerError(-errno.ESTALE, "batch %d:%d already released: its views are gone" %
                            (self.epoch, self.step))
        if self._samples is None:
            arena = self._arena
            if arena is None:
                raise _closed("batch %d:%d" % (self.epoch, self.step))
            types = self._loader._types
            out = []
            for off, size, t in zip(self._offsets.tolist(), self.sizes.tolist(),
                                    self._types.tolist()):
                if off + size > len(arena) or t >= len(types):
                    raise SeerError(-errno.EPROTO, "batch %d:%d: sample outside the arena" %
                                    (self.epoch, self.step))
                v = arena[off:off + size]
                dt, shape = types[t]
                if dt is not None:
                    v = v.view(dt).reshape(shape)
                out.append(v)
            self._samples = out
        return self._samples

    def __getitem__(self, i):
        return self.samples[i]

    @property
    def tensor(self):
        """The whole batch as ONE read-only numpy array when seerd transforms
        images ([transform] decode = image): [n, 3, H, W] float32/float16
        (layout NCHW) or [n, H, W, 3] uint8 (NHWC), a zero-copy view of the
        arena valid until the batch is released (copy what you keep). None
        when the batch is file bytes or format arrays."""
        if self._ptr is None:
            raise SeerError(-errno.ESTALE, "batch %d:%d already released: its tensor is gone" %
                            (self.epoch, self.step))
        loader = self._loader
        lib = loader._lib
        if lib.opt_seer_batch_tensor is None:
            return None
        data, dt, lay = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_int()
        dims = (ctypes.c_uint64 * _C.MAX_DIMS)()
        nd = lib.opt_seer_batch_tensor(self._ptr, ctypes.byref(data), ctypes.byref(dt),
                                       ctypes.byref(lay), dims, _C.MAX_DIMS)
        if nd < 0:
            raise _error(nd)
        if nd == 0:
            return None
        c, arena = loader._c, self._arena
        if c is None or arena is None:
            raise _closed("batch %d:%d" % (self.epoch, self.step))
        if self._gen != loader._arena_gen:
            raise SeerError(-errno.ESTALE, "batch %d:%d was taken before seerd restarted: its "
                            "tensor is no longer described (read it before the next batch, or "
                            "pass copy=True)" % (self.epoch, self.step))
        npdt = _C.DTYPES.get(dt.value)
        shape = tuple(dims[k] for k in range(nd))
        off = data.value - lib.opt_seer_arena_base(c)
        nbytes = int(np.prod(shape)) * (npdt.itemsize if npdt is not None else 0)
        if npdt is None or off < 0 or off + nbytes > len(arena):
            raise SeerError(-errno.EPROTO, "batch %d:%d: batch tensor outside the arena" %
                            (self.epoch, self.step))
        return arena[off:off + nbytes].view(npdt).reshape(shape)

    def release(self):
        """Give the batch back; its sample views then no longer hold its bytes.
        Nothing happens when the Loader was closed."""
        ptr = self._ptr
        if ptr is None:
            return
        c = self._loader._c
        if c is not None:
            # the handle is dropped only after libseer took it back: a Ctrl-C
            # before the call leaves it to be released again (ENOTHELD then
            # says the call had gone through)
            rc = self._loader._lib.seer_release(c, ptr)
            if rc < 0 and rc not in (-errno.EBADF, _C.ENOTHELD):
                raise _error(rc)
        self._ptr, self._samples, self._arena = None, None, None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False


_RANK_ENV = (("SEER_RANK", "SEER_WORLD_SIZE"), ("RANK", "WORLD_SIZE"),
             ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
             ("SLURM_PROCID", "SLURM_NTASKS"))


def _env_rank():
    """(rank, world, "NAME=v, NAME=v") from the launcher's environment, read as
    libseer reads it (client/connect.c rank_from_env: the first pair whose
    two variables are decimal integers in [0, INT_MAX]), or None."""
    def val(name):
        v = os.environ.get(name)
        if not v or not re.fullmatch(r"[ \t\n\v\f\r]*[+-]?[0-9]+", v):
            return None
        x = int(v)
        return x if 0 <= x <= _INT_MAX else None
    for rn, wn in _RANK_ENV:
        r, w = val(rn), val(wn)
        if r is not None and w is not None:
            return r, w, "%s=%s, %s=%s" % (rn, os.environ[rn].strip(), wn, os.environ[wn].strip())
    return None


def _dist_rank():
    """(rank, world) of an initialised torch.distributed, else None. Never
    imports torch: a process that did not import it has no process group."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size()


def _check_bool(name, v):
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError("%s must be True or False, not %r" % (name, v))
    return bool(v)


class _EpochSampler:
    """loader.sampler: DistributedSampler's surface over seerd's stream.
    seerd computes the order; set_epoch(e) selects the epoch the next `for`
    delivers (Loader.set_epoch)."""

    def __init__(self, loader):
        self._loader = weakref.ref(loader)

    def _l(self):
        loader = self._loader()
        if loader is None:
            raise _closed("sampler")
        return loader

    def set_epoch(self, epoch):
        self._l().set_epoch(epoch)

    @property
    def epoch(self):
        return self._l().epoch

    num_replicas = property(lambda self: self._l().world_size)
    rank = property(lambda self: self._l().rank)
    seed = property(lambda self: self._l().seed)
    shuffle = property(lambda self: self._l().shuffle)
    drop_last = property(lambda self: self._l().drop_last)


class _DatasetView:
    """loader.dataset: what seerd serves, as far as the job says (its samples
    are read by seerd; this view does not index them)."""

    def __init__(self, loader):
        self._loader = weakref.ref(loader)

    def _l(self):
        loader = self._loader()
        if loader is None:
            raise _closed("dataset")
        return loader

    def __len__(self):
        return self._l().num_samples

    num_samples = property(lambda self: self._l().num_samples)
    dataset_hash = property(lambda self: self._l().dataset_hash)

    def __repr__(self):
        loader = self._loader()
        n = loader._facts["num_samples"] if loader is not None and loader._facts else "?"
        return "<seer dataset view: %s samples served by seerd>" % n


def _fact_property(name, doc):
    return property(lambda self: self._fact(name), doc=doc)


class Loader:
    """Connection of one trainer rank to its node's seerd.

    Arguments (all optional): socket (else $SEER_SOCKET or derived from the
    job id), job_id (else $SEER_JOB_ID / $SLURM_JOB_ID), rank and world_size
    (else torch.distributed's when it is initialised, else the launcher's
    environment; see below), start=(epoch, step) to start there instead of
    where this rank left off, timeout in seconds for each batch (None: wait
    forever), connect_timeout in seconds (every step of connecting and of a
    seek ends within it).

    The script declares the job: batch_size, shuffle, drop_last, seed,
    epochs and dataset (the dataset's path as this process sees it) travel
    in the handshake. seerd takes what its config left unset from the job's
    first trainer; a value that differs from seerd's config, or from what
    the job's first trainer declared, is refused: JobError (a ValueError and
    a SeerError) naming both values and where each came from. None: take
    seerd's.

    Connecting is lazy (docs/torch.md): the constructor checks its arguments;
    the connection is made by the first call that needs seerd -- iteration,
    next_batch(), state_dict(), seek(), len(), set_epoch() or a job fact
    (rank, epochs, batch_size, ...) -- or by connect(). Errors of connecting
    (no seerd, a refusal, a job that differs from the arguments) come from
    that call.

    Rank and world size: explicit rank=/world_size= win; else an initialised
    torch.distributed's get_rank()/get_world_size() (torch.multiprocessing.spawn
    sets no environment); else the launcher's environment (SEER_RANK/
    SEER_WORLD_SIZE, RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, PMI_*, SLURM_PROCID/
    SLURM_NTASKS; none: rank 0 of 1). torch.distributed disagreeing with the
    environment or with explicit arguments raises ValueError naming both.

    Checkpoints (the torchdata StatefulDataLoader convention, docs/resume.md):
    state=loader_state (a dict from state_dict(), as torch.load gives it back)
    resumes right after the batches it says were consumed, with this or
    another world size; so does load_state_dict(state) before the first use.
    state_dict() is this rank's position (every batch the iterator yielded
    counts as consumed): save it with the model.
    reconnect=seconds: when seerd goes away (crash, restart), wait up to that
    long for a restarted one and continue the stream exactly after the last
    batch handed out (a delay, not an error); None (default): SeerError at once.
    max_held: batches you may hold at once (taken, not released), declared to
    seerd, which refuses the connection when it cannot serve that many
    (None: seerd's [job] max_held, 2).

    Epochs: one `for` delivers (the rest of) one epoch and ends at its end.
    A `for` left early (break) leaves the epoch open: the next `for`
    continues it, unless set_epoch() chose another epoch. len(loader) is the
    batches of that epoch; one iterator at a time (a second iter() while one
    is live raises).

    Positions (docs/resume.md): a batch counts as done for seerd's saved
    position (resume = auto) once released; the iterator releases the batch
    it yielded when the next is requested or the loop ends. Batches held
    when the process dies or closes are delivered again after a restart.
    """

    def __init__(self, socket=None, job_id=None, rank=None, world_size=None, start=None,
                 timeout=None, connect_timeout=30.0, state=None, reconnect=None, max_held=None,
                 *, batch_size=None, shuffle=None, drop_last=None, seed=None, epochs=None,
                 dataset=None, _take_ahead=False):
        self._c = None
        self._closed = False
        self._facts = None
        self._arena = None
        self._arena_gen = 0
        self._lib = _load()
        self._held = None
        self._pending = None  # what libseer delivered and no caller has yet (see _take)
        self._out = ctypes.c_void_p()  # seer_next's answer, kept across an interrupt
        self._taken = False
        self._connect_lock = threading.Lock()
        # the user's view of the stream (docs/torch.md, "Epochs"): the live
        # iterator and its epoch, the iterators' generation (seek() ends the
        # live one), and whether the last thing handed out was a batch (its
        # epoch in _last_epoch) rather than an epoch's end
        self._live = None
        self._live_gen = -1
        self._iter_gen = 0
        self._iter_epoch = None
        self._mid_epoch = False
        self._last_epoch = None
        self._timeout_ms = self._ms("timeout", timeout)
        o = _Options()
        o.socket_path = os.fsencode(socket) if socket else None
        o.job_id = job_id.encode() if job_id else None
        self._explicit_rank = None
        if world_size is not None:
            if rank is None:
                raise ValueError("rank is required with world_size")
            o.world_size = _check_int("world_size", world_size, 1, _INT_MAX)
            o.rank = _check_int("rank", rank, 0, o.world_size - 1)
            self._explicit_rank = (o.rank, o.world_size)
        elif rank is not None:
            raise ValueError("world_size is required with rank")
        if start is not None:
            o.flags |= _C.OPT_START_AT
            o.start_epoch = _check_int("start epoch", start[0], 0, _U64_MAX)
            o.start_step = _check_int("start step", start[1], 0, _U64_MAX)
        o.connect_timeout_ms = self._ms("connect_timeout", connect_timeout)
        if o.connect_timeout_ms < 0:
            raise ValueError("connect_timeout must be a number of seconds, not None")
        if reconnect is not None:
            o.flags |= _C.OPT_RECONNECT
            o.reconnect_ms = max(1, self._ms("reconnect", reconnect))
        if max_held is not None:
            o.max_held = _check_int("max_held", max_held, 1, 4093)
        if _take_ahead:
            o.flags |= _C.OPT_TAKE_AHEAD
        want = {}
        if batch_size is not None:
            want["batch_size"] = _check_int("batch_size", batch_size, 1, _U32_MAX)
        if shuffle is not None:
            want["shuffle"] = _check_bool("shuffle", shuffle)
        if drop_last is not None:
            want["drop_last"] = _check_bool("drop_last", drop_last)
        if seed is not None:
            want["seed"] = _check_int("seed", seed, 0, _U64_MAX)
        if epochs is not None:
            want["epochs"] = _check_int("epochs", epochs, 1, _U64_MAX)
        bits = {"batch_size": _C.JOB_BATCH_SIZE, "shuffle": _C.JOB_SHUFFLE,
                "drop_last": _C.JOB_DROP_LAST, "seed": _C.JOB_SEED, "epochs": _C.JOB_EPOCHS}
        for key, v in want.items():
            o.job |= bits[key]
            setattr(o, key, int(v))
        if dataset is not None:
            o.job |= _C.JOB_DATASET
            o.dataset = os.fsencode(os.path.abspath(os.fspath(dataset)))
        self._want = want
        self._opts = o
        self._state = self._record(state)

    @staticmethod
    def _record(state):
        """The record bytes of `state` (None: none); a malformed dict raises here."""
        if state is None:
            return None
        return bytes(state) if isinstance(state, (bytes, bytearray)) else record_encode(state)

    # ---- connecting ---------------------------------------------------------

    def connect(self):
        """Connect now (otherwise the first call that needs seerd does);
        raises what connecting raises. Returns self; nothing when connected."""
        self._client("connect")
        return self

    def _client(self, what):
        """The C client, connecting first when this Loader has not yet."""
        c = self._c
        if c is not None:
            return c
        with self._connect_lock:
            if self._closed:
                raise _closed(what)
            if self._c is None:
                self._connect(self._state)
            return self._c

    def _resolve_rank(self):
        """Rank and world size for the connection (explicit, torch.distributed,
        or left to libseer's environment reading); ValueError when sources
        disagree."""
        o = self._opts
        dist = _dist_rank()
        if self._explicit_rank is not None:
            if dist is not None and dist != self._explicit_rank:
                raise ValueError(
                    "rank=%d, world_size=%d given, but torch.distributed is initialised as rank "
                    "%d of %d: pass torch.distributed's (or nothing: the loader reads it)" %
                    (self._explicit_rank + dist))
            o.rank, o.world_size = self._explicit_rank
        elif dist is not None:
            env = _env_rank()
            if env is not None and env[:2] != dist:
                raise ValueError(
                    "torch.distributed is initialised as rank %d of %d, but the launcher's "
                    "environment says rank %d of %d (%s): which is this process? Pass "
                    "rank= and world_size= explicitly (they override the environment), or "
                    "fix the environment" % (dist + env))
            o.rank, o.world_size = dist
        else:
            o.rank, o.world_size = 0, 0  # libseer reads the launcher's environment

    def _connect(self, state):
        """Connect with self._opts (and the record bytes `state`, or none)."""
        self._resolve_rank()
        o = self._opts
        o.record = state
        o.record_len = len(state) if state else 0
        c = ctypes.c_void_p()
        deadline = time.monotonic() + o.connect_timeout_ms / 1000.0
        while True:
            rc = self._lib.seer_connect(ctypes.byref(o), ctypes.byref(c))
            # seerd refuses a new job (another definition or world size) while
            # the last job's reads still land: a moment's wait, not an error
            if rc >= 0 or "try again in a moment" not in str(_error(rc)) or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.05)
        o.record, o.record_len = None, 0
        if rc < 0:
            e = _error(rc)
            msg = str(e)
            if rc == _C.ECONFIG and any(k in msg for k in (": job.", ": dataset.path",
                                                           ": this trainer's job.")):
                raise JobError(rc, msg) from None
            if state is not None and rc == _C.EREFUSED and "resume plan" in str(e):
                raise SeerError(rc, "%s. seerd fixed this job's plan at its first connection: "
                                "give the state to every rank before its first use "
                                "(Loader(state=...) or load_state_dict() right after "
                                "constructing)" % e) from None
            raise e
        self._c = c.value
        try:
            self._map_arena()
            lib = self._lib
            self._reconnects = lib.seer_reconnects(self._c)
            f = {"rank": lib.seer_rank(self._c), "world_size": lib.seer_world_size(self._c),
                 "num_samples": lib.seer_num_samples(self._c),
                 "epochs": lib.seer_epochs(self._c),
                 "batches_per_epoch": lib.seer_batches_per_epoch(self._c),
                 "batch_size": lib.seer_batch_size(self._c), "seed": lib.seer_seed(self._c),
                 "dataset_hash": lib.seer_dataset_hash(self._c)}
            rec = self._position()
            f["drop_last"], f["shuffle"] = rec["drop_last"], rec["shuffle"]
            self._check_job(f)
        except BaseException:
            self._disconnect()
            raise
        self._facts = f
        self._mid_epoch = False
        self._last_epoch = None
        if self._closed:  # close() from another thread while connecting
            self._disconnect()
            raise _closed("connecting")

    def _check_job(self, f):
        """The constructor's job arguments against seerd's job."""
        for key, v in self._want.items():
            if f[key] == v:
                continue
            if key == "epochs":
                raise ValueError("epochs=%d but seerd's job has %d epoch%s: seerd defines the "
                                 "job (set [job] epochs = %d in its config, or pass epochs=%d)"
                                 % (v, f[key], "" if f[key] == 1 else "s", v, f[key]))
            show = (lambda x: str(x).lower()) if isinstance(v, bool) else str
            raise ValueError("%s=%s but seerd's [job] %s is %s: seerd defines the job (set "
                             "[job] %s = %s in its config, or pass %s=%s)" %
                             (key, v, key, show(f[key]), key, show(v), key, f[key]))

    def _fact(self, name):
        f = self._facts
        if f is None:
            self._client(name)
            f = self._facts
        return f[name]

    rank = _fact_property("rank", "this trainer's rank")
    world_size = _fact_property("world_size", "the job's world size")
    num_samples = _fact_property("num_samples", "samples in the dataset")
    epochs = _fact_property("epochs", "epochs in the job ([job] epochs)")
    batches_per_epoch = _fact_property("batches_per_epoch", "batches per rank in a plain epoch")
    batch_size = _fact_property("batch_size", "samples per batch ([job] batch_size)")
    seed = _fact_property("seed", "the job's shuffle seed ([job] seed)")
    dataset_hash = _fact_property("dataset_hash", "the catalog's fingerprint")
    drop_last = _fact_property("drop_last", "[job] drop_last")
    shuffle = _fact_property("shuffle", "[job] shuffle")

    @property
    def sampler(self):
        """DistributedSampler's surface: set_epoch(e), epoch, num_replicas,
        rank, seed, shuffle, drop_last (seerd computes the order)."""
        s = self.__dict__.get("_sampler")
        if s is None:
            s = self.__dict__["_sampler"] = _EpochSampler(self)
        return s

    @property
    def dataset(self):
        """A view of the dataset seerd serves: len() = num_samples."""
        s = self.__dict__.get("_dataset")
        if s is None:
            s = self.__dict__["_dataset"] = _DatasetView(self)
        return s

    def _position(self):
        return self.state_dict()

    # ---- epochs --------------------------------------------------------------

    def _live_iter(self):
        """The live iterator of this Loader (started, not finished, not ended
        by a seek), or None."""
        ref = self._live
        it = ref() if ref is not None else None
        if it is None or getattr(it, "gi_frame", 1) is None or \
                self._live_gen != self._iter_gen:
            return None
        return it

    @property
    def epoch(self):
        """The epoch the running `for` delivers, or else the one the next `for`
        will: after a `for` left early, the same epoch (it continues it)."""
        if self._live_iter() is not None:
            return self._iter_epoch
        return self._position()["epoch"]

    def __bool__(self):
        return True  # a Loader is an object, not an empty epoch: `if loader` never connects

    def __len__(self):
        """Batches this rank gets in `epoch` (the running or next `for`'s), as
        DataLoader's len; a `for` continuing an epoch delivers its rest."""
        return self.epoch_batches(self.epoch)

    def set_epoch(self, epoch):
        """Select the epoch the next `for` delivers (as DistributedSampler's
        set_epoch before each epoch): the epoch already being delivered (or
        next, see `epoch`) is a no-op, so a `for` left early continues it;
        another epoch, earlier or later, seeks to its start (releasing held
        batches, ending a live iterator)."""
        epoch = _check_int("epoch", epoch, 0, _U64_MAX)
        if epoch >= self.epochs:
            raise ValueError("set_epoch(%d): seerd's job has %d epoch%s (0 to %d)" %
                             (epoch, self.epochs, "" if self.epochs == 1 else "s",
                              self.epochs - 1))
        if epoch != self.epoch:
            self.seek(epoch, 0)

    def epoch_batches(self, epoch):
        """Batches per rank in `epoch` (an epoch re-sharded on resume has its own)."""
        c = self._client("epoch_batches")
        return self._lib.seer_epoch_batches(c, _check_int("epoch", epoch, 0, _U64_MAX))

    def state_dict(self):
        """This rank's position as a dict of ints, bools, lists and strings
        (torch.save / json keep it): every batch the loader gave out counts as
        consumed. Resume with Loader(state=...) or load_state_dict()."""
        c = self._client("state_dict")
        n = self._lib.seer_state(c, None, 0)
        if n < 0:
            raise _error(n)
        buf = ctypes.create_string_buffer(n)
        got = self._lib.seer_state(c, buf, n)
        if got != n:
            raise _error(got if got < 0 else -errno.EIO)
        return record_decode(buf.raw)

    def load_state_dict(self, state):
        """Resume from `state` (state_dict()'s dict), StatefulDataLoader's
        convention: construct, load_state_dict(state), iterate. Before the
        first use it is kept for the connection (any world size); connected
        and before the first batch, it connects again with it (seerd may then
        refuse a record that needs another plan than the job's: another world
        size than the checkpoint's -- load it before any other use)."""
        if self._closed:
            raise _closed("load_state_dict")
        rec = self._record(state)  # a malformed dict fails here
        with self._connect_lock:
            if self._c is None:
                if self._closed:
                    raise _closed("load_state_dict")
                self._state = rec
                return
        if self._taken:
            raise SeerError(-errno.EBUSY, "load_state_dict: this Loader already gave out "
                            "batches; load the state into a new Loader (state=...)")
        self._disconnect()
        self._iter_gen += 1
        self._state = rec
        self._client("load_state_dict")

    # ---- the stream --------------------------------------------------------------

    @staticmethod
    def _ms(name, seconds):
        """Seconds (None: forever) as the int milliseconds C takes (-1: forever)."""
        if seconds is None:
            return -1
        ms = int(float(seconds) * 1000)
        if not 0 <= ms <= _INT_MAX:
            raise ValueError("%s=%r seconds is out of range [0, %d]" % (name, seconds,
                                                                         _INT_MAX // 1000))
        return ms

    def _map_arena(self):
        """Map the arena ourselves: numpy views then hold the mapping, which
        stays valid after close() for as long as any view exists."""
        lib = self._lib
        fd = lib.seer_arena_fd(self._c)
        if fd < 0:
            raise _error(fd)
        try:
            size = lib.seer_arena_size(self._c)
            mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self._arena = np.frombuffer(mm, dtype=np.uint8)
        # libseer maps the pages the daemon filled into this mapping ahead of
        # our reads (warm epochs without page faults)
        rc = lib.seer_arena_reader(self._c, self._arena.ctypes.data)
        if rc < 0:
            raise _error(rc)
        self._types = []
        dims = (ctypes.c_uint64 * _C.MAX_DIMS)()
        dt = ctypes.c_int()
        for t in range(lib.seer_type_count(self._c)):
            nd = lib.seer_type_info(self._c, t, ctypes.byref(dt), dims, _C.MAX_DIMS)
            npdt = _C.DTYPES.get(dt.value)
            if nd < 0 or npdt is None:
                self._types.append((None, None))
            else:
                self._types.append((npdt, tuple(dims[i] for i in range(nd))))

    @property
    def closed(self):
        """True after close() (a Loader not yet connected is not closed)."""
        return self._closed

    def next_batch(self, timeout=None):
        """The next batch (you release it). Raises EndOfEpoch once after each
        epoch's last batch, EndOfJob after the job's last, SeerError on
        failure (a batch that failed to load is returned with .error set).
        A batch the iterator kept after its loop was left early is released
        first (this is the request after it)."""
        self._drop_held()
        try:
            b = self._take(timeout)
        except (EndOfEpoch, EndOfJob):
            self._mid_epoch = False
            raise
        self._handed_out(b.epoch)
        return b

    def _handed_out(self, epoch):
        """The user got a batch of `epoch` (the epoch's end not yet)."""
        self._mid_epoch = True
        self._last_epoch = epoch

    def _take(self, timeout=None):
        """next_batch without the user's epoch bookkeeping (the worker
        pipeline takes batches ahead of the user).

        Ctrl-C: libseer's wait for a batch is not interrupted by a signal, and
        Python raises KeyboardInterrupt only once the call returned, so a
        batch libseer delivered could be lost between its answer and the
        caller (held for ever, counted as handed, never seen: issue 28's
        review). libseer writes the batch into self._out, which outlives the
        call, and it is moved to self._pending and from there to the caller
        by assignments Python does not interrupt: a KeyboardInterrupt raised
        anywhere in between leaves the batch where the next request finds it
        first. (SIGINT is also blocked around the call in the main thread;
        another thread may still take it.)"""
        if self._pending is None:
            c = self._client("next_batch")
            rc = 0
            out = self._out
            if not out.value:  # (else: a batch an interrupted call left there)
                ms = self._timeout_ms if timeout is None else self._ms("timeout", timeout)
                main = threading.current_thread() is threading.main_thread()
                old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if main else None
                try:
                    rc = self._lib.seer_next(c, ms, ctypes.byref(out))
                finally:
                    if old is not None:
                        signal.pthread_sigmask(signal.SIG_SETMASK, old)
            n = self._lib.seer_reconnects(c)
            if n != self._reconnects:  # a restarted seerd: its arena is another
                self._map_arena()
                self._reconnects = n
                self._arena_gen += 1
            if out.value:
                self._taken = True
                self._pending, out.value = Batch(self, out.value), None
            elif rc == _C.EEPOCH:
                self._pending = EndOfEpoch
            elif rc == _C.EEND:
                self._pending = EndOfJob
            elif rc < 0:
                if self._c is None:
                    raise _closed("next_batch (closed while waiting)")
                raise _error(rc)
        item, self._pending = self._pending, None
        if item is EndOfEpoch:
            raise EndOfEpoch()
        if item is EndOfJob:
            raise EndOfJob()
        return item

    def _handed(self, batch):
        """A batch taken ahead (_take_ahead) reached the user: it counts in
        state_dict() and a reconnect continues after it."""
        if batch._ptr is None or self._c is None:
            return
        rc = self._lib.seer_handed(self._c, batch._ptr)
        if rc < 0:
            raise _error(rc)

    def _alive(self):
        """0 while seerd serves this Loader, else its stop or loss code."""
        c = self._c
        if c is None:
            raise _closed("next_batch")
        return self._lib.seer_alive(c)

    def _drop_held(self):
        held = self._held
        if held is not None:
            held.release()  # (interrupted: still _held, released by the next request)
            self._held = None

    def __iter__(self):
        """Iterate (the rest of) one epoch. The batch yielded is released when
        the next is requested (or the epoch ends): that is when seerd counts
        it as done. Leaving the loop early (break, an exception, Ctrl-C) keeps
        it held and readable; the next request releases it, and a crash or
        close() before that delivers it again after a restart
        (docs/resume.md). A `for` after one left early continues its epoch;
        one after the epoch's last batch starts the next epoch (even when the
        loop that got that batch did not see the epoch end). One iterator at
        a time: iter() while another is live raises SeerError (EBUSY)."""
        self._client("iterating")
        if self._live_iter() is not None:
            raise SeerError(-errno.EBUSY, "iter(loader): another iterator of this Loader is "
                            "live (a `for` that has not ended, or an iterator kept in a "
                            "variable): two iterators would split one stream between them. "
                            "Finish or drop the other (it.close(), del it) first, or "
                            "set_epoch()/seek() to restart the stream")
        epoch = self._position()["epoch"]
        # the previous loop got the epoch's last batch but not its end: that
        # end belongs to the epoch already delivered, not to this loop
        skip_end = self._mid_epoch and epoch != self._last_epoch
        self._iter_gen += 1
        it = self._iterate(self._iter_gen, skip_end)
        self._live, self._live_gen, self._iter_epoch = weakref.ref(it), self._iter_gen, epoch
        return it

    def _iterate(self, gen, skip_end):
        return self._batches(gen, skip_end)

    def _still(self, gen):
        """Raise in an iterator that seek(), set_epoch() or load_state_dict()
        ended."""
        if gen != self._iter_gen:
            raise SeerError(-errno.ESTALE, "this iterator was ended by seek(), set_epoch() "
                            "or load_state_dict(), which restart the stream: start a new `for`")

    def _end(self, skip_end):
        """An epoch's end reached the user's iterator: True when it ends the
        loop (False: the previous epoch's, skipped)."""
        self._mid_epoch = False
        return not skip_end

    def _batches(self, gen, skip_end):
        while True:
            self._still(gen)
            self._drop_held()
            try:
                b = self._take()
            except EndOfEpoch:
                if self._end(skip_end):
                    return
                skip_end = False
                continue
            except EndOfJob:
                self._mid_epoch = False
                return
            skip_end = False
            self._handed_out(b.epoch)
            if b.error is not None:
                msg = b.error
                self._held = b  # released with the next request, as any batch
                raise SeerError(_C.EBATCH, "batch %d:%d failed: %s" % (b.epoch, b.step, msg))
            self._held = b
            yield b

    def seek(self, epoch, step):
        """Restart this rank's stream at (epoch, step); releases held batches
        and ends a live iterator (the next `for` starts there)."""
        epoch = _check_int("epoch", epoch, 0, _U64_MAX)
        step = _check_int("step", step, 0, _U64_MAX)
        c = self._client("seek")
        self._drop_held()
        pending, self._pending = self._pending, None
        if isinstance(pending, Batch):
            pending.release()
        if self._out.value:  # delivered to a call that was interrupted
            self._lib.seer_release(c, self._out.value)
            self._out.value = None
        self._iter_gen += 1
        self._mid_epoch = False
        rc = self._lib.seer_seek(c, epoch, step)
        if rc < 0:
            raise _error(rc)

    def close(self):
        """Disconnect. Held batches are not counted as done (seerd resumes
        this rank at the first of them) unless the job's last batch was
        handed out. Safe to call twice and from another thread: a
        next_batch() waiting there raises SeerError. A Loader never
        connected just becomes closed."""
        self._closed = True
        self._disconnect()

    def _disconnect(self):
        c, self._c = self._c, None
        if c is None:
            return
        held, self._held = self._held, None
        if held is not None:
            held._ptr = None  # gone with the connection
        # libseer prefaults our mapping (seer_arena_reader) until seer_close
        # returns: drop it only after (views keep it alive beyond)
        self._lib.seer_close(c)
        self._arena = None

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
        self._s = None
        self._lib = _load()
        num_samples = _check_int("num_samples", num_samples, 1, _U64_MAX)
        seed = _check_int("seed", seed, 0, _U64_MAX)
        world_size = _check_int("world_size", world_size, 1, _U32_MAX)
        batch_size = _check_int("batch_size", batch_size, 1, _U32_MAX)
        flags = ((_C.SAMPLER_DROP_LAST if drop_last else 0) |
                 (0 if shuffle else _C.SAMPLER_NO_SHUFFLE))
        self._s = self._lib.seer_sampler_new(num_samples, seed, world_size, batch_size, flags)
        if not self._s:
            raise _error(-errno.EINVAL)
        self.batch_size = batch_size
        self.batches_per_epoch = self._lib.seer_sampler_batches_per_epoch(self._s)

    def batch(self, epoch, rank, step):
        epoch = _check_int("epoch", epoch, 0, _U64_MAX)
        rank = _check_int("rank", rank, 0, _U32_MAX)
        step = _check_int("step", step, 0, _U64_MAX)
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
_REC_HDR = _struct.Struct("<8sHHIQQQQIIIIII")  # 72 bytes, see src/sampler/sampler_record.h
_REC_DROP_LAST, _REC_SHUFFLE = 1, 2
_REC_MAX_SEGS, _REC_MAX_WORLD = 64, 1 << 20
_U32, _U64 = (1 << 32) - 1, (1 << 64) - 1

def _load_records():
    return _load()


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
    return (_C.SAMPLER_DROP_LAST if drop_last else 0) | (0 if shuffle else _C.SAMPLER_NO_SHUFFLE)


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
