"""seer._workers: the Python-transform workers behind
``seer.torch.TorchLoader(transform=fn, num_workers=N)``.

Owns: the per-sample seed, applying the user's transform to one batch
(decode, seed, call, collate), the worker processes and the in-order
pipeline that feeds them. Used by seer.torch only.

Data path: the main process takes batches from seerd (seer.Loader.next_batch)
and sends each one's sample descriptors (arena offsets, sizes, types, ids,
labels; never the bytes) to worker ``seq % N``. The worker reads the samples
in place through its own read-only mapping of the arena, calls the
transform, and stacks the results into one of its batch buffers (_Buffers:
memfds mapped in the worker and the trainer, reused once every tensor of the
batch they held is gone, so neither side faults on fresh pages per batch as
the DataLoader's collate into new shared memory does); the answer names the
buffer, with its fd the first time. The main process releases the batch to
seerd when its worker's answer arrives (nobody reads it any more) and yields
the answers in stream order.

Start-up: with the "fork" start method (the default, as the DataLoader's on
Linux) a worker inherits the shim's own mapping of the arena (the numpy array
over the mmap); libseer's pthread_atfork handler closes the client's socket,
eventfd and fd in the child, which never calls libseer's client API. With
"spawn" or "forkserver" the arena fd (a dup from seer_arena_fd) is passed to
each worker by SCM_RIGHTS (multiprocessing's DupFd) and mapped there.

Failure: an exception in the transform is sent back as text naming the sample
and raised in the trainer (TransformError); a worker that dies is seen at
once through its process sentinel (WorkerError naming the worker, its exit
status and the batch it held); a worker whose trainer died notices its parent
changed within a second and exits. The pool is then unusable; TorchLoader
closes itself.
"""

import collections
import ctypes
import errno
import hashlib
import io
import mmap
import multiprocessing
import os
import random
import signal
import struct
import threading
import traceback
import weakref
import warnings
from multiprocessing import connection as mpconn
from multiprocessing import reduction

import numpy as np
import torch
import torch.multiprocessing  # noqa: F401  registers the tensor reductions (shared memory)

from . import _C, SeerError

_U64 = (1 << 64) - 1
_PARENT_POLL_S = 1.0


class TransformError(SeerError):
    """The transform raised for a sample. .epoch, .step, .index, .sample_id,
    .label say which; str() carries the exception and the worker's traceback."""

    def __init__(self, message, epoch=None, step=None, index=None, sample_id=None, label=None):
        super().__init__(-errno.EINVAL, message)
        self.epoch, self.step, self.index = epoch, step, index
        self.sample_id, self.label = sample_id, label


class WorkerError(SeerError):
    """A transform worker process died (signal, os._exit, out of memory)."""

    def __init__(self, message):
        super().__init__(-errno.EPIPE, message)


def sample_seed(seed, epoch, sample_id):
    """The 64-bit seed of one sample's transform: the first 8 bytes (little
    endian) of BLAKE2b(person=b"seer.torch", digest_size=8) over the three
    values packed as little-endian uint64. A pure function of (job seed,
    epoch, sample id): the same whatever num_workers, rank or world size."""
    h = hashlib.blake2b(struct.pack("<QQQ", seed & _U64, epoch & _U64, sample_id & _U64),
                        digest_size=8, person=b"seer.torch")
    return int.from_bytes(h.digest(), "little")


def seed_globals(s):
    """Seed the generators a stock pipeline draws from: torch's default CPU
    generator (torchvision's random transforms), Python's `random`
    (albumentations) and numpy's legacy global generator (seeded with the
    low 32 bits, its limit)."""
    torch.default_generator.manual_seed(s)
    random.seed(s)
    np.random.seed(s & 0xFFFFFFFF)


class SampleInfo(collections.namedtuple("SampleInfo", "seed epoch step index id label")):
    """The sample a transform is being called for (seer.torch.sample_info()).
    seed is sample_seed(job seed, epoch, id)."""

    __slots__ = ()

    @property
    def generator(self):
        """A new torch.Generator seeded with this sample's seed, for
        transforms that take an explicit generator."""
        g = torch.Generator()
        g.manual_seed(self.seed)
        return g


_current = None


def current():
    return _current


def decode_pil(view):
    """An encoded image (a uint8 view) as a PIL RGB image, as torchvision's
    ImageFolder loads one (Image.open(...).convert("RGB")). PIL reads from an
    in-process BytesIO copy of the bytes (PIL copies what it reads anyway)."""
    from PIL import Image
    with Image.open(io.BytesIO(view)) as im:
        return im.convert("RGB")


_DECODERS = {None: None, "pil": decode_pil}


def check_decode(decode):
    if decode not in _DECODERS and not callable(decode):
        raise ValueError("decode=%r: use None (the sample as a numpy view), 'pil' (a PIL "
                         "RGB image) or a callable taking the view" % (decode,))


class Job:
    """What every worker needs (pickled once per worker under spawn):
    the transform, the decoder name, the job seed and the arena type table."""

    def __init__(self, transform, decode, seed, types):
        check_decode(decode)
        self.transform = transform
        self.decode = decode
        self.seed = seed
        self.types = types


def _as_tensor(y):
    if isinstance(y, torch.Tensor):
        return y
    if isinstance(y, np.ndarray):
        return torch.as_tensor(np.ascontiguousarray(y))
    if isinstance(y, (bool, int, float, np.number)):
        return torch.as_tensor(y)
    raise TypeError("the transform returned %s; it must return a torch tensor, a numpy "
                    "array or a number (add transforms.ToTensor() or PILToTensor() for PIL "
                    "images)" % type(y).__name__)


def run_batch(job, arena, task, alloc=None):
    """The stacked tensor [n, ...] of one batch (task: see Pipeline._dispatch).
    alloc(n, y): the batch tensor for n samples like y (a worker's shared
    buffer, see _Buffers); None: private memory. Raises TransformError."""
    global _current
    seq, epoch, step, offsets, sizes, types, ids, labels = task
    decode = _DECODERS.get(job.decode, job.decode) if not callable(job.decode) else job.decode
    out, first = None, None
    n = len(ids)
    for i in range(n):
        off, size, t, sid = offsets[i], sizes[i], types[i], ids[i]
        where = "sample %d (batch %d:%d, index %d, label %d)" % (sid, epoch, step, i, labels[i])
        try:
            if off + size > len(arena) or t >= len(job.types):
                raise ValueError("descriptor outside the arena")
            v = arena[off:off + size]
            dt, shape = job.types[t]
            if dt is not None:
                v = v.view(dt).reshape(shape)
            x = decode(v) if decode is not None else v
            s = sample_seed(job.seed, epoch, sid)
            seed_globals(s)
            _current = SampleInfo(s, epoch, step, i, sid, labels[i])
            try:
                y = _as_tensor(job.transform(x))
            finally:
                _current = None
            if out is None:
                first = (tuple(y.shape), y.dtype)
                if alloc is not None:
                    out = alloc(n, y)
                else:
                    out = torch.empty((n,) + tuple(y.shape), dtype=y.dtype)
            elif (tuple(y.shape), y.dtype) != first:
                raise ValueError("the transform returned %s %s, but %s %s for the batch's first "
                                 "sample: a batch is one tensor, so every sample needs the same "
                                 "shape and dtype (crop or resize to a fixed size)" %
                                 (str(y.dtype), list(y.shape), str(first[1]), list(first[0])))
            out[i].copy_(y)
        except Exception as e:
            tb = traceback.format_exc()
            raise TransformError("%s: %s: %s\n%s" % (where, type(e).__name__, e, tb), epoch,
                                 step, i, sid, labels[i]) from None
    if out is None:
        out = torch.empty((0,))
    return out


# ---- worker processes -------------------------------------------------------

class _ArenaFd:
    """The arena fd, passed to a spawned worker by SCM_RIGHTS when pickled."""

    def __init__(self, fd, size):
        self.fd, self.size = fd, size

    def __reduce__(self):
        return _map_arena, (reduction.DupFd(self.fd), self.size)


class _Arena(np.ndarray):
    """The arena as mapped in a worker, with its file's inode (to tell it
    from the arenas of earlier seerd sessions)."""
    inode = None


def _map_arena(dupfd, size):
    fd = dupfd.detach()
    try:
        ino = os.fstat(fd).st_ino
        mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    a = np.frombuffer(mm, dtype=np.uint8).view(_Arena)
    a.inode = ino
    return a


_MAP_FIXED, _MAP_PRIVATE, _MAP_ANON, _MAP_NORESERVE = 0x10, 0x02, 0x20, 0x4000


def _drop_stale_arenas(keep):
    """Unmap, in this worker, every seerd shared segment (the arena, the
    control regions) but the arena with inode `keep`: after a reconnect the
    old seerd's segments are only this process's inheritance (a fork copies
    every mapping, and the objects holding them), and a segment's memory is
    freed only when its last mapping goes, so a worker would pin the old
    cache. Each range is replaced by an inaccessible anonymous one (MAP_FIXED)
    so that the objects still naming it never touch another mapping. Linux
    only; anything unexpected leaves the mappings as they are."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except (OSError, AttributeError):
        return
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 6 or not any("memfd:seer-%s " % k in parts[5] + " "
                                     for k in ("arena", "ctrl-out", "ctrl-in")):
            continue  # (the worker's own batch buffers are memfd:seer-torch-batch)
        if "memfd:seer-arena" in parts[5] and int(parts[4]) == keep:
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        libc.mmap(lo, hi - lo, 0, _MAP_FIXED | _MAP_PRIVATE | _MAP_ANON | _MAP_NORESERVE, -1, 0)


_MADV_POPULATE_WRITE = 23  # Linux 5.14; older kernels say EINVAL and pages fault in as written
_PAGE = mmap.PAGESIZE


class _Buffers:
    """A worker's batch buffers: anonymous shared-memory files (memfd), each
    mapped here and, once, in the trainer, and reused for a later batch once
    the trainer has dropped every tensor (and view) of the batch it held.

    Why: a batch tensor in fresh shared memory (what the DataLoader's collate
    allocates) costs a page fault per 4 KiB page on first write (a 3x224x224
    float sample is 147 pages) and the trainer faults again on its first read;
    under this machine's hypervisor a fault on a fresh page costs ~10-30 us, a
    third of the worker's time per sample (docs/torch.md, "Measured"). A
    reused buffer is already mapped on both sides: the stacking is a plain
    copy. A new buffer is populated in one madvise call instead of a fault per
    page. Worker process only (the trainer's side is Pipeline._images)."""

    def __init__(self, keep):
        self._keep = keep  # free buffers kept for reuse; more are retired
        self._bufs = {}  # id -> (mmap, fd, size)
        self._free = []  # ids the trainer released
        self._next = 0
        self._told = set()  # ids whose fd the trainer was sent
        self.retired = []  # ids closed here since the last reply: the trainer unmaps them
        self.used = None  # (id, size) of the buffer the last alloc gave

    def release(self, ids):
        self._free.extend(i for i in ids if i in self._bufs)
        self._free.sort(key=lambda i: self._bufs[i][2])
        while len(self._free) > self._keep:  # the smallest go first
            i = self._free.pop(0)
            try:
                self._bufs[i][0].close()
            except BufferError:  # still exported here (cannot happen once a reply is sent)
                self._free.append(i)
                break
            os.close(self._bufs.pop(i)[1])
            if i in self._told:
                self.retired.append(i)
                self._told.discard(i)

    def unuse(self):
        """The batch that took a buffer failed: the buffer is free again."""
        if self.used is not None:
            self._free.append(self.used[0])
            self.used = None

    def announce(self, i):
        """The fd of buffer i to send with the answer the first time (a DupFd,
        passed by SCM_RIGHTS when pickled), None later."""
        if i in self._told:
            return None
        self._told.add(i)
        return reduction.DupFd(self._bufs[i][1])

    def alloc(self, n, y):
        if n * y.numel() == 0:  # nothing to share: the answer carries the tensor itself
            return torch.empty((n,) + tuple(y.shape), dtype=y.dtype)
        nbytes = n * y.numel() * y.element_size()
        fit = [i for i in self._free if self._bufs[i][2] >= nbytes]
        if fit:
            i = min(fit, key=lambda k: self._bufs[k][2])
            self._free.remove(i)
            mm, fd, size = self._bufs[i]
        else:
            size = -(-nbytes // _PAGE) * _PAGE
            fd = os.memfd_create("seer-torch-batch", os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, size)
                mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED,
                               prot=mmap.PROT_READ | mmap.PROT_WRITE)
            except BaseException:
                os.close(fd)
                raise
            try:
                mm.madvise(_MADV_POPULATE_WRITE)
            except OSError:
                pass
            i, self._next = self._next, self._next + 1
            self._bufs[i] = (mm, fd, size)
        self.used = (i, size)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            flat = torch.frombuffer(mm, dtype=y.dtype, count=n * y.numel())
        return flat.view((n,) + tuple(y.shape))


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def _keep_freed_memory():
    """Make this worker's allocator reuse freed memory instead of handing it
    back to the kernel and faulting fresh pages in for the next sample.

    glibc serves blocks above its mmap threshold (128 KiB at first, raised
    as such blocks are freed) by mmap and unmaps them on free, and trims the
    heap top above its trim threshold: a transform's per-sample buffers (a
    500x375 PIL image is 750 KB, a 3x224x224 float tensor 602 KB) then come
    back as fresh pages, ~30-50 faults per sample at ~10-30 us each under
    this machine's hypervisor (docs/torch.md). With the thresholds fixed at
    32 MiB (glibc's largest mmap threshold) and 64 MiB, they are served from
    the heap and reused: no faults after the first samples, at the price of
    up to 64 MiB of freed heap kept per worker. Worker processes only (the
    trainer's allocator is left alone); nothing happens without glibc."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)
        libc.mallopt(_M_TRIM_THRESHOLD, 64 << 20)
    except (OSError, AttributeError):
        pass


def _worker_main(wid, conn, arena, job, parent, keep):
    """One worker: answer tasks until told to stop, the pipe closes, or the
    trainer (parent) is gone. A task comes with the ids of the buffers the
    trainer released; an answer names the buffer its batch is in (with its fd
    the first time) and the buffers retired since the last answer."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle
    torch.set_num_threads(1)
    _keep_freed_memory()
    bufs = _Buffers(keep)
    while True:
        try:
            if not conn.poll(_PARENT_POLL_S):
                if os.getppid() != parent:
                    return
                continue
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        task, freed, new_arena = msg
        if new_arena is not None:  # seerd restarted: this task and the next read its arena
            arena = new_arena
            _drop_stale_arenas(arena.inode)  # every earlier task of ours is done
        bufs.release(freed)
        bufs.used = None
        try:
            out = run_batch(job, arena, task, bufs.alloc)
            if bufs.used is None:  # an empty batch
                images = ("tensor", out)
            else:
                bid, size = bufs.used
                images = ("buffer", bid, bufs.announce(bid), size, out.dtype,
                          tuple(out.shape))
            reply = (task[0], images, None, bufs.retired)
        except TransformError as e:
            bufs.unuse()
            reply = (task[0], None, (str(e), e.epoch, e.step, e.index, e.sample_id, e.label),
                     bufs.retired)
        bufs.retired = []
        out = None
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return
        del reply


def _describe_exit(code):
    if code is None:
        return "is gone"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "signal %d" % -code
        return "was killed by %s" % name
    return "exited with status %d" % code


class Entry:
    """One place in the stream: a batch (held from seerd while `batch` is
    set: until the user asks for the batch after it), or the end of an epoch
    or job. `answered` once its worker is done with it (or it failed)."""

    __slots__ = ("kind", "seq", "batch", "worker", "images", "error", "epoch", "step", "ids",
                 "labels", "answered")

    def __init__(self, kind, seq=None, b=None):
        self.kind, self.seq, self.batch = kind, seq, b
        self.worker = self.images = self.error = None
        self.answered = False
        if b is not None:  # the facts outlive the release
            self.epoch, self.step, self.ids, self.labels = b.epoch, b.step, b.ids, b.labels


class Pipeline:
    """N worker processes fed in order from one seer.Loader. next() gives the
    entries of the stream in order; what was fetched but not yet handed out
    when an iteration stops stays queued for the next.

    Exactness (docs/resume.md, docs/torch.md): the Loader takes batches
    ahead for the workers (SEER_OPT_TAKE_AHEAD) and declares them to seerd
    (max_held); a batch is handed to the user (seer_handed: state_dict()
    counts it) when next() returns it, and released -- counted done in
    seerd's saved positions -- when the user asks for the one after it.
    Before handing one out the pipeline checks that seerd still serves it
    (after a stop its positions are final). At a reconnect (a restarted
    seerd) the batches taken and not handed are dropped: the new seerd
    delivers them again, from its own arena, which goes to the workers with
    their next task."""

    def __init__(self, loader, job, num_workers, prefetch, context):
        self._loader = loader
        self._job = job
        self._depth = max(1, prefetch * num_workers)
        self._procs, self._conns = [], []
        self._queue = collections.deque()  # entries in stream order
        self._seq = 0
        self._fetching = True  # False after EndOfEpoch/EndOfJob until that marker is consumed
        self._broken = None
        self._last = None  # the entry handed out last: released at the next request
        self._gen = loader._arena_gen  # the arena generation the workers read
        self._wgen = [self._gen] * num_workers  # what each worker was given
        self._dropped = set()  # seqs dropped at a reconnect whose answers may still come
        self._ctx = ctx = multiprocessing.get_context(context)
        if ctx.get_start_method() == "fork":
            arena = loader._arena
            fd = -1
        else:
            fd = loader._lib.seer_arena_fd(loader._c)
            if fd < 0:
                from . import _error
                raise _error(fd)
            arena = _ArenaFd(fd, len(loader._arena))
        self._lock = threading.Lock()
        self._waiting = False  # a thread is in _collect's wait
        self._stopped = False
        self._wake_r, self._wake_w = os.pipe()
        # each worker's batch buffers as mapped here, and the ids whose
        # tensors died since its last task (appended by weakref finalizers,
        # from whatever thread drops the last reference)
        self._maps = [{} for _ in range(num_workers)]
        self._freed = [collections.deque() for _ in range(num_workers)]
        try:
            for w in range(num_workers):
                mine, theirs = ctx.Pipe(duplex=True)
                p = ctx.Process(target=_worker_main, name="seer-torch-worker-%d" % w,
                                args=(w, theirs, arena, job, os.getpid(), prefetch + 2),
                                daemon=True)
                p.start()
                theirs.close()
                self._procs.append(p)
                self._conns.append(mine)
        except BaseException:
            self.stop()
            raise
        finally:
            if fd >= 0:
                os.close(fd)

    def _arena_for(self, w):
        """The new arena for worker w when it still reads an older one (an
        fd passed by SCM_RIGHTS), else None."""
        if self._wgen[w] == self._gen:
            return None
        loader = self._loader
        fd = loader._lib.seer_arena_fd(loader._c)
        if fd < 0:
            from . import _error
            raise _error(fd)
        try:
            # pickling dups the fd for the receiver (multiprocessing's DupFd)
            return _ArenaFd(fd, len(loader._arena)), fd
        except BaseException:
            os.close(fd)
            raise

    def _dispatch(self, b):
        seq, self._seq = self._seq, self._seq + 1
        e = Entry("batch", seq, b)
        if b.error is not None:
            e.error = SeerError(_C.EBATCH, "batch %d:%d failed: %s" % (b.epoch, b.step, b.error))
            e.answered = True  # held until handed and moved past, as any batch
        else:
            w = seq % len(self._procs)
            task = (seq, b.epoch, b.step, b._offsets.tolist(), b.sizes.tolist(),
                    b._types.tolist(), b.ids.tolist(), b.labels.tolist())
            e.worker = w
            freed, dq = [], self._freed[w]
            while dq:
                freed.append(dq.popleft())
            new = self._arena_for(w)
            try:
                self._conns[w].send((task, freed, new[0] if new else None))
            except (OSError, EOFError, ValueError):
                self._queue.append(e)
                if self._stopped:
                    raise _stopped_error()
                raise self._dead(w, e)
            finally:
                if new:
                    os.close(new[1])
            if new:
                self._wgen[w] = self._gen
        self._queue.append(e)

    def _reconnected(self):
        """seerd was restarted under us (Loader(reconnect=...)): the new
        session starts right after the last batch handed out, so every
        batch still queued comes again; drop them (their answers are
        ignored) and give the workers the new arena with their next task."""
        self._gen = self._loader._arena_gen
        keep = collections.deque()
        for e in self._queue:
            if e.kind == "batch" or keep is None:
                keep = None
                if e.kind == "batch" and e.worker is not None and not e.answered:
                    self._dropped.add(e.seq)
                if e.batch is not None:  # the old session's: libseer unmaps it with the last
                    b, e.batch = e.batch, None
                    b.release()
                continue
            keep.append(e)  # an epoch's end before the first batch not handed stays
        self._queue = keep if keep is not None else collections.deque()
        self._fetching = not any(e.kind != "batch" for e in self._queue)

    def _fetch(self, timeout):
        """Take one batch from seerd; False when none came within timeout
        (seconds; None: the Loader's timeout)."""
        from . import EndOfEpoch, EndOfJob
        try:
            b = self._loader._take(timeout=timeout)
        except EndOfEpoch:
            if self._loader._arena_gen != self._gen:
                self._reconnected()
            self._queue.append(Entry("epoch"))
            self._fetching = False
            return True
        except EndOfJob:
            if self._loader._arena_gen != self._gen:
                self._reconnected()
            self._queue.append(Entry("end"))
            self._fetching = False
            return True
        except SeerError as ex:
            if self._loader._arena_gen != self._gen:
                self._reconnected()
            if timeout == 0 and ex.code == -errno.ETIMEDOUT:
                return False
            if ex.code == -errno.EDEADLK and self._queue:
                return False  # the user's next request releases one: stop filling ahead
            raise
        if self._loader._arena_gen != self._gen:
            self._reconnected()
        self._dispatch(b)
        return True

    def _busy(self):
        return [e for e in self._queue if e.kind == "batch" and e.worker is not None
                and not e.answered]

    def _dead(self, w, e=None):
        p = self._procs[w]
        p.join(1.0)
        held = e or next((x for x in self._queue if x.worker == w and not x.answered), None)
        what = " while transforming batch %d:%d" % (held.epoch, held.step) if held else ""
        return WorkerError("seer.torch worker %d (pid %s) %s%s; the loader is closed (a "
                           "transform that crashes the interpreter or runs out of memory "
                           "ends the worker)" % (w, p.pid, _describe_exit(p.exitcode), what))

    def _collect(self, timeout):
        """Wait up to timeout (None: forever) for worker answers; store them."""
        busy = self._busy()
        workers = sorted({e.worker for e in busy})
        if self._dropped:  # answers for batches dropped at a reconnect still come
            workers = sorted(set(workers) | set(range(len(self._procs))))
        if not workers:
            return
        waitees = [self._conns[w] for w in workers] + [self._procs[w].sentinel for w in workers]
        waitees.append(self._wake_r)
        with self._lock:
            if self._stopped:
                raise _stopped_error()
            self._waiting = True
        try:
            ready = mpconn.wait(waitees, timeout)
        finally:
            with self._lock:
                self._waiting = False
                stopped = self._stopped
            if stopped:  # stop() ran in another thread meanwhile and left the fds to us
                self._close_fds()
        if stopped:
            raise _stopped_error()
        for w in workers:
            c = self._conns[w]
            if c in ready:
                try:
                    seq, images, err, retired = c.recv()
                except (EOFError, OSError):
                    raise self._dead(w) from None
                for i in retired:  # free (no tensor of ours uses it): unmapped when dropped
                    self._maps[w].pop(i, None)
                try:
                    out = self._images(w, images)
                except (EOFError, OSError):  # its buffer's fd did not come: it died meanwhile
                    raise self._dead(w) from None
                if seq in self._dropped:  # its buffer goes back when `out` dies here
                    self._dropped.discard(seq)
                    continue
                self._settle(seq, out, err)
            elif self._procs[w].sentinel in ready:
                if c.poll(0):  # its last answer came before it died
                    continue
                raise self._dead(w)

    def _images(self, w, images):
        """The batch tensor of an answer: in worker w's buffer, mapped here
        the first time (read-write: the tensor is the trainer's, as the
        DataLoader's). When the last tensor or view of it dies (its numpy
        base's finalizer), the buffer's id goes back to w with its next task."""
        if images is None:
            return None
        if images[0] == "tensor":
            return images[1]
        _, bid, dupfd, size, dtype, shape = images
        if dupfd is not None:
            fd = dupfd.detach()
            try:
                self._maps[w][bid] = mmap.mmap(fd, size, flags=mmap.MAP_SHARED,
                                               prot=mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
        mm = self._maps[w].get(bid)
        numel = 1
        for d in shape:
            numel *= d
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        if mm is None or nbytes > len(mm):
            raise SeerError(-errno.EPROTO, "seer.torch: worker %d answered in buffer %d, which "
                            "is not mapped here (or too small)" % (w, bid))
        base = np.frombuffer(mm, dtype=np.uint8, count=nbytes)
        weakref.finalize(base, self._freed[w].append, bid)
        return torch.frombuffer(base, dtype=dtype, count=numel).view(shape)

    def _settle(self, seq, out, err):
        for e in self._queue:
            if e.seq == seq and e.kind == "batch" and not e.answered:
                e.answered = True  # the worker has read it; it stays held until consumed
                if err is not None:
                    msg, epoch, step, index, sid, label = err
                    e.error = TransformError(msg, epoch, step, index, sid, label)
                else:
                    e.images = out
                return
        raise SeerError(-errno.EPROTO, "seer.torch: a worker answered for batch %d, which is "
                        "not in flight" % seq)

    def consumed(self):
        """The user is done with the entry handed out last: release it (seerd
        counts it in its saved positions from now on)."""
        last, self._last = self._last, None
        if last is not None and last.batch is not None:
            b, last.batch = last.batch, None
            b.release()

    def next(self):
        """The next Entry in stream order: kind "batch" (with images), "epoch"
        once after each epoch, "end" at the job's end (and after). The entry
        handed out before is released first. A TransformError or failed
        batch raises for that batch only; a WorkerError leaves the pipeline
        broken (it raises again)."""
        if self._broken is not None:
            raise self._broken
        try:
            self.consumed()
            return self._next()
        except WorkerError as ex:
            self._broken = ex
            raise

    def drain(self):
        """Wait until no worker reads a batch any more; release and drop what
        is queued (before a seek)."""
        while self._busy():
            self._collect(None)
        self.consumed()
        for e in self._queue:
            if e.batch is not None:
                b, e.batch = e.batch, None
                b.release()
        self._queue.clear()
        self._fetching = True

    def _hand(self, head):
        """Hand out the answered batch at the head: seerd must still serve us
        (else the stop or reconnect is taken first, by a fetch), then the
        loader records it as handed."""
        loader = self._loader
        rc = loader._alive()
        if rc != 0:
            if not (loader._opts.flags & _C.OPT_RECONNECT):
                from . import _error
                raise _error(rc)  # seerd stopped or died: not one more batch
            return False  # the fetch reconnects
        loader._handed(head.batch)  # first: if it fails, the entry stays at the head
        self._queue.popleft()
        self._last = head
        if head.error is not None:
            raise head.error
        return True

    def _next(self):
        backoff = 0.001
        while True:
            while self._fetching and len(self._queue) < self._depth:
                if not self._fetch(None if not self._queue else 0):
                    break
            if not self._queue:
                continue
            head = self._queue[0]
            if head.kind != "batch":
                self._queue.popleft()
                if head.kind == "epoch":
                    self._fetching = True
                else:
                    self._queue.appendleft(head)  # the job's end stays
                return head
            if head.answered:
                if self._hand(head):
                    return head
                # seerd stopped or went away: the fetch says which, or
                # reconnects (the queue is then dropped and filled anew)
                self._fetch(None)
                continue
            room = self._fetching and len(self._queue) < self._depth
            self._collect(backoff if room else None)
            if room:
                backoff = min(0.02, backoff * 2)

    def stop(self):
        """End the workers (they only read the arena; an answer in flight is
        dropped) and wait for them; from any thread. Batches still held stay
        held (closing the Loader leaves them not done)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            waiting = self._waiting
        self.wake()
        for p in self._procs:  # they hold nothing but a read-only mapping
            if p.is_alive():
                p.terminate()
        for p in self._procs:
            p.join(5.0)
            if p.is_alive():
                p.kill()
                p.join()
        if not waiting:
            self._close_fds()

    def wake(self):
        """Make a wait in another thread return."""
        if self._wake_w >= 0:
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass

    def _close_fds(self):
        """The pipes: by stop(), or by the thread that was waiting on them."""
        for c in self._conns:
            c.close()
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1


def _stopped_error():
    return SeerError(-errno.EBADF, "seer.torch: the loader was closed (its transform workers "
                     "are stopped)")
