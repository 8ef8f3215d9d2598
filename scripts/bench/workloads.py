"""Benchmark workloads: scaled-down DLIO configurations, and their datasets.

Each *dataset* is generated once into DATA/<name>/ (DLIO layout:
DATA/<name>/train/..., DALI indexes in DATA/<name>/index/train/ for tfrecord)
and reused while its parameters (recorded in DATA/<name>/.params) are
unchanged. Each *scenario* runs every system on one dataset through one PFS
emulator configuration.

The DLIO facts each workload keeps (from argonne-lcf/dlio_benchmark,
dlio_benchmark/configs/workload/*.yaml) are in DLIO below; what is scaled and
why is in docs/results.md ("Workloads")."""

import math
import os
import struct
import sys

MiB = 1 << 20
KiB = 1 << 10

# Facts from DLIO's shipped workload configs (h100 variants where they exist).
DLIO = {
    "unet3d": dict(config="unet3d_h100.yaml", format="npz", files=168, samples_per_file=1,
                   record_bytes=146600628, record_sd=68341808, resize=2097152, batch=7,
                   read_threads=4, compute_s=0.323, epochs=5),
    # (num_files_train 1281167 with 1251 samples per file, as the file says;
    # resnet50.yaml: 1024 jpeg files of one 150528-byte sample, 0.1 s compute)
    "resnet50": dict(config="resnet50_h100.yaml", format="tfrecord",
                     files=1281167, samples_per_file=1251, record_bytes=114660, record_sd=136076,
                     batch=64, read_threads=8, compute_s=0.103, epochs=5),
    "cosmoflow": dict(config="cosmoflow_h100.yaml", format="tfrecord (hdf5 in older configs)",
                      files=524288, samples_per_file=1, record_bytes=2828486, record_sd=71311,
                      batch=1, read_threads=4, compute_s=0.0035, epochs=5),
    "bert": dict(config="bert_v100.yaml", format="tfrecord", files=500,
                 samples_per_file=313532, record_bytes=2500, record_sd=0, batch=48,
                 read_threads=1, compute_s=0.968, epochs="1000 steps"),
}


def _ds(name, fmt, nsamples, per_file, size, sd=0, dims=None, seed=1, classes=0):
    return dict(name=name, format=fmt, nsamples=nsamples, per_file=per_file, size=size, sd=sd,
                dims=dims, seed=seed, classes=classes)


# ---- datasets -------------------------------------------------------------------
# default sizes: `make bench` (all scenarios, all systems, 2 rounds) runs in
# ~15 min on a 2-core VM (~8 of them the bandwidth-bound scenarios, ~7 the
# packed *-lustre ones); full: DLIO's own sizes (configuration only; the
# *-lustre scenarios have no --full variant).

def datasets(full=False):
    if full:
        return {
            "unet3d": _ds("unet3d", "npz", 168, 1, 146600628, 68341808, seed=11),
            "resnet50": _ds("resnet50", "files", 1281167, 1, 114660, 136076, seed=12,
                            classes=1000),
            "cosmoflow": _ds("cosmoflow", "hdf5", 524288, 1, 2828486, 0, dims=(1682, 1682),
                             seed=13),
            # 16 of DLIO's 500 files (5.0 M records, 12.5 GB): an epoch of DLIO's
            # BERT at 0.968 s per step is otherwise ~2 days on 32 trainers
            "bert": _ds("bert", "tfrecord", 16 * 313532, 313532, 2500, seed=14),
        }
    return {
        # DLIO's 168 files of one sample each; ~2 MiB samples (DLIO resizes UNet3D
        # samples to 2 MiB) with DLIO's relative spread (68 MB sd on 147 MB)
        "unet3d": _ds("unet3d", "npz", 168, 1, 2 * MiB, int(2 * MiB * 68341808 / 146600628),
                      seed=11),
        # ImageNet-style tree of 2048 files, lognormal sizes with DLIO's mean and sd
        "resnet50": _ds("resnet50", "files", 2048, 1, 114660, 136076, seed=12, classes=16),
        # 80 HDF5 files of one 1682x1682 uint8 sample (2.83 MB, DLIO's record length)
        "cosmoflow": _ds("cosmoflow", "hdf5", 80, 1, 1682 * 1682, 0, dims=(1682, 1682),
                         seed=13),
        # 2500-byte records, 960 per TFRecord file, 8 files (DALI indexes beside)
        "bert": _ds("bert", "tfrecord", 8 * 960, 960, 2500, seed=14),
        # packed formats with many samples per file (the lustre-like scenarios):
        # 8 files x 512 samples of 4 KiB each; HDF5 'records' (n, 64, 64)
        # contiguous, npz as DLIO writes it (x = (64, 64, n), samples on the
        # last axis), DLIO's indexed binary (data + .off.idx/.sz.idx)
        "h5multi": _ds("h5multi", "hdf5", 8 * 512, 512, 4096, dims=(64, 64), seed=15),
        "npzmulti": _ds("npzmulti", "npz", 8 * 512, 512, 4096, seed=16),
        "idxbin": _ds("idxbin", "indexed", 8 * 512, 512, 4096, seed=17),
    }


# ---- scenarios --------------------------------------------------------------------

def _pfs(bw, lat=1.0, meta=1.0, inflight=32):
    return dict(bandwidth=bw, latency_ms=lat, meta_latency_ms=meta, max_inflight=inflight)


# The emulator's lustre preset (tools/pfsemu/opts.c, docs/pfsemu.md): one
# Lustre client, 8 read RPCs in flight to the OST holding the files, 2 ms per
# RPC, 2 GB/s, 4 MiB RPCs, readahead for sequential readers. The numbers are
# repeated here for the report and the timeouts; the emulator gets --preset.
LUSTRE = dict(preset="lustre", bandwidth=2e9, latency_ms=2.0, meta_latency_ms=1.0,
              max_inflight=0, ost_inflight=8, meta_inflight=8, rpc_size=4 << 20,
              readahead=256 << 20)


def emulator_args(pfs):
    """seer-pfsemu options for a scenario's PFS."""
    if pfs.get("preset"):
        return ["--preset", pfs["preset"]]
    return ["--bandwidth", "%dB/s" % int(pfs["bandwidth"]), "--latency-ms",
            str(pfs["latency_ms"]), "--meta-latency-ms", str(pfs["meta_latency_ms"]),
            "--max-inflight", str(pfs["max_inflight"])]


def in_flight(pfs):
    """The bound on read requests in flight, for the report."""
    return pfs.get("ost_inflight") or pfs.get("max_inflight") or 0


def scenarios(full=False, nodes=2, tpn=2):
    """The scenarios in run order. Sizes are bytes; bandwidth in bytes/s; ram_frac is
    the aggregate RAM cache of all nodes over the dataset size."""
    ds = datasets(full)
    out = []

    def sc(name, dsname, batch, compute_ms, pfs, ram_frac=1.2, staging=256 * MiB,
           epochs=3, io_threads=16, lookahead=8, baseline=True, shares=None, dlio=None, note="",
           systems=None, packed=False):
        d = ds[dsname]
        D = d["nsamples"] * d["size"]  # nominal; the runner uses the real bytes
        out.append(dict(name=name, dataset=dsname, fmt=d["format"], batch=batch,
                        compute_ms=compute_ms, pfs=pfs, ram_frac=ram_frac, staging=staging,
                        epochs=epochs, io_threads=io_threads, lookahead=lookahead,
                        baseline=baseline, shares=shares, nominal_bytes=D, dlio=dlio or dsname,
                        nodes=nodes, tpn=tpn, note=note, systems=systems, packed=packed))

    def packed(name, dsname, batch, compute_ms, staging, note):
        """A packed format on the lustre-like PFS: seer (coalesced reads) and seer
        with them off, the DataLoader (one pread per record located by an index)
        and the sequential read of the files."""
        sc(name, dsname, batch, compute_ms, dict(LUSTRE), staging=staging, epochs=2,
           systems=("torch", "seer", "seer-plain", "seq"), packed=True, note=note)

    if full:
        # real-hardware sizes: DLIO's sample counts, sizes, batches, compute times;
        # PFS numbers are a mid-size Lustre share per node (edit for your site)
        sc("unet3d", "unet3d", 7, 323, _pfs(2e9, 1.0, 1.0, 64), staging=8 << 30, epochs=5)
        sc("resnet50", "resnet50", 64, 103, _pfs(2e9, 1.0, 1.0, 64), staging=2 << 30,
           epochs=5, io_threads=64)
        sc("cosmoflow", "cosmoflow", 1, 3.5, _pfs(2e9, 1.0, 1.0, 64), staging=2 << 30,
           epochs=5, io_threads=64, lookahead=64)
        sc("bert", "bert", 48, 968, _pfs(2e9, 1.0, 1.0, 64), epochs=3, io_threads=64)
        sc("cosmoflow-big", "cosmoflow", 1, 3.5, _pfs(2e9, 1.0, 1.0, 64), ram_frac=0.5,
           staging=2 << 30, epochs=5, io_threads=64, lookahead=64, shares="cosmoflow",
           note="aggregate RAM cache = 0.5 x dataset")
        return out

    # quick: the PFS bandwidth of every scenario is set so that reading the
    # dataset once takes 4x the epoch's compute time (an I/O-bound job: a loader
    # that reads the PFS every epoch cannot pass AU 25%), latency 1 ms per request
    # and per metadata operation, 32 requests in flight
    def bw(dsname, batch, compute_ms):
        d = ds[dsname]
        steps = -(-d["nsamples"] // (nodes * tpn * batch))
        return _pfs(round(d["nsamples"] * d["size"] / (4 * steps * compute_ms / 1000), -5))

    sc("unet3d", "unet3d", 7, 150, bw("unet3d", 7, 150), staging=192 * MiB, lookahead=4)
    # staging: [job] max_held (2) batches of the largest samples (64 x 896 KiB)
    # for each of a node's 2 trainers
    sc("resnet50", "resnet50", 64, 103, bw("resnet50", 64, 103), staging=256 * MiB,
       lookahead=4)
    sc("cosmoflow", "cosmoflow", 1, 45, bw("cosmoflow", 1, 45), staging=96 * MiB,
       lookahead=8)
    sc("bert", "bert", 48, 20, bw("bert", 48, 20), staging=32 * MiB, lookahead=8)
    # the dataset larger than the aggregate cache: cosmoflow's files, RAM per node
    # 1/4 of the dataset (aggregate 0.5 D); the baselines do not cache, so their
    # runs on the same files and PFS settings are those of the "cosmoflow" scenario
    sc("cosmoflow-big", "cosmoflow", 1, 45, bw("cosmoflow", 1, 45), ram_frac=0.5,
       staging=96 * MiB, lookahead=8, baseline=False, shares="cosmoflow",
       note="aggregate RAM cache = 0.5 x dataset")
    # every packed format on the lustre-like PFS (the cold-epoch issue): small
    # records, many per file; latency x in-flight bound, not bandwidth, limits
    # a loader that reads one record per request. Compute time aside (the
    # issue's bars compare loading alone): the trainers do not compute, so an
    # epoch's wall time and samples/s are the loader's own
    packed("bert-lustre", "bert", 48, 0, 32 * MiB, "TFRecord, BERT-like")
    packed("hdf5-lustre", "h5multi", 32, 0, 32 * MiB, "HDF5, 512 samples per file")
    packed("npz-lustre", "npzmulti", 32, 0, 32 * MiB, "NPZ as DLIO writes it, 512 per file")
    packed("indexed-lustre", "idxbin", 32, 0, 32 * MiB, "indexed binary, 512 per file")
    return out


# ---- generation ---------------------------------------------------------------

def _mkdirs(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


def _sizes(rng, d):
    """Per-sample sizes: fixed, or lognormal with the given mean and sd, clipped."""
    import numpy as np
    n, mean, sd = d["nsamples"], d["size"], d["sd"]
    if not sd:
        return np.full(n, mean, dtype=np.int64)
    s2 = math.log(1 + (sd / mean) ** 2)
    mu = math.log(mean) - s2 / 2
    x = rng.lognormal(mu, math.sqrt(s2), n)
    return np.clip(x, max(4096, mean / 16), mean * 8).astype(np.int64)


def _masked_crc(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_T = None


def _crc32c(data):
    """CRC32C (Castagnoli); vectorised over the bytes with numpy, 8 lanes."""
    global _T
    import numpy as np
    if _T is None:
        _T = np.array(_crc32c_table(), dtype=np.uint32)
    crc = 0xFFFFFFFF
    for b in data:
        crc = int(_T[(crc ^ b) & 0xFF]) ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _crc32c_rows(rows):
    """CRC32C of every row of a 2-D uint8 array at once (rows processed in parallel)."""
    import numpy as np
    global _T
    if _T is None:
        _T = np.array(_crc32c_table(), dtype=np.uint32)
    crc = np.full(rows.shape[0], 0xFFFFFFFF, dtype=np.uint32)
    for j in range(rows.shape[1]):
        crc = _T[(crc ^ rows[:, j]) & 0xFF] ^ (crc >> 8)
    return crc ^ np.uint32(0xFFFFFFFF)


def info(d, root):
    """{nsamples, bytes, max_len, ram_bytes (64-byte aligned, as seer's RAM plan)}."""
    import json
    with open(os.path.join(root, d["name"], ".info.json")) as f:
        return json.load(f)


def generate(d, root):
    """Write dataset d under root/<name>/ unless it is there with the same params.
    Returns the dataset directory."""
    import numpy as np
    out = os.path.join(root, d["name"])
    marker = os.path.join(out, ".params")
    params = repr(sorted(d.items()))
    if os.path.exists(marker) and open(marker).read() == params:
        return out
    print("generating %s (%d samples, %s) ..." % (out, d["nsamples"], d["format"]), flush=True)
    if os.path.exists(out):
        import shutil
        shutil.rmtree(out)
    rng = np.random.default_rng(d["seed"])
    sizes = _sizes(rng, d)
    n, per = d["nsamples"], d["per_file"]
    nfiles = (n + per - 1) // per
    fmt = d["format"]
    total = 0
    lens = []
    if fmt == "files":
        ncls = max(1, d["classes"])
        for i in range(n):
            p = _mkdirs(os.path.join(out, "train", "class_%04d" % (i % ncls),
                                     "img_%d_of_%d.jpg" % (i, n)))
            b = rng.bytes(int(sizes[i]))
            with open(p, "wb") as f:
                f.write(b)
            total += len(b)
            lens.append(len(b))
    elif fmt == "npz":
        # DLIO: np.savez(x = (d1, d2, n) uint8, y = labels); one sample per file here
        for i in range(nfiles):
            dim = max(16, int(math.sqrt(int(sizes[i]))))
            x = np.frombuffer(rng.bytes(dim * dim * per), dtype=np.uint8).reshape(dim, dim, per)
            p = _mkdirs(os.path.join(out, "train", "img_%d_of_%d.npz" % (i, nfiles)))
            np.savez(p, x=x, y=np.zeros(per, dtype=np.int64))
            total += x.nbytes
            lens += [dim * dim] * per
    elif fmt == "hdf5":
        import h5py
        d1, d2 = d["dims"]
        for i in range(nfiles):
            k = min(per, n - i * per)
            x = np.frombuffer(rng.bytes(d1 * d2 * k), dtype=np.uint8).reshape(k, d1, d2)
            p = _mkdirs(os.path.join(out, "train", "img_%d_of_%d.hdf5" % (i, nfiles)))
            with h5py.File(p, "w") as f:   # contiguous (no chunks): DLIO's layout
                f.create_dataset("records", data=x)
                f.create_dataset("labels", data=np.zeros(k, dtype=np.int64))
            total += x.nbytes
            lens += [d1 * d2] * k
    elif fmt == "tfrecord":
        size = d["size"]
        for i in range(nfiles):
            k = min(per, n - i * per)
            rows = np.frombuffer(rng.bytes(size * k), dtype=np.uint8).reshape(k, size)
            crcs = _crc32c_rows(rows)
            head = struct.pack("<Q", size)
            hcrc = struct.pack("<I", _masked_crc(_crc32c(head)))
            name = "img_%d_of_%d.tfrecord" % (i, nfiles)
            parts, index, pos = [], [], 0
            for j in range(k):
                rec = head + hcrc + rows[j].tobytes() + struct.pack("<I", _masked_crc(int(crcs[j])))
                parts.append(rec)
                index.append("%d %d\n" % (pos, len(rec)))
                pos += len(rec)
            with open(_mkdirs(os.path.join(out, "train", name)), "wb") as f:
                f.write(b"".join(parts))
            with open(_mkdirs(os.path.join(out, "index", "train", name + ".idx")), "w") as f:
                f.write("".join(index))
            total += rows.nbytes
            lens += [size] * k
    elif fmt == "indexed":
        # DLIO's indexed_binary: samples back to back, u64 offsets and sizes beside
        size = d["size"]
        for i in range(nfiles):
            k = min(per, n - i * per)
            name = os.path.join(out, "train", "img_%d_of_%d.bin" % (i, nfiles))
            with open(_mkdirs(name), "wb") as f:
                f.write(rng.bytes(size * k))
            np.arange(k, dtype="<u8").__mul__(size).tofile(name + ".off.idx")
            np.full(k, size, dtype="<u8").tofile(name + ".sz.idx")
            total += size * k
            lens += [size] * k
    else:
        sys.exit("unknown format " + fmt)
    import json
    with open(os.path.join(out, ".info.json"), "w") as f:
        json.dump(dict(nsamples=len(lens), bytes=int(total), max_len=int(max(lens)),
                       ram_bytes=int(sum((x + 63) // 64 * 64 for x in lens))), f)
    with open(marker, "w") as f:
        f.write(params)
    print("generated %s: %d samples, %.1f MB of samples, %s" % (out, n, total / 1e6, fmt),
          flush=True)
    return out
