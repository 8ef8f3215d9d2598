"""A Python trainer for the integration tests: same options and log format as
seer-trainer (C), through the seer ctypes shim, pause points included
(--sync DIR --pause-at E:S, seertest.Gate). Run with /usr/bin/python3.

Checkpoints: --save-state writes torch.save({"loader": loader.state_dict()})
to DIR/state-R-E-S at each pause (the held batch counts as consumed);
--state-in FILE resumes from such a file (or from a record's raw bytes, as
seer-trainer writes them); --reconnect S continues with a restarted seerd."""

import argparse
import os
import signal
import sys
import time
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import seer  # noqa: E402
from seertest import Pauses  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int)
    ap.add_argument("--world", type=int)
    ap.add_argument("--socket")
    ap.add_argument("--log")
    ap.add_argument("--compute-ms", type=float, default=0.0)
    ap.add_argument("--kill-after", type=int, default=-1)
    ap.add_argument("--torch", action="store_true", help="iterate through seer.torch")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--sync")
    ap.add_argument("--pause-at", action="append")
    ap.add_argument("--save-state", action="store_true")
    ap.add_argument("--save-raw", action="store_true", help="--save-state as record bytes")
    ap.add_argument("--state-in")
    ap.add_argument("--reconnect", type=float)
    a = ap.parse_args()
    log = open(a.log, "w") if a.log else None
    kw = {}
    if a.world:
        kw = {"rank": a.rank, "world_size": a.world}
    if a.reconnect:
        kw["reconnect"] = a.reconnect
    if a.state_in:
        with open(a.state_in, "rb") as f:
            raw = f.read()
        if raw.startswith(b"SEERPOS"):
            kw["state"] = raw
        else:
            import io
            import torch
            kw["state"] = torch.load(io.BytesIO(raw), weights_only=True)["loader"]
    save = None
    if a.save_state:
        import torch

        def save(path):
            torch.save({"loader": loader.state_dict()}, path + ".tmp")
            os.rename(path + ".tmp", path)
    elif a.save_raw:
        def save(path):
            with open(path + ".tmp", "wb") as f:
                f.write(seer.record_encode(loader.state_dict()))
            os.rename(path + ".tmp", path)
    t0 = time.time()
    n = nbytes = batches = 0
    if a.torch:
        from seer.torch import TorchLoader
        loader = TorchLoader(socket=a.socket, **kw)
    else:
        loader = seer.Loader(socket=a.socket, **kw)
    with loader:
        pauses = Pauses(a.sync, a.pause_at, loader.rank)
        for _ in range(loader.epochs):
            it = iter(loader)
            while True:
                try:
                    if a.torch:
                        xs, ys = next(it)
                        batch = loader._held
                        views = [x.numpy() for x in xs]
                        labels = ys.tolist()
                    else:
                        batch = next(it)
                        views = batch.samples
                        labels = batch.labels.tolist()
                except StopIteration:
                    break
                pauses.at(batch.epoch, batch.step, save)
                for i, (v, sid, label) in enumerate(zip(views, batch.ids.tolist(), labels)):
                    crc = zlib.crc32(v.reshape(-1).view("u1"))
                    nbytes += v.nbytes
                    if log:
                        log.write("%d %d %d %d %d %d %08x\n" % (batch.epoch, batch.step, i, sid,
                                                                label, v.nbytes, crc))
                n += len(batch)
                batches += 1
                if a.kill_after >= 0 and batches >= a.kill_after:
                    if log:
                        log.flush()
                    os.kill(os.getpid(), signal.SIGKILL)
                if a.compute_ms:
                    time.sleep(a.compute_ms / 1000.0)
    if log:
        log.close()
    dt = time.time() - t0
    if not a.quiet:
        print("py-trainer %d: %d batches, %d samples, %.1f MB in %.2f s" %
              (loader.rank, batches, n, nbytes / 1e6, dt))


if __name__ == "__main__":
    main()
