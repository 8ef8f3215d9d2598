"""seer.torch: the Loader as an iterable of torch tensors (Debian's python3-torch).

    from seer.torch import TorchLoader
    loader = TorchLoader(ImageFolder(root, transform=tf), batch_size=256, shuffle=True,
                         seed=0, epochs=90, num_workers=8)
    for epoch in range(90):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:            # one epoch
            ...

Porting a DataLoader script: docs/torch.md. The job's definition
(batch_size, shuffle, drop_last, seed, epochs, the dataset) travels to seerd
in the handshake; with a root, daemon="auto" starts the node's seerd when
none serves the job, and it ends with the job. DataLoader's surface: len(),
sampler.set_epoch(e), dataset; rank and world size from an initialised
torch.distributed; the connection is made at the first use, so construct +
load_state_dict(state) + iterate resumes with any world size.

Three ways to get tensors:

1. File bytes or format arrays, no transform (default): x is a list of
   zero-copy tensors, one per sample, sharing the daemon's read-only memory
   and valid until the iterator moves on (the batch is then released).
   Writing to one faults; ``.clone()`` or ``.to(device)`` makes a private
   copy. stack=True returns one contiguous tensor per batch instead (one
   copy, as DataLoader's collate does; samples must share a shape). x is a
   SampleList: x.to(), x.cuda(), x.float() ... raise TypeError saying what
   x is and how to get one batch tensor (docs/torch.md).

2. A Python transform, ``transform=fn`` with ``num_workers=N``: fn runs in N
   worker processes (0: in the trainer) on every sample, and x is one tensor
   [B, ...] per batch, stacked in shared memory by the workers, owned by the
   trainer (like the DataLoader's: keep it as long as you like)::

       tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                       T.ToTensor(), T.Normalize(mean, std)])
       loader = TorchLoader(transform=tf, decode="pil", num_workers=4, pin_memory=True)

   What fn receives: with decode=None the sample as a read-only numpy view of
   the arena (uint8 bytes for files; the format's dtype and shape for
   npz/npy/hdf5), valid during the call (copy what you keep); with
   decode="pil" a PIL RGB image, decoded from the arena as torchvision's
   ImageFolder decodes a file (so ``ImageFolder(root, transform=tf)`` becomes
   ``TorchLoader(transform=tf, decode="pil")``); decode may also be a callable
   taking the view. fn returns a tensor, a numpy array or a number, of one
   shape and dtype for every sample. Labels are the int64 class indices.

   Workers read the samples in place (only offsets cross the pipes). Batches
   come in stream order. Workers start at the first iteration and live until
   close(); up to prefetch_factor * num_workers batches are in flight, held
   from seerd, which the loader declares at connect (max_held: seerd refuses
   the connection, saying what to raise, when it cannot serve that many). A
   batch is released -- done, for seerd's saved positions -- when the user
   asks for the batch after it, as with the plain iterator; state_dict()
   counts the batches yielded, never those still with the workers; a
   reconnect continues right after the last batch yielded (docs/resume.md).

   Determinism: before each sample, the generators a stock pipeline draws
   from (torch's default CPU generator, Python's random, numpy's global one)
   are seeded with sample_seed(job seed, epoch, sample id), so x depends on
   the sample and epoch only, never on num_workers, rank or world size; with
   num_workers=0 the trainer's own generator states are restored after each
   batch. sample_info() inside fn gives the sample's facts and a seeded
   torch.Generator, for transforms that take an explicit generator.

   Errors: an exception in fn raises TransformError in the trainer naming the
   sample (epoch, step, index, id, label) with the worker's traceback; it
   fails that batch only (the next iteration continues with the next batch).
   A worker that dies raises WorkerError at once (not a hang) and closes the
   loader. pin_memory=True pins x and y when CUDA is available (as the
   DataLoader, it does nothing without CUDA).

3. seerd's own transform (a [transform] section with decode = image, no
   transform= here): x is ONE zero-copy tensor of the whole batch, [B, 3, H,
   W] float32/float16 or [B, H, W, 3] uint8 as configured, a read-only view
   of the batch in seerd's memory: no decode, no collate, no copy. It is
   valid until the iterator moves to the next batch (the batch is then
   released and its memory reused): ``.to(device)``, ``.clone()`` or a
   computation that reads it before the next step is fine; to keep it longer
   pass copy=True (one copy per batch) or clone it. Writing to it faults.
   pin_memory=True copies it into pinned memory (when CUDA is available).
   With transform= as well, fn gets each sample's decoded tensor as a
   read-only numpy view (e.g. Python augmentations on top of seerd's crop).
"""

import collections
import warnings

import numpy as np
import torch

import os

from . import Loader, SeerError, _closed, _error, _find_lib
from . import _daemon, _workers
from ._workers import SampleInfo, TransformError, WorkerError, sample_seed

__all__ = ["TorchLoader", "TransformError", "WorkerError", "SampleInfo", "sample_seed",
           "sample_info", "decode_pil", "SampleList"]

decode_pil = _workers.decode_pil

LastBatch = collections.namedtuple("LastBatch", "epoch step ids")


def sample_info():
    """Inside a transform: the SampleInfo (seed, epoch, step, index, id,
    label) of the sample being transformed; None elsewhere."""
    return _workers.current()


def _as_tensor(a):
    with warnings.catch_warnings():
        # the views are deliberately read-only; torch warns about that
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(a)


class SampleList(list):
    """x from TorchLoader() without transform= when seerd has no [transform]
    section: a list of zero-copy tensors, one per sample (file bytes, or the
    format's arrays). It is a list, not a batch tensor; the tensor methods a
    training step calls on x (.to, .cuda, .pin_memory, .float, ...) raise
    TypeError saying what x is and how to get a batch tensor."""

    __slots__ = ()

    def _hint(self, what):
        n = len(self)
        if n and all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.dim() == 1
                     for t in self):
            sizes = [t.numel() for t in self]
            kind = "the samples' file bytes (uint8, %d to %d bytes each)" % (min(sizes),
                                                                              max(sizes))
            stack = ""
        else:
            shapes = sorted({tuple(t.shape) for t in self if isinstance(t, torch.Tensor)})
            kind = "the samples' arrays (shapes %s)" % ", ".join(str(list(x)) for x in shapes[:3])
            stack = "; stack=True makes them one tensor (samples of one shape)"
        return ("%s: x is a list of %d tensors, one per sample: %s, not one batch tensor "
                "(seerd has no [transform] section and TorchLoader got no transform=). For "
                "a batch tensor pass transform=fn (with decode='pil' for images, num_workers=N "
                "to run it in workers)%s, or give seerd a [transform] section with decode = "
                "image (docs/transform.md). To move the samples as they are: [t.to(device) "
                "for t in x]" % (what, n, kind, stack))

    def _refuse(self, name):
        def method(*args, **kwargs):
            raise TypeError(self._hint("x.%s()" % name))
        return method

    def __getattr__(self, name):
        if name in ("to", "cuda", "cpu", "pin_memory", "float", "half", "double", "bfloat16",
                    "long", "int", "byte", "contiguous", "size", "dim", "numel", "view",
                    "reshape", "permute", "unsqueeze", "numpy", "clone", "detach"):
            return self._refuse(name)
        if name in ("shape", "dtype", "device", "is_cuda", "ndim"):
            raise AttributeError(self._hint("x.%s" % name))
        raise AttributeError("'SampleList' object has no attribute %r" % name)


class TorchLoader(Loader):
    """seer.Loader yielding (x, y) torch pairs; see the module documentation.

    TorchLoader(root, batch_size, shuffle, *, drop_last, seed, epochs, ...)
    declares the job as a DataLoader does (docs/torch.md, the porting
    guide): root is the dataset's directory, or a torchvision DatasetFolder /
    ImageFolder (its root, and its transform when transform= is not given,
    with decode="pil"). The job's arguments travel to seerd in the handshake.

    daemon: "auto" (the default when root is given) starts the node's seerd
    when none serves the job's socket, ending with the job (daemon_idle:
    seconds without a trainer after which it exits, default 120;
    seerd_settings: extra "section.key": value for it, e.g. {"cache.ram":
    "8GiB"}); a run without state= (or load_state_dict) starts at the job's
    start, as a DataLoader does, and one with it where the checkpoint says,
    whatever a seerd still running from an earlier run holds. None: seerd is
    started by hand (socket, job id as for seer.Loader) and a run without
    state continues where seerd last saw this rank.

    Extra arguments: stack, copy, transform, decode, num_workers, pin_memory,
    prefetch_factor, multiprocessing_context ("fork", the default, "spawn" or
    "forkserver": with spawn fn must be picklable, as for the DataLoader).
    last_batch is (epoch, step, ids) of the batch yielded last."""

    def __init__(self, root=None, batch_size=None, shuffle=None, *, stack=False, copy=False,
                 transform=None, decode=None, num_workers=0, pin_memory=False,
                 prefetch_factor=2, multiprocessing_context=None, daemon="default",
                 daemon_idle=120.0, seerd_settings=None, **kwargs):
        if root is not None and not isinstance(root, (str, bytes, os.PathLike)):
            ds = root
            if not hasattr(ds, "root"):
                raise TypeError("TorchLoader(root): a directory or a torchvision DatasetFolder/"
                                "ImageFolder (with .root), not %r" % (ds,))
            root = ds.root
            if transform is None and getattr(ds, "transform", None) is not None:
                transform = ds.transform
                if decode is None:
                    decode = "pil"
        if daemon == "default":
            daemon = "auto" if root is not None else None
        if daemon not in ("auto", None):
            raise ValueError("daemon must be 'auto' or None, not %r" % (daemon,))
        if daemon == "auto" and root is None:
            raise ValueError("daemon='auto' needs the dataset: TorchLoader(root, ...)")
        if batch_size is not None:
            kwargs["batch_size"] = batch_size
        if shuffle is not None:
            kwargs["shuffle"] = shuffle
        if root is not None:
            kwargs["dataset"] = root
        if daemon == "auto" and kwargs.get("state") is None and kwargs.get("start") is None:
            # the script owns the job: without a checkpoint it starts it,
            # whatever an earlier run left in a seerd still running
            kwargs["start"] = (0, 0)
        self._daemon_mode = daemon
        self._daemon_idle = float(daemon_idle)
        self._seerd_settings = dict(seerd_settings or {})
        self._root = None if root is None else os.path.abspath(os.fspath(root))
        self._job_id = kwargs.get("job_id")
        self._socket = kwargs.get("socket")
        self.seerd = None  # the Popen of a seerd this loader started
        if transform is None and (decode is not None or num_workers):
            raise ValueError("decode and num_workers apply to a transform: pass transform=fn")
        if transform is not None and not callable(transform):
            raise TypeError("transform must be callable, not %r" % (transform,))
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError("num_workers must be an integer >= 0, not %r" % (num_workers,))
        if isinstance(prefetch_factor, bool) or not isinstance(prefetch_factor, int) or \
                prefetch_factor < 1:
            raise ValueError("prefetch_factor must be an integer >= 1, not %r" %
                             (prefetch_factor,))
        if multiprocessing_context not in (None, "fork", "spawn", "forkserver"):
            raise ValueError("multiprocessing_context must be 'fork', 'spawn' or 'forkserver'")
        if transform is not None:
            _workers.check_decode(decode)
        self._pipe = None
        self._retry = None  # a batch whose inline transform was interrupted: done first
        if transform is not None:
            # a batch is handed to the user when its tensor is yielded, not when
            # taken: with workers, up to num_workers x prefetch_factor are taken
            # ahead (declared to seerd, with the one in the user's hands)
            if num_workers > 0:
                kwargs.setdefault("max_held", num_workers * prefetch_factor + 1)
            kwargs["_take_ahead"] = True
        super().__init__(**kwargs)
        self.stack = stack
        self.copy = bool(copy)
        self.transform = transform
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.multiprocessing_context = multiprocessing_context or "fork"
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()
        self.last_batch = None
        self._decode = decode
        self._job = None  # made at the first iteration (it needs the job's seed)

    def _connect(self, state):
        if self._daemon_mode == "auto":
            self._start_daemon()
        super()._connect(state)

    def _start_daemon(self):
        """daemon='auto': the job's seerd, started here when none serves its
        socket (seer/_daemon.py)."""
        lib = self._lib
        sock = self._socket
        if not sock:
            import ctypes
            buf = ctypes.create_string_buffer(4096)
            rc = lib.seer_socket_path(self._job_id.encode() if self._job_id else None, buf,
                                      len(buf))
            if rc < 0:
                raise _error(rc)
            sock = os.fsdecode(buf.value)
        job = self._job_id or os.environ.get("SEER_JOB_ID") or \
            os.environ.get("SLURM_JOB_ID") or "default"
        nodes = os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or "1"
        if nodes.isdigit() and int(nodes) > 1:
            # several nodes: their seerds are one MPI job, started by srun
            # (docs/torch.md); connecting waits for this node's
            self._opts.socket_path = os.fsencode(sock)
            return
        try:
            libpath = _find_lib()
        except OSError:
            libpath = None
        timeout = max(self._opts.connect_timeout_ms / 1000.0, 1.0)
        proc = _daemon.ensure(sock, job, self._root, self._seerd_settings, self._daemon_idle,
                              libpath, timeout, lambda m: SeerError(-1, m))
        if proc is not None:
            self.seerd = proc
            self.daemon_log = sock + ".log"
        self._opts.socket_path = os.fsencode(sock)

    def _transform_job(self):
        if self._job is None:
            self._job = _workers.Job(self.transform, self._decode, self.seed, self._types)
        return self._job

    def _pinned(self, x, y):
        if self.pin_memory:
            return x.pin_memory(), y.pin_memory()
        return x, y

    def _iterate(self, gen, skip_end):
        if self.transform is None:
            return self._iter_plain(gen, skip_end)
        if self.num_workers == 0:
            return self._iter_inline(gen, skip_end)
        return self._iter_workers(gen, skip_end)

    def _iter_plain(self, gen, skip_end):
        for batch in self._batches(gen, skip_end):
            self.last_batch = LastBatch(batch.epoch, batch.step, batch.ids)
            labels = torch.from_numpy(batch.labels)
            block = batch.tensor
            if block is not None:  # seerd's transform: the batch is one tensor already
                x = _as_tensor(block)
                if self.copy or self.pin_memory:
                    x = x.pin_memory() if self.pin_memory else x.clone()
                    labels = labels.pin_memory() if self.pin_memory else labels
                yield x, labels
            elif self.stack:
                yield self._pinned(torch.from_numpy(np.stack(batch.samples)), labels)
            else:
                yield SampleList(_as_tensor(s) for s in batch.samples), labels

    def _iter_inline(self, gen, skip_end):
        job = self._transform_job()
        batches = self._batches(gen, skip_end)
        while True:
            batch, self._retry = self._retry, None
            if batch is None:
                try:
                    batch = next(batches)
                except StopIteration:
                    return
            task = (0, batch.epoch, batch.step, batch._offsets.tolist(), batch.sizes.tolist(),
                    batch._types.tolist(), batch.ids.tolist(), batch.labels.tolist())
            state = (torch.default_generator.get_state(), _workers.random.getstate(),
                     np.random.get_state())
            try:
                x = _workers.run_batch(job, batch._arena, task)
            except TransformError:
                self._handed(batch)  # raised in its place: that batch is delivered (failed)
                raise
            except BaseException:
                # interrupted (Ctrl-C): not handed, so not released by the next
                # request either; the next iteration transforms it again
                if self._held is batch:
                    self._held = None
                self._retry = batch
                raise
            finally:
                torch.default_generator.set_state(state[0])
                _workers.random.setstate(state[1])
                np.random.set_state(state[2])
            self._handed(batch)
            self.last_batch = LastBatch(batch.epoch, batch.step, batch.ids)
            yield self._pinned(x, torch.from_numpy(batch.labels))

    def _iter_workers(self, gen, skip_end):
        if self._c is None:
            raise _closed("iterating")
        if self._pipe is None:
            self._pipe = _workers.Pipeline(self, self._transform_job(), self.num_workers,
                                           self.prefetch_factor, self.multiprocessing_context)
        while True:
            self._still(gen)
            pipe = self._pipe
            if pipe is None:
                raise _closed("iterating")
            try:
                e = pipe.next()
            except WorkerError:
                self.close()
                raise
            except SeerError:
                if pipe._last is not None:  # a failed batch, handed in its place
                    self._handed_out(pipe._last.epoch)
                raise
            if e.kind == "epoch":
                if self._end(skip_end):
                    return
                skip_end = False
                continue
            if e.kind != "batch":
                self._mid_epoch = False
                return
            skip_end = False
            self._handed_out(e.epoch)
            self.last_batch = LastBatch(e.epoch, e.step, e.ids)
            yield self._pinned(e.images, torch.from_numpy(e.labels))

    def seek(self, epoch, step):
        """Restart the stream at (epoch, step): batches being transformed are
        waited for and dropped first."""
        if self._pipe is not None:
            self._pipe.drain()
        retry, self._retry = self._retry, None
        if retry is not None:
            retry.release()
        super().seek(epoch, step)

    def close(self):
        """Stop the transform workers, then disconnect; from any thread (an
        iteration waiting in another thread raises SeerError)."""
        pipe, self._pipe = getattr(self, "_pipe", None), None
        if pipe is not None:
            pipe.stop()
        super().close()


__all__ += ["SeerError"]
