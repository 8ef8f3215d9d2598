"""seer.checkpoint.StorageWriter / StorageReader: torch.distributed.checkpoint
(DCP) storage through seerd (docs/checkpoint.md, "DCP").

    writer = seer.checkpoint.StorageWriter()
    dcp.save(state_dict, checkpoint_id="/pfs/run/step100", storage_writer=writer)
    writer.wait("pfs")                      # optional: this rank's files durable
    dcp.load(state_dict, checkpoint_id="/pfs/run/step100",
             storage_reader=seer.checkpoint.StorageReader())

Each rank writes one file, <checkpoint_id>/__<rank>_0.seer: one seer
checkpoint (seer.checkpoint.save_items) holding the rank's items laid out at
aligned offsets, tensors as their raw elements (row-major chunk, no pickle),
so write_data returns once the bytes are in seerd's shared memory (or, with
level=, once they are at that level). seerd drains the file to the PFS. The
coordinator writes <checkpoint_id>/.metadata (DCP's Metadata, pickled; its
storage_data maps each item to a seer.checkpoint.DcpItem) the same way in
finish(). The reader reads each file's items from the newest complete copy
(seerd's memory or NVMe, a peer copy it holds, else the PFS file) at the
offsets in the metadata. The files are not FileSystemReader's format.

Split: write_rank_file() and read_rank_file() hold the logic and need torch
(any version) but not DCP; the classes below are thin adapters to DCP's
interfaces of torch 2.0-2.1 (init), 2.2 (reset, set_up_storage_*) and 2.3+
(validate_checkpoint_id, storage_meta). Run on the caller's thread (dcp.save's,
or async_save's background thread); on failure the exception propagates to
DCP, which reports it for the rank.
"""

import io
import os
import pickle
import uuid

from . import checkpoint as _ck

try:
    import torch
except ImportError:  # seer.checkpoint works without torch; these classes do not
    torch = None

_WHY = None
_dcp = None
try:
    from torch.distributed.checkpoint import metadata as _md
    from torch.distributed.checkpoint import planner as _pl
    from torch.distributed.checkpoint import storage as _st
    from torch.futures import Future as _Future
    _dcp = True
except Exception as ex:  # torch 1.x, or no torch: the classes refuse on use
    _WHY = ("seer.checkpoint.StorageWriter/StorageReader need torch >= 2.0 "
            "(torch.distributed.checkpoint); this is torch %s (%s: %s)" %
            (getattr(torch, "__version__", "not installed"), type(ex).__name__, ex))

RANK_FILE = "__%d_0.seer"
METADATA = ".metadata"


def dtype_name(dtype):
    """torch.float32 -> "float32"."""
    return str(dtype).rsplit(".", 1)[-1]


def _elem_size(dtype):
    return torch.empty((), dtype=dtype).element_size()


def _as_tensor(buf, dtype, shape):
    """A tensor of `dtype` and `shape` over the bytes of `buf` (shared, not
    copied); numpy holds the buffer, so a view left alive after the call
    makes the memoryview's release fail loudly instead of dangling."""
    import numpy as np
    shape = tuple(shape)
    if not len(buf):
        return torch.empty(shape, dtype=dtype)
    return torch.from_numpy(np.frombuffer(buf, dtype=np.uint8)).view(dtype).view(shape)


def write_rank_file(path, items, resolve, is_bytes, **kw):
    """Write DCP write items into one seer checkpoint at `path`.
    resolve(item) gives a BytesIO (is_bytes(item)) or a tensor of
    item.tensor_data.chunk.sizes and item.tensor_data.properties.dtype (any
    device, any strides: its elements are copied once, into the shared
    memory). Returns (Checkpoint, [DcpItem per item]). kw: save_items'."""
    rel = os.path.basename(path)
    sizes, kinds, blobs = [], [], {}
    for i, it in enumerate(items):
        if is_bytes(it):
            # bytes items first: their size is known only once resolved
            b = resolve(it)
            b = b.getbuffer() if isinstance(b, io.BytesIO) else memoryview(b)
            blobs[i] = b
            sizes.append(b.nbytes)
            kinds.append((None, None))
        else:
            td = it.tensor_data
            shape = tuple(td.chunk.sizes)
            n = 1
            for s in shape:
                n *= s
            sizes.append(n * _elem_size(td.properties.dtype))
            kinds.append((td.properties.dtype, shape))

    def fill(i, view):
        if i in blobs:
            view[:] = blobs.pop(i)
            return
        dtype, shape = kinds[i]
        t = resolve(items[i]).detach()
        if tuple(t.shape) != shape or t.dtype != dtype:
            raise ValueError("DCP item %s: the planner resolved a %s %s tensor, the plan says "
                             "%s %s" % (items[i].index, t.dtype, tuple(t.shape), dtype, shape))
        _as_tensor(view, dtype, shape).copy_(t)

    h, offsets = _ck.save_items(path, sizes, fill, **kw)
    return h, [_ck.DcpItem(rel, off, n, None if d is None else dtype_name(d), s)
               for off, n, (d, s) in zip(offsets, sizes, kinds)]


def read_rank_file(path, reqs, where_of, is_bytes, load_bytes, resolve_tensor, commit_tensor,
                   **kw):
    """Read DCP read items `reqs` (all in the file at `path`): where_of(req)
    gives its DcpItem; bytes go to load_bytes(req, BytesIO), tensors are
    narrowed to req.storage_offsets / req.lengths and copied into
    resolve_tensor(req), then commit_tensor(req, tensor). Reads the newest
    complete copy, one item in memory at a time; returns the level read.
    kw: iter_ranges'."""
    level = None
    mds = [where_of(r) for r in reqs]
    direct = {}

    def into(i):
        # the whole chunk into a contiguous CPU destination: read straight
        # into it, no copy
        req, m = reqs[i], mds[i]
        if is_bytes(req) or list(req.storage_offsets) != [0] * len(m.shape) or \
                tuple(req.lengths) != m.shape or not m.length:
            return None
        dst = resolve_tensor(req).detach()
        if dst.device.type != "cpu" or not dst.is_contiguous() or \
                dtype_name(dst.dtype) != m.dtype or tuple(dst.shape) != m.shape:
            direct[i] = dst  # resolved once: copied into below
            return None
        direct[i] = dst
        return dst.reshape(-1).view(torch.uint8).numpy()

    for i, level, buf in _ck.iter_ranges(path, [(m.offset, m.length) for m in mds], into=into,
                                         **kw):
        req, m = reqs[i], mds[i]
        if is_bytes(req):
            load_bytes(req, io.BytesIO(buf))
            continue
        dst = direct.pop(i, None)
        if dst is not None and not isinstance(buf, bytearray):
            commit_tensor(req, dst)  # read in place
            continue
        t = _as_tensor(buf, getattr(torch, m.dtype), m.shape)
        for d, (off, n) in enumerate(zip(req.storage_offsets, req.lengths)):
            t = t.narrow(d, off, n)
        if dst is None:
            dst = resolve_tensor(req).detach()
        if dst.shape != t.shape:
            raise ValueError("DCP item %s in %s: stored slice %s, destination %s" %
                             (req.storage_index, path, tuple(t.shape), tuple(dst.shape)))
        dst.copy_(t)
        commit_tensor(req, dst)
    return level


def _check_path(path, what):
    if path is None:
        raise ValueError("%s: no checkpoint_id: give one to dcp.save/dcp.load or a path to "
                         "the constructor" % what)
    s = os.fspath(path)
    if "://" in str(s):
        raise ValueError("%s: %s is a URL; seer writes to a PFS directory" % (what, s))
    return os.path.abspath(s)


if _dcp:
    class StorageWriter(_st.StorageWriter):
        """DCP StorageWriter through seerd: write_data returns once this
        rank's bytes are in seerd's shared memory, or, with `level`
        ("local", "peer", "pfs"), once they are durable there (through
        seerd's retries of a failed peer copy or drain, until `timeout`).
        wait(level) waits for this rank's files of the last save (the
        coordinator's .metadata included). socket/job_id/timeout: as
        seer.checkpoint.save."""

        def __init__(self, path=None, level=None, socket=None, job_id=None, timeout=None,
                     connect_timeout=None):
            super().__init__()
            if level not in (None, "memory") and level not in _ck.LEVELS:
                raise ValueError("level must be one of %s or None, not %r" % (_ck.LEVELS, level))
            self.path = None if path is None else _check_path(path, "seer StorageWriter")
            self.level = None if level == "memory" else level
            self._kw = dict(socket=socket, job_id=job_id, timeout=timeout,
                            connect_timeout=connect_timeout)
            self.is_coordinator = False
            self.checkpoints = []
            self.save_id = str(uuid.uuid4())

        # torch 2.2+: a new save begins
        def reset(self, checkpoint_id=None):
            if checkpoint_id:
                self.path = _check_path(checkpoint_id, "seer StorageWriter")
            self.checkpoints = []
            self.save_id = str(uuid.uuid4())

        @classmethod
        def validate_checkpoint_id(cls, checkpoint_id):
            return "://" not in str(os.fspath(checkpoint_id))

        def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
            # each save: torch 2.0/2.1 have no reset(), 2.3 calls it only
            # with a checkpoint_id; wait() is about the last save's files
            self.is_coordinator = is_coordinator
            self.checkpoints = []

        def init(self, is_coordinator):  # torch 2.0-2.1's name
            self.set_up_storage_writer(is_coordinator)

        def storage_meta(self):
            sm = getattr(_md, "StorageMeta", None)
            return sm(checkpoint_id=self.path, save_id=self.save_id) if sm else None

        def prepare_local_plan(self, plan):
            path = _check_path(self.path, "seer StorageWriter")
            # seerd refuses a checkpoint whose directory is missing
            os.makedirs(path, exist_ok=True)
            return plan

        def prepare_global_plan(self, plans):
            import dataclasses
            return [dataclasses.replace(p, storage_data=RANK_FILE % i)
                    for i, p in enumerate(plans)]

        def _keep(self, h):
            self.checkpoints.append(h)
            if self.level:
                # a failed peer copy or drain is retried by seerd: not a failed save
                h.wait(self.level, self._kw["timeout"], retrying=True)

        def write_data(self, plan, planner):
            results = []
            if plan.items:
                h, where = write_rank_file(
                    os.path.join(self.path, plan.storage_data), plan.items, planner.resolve_data,
                    lambda it: it.type == _pl.WriteItemType.BYTE_IO, **self._kw)
                self._keep(h)
                results = [_st.WriteResult(index=it.index, size_in_bytes=m.length,
                                           storage_data=m) for it, m in zip(plan.items, where)]
            fut = _Future()
            fut.set_result(results)
            return fut

        def finish(self, metadata, results):
            metadata.storage_data = {wr.index: wr.storage_data for wrs in results for wr in wrs}
            if hasattr(metadata, "storage_meta"):
                metadata.storage_meta = self.storage_meta()
            blob = pickle.dumps(metadata)

            def fill(_, view):
                view[:] = blob

            h, _ = _ck.save_items(os.path.join(self.path, METADATA), [len(blob)], fill,
                                  **self._kw)
            self._keep(h)

        def wait(self, level="pfs", timeout=None, retrying=True):
            """This rank's files of the last save (those of the last
            dcp.save / async_save with this writer, the coordinator's
            .metadata included) durable at `level`; `timeout` seconds for
            each file (None: for ever). retrying: as Checkpoint.wait (by
            default the wait goes on through seerd's retries)."""
            for h in self.checkpoints:
                h.wait(level, timeout, retrying=retrying)

    class StorageReader(_st.StorageReader):
        """DCP StorageReader through seerd: each item from the newest
        complete copy of its file (seerd's memory or NVMe, a peer copy it
        holds, else the PFS), at the offsets in the metadata. `levels`
        counts the files read per level after read_data."""

        def __init__(self, path=None, socket=None, job_id=None, connect_timeout=None):
            super().__init__()
            self.path = None if path is None else _check_path(path, "seer StorageReader")
            self._kw = dict(socket=socket, job_id=job_id, connect_timeout=connect_timeout)
            self.storage_data = {}
            self.levels = {}
            self.load_id = str(uuid.uuid4())

        def reset(self, checkpoint_id=None):
            if checkpoint_id:
                self.path = _check_path(checkpoint_id, "seer StorageReader")
            self.storage_data = {}
            self.levels = {}
            self.load_id = str(uuid.uuid4())

        @classmethod
        def validate_checkpoint_id(cls, checkpoint_id):
            return "://" not in str(os.fspath(checkpoint_id))

        def read_metadata(self):
            path = os.path.join(_check_path(self.path, "seer StorageReader"), METADATA)
            (blob,), level = _ck.read_ranges(path, None, **self._kw)
            md = pickle.loads(bytes(blob))
            self.levels[METADATA] = level
            if hasattr(md, "storage_meta"):
                if md.storage_meta is None and hasattr(_md, "StorageMeta"):
                    md.storage_meta = _md.StorageMeta()
                if md.storage_meta is not None:
                    md.storage_meta.load_id = self.load_id
            return md

        def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
            self.storage_data = metadata.storage_data
            bad = [v for v in self.storage_data.values() if not isinstance(v, _ck.DcpItem)]
            if bad:
                raise ValueError("%s was not written by seer.checkpoint.StorageWriter (its "
                                 "storage_data holds %s): read it with the reader of the "
                                 "writer used" % (self.path, type(bad[0]).__name__))

        def init(self, metadata, is_coordinator):  # torch 2.0-2.1's name
            self.set_up_storage_reader(metadata, is_coordinator)

        def prepare_local_plan(self, plan):
            return plan

        def prepare_global_plan(self, plans):
            return plans

        def read_data(self, plan, planner):
            per_file = {}
            for r in plan.items:
                per_file.setdefault(self.storage_data[r.storage_index].relative_path,
                                    []).append(r)
            for rel, reqs in per_file.items():
                lv = read_rank_file(os.path.join(self.path, rel), reqs,
                                    lambda r: self.storage_data[r.storage_index],
                                    lambda r: r.type == _pl.LoadItemType.BYTE_IO,
                                    planner.load_bytes, planner.resolve_tensor,
                                    planner.commit_tensor, **self._kw)
                self.levels[rel] = lv
            fut = _Future()
            fut.set_result(None)
            return fut
else:
    class StorageWriter:
        """Needs torch >= 2.0 (torch.distributed.checkpoint): refuses."""

        def __init__(self, *args, **kwargs):
            raise RuntimeError(_WHY)

    class StorageReader:
        """Needs torch >= 2.0 (torch.distributed.checkpoint): refuses."""

        def __init__(self, *args, **kwargs):
            raise RuntimeError(_WHY)
