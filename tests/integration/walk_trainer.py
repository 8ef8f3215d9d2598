"""The Python trainer of scripts/walk.py (issue 28): one session of one rank,
through seer.Loader or seer.torch.TorchLoader, logging every batch it hands
to user code as one JSON line, flushed at once, so the walk's oracle can check
it against the sampler and the files (run with /usr/bin/python3).

    walk_trainer.py --rank R --world W --socket PATH --job ID --log FILE
                    --kind py|torch0|torch2 [--hold iter|double|ooo]
                    [--sync DIR --pause-at E:S ...] [--state-in FILE]
                    [--reconnect S]

Kinds: py = seer.Loader; torch0 / torch2 = TorchLoader with a transform that
returns [crc32, length] of each sample's bytes, num_workers 0 / 2.
Hold patterns (py only; TorchLoader always iterates): iter = `for batch in
loader` (the batch yielded is released when the next is asked for); double =
next_batch() the next while holding the previous, then release the previous;
ooo = take two, release the second, then the first.

Log lines (one JSON object each):
  {"ev": "open", "kind", "hold", "pid"}      a connection was made
  {"ev": "b", "e", "s", "ids", "labels", "crc", "len"}   a batch handed
  {"ev": "recheck", "e", "s", "ids", "crc"}  after a pause, a batch held
                                             across it read again (Loader)
  {"ev": "rel", "e", "s"}                    a batch released (iter: logged
                                             as the next one is asked for)
  {"ev": "seek", "e", "s"}                   seek(e, s) returned
  {"ev": "state", "file", "record"}          state_dict() saved (then closed)
  {"ev": "err", "what", "msg"}               an error ended the connection
  {"ev": "end"}                              the job's end (EndOfJob)

Pause points (seertest.Gate's protocol): handing the first batch at or after
E:S, the trainer writes DIR/paused-R-E-S (JSON: the batch, the batches it
holds, its pid) and waits for DIR/go-R-E-S or DIR/go-E-S, whose content is
the command: empty or "go" (continue), "seek E S", "close" (save
state_dict() to DIR/state-R-E-S.json, close, exit 0).

Exit status: 0 at the job's end or after "close"; 3 when seerd stopped the
job (ESHUTDOWN); 4 when seerd went away (EDAEMON); 1 on anything else.
After a WorkerError (a transform worker killed) the trainer connects again
(the same rank: seerd resumes it) and goes on, logging "err" then "open".
"""

import argparse
import faulthandler
import json
import os
import signal
import sys
import time
import zlib

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import seer  # noqa: E402


def crc_transform(view):
    """[crc32, length] of the sample's bytes (TorchLoader transform)."""
    v = np.ascontiguousarray(view).reshape(-1).view(np.uint8)
    return np.array([zlib.crc32(v), v.nbytes], dtype=np.int64)


class Log:
    def __init__(self, path):
        self.f = open(path, "a")

    def write(self, **kw):
        self.f.write(json.dumps(kw, separators=(",", ":")) + "\n")
        self.f.flush()


class Stop(Exception):
    def __init__(self, rc):
        super().__init__(rc)
        self.rc = rc


class Trainer:
    def __init__(self, a):
        self.a = a
        self.log = Log(a.log)
        self.points = sorted(tuple(int(x) for x in p.split(":")) for p in a.pause_at or [])
        self.loader = None
        self.held = []       # batches handed and not released, in hand order (hold modes)
        self.last = None     # (e, s) handed last
        self.yielded = None  # iter mode: the batch the iterator yielded last
        self.paused_now = False

    # ---- connection ----------------------------------------------------------------------

    def connect(self, state=None):
        a = self.a
        kw = {"socket": a.socket, "job_id": a.job, "rank": a.rank, "world_size": a.world}
        if a.reconnect:
            kw["reconnect"] = a.reconnect
        if state is not None:
            kw["state"] = state
        t0 = time.monotonic()
        while True:
            try:
                if a.kind == "py":
                    self.loader = seer.Loader(**kw)
                else:
                    from seer.torch import TorchLoader
                    self.loader = TorchLoader(transform=crc_transform,
                                              num_workers=0 if a.kind == "torch0" else 2, **kw)
                break
            except seer.SeerError as ex:
                # a rank whose previous connection seerd has not reaped yet is
                # refused: connect again while it says so (bounded)
                if "already" not in str(ex) or time.monotonic() - t0 > 60:
                    raise
                time.sleep(0.02)
        self.log.write(ev="open", kind=a.kind, hold=a.hold, pid=os.getpid())

    # ---- one handed batch ----------------------------------------------------------------

    def hand(self, e, s, ids, labels, crcs, lens):
        self.log.write(ev="b", e=e, s=s, ids=ids, labels=labels, crc=crcs, len=lens)
        self.last = (e, s)
        return self.pause(e, s)

    @staticmethod
    def crcs(b):
        crcs, lens = [], []
        for v in b.samples:
            v = v.reshape(-1).view(np.uint8)
            crcs.append(zlib.crc32(v))
            lens.append(int(v.nbytes))
        return crcs, lens

    def hand_batch(self, b):
        crcs, lens = self.crcs(b)
        cmd = self.hand(int(b.epoch), int(b.step), [int(x) for x in b.ids.tolist()],
                        [int(x) for x in b.labels.tolist()], crcs, lens)
        if cmd == "go" and self.paused_now:
            # what the pause did (a reconnect, seerd killed or restarted) must
            # leave the bytes of the batches held meanwhile readable and intact
            for h in (self.held if self.a.hold != "iter" else [b]):
                self.log.write(ev="recheck", e=int(h.epoch), s=int(h.step),
                               ids=[int(x) for x in h.ids.tolist()], crc=self.crcs(h)[0])
        return cmd

    def hand_torch(self, x, y):
        lb = self.loader.last_batch
        x = x.numpy()
        return self.hand(int(lb.epoch), int(lb.step), [int(i) for i in lb.ids.tolist()],
                         [int(v) for v in y.tolist()], [int(v) for v in x[:, 0]],
                         [int(v) for v in x[:, 1]])

    def pause(self, e, s):
        """At a pause point: announce, wait for the command; returns it
        ('go', ('seek', e, s) or 'close')."""
        cmd = "go"
        self.paused_now = False
        while self.points and self.points[0] <= (e, s):
            self.paused_now = True
            pe, ps = self.points.pop(0)
            d = self.a.sync
            held = [list(p) for p in self.held_now()]
            name = os.path.join(d, "paused-%d-%d-%d" % (self.a.rank, pe, ps))
            with open(name + ".tmp", "w") as f:
                json.dump({"e": e, "s": s, "held": held, "pid": os.getpid()}, f)
            os.rename(name + ".tmp", name)
            gos = [os.path.join(d, "go-%d-%d-%d" % (self.a.rank, pe, ps)),
                   os.path.join(d, "go-%d-%d" % (pe, ps))]
            t0 = time.monotonic()
            while True:
                got = [g for g in gos if os.path.exists(g)]
                if got:
                    with open(got[0]) as f:
                        words = f.read().split()
                    break
                if not os.path.isdir(d) or time.monotonic() - t0 > 900:
                    raise SystemExit("walk_trainer %d: no go at %d:%d" % (self.a.rank, pe, ps))
                time.sleep(0.002)
            if words and words[0] == "seek":
                cmd = ("seek", int(words[1]), int(words[2]))
            elif words and words[0] == "close":
                cmd = "close"
        return cmd

    def held_now(self):
        if self.a.hold == "iter" or self.a.kind != "py":
            return [self.yielded] if self.yielded else []
        return [(int(b.epoch), int(b.step)) for b in self.held]

    def release(self, b):
        b.release()
        self.log.write(ev="rel", e=int(b.epoch), s=int(b.step))

    def do(self, cmd):
        """Carry out a pause command; True when the iteration must restart."""
        if cmd == "go":
            return False
        if cmd == "close":
            path = os.path.join(self.a.sync, "state-%d-%d-%d.json" % (self.a.rank, *self.last))
            sd = self.loader.state_dict()
            with open(path + ".tmp", "w") as f:
                json.dump(sd, f)
            os.rename(path + ".tmp", path)
            self.log.write(ev="state", file=path, record=sd)
            self.loader.close()
            raise Stop(0)
        _, e, s = cmd
        for b in list(self.held):
            self.release(b)
        self.held = []
        if self.yielded:  # Loader.seek releases the batch the iterator holds
            self.log.write(ev="rel", e=self.yielded[0], s=self.yielded[1])
            self.yielded = None
        self.loader.seek(e, s)
        self.log.write(ev="seek", e=e, s=s)
        return True

    # ---- the loops -------------------------------------------------------------------------

    def run_iter(self):
        """`for batch in loader` (Loader or TorchLoader), epoch after epoch,
        until an iteration yields nothing (the job's end)."""
        torch_kind = self.a.kind != "py"
        while True:
            n = 0
            restart = False
            for item in self.loader:
                n += 1
                if torch_kind:
                    lb = self.loader.last_batch
                    self.yielded = (int(lb.epoch), int(lb.step))
                    cmd = self.hand_torch(*item)
                else:
                    self.yielded = (int(item.epoch), int(item.step))
                    cmd = self.hand_batch(item)
                if self.do(cmd):
                    restart = True
                    break
                # asking for the next batch releases this one (rule: the plain iterator)
                self.log.write(ev="rel", e=self.yielded[0], s=self.yielded[1])
                self.yielded = None
            if restart:
                continue
            if n == 0:
                break
        self.log.write(ev="end")

    def take(self):
        """next_batch() skipping epoch ends; None at the job's end."""
        while True:
            try:
                b = self.loader.next_batch()
            except seer.EndOfEpoch:
                continue
            except seer.EndOfJob:
                return None
            if b.error is not None:
                raise seer.SeerError(seer.EBATCH, "batch %d:%d failed: %s" %
                                     (b.epoch, b.step, b.error))
            return b

    def run_hold(self):
        """double: take the next while holding the previous, then release
        the previous; ooo: take two, release the second, then the first."""
        while True:
            b = self.take()
            if b is None:
                break
            self.held.append(b)
            if self.do(self.hand_batch(b)):
                continue
            if self.a.hold == "double":
                while len(self.held) > 1:
                    self.release(self.held.pop(0))
            elif len(self.held) == 2:
                second = self.held.pop()
                self.release(second)
                self.release(self.held.pop())
        for b in self.held:
            self.release(b)
        self.held = []
        self.log.write(ev="end")

    def run(self):
        state = None
        if self.a.state_in:
            with open(self.a.state_in) as f:
                state = json.load(f)
        self.connect(state)
        while True:
            try:
                if self.a.hold == "iter" or self.a.kind != "py":
                    self.run_iter()
                else:
                    self.run_hold()
                self.loader.close()
                return 0
            except Stop as st:
                return st.rc
            except seer.SeerError as ex:
                what = type(ex).__name__
                if what == "WorkerError":
                    self.log.write(ev="err", what="worker", msg=str(ex)[:300])
                    self.loader.close()
                    self.yielded = None
                    self.connect()
                    continue
                code = getattr(ex, "code", None)
                kind = ("shutdown" if code == seer.ESHUTDOWN else
                        "daemon" if code == seer.EDAEMON else "other")
                self.log.write(ev="err", what=kind, msg=str(ex)[:300])
                print("walk_trainer %d: %s" % (self.a.rank, ex), file=sys.stderr)
                return {"shutdown": 3, "daemon": 4}.get(kind, 1)


def main():
    faulthandler.register(signal.SIGUSR2, all_threads=True)  # the driver's view of a hang
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--job", required=True, help="seerd's job.id")
    ap.add_argument("--log", required=True)
    ap.add_argument("--kind", choices=("py", "torch0", "torch2"), default="py")
    ap.add_argument("--hold", choices=("iter", "double", "ooo"), default="iter")
    ap.add_argument("--sync")
    ap.add_argument("--pause-at", action="append")
    ap.add_argument("--state-in")
    ap.add_argument("--reconnect", type=float)
    a = ap.parse_args()
    sys.exit(Trainer(a).run())


if __name__ == "__main__":
    main()
