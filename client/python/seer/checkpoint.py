"""seer.checkpoint: hand a checkpoint to the node's seerd and go on training.

    h = seer.checkpoint.save(model.state_dict(), "/pfs/run/ckpt_100.pt")
    ...                                   # training goes on at once
    h.wait("pfs")                         # durable at the path (optional)
    state = seer.checkpoint.load("/pfs/run/ckpt_100.pt", map_location="cpu")

save() serialises obj as torch.save(obj, f) does for a file object f,
straight into shared memory seerd hands out, and returns once the bytes are
there (committed); seerd then writes them to the node's NVMe ("local") and
drains them to `path` ("pfs": a temporary name beside it, fsync, rename, so a
reader never sees a partial file). With torch 1.13 the size has to be known
before the memory is asked for. For the usual checkpoint (dicts, lists and
tuples of tensors, numbers and strings: a state_dict) save asks for an upper
bound of it (the tensors' bytes plus room for the archive's own) and commits
the bytes torch.save wrote: one pass, one copy of every byte, from the
tensors into shared memory. For anything else (a whole nn.Module, other
objects), or if the bound was short, torch.save runs twice: first into a
writer that only counts bytes (no copy), then into the mapping. Nothing else
is copied.

The bytes are those of torch.save(obj, open(path, "wb")): torch.save(obj,
"name.pt") names the archive's top folder after the file ("name/") where a
file object gives "archive/"; torch.load reads both alike.

load() returns torch.load's result from the newest complete copy: seerd's
NVMe copy (or its memory while the drain runs), else the file at `path`.

Both find seerd as seer.Loader does (socket= or $SEER_SOCKET, job_id= or
$SEER_JOB_ID / $SLURM_JOB_ID) and work beside a Loader or alone.

torch.distributed.checkpoint (docs/checkpoint.md, "DCP"): StorageWriter and
StorageReader (torch >= 2; on older torch they exist but refuse, naming the
version) put each rank's items into one seer checkpoint per rank file. Their
torch-independent part is here: layout() lays items out in one buffer,
save_items() hands such a buffer to seerd, read_ranges() reads byte ranges
back from the newest complete copy of a file.
"""

import contextlib
import ctypes
import errno
import io
import os
import threading
import time

from . import SeerError, _Options, _load

# and StorageWriter, StorageReader, made by __getattr__ on first use
__all__ = ["save", "load", "where", "Checkpoint", "LEVELS", "layout", "save_items",
           "read_ranges", "iter_ranges", "DcpItem"]

LEVELS = ("memory", "local", "peer", "pfs")
_STATES = ("pending", "done", "failed", "off", "pruned")
_sig_lock = threading.Lock()
_sig_done = False


def _lib():
    global _sig_done
    lib = _load()
    with _sig_lock:
        if not _sig_done:
            P, I, U64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64
            sigs = {
                "seer_ckpt_begin": (I, [ctypes.POINTER(_Options), ctypes.c_char_p, U64, I,
                                        ctypes.POINTER(P)]),
                "seer_ckpt_data": (P, [P]),
                "seer_ckpt_size": (U64, [P]),
                "seer_ckpt_id": (U64, [P]),
                "seer_ckpt_commit": (I, [P]),
                "seer_ckpt_commit_len": (I, [P, U64]),
                "seer_ckpt_wait": (I, [P, I, I]),
                "seer_ckpt_state": (I, [P, I, ctypes.POINTER(U64)]),
                "seer_ckpt_close": (None, [P]),
                "seer_ckpt_open": (I, [ctypes.POINTER(_Options), ctypes.c_char_p,
                                       ctypes.POINTER(I), ctypes.POINTER(U64),
                                       ctypes.POINTER(I)]),
            }
            for name, (res, args) in sigs.items():
                f = getattr(lib, name, None)
                if f is None:
                    raise ImportError("libseer lacks %s: too old for seer.checkpoint" % name)
                f.restype = res
                f.argtypes = args
            _sig_done = True
    return lib


def _err(lib, rc):
    msg = lib.seer_errmsg().decode(errors="replace") or \
        lib.seer_strerror(rc).decode(errors="replace")
    if rc == -errno.ETIMEDOUT:
        return TimeoutError(msg)
    return SeerError(rc, msg)


def _options(socket, job_id, connect_timeout):
    o = _Options()
    o.socket_path = os.fsencode(socket) if socket else None
    o.job_id = job_id.encode() if job_id else None
    if connect_timeout is not None:
        o.connect_timeout_ms = max(1, int(connect_timeout * 1000))
    return o


def _ms(timeout):
    return -1 if timeout is None else max(0, min(int(timeout * 1000), 2**31 - 1))


class _Counter:
    """A file object that only counts what torch.save writes."""

    def __init__(self):
        self.n = 0

    def write(self, b):
        n = memoryview(b).nbytes
        self.n += n
        return n

    def flush(self):
        pass


class _Overflow(Exception):
    pass


class _ShmWriter:
    """A file object over the shared mapping: each write is one copy."""

    def __init__(self, addr, size):
        self._mv = memoryview((ctypes.c_char * size).from_address(addr)).cast("B")
        self.pos = 0

    def write(self, b):
        src = memoryview(b).cast("B")
        n = src.nbytes
        if self.pos + n > len(self._mv):
            raise _Overflow()
        self._mv[self.pos:self.pos + n] = src
        self.pos += n
        return n

    def flush(self):
        pass

    def release(self):
        self._mv.release()


class Checkpoint:
    """A checkpoint handed to seerd. wait(level) blocks until it is durable
    at "local" (this node's NVMe), "peer" or "pfs" (at its path); state()
    says where it is."""

    def __init__(self, lib, handle, path, size):
        self._lib = lib
        self._h = handle
        self.path = path
        self.size = size
        self.id = lib.seer_ckpt_id(handle)
        self._lock = threading.Lock()

    def wait(self, level="pfs", timeout=None, retrying=False):
        """Return once durable at `level`; TimeoutError after `timeout`
        seconds (None: for ever); SeerError when the level failed (a PFS
        write: the message says why, the copy stays on NVMe and seerd tries
        again; a peer copy: the same, at once, while seerd retries) or is
        not used (no NVMe tier: "local"; no peers: "peer"). retrying=True:
        a failure whose message says seerd tries again does not raise; the
        wait goes on through the retries until the level is reached, a
        failure seerd gives up on, or `timeout` (TimeoutError naming the
        last failure)."""
        lv = LEVELS.index(level) if level in LEVELS else -1
        if lv < 1:
            raise ValueError("level must be 'local', 'peer' or 'pfs', not %r" % (level,))
        end = None if timeout is None else time.monotonic() + timeout
        step = 0.01
        while True:
            left = None if end is None else max(end - time.monotonic(), 0.0)
            with self._lock:
                self._check()
                rc = self._lib.seer_ckpt_wait(self._h, lv, _ms(left))
                if rc == 0:
                    return
                ex = _err(self._lib, rc)
            if not retrying or not isinstance(ex, SeerError) or "tries again" not in str(ex):
                raise ex
            # seerd answers at once while the level is failed: until its retry, a poll
            if end is not None and time.monotonic() >= end:
                raise TimeoutError("checkpoint %s: not durable at %r within %s s; the last "
                                   "failure: %s" % (self.path, level, timeout, ex))
            time.sleep(step if end is None else min(step, max(end - time.monotonic(), 0.0)))
            step = min(step * 2, 0.25)

    def state(self):
        """{"memory": ..., "local": ..., "peer": ..., "pfs": ...} with each
        level's state ("pending", "done", "failed", "off", "pruned"), plus
        "drained" (bytes on the PFS so far) and "why" (the last failure)."""
        out = {}
        drained = ctypes.c_uint64()
        with self._lock:
            self._check()
            why = ""
            for lv, name in enumerate(LEVELS):
                rc = self._lib.seer_ckpt_state(self._h, lv, ctypes.byref(drained))
                if rc < 0:
                    raise _err(self._lib, rc)
                out[name] = _STATES[rc]
                if rc == 2:
                    why = self._lib.seer_errmsg().decode(errors="replace")
        out["drained"] = drained.value
        out["why"] = why
        return out

    def close(self):
        with self._lock:
            if self._h:
                self._lib.seer_ckpt_close(self._h)
                self._h = None

    def _check(self):
        if not self._h:
            raise SeerError(-errno.EBADF, "checkpoint %s: handle closed" % self.path)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return "<seer.checkpoint.Checkpoint %s %d bytes>" % (self.path, self.size)


def _bound(obj):
    """An upper bound of torch.save(obj)'s bytes for containers of tensors,
    numbers and strings; None for anything else."""
    import torch
    seen = set()
    total, stack, items = 65536, [obj], 0
    while stack:
        o = stack.pop()
        items += 1
        if isinstance(o, torch.Tensor):
            st = o.storage()
            key = (o.device, st.data_ptr())
            if key not in seen:
                seen.add(key)
                total += st.nbytes() + 4096  # its zip entry, headers and alignment
            total += 256 + 16 * o.dim()       # its pickled rebuild call
        elif isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        elif isinstance(o, (str, bytes, bytearray)):
            total += 4 * len(o) + 16
        elif o is None or isinstance(o, (bool, int, float, complex, torch.dtype,
                                         torch.device, torch.Size)):
            pass
        else:
            return None
    return total + 64 * items


def _begin(lib, o, path, size, timeout):
    h = ctypes.c_void_p()
    rc = lib.seer_ckpt_begin(ctypes.byref(o), os.fsencode(path), size, _ms(timeout),
                             ctypes.byref(h))
    if rc != 0:
        raise _err(lib, rc)
    return h


def _fill(lib, h, obj, size):
    """torch.save into the mapping: the bytes written, or None when they do
    not fit."""
    import torch
    w = _ShmWriter(lib.seer_ckpt_data(h), size)
    try:
        torch.save(obj, w)
    except _Overflow:
        return None
    finally:
        w.release()
    return w.pos


@contextlib.contextmanager
def _commit_or_abandon(lib, h):
    """Runs the block that fills h, then commits all its bytes; if the block
    or the commit raises, closes h (seerd abandons the checkpoint: nothing
    reaches its path) and the exception goes on."""
    ok = False
    try:
        yield
        rc = lib.seer_ckpt_commit(h)
        if rc != 0:
            raise _err(lib, rc)
        ok = True
    finally:
        if not ok:
            lib.seer_ckpt_close(h)  # seerd abandons it


def save(obj, path, socket=None, job_id=None, timeout=None, connect_timeout=None):
    """Serialise obj as torch.save would, into seerd's shared memory, and
    return a Checkpoint once the bytes are there. timeout: seconds to wait
    while seerd's checkpoint memory is full (None: for ever); then a
    SeerError names [checkpoint] memory to raise."""
    import torch
    lib = _lib()
    path = os.path.abspath(os.fspath(path))
    o = _options(socket, job_id, connect_timeout)
    bound = _bound(obj)
    if bound is not None:
        h = _begin(lib, o, path, bound, timeout)
        ok = False
        try:
            n = _fill(lib, h, obj, bound)
            if n is not None:
                rc = lib.seer_ckpt_commit_len(h, n)
                if rc != 0:
                    raise _err(lib, rc)
                ok = True
                return Checkpoint(lib, h, path, n)
        finally:
            if not ok:
                lib.seer_ckpt_close(h)  # seerd abandons it
    counter = _Counter()
    torch.save(obj, counter)
    size = counter.n
    h = _begin(lib, o, path, size, timeout)
    with _commit_or_abandon(lib, h):
        n = _fill(lib, h, obj, size)
        if n != size:
            raise SeerError(-errno.EOVERFLOW, "torch.save wrote %d bytes, then %s (changed "
                            "while saving?)" % (size, "more" if n is None else n))
    return Checkpoint(lib, h, path, size)


def where(path, socket=None, job_id=None, connect_timeout=None):
    """Where load(path) reads from: "local", "memory" or "pfs"."""
    fd, level, _ = _open(path, socket, job_id, connect_timeout)
    if fd is not None:
        os.close(fd)
    return level


def _open(path, socket, job_id, connect_timeout):
    lib = _lib()
    path = os.path.abspath(os.fspath(path))
    o = _options(socket, job_id, connect_timeout)
    fd, size, level = ctypes.c_int(-1), ctypes.c_uint64(), ctypes.c_int()
    rc = lib.seer_ckpt_open(ctypes.byref(o), os.fsencode(path), ctypes.byref(fd),
                            ctypes.byref(size), ctypes.byref(level))
    if rc != 0:
        # no copy at seerd (-ENOENT), or no seerd answering: the PFS file
        return None, "pfs", 0
    return fd.value, LEVELS[level.value], size.value


def load(path, map_location=None, socket=None, job_id=None, connect_timeout=None, **kwargs):
    """torch.load(path, map_location) from the newest complete copy: seerd's
    NVMe copy (or its memory while that is all there is), else `path`."""
    import torch
    fd, level, size = _open(path, socket, job_id, connect_timeout)
    if fd is None:
        return torch.load(os.fspath(path), map_location=map_location, **kwargs)
    if level == "memory":
        # seerd's memory may be longer than the checkpoint: its first `size` bytes
        try:
            buf = bytearray(size)
            view, got = memoryview(buf), 0
            while got < size:
                n = os.preadv(fd, [view[got:]], got)
                if n <= 0:
                    raise SeerError(-errno.EIO, "short read of seerd's copy of %s" % path)
                got += n
        finally:
            os.close(fd)
        return torch.load(io.BytesIO(buf), map_location=map_location, **kwargs)
    try:
        # by name, torch's own file reader reads it (a file object is read
        # through Python calls: slower)
        return torch.load("/proc/self/fd/%d" % fd, map_location=map_location, **kwargs)
    finally:
        os.close(fd)


# --- torch.distributed.checkpoint's storage layer, without torch ------------

ALIGN = 64


class DcpItem:
    """Where one DCP item lies (metadata.storage_data's values): `length`
    bytes at `offset` of the file <checkpoint_id>/<relative_path>; for a
    tensor chunk also its dtype's name ("float32") and shape, its bytes being
    the chunk's elements in row-major order; dtype None for bytes."""

    __slots__ = ("relative_path", "offset", "length", "dtype", "shape")

    def __init__(self, relative_path, offset, length, dtype=None, shape=None):
        self.relative_path = relative_path
        self.offset = offset
        self.length = length
        self.dtype = dtype
        self.shape = None if shape is None else tuple(shape)

    def __getstate__(self):
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, st):
        for k in self.__slots__:
            setattr(self, k, st[k])

    def __eq__(self, other):
        return isinstance(other, DcpItem) and self.__getstate__() == other.__getstate__()

    def __repr__(self):
        return "DcpItem(%r, %d, %d, %r, %r)" % (self.relative_path, self.offset, self.length,
                                                 self.dtype, self.shape)


def layout(sizes, align=ALIGN):
    """Items of `sizes` bytes laid one after the other in one buffer, each
    starting at a multiple of `align`: returns (offsets, total bytes)."""
    if align < 1:
        raise ValueError("align must be >= 1, not %r" % (align,))
    offsets, end = [], 0
    for n in sizes:
        if n < 0:
            raise ValueError("item size %r is negative" % (n,))
        end = (end + align - 1) // align * align
        offsets.append(end)
        end += n
    return offsets, end


def save_items(path, sizes, fill, socket=None, job_id=None, timeout=None, connect_timeout=None,
               align=ALIGN):
    """One seer checkpoint at `path` holding len(sizes) items laid out by
    layout(sizes, align): fill(i, view) writes item i into `view`, a writable
    memoryview of exactly sizes[i] bytes of seerd's shared memory, valid only
    during the call. Commits once every item is filled and returns
    (Checkpoint, offsets): the bytes are then seerd's, and it makes them
    durable at `path` as save() does. An exception from fill abandons the
    checkpoint (nothing reaches `path`) and is raised again."""
    lib = _lib()
    path = os.path.abspath(os.fspath(path))
    offsets, total = layout(sizes, align)
    # seerd hands out no empty memory: an empty file is one zero byte
    h = _begin(lib, _options(socket, job_id, connect_timeout), path, max(total, 1), timeout)
    with _commit_or_abandon(lib, h):
        if total:
            base = memoryview((ctypes.c_char * total).from_address(lib.seer_ckpt_data(h)))
            base = base.cast("B")
            try:
                for i, (off, n) in enumerate(zip(offsets, sizes)):
                    with base[off:off + n] as view:
                        fill(i, view)
            finally:
                base.release()
    return Checkpoint(lib, h, path, max(total, 1)), offsets


def _pread_into(fd, view, offset, path):
    got, n = 0, len(view)
    while got < n:
        k = os.preadv(fd, [view[got:]], offset + got)
        if k <= 0:
            raise SeerError(-errno.EIO, "checkpoint file %s: short read at byte %d of %d" %
                            (path, offset + got, offset + n))
        got += k


def iter_ranges(path, ranges, socket=None, job_id=None, connect_timeout=None, into=None):
    """Yield (i, level, buffer) for each (offset, length) of `ranges`
    (None: the whole file), read from the newest complete copy of the
    checkpoint file at `path` (level: where it came from, as where() says:
    seerd's memory or NVMe copy, a copy it holds for a peer, else the file at
    `path`: "pfs"). The buffer is into(i) when `into` gives one (a writable
    buffer of the range's length: read straight into it), else a new
    bytearray; one range is in memory at a time. FileNotFoundError
    names `path` when no copy exists anywhere; a range past the copy's end
    is a SeerError naming the range and the size."""
    path = os.path.abspath(os.fspath(path))
    fd, level, size = _open(path, socket, job_id, connect_timeout)
    if fd is None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "checkpoint file %s: seerd holds no copy "
                                    "(memory, NVMe, peer) and there is none on the PFS" %
                                    path) from None
        size = os.fstat(fd).st_size
    try:
        if ranges is None:
            ranges = [(0, size)]
        for i, (off, n) in enumerate(ranges):
            if off < 0 or n < 0 or off + n > size:
                raise SeerError(-errno.ERANGE, "checkpoint file %s (%s copy, %d bytes) has no "
                                "bytes %d..%d: not the file this metadata describes" %
                                (path, level, size, off, off + n))
            buf = into(i) if into else None
            if buf is None:
                buf = bytearray(n)
            with memoryview(buf) as mv:
                mv = mv.cast("B")
                if mv.nbytes != n:
                    raise ValueError("range %d of %s: %d bytes, into() gave %d" %
                                     (i, path, n, mv.nbytes))
                _pread_into(fd, mv, off, path)
                mv.release()
            yield i, level, buf
    finally:
        os.close(fd)


def read_ranges(path, ranges, socket=None, job_id=None, connect_timeout=None):
    """[bytearray per range] and the level read, as iter_ranges()."""
    out, level = [], None
    for _, level, buf in iter_ranges(path, ranges, socket, job_id, connect_timeout):
        out.append(buf)
    return out, level


def __getattr__(name):
    # StorageWriter / StorageReader need torch.distributed.checkpoint (torch
    # >= 2): imported on first use, so that importing this module works on
    # any torch (and on none)
    if name in ("StorageWriter", "StorageReader"):
        from . import _dcp
        return getattr(_dcp, name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
