"""seer.Loader / TorchLoader as a drop-in for the DataLoader (issue 30,
findings 4-7): rank and world size from an initialised torch.distributed
(torch.multiprocessing.spawn sets no environment), DataLoader's surface
(len, batch_size, sampler.set_epoch, dataset, one iterator at a time, the
epoch a `for` delivers), the job's arguments checked against seerd's job,
StatefulDataLoader's construct + load_state_dict + iterate with a state from
another world size (the connection is lazy), and the hint on x when it is a
list of byte tensors.

Every check is on delivered data: ids against libseer's sampler (or
ElasticSampler for a resumed job), labels and bytes against the files.
Trainers run in this process (torch.distributed's ranks in processes it
spawns); daemons are waited for by state, never by time."""

import errno
import json
import os
import zlib

import torch

from seertest import (LONG, Daemon, Fail, catalog, check, cleanup, log, make_classes, run_tests,
                      seer, tmpdir, wait_for)
from seer.torch import SampleList, TorchLoader

SEED = 7
BATCH = 4
RANK_VARS = ("SEER_RANK", "SEER_WORLD_SIZE", "RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
             "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS")


def dataset(tmp, per_class=7):
    root = os.path.join(tmp, "data")
    make_classes(root, ["a", "b", "c"], per_class, 200, 2000, seed=30)
    return root, catalog(root)


def settings(tmp, root, **kw):
    s = {"dataset.path": root, "job.seed": SEED, "job.epochs": 2, "job.batch_size": BATCH,
         "cache.ram": "1MiB", "cache.staging": "2MiB", "prefetch.io_threads": 1}
    s.update(kw)
    return s


def check_batch(cat, want_ids, ids, labels, samples=None, what=""):
    check(ids == want_ids, "%s: ids %s, the sampler's %s" % (what, ids, want_ids))
    check(labels == [cat[i][1] for i in ids], "%s: labels %s, the catalog's %s" %
          (what, labels, [cat[i][1] for i in ids]))
    if samples is not None:
        crcs = [zlib.crc32(bytes(memoryview(v).cast("B"))) for v in samples]
        check(crcs == [cat[i][3] for i in ids], "%s: bytes differ from the files'" % what)


def detached(d, rank):
    """Wait until seerd saw `rank`'s session end (a connection checked and
    closed), so the next Loader of that rank is not refused as a duplicate."""
    def gone():
        st = d.status()
        return all(not t["attached"] for t in st["trainers"] if t.get("rank") == rank)
    wait_for(gone, LONG, "seerd to see rank %d leave" % rank)


# ---- finding 4: torch.distributed's rank ---------------------------------------

def _dist_rank_main(rank, sock, init_file, out_dir):
    """A rank of torch.multiprocessing.spawn: process group by hand, no
    launcher environment."""
    import torch.distributed as dist
    for v in RANK_VARS:
        os.environ.pop(v, None)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=2)
    res = {"errors": {}}
    # the environment says another rank: an error naming both
    os.environ.update({"RANK": "0", "WORLD_SIZE": "1"})
    try:
        seer.Loader(socket=sock).connect()
        res["errors"]["env"] = "accepted"
    except ValueError as e:
        res["errors"]["env"] = str(e)
    for v in ("RANK", "WORLD_SIZE"):
        del os.environ[v]
    # explicit arguments that disagree with torch.distributed
    try:
        seer.Loader(socket=sock, rank=1 - rank, world_size=2).connect()
        res["errors"]["explicit"] = "accepted"
    except ValueError as e:
        res["errors"]["explicit"] = str(e)
    batches = []
    with seer.Loader(socket=sock) as L:
        res["rank"], res["world"] = L.rank, L.world_size
        for _ in range(L.epochs):
            for b in L:
                batches.append((b.epoch, b.step, b.ids.tolist(), b.labels.tolist()))
    res["batches"] = batches
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out_dir, "rank-%d.json" % rank), "w") as f:
        json.dump(res, f)


def test_rank_from_torch_distributed():
    """Finding 4: two processes of torch.multiprocessing.spawn with a gloo
    group initialised by hand (no RANK/WORLD_SIZE) are ranks 0 and 1 of 2
    for seerd and get the sampler's streams of ranks 0 and 1; an environment
    or explicit arguments that disagree with torch.distributed raise
    ValueError naming both (before: both connected as rank 0 of 1)."""
    import torch.multiprocessing as tmp_mp
    tmp = tmpdir("seer-di-")
    try:
        root, cat = dataset(tmp)
        with Daemon(tmp, settings(tmp, root)) as d:
            tmp_mp.spawn(_dist_rank_main, args=(d.sock, os.path.join(tmp, "pg-init"), tmp),
                         nprocs=2, join=True)
            check(d.wait(LONG) == 0, "seerd failed:\n" + d.log())
        sampler = seer.Sampler(len(cat), SEED, 2, BATCH)
        for r in range(2):
            with open(os.path.join(tmp, "rank-%d.json" % r)) as f:
                res = json.load(f)
            env, explicit = res["errors"]["env"], res["errors"]["explicit"]
            check("torch.distributed is initialised as rank %d of 2" % r in env and
                  "rank 0 of 1" in env and "RANK=0, WORLD_SIZE=1" in env,
                  "rank %d: environment against torch.distributed: %s" % (r, env))
            check("rank=%d, world_size=2 given" % (1 - r) in explicit and
                  "rank %d of 2" % r in explicit,
                  "rank %d: explicit rank against torch.distributed: %s" % (r, explicit))
            check((res["rank"], res["world"]) == (r, 2), "process %d connected as rank %d of %d"
                  % (r, res["rank"], res["world"]))
            keys = [(e, s) for e, s, _, _ in res["batches"]]
            want = [(e, s) for e in range(2) for s in range(sampler.batches_per_epoch)]
            check(keys == want, "rank %d: batches %s, want %s" % (r, keys, want))
            for e, s, ids, labels in res["batches"]:
                check_batch(cat, sampler.batch(e, r, s), ids, labels, what="rank %d %d:%d" %
                            (r, e, s))
        log("spawned ranks 0 and 1 of 2 from torch.distributed: the sampler's streams; "
            "disagreement: %s" % env[:90])
    finally:
        cleanup(tmp)


# ---- finding 5: DataLoader's surface ----------------------------------------

def test_len_sampler_and_epochs():
    """len(loader), batch_size/drop_last/shuffle, dataset, sampler.set_epoch,
    the epoch a `for` delivers, one live iterator (before: len raised
    TypeError, a loop that got an epoch's last batch without its end left
    the next `for` empty, two iterators split one stream silently)."""
    tmp = tmpdir("seer-di-")
    try:
        root, cat = dataset(tmp)  # 21 samples: 6 batches of 4 per epoch (the last 1)
        with Daemon(tmp, settings(tmp, root, **{"job.epochs": 4})) as d:
            sampler = seer.Sampler(len(cat), SEED, 1, BATCH)
            bpe = sampler.batches_per_epoch
            L = seer.Loader(socket=d.sock, rank=0, world_size=1)
            check(not d.status()["trainers"], "the constructor connected (it is lazy now)")
            check(len(L) == bpe == 6, "len(loader) %d, the sampler's %d" % (len(L), bpe))
            check((L.batch_size, L.drop_last, L.shuffle, L.seed) == (BATCH, False, True, SEED),
                  "job facts %s" % ((L.batch_size, L.drop_last, L.shuffle, L.seed),))
            check(len(L.dataset) == len(cat) and L.sampler.num_replicas == 1 and
                  L.sampler.epoch == 0, "dataset %d, sampler %d/%d" %
                  (len(L.dataset), L.sampler.num_replicas, L.sampler.epoch))

            def take(loop_epoch, steps, it=None):
                for s in steps:
                    b = next(it)
                    check((b.epoch, b.step) == (loop_epoch, s), "batch %d:%d, want %d:%d" %
                          (b.epoch, b.step, loop_epoch, s))
                    check_batch(cat, sampler.batch(loop_epoch, 0, s), b.ids.tolist(),
                                b.labels.tolist(), b.samples, "%d:%d" % (loop_epoch, s))

            def whole(loop_epoch, first):
                got = [(b.epoch, b.step) for b in L]
                want = [(loop_epoch, s) for s in range(first, bpe)]
                check(got == want, "for: %s, want %s" % (got, want))

            # epoch 0: a `for` left early, the next continues the epoch
            for i, b in enumerate(L):
                if i == 1:
                    break
            check(L.epoch == 0 and len(L) == 6, "after a break: epoch %d" % L.epoch)
            take(0, range(2, bpe), iter(L))
            check(L.epoch == 1, "after epoch 0's last batch: epoch %d" % L.epoch)
            # epoch 1 through zip(range(len)): the loop never sees the end
            got = [(b.epoch, b.step) for _, b in zip(range(len(L)), L)]
            check(got == [(1, s) for s in range(bpe)], "zip(range(len(L)), L): %s" % got)
            check(L.epoch == 2, "after zip: epoch %d" % L.epoch)
            # epoch 2: a live iterator makes iter() an error
            it = iter(L)
            take(2, [0], it)
            try:
                iter(L)
                raise Fail("a second live iterator was accepted")
            except seer.SeerError as e:
                check(e.code == -errno.EBUSY and "another iterator" in str(e), str(e))
            del it
            L.sampler.set_epoch(2)  # the epoch being delivered: a no-op
            whole(2, 1)
            # set_epoch to a past epoch seeks there, and ends a live iterator
            it = iter(L)
            take(3, [0], it)
            L.sampler.set_epoch(1)
            try:
                next(it)
                raise Fail("an iterator kept going across set_epoch")
            except seer.SeerError as e:
                check(e.code == -errno.ESTALE, str(e))
            check(L.epoch == 1, "after set_epoch(1): epoch %d" % L.epoch)
            whole(1, 0)
            L.set_epoch(3)
            whole(3, 0)
            try:
                L.set_epoch(4)
                raise Fail("set_epoch past the job accepted")
            except ValueError as e:
                check("4 epochs" in str(e), str(e))
            L.close()
        log("len %d, a broken `for` continued, zip(range(len)) then the next epoch, "
            "set_epoch no-op/seek, second iterator refused" % bpe)
    finally:
        cleanup(tmp)


def test_len_and_epochs_with_workers():
    """The same epoch rules with TorchLoader's worker pipeline: the next
    `for` after zip(range(len(loader)), loader) is the next epoch (its end
    marker was queued, before: the `for` was empty)."""
    tmp = tmpdir("seer-di-")
    try:
        root, cat = dataset(tmp)
        with Daemon(tmp, settings(tmp, root)) as d:
            sampler = seer.Sampler(len(cat), SEED, 1, BATCH)
            L = TorchLoader(socket=d.sock, rank=0, world_size=1,
                            transform=lambda v: torch.tensor([zlib.crc32(v)]), num_workers=2)
            with L:
                got = []
                for _, (x, y) in zip(range(len(L)), L):
                    got.append((L.last_batch.epoch, L.last_batch.step))
                    ids = L.last_batch.ids.tolist()
                    check_batch(cat, sampler.batch(0, 0, got[-1][1]), ids, y.tolist(),
                                what="workers %d:%d" % got[-1])
                    check(x[:, 0].tolist() == [cat[i][3] for i in ids], "crc")
                check(L.epoch == 1 and len(L) == sampler.batches_per_epoch, "epoch %d" % L.epoch)
                for x, y in L:
                    got.append((L.last_batch.epoch, L.last_batch.step))
            want = [(e, s) for e in range(2) for s in range(sampler.batches_per_epoch)]
            check(got == want, "workers: %s, want %s" % (got, want))
        log("workers: epoch 0 by zip(range(len)), epoch 1 by the next `for`")
    finally:
        cleanup(tmp)


def test_job_arguments_checked():
    """batch_size, epochs, seed, shuffle, drop_last and the dataset given to
    the Loader travel in the handshake; a seerd whose config fixed them
    refuses another value: JobError (a ValueError) naming the key, both
    values and where seerd's came from (before: not arguments at all; a
    DataLoader's batch_size silently differed from seerd's)."""
    tmp = tmpdir("seer-di-")
    try:
        root, cat = dataset(tmp)
        with Daemon(tmp, settings(tmp, root, **{"job.shuffle": True,
                                                "job.drop_last": False})) as d:
            for kw, want in (({"batch_size": 8}, "job.batch_size: seerd's config says 4"),
                             ({"epochs": 3}, "job.epochs: seerd's config says 2"),
                             ({"epochs": 1}, "job.epochs: seerd's config says 2"),
                             ({"seed": 1}, "job.seed: seerd's config says 7"),
                             ({"shuffle": False}, "job.shuffle: seerd's config says true"),
                             ({"drop_last": True}, "job.drop_last: seerd's config says false"),
                             ({"dataset": tmp}, "dataset.path: seerd's config says %s" % root)):
                L = TorchLoader(socket=d.sock, rank=0, world_size=1, **kw)
                try:
                    for _ in L:
                        break
                    raise Fail("%s accepted by seerd's job" % kw)
                except ValueError as e:
                    check(isinstance(e, seer.JobError), "%s: %r" % (kw, e))
                    check(want in str(e), "%s: %s" % (kw, e))
                    if "dataset" not in kw:
                        v = list(kw.values())[0]
                        v = str(v).lower() if isinstance(v, bool) else str(v)
                        check("asks %s" % v in str(e), "%s: the trainer's value: %s" % (kw, e))
                L.close()
            for kw, exc in (({"batch_size": 0}, ValueError), ({"shuffle": "yes"}, TypeError),
                            ({"epochs": 0}, ValueError)):
                try:
                    seer.Loader(socket=d.sock, rank=0, world_size=1, **kw)
                    raise Fail("Loader(%s) constructed" % kw)
                except exc:
                    pass
            sampler = seer.Sampler(len(cat), SEED, 1, BATCH)
            with seer.Loader(socket=d.sock, rank=0, world_size=1, batch_size=4, epochs=2,
                             seed=SEED, shuffle=True, drop_last=False,
                             dataset=os.path.join(root, "..", "data")) as L:
                n = 0
                for _ in range(L.epochs):
                    for b in L:
                        check_batch(cat, sampler.batch(b.epoch, 0, b.step), b.ids.tolist(),
                                    b.labels.tolist(), b.samples, "%d:%d" % (b.epoch, b.step))
                        n += 1
            check(n == 2 * sampler.batches_per_epoch, "%d batches" % n)
        log("7 mismatches refused naming both values; matching arguments: %d exact batches" % n)
    finally:
        cleanup(tmp)


def test_job_from_the_script():
    """A seerd started without [job] batch_size/seed/epochs/shuffle/drop_last
    takes them from the job's first trainer (seerctl config names it as the
    origin) and serves exactly that job; a second trainer declaring another
    value is refused naming both; once every trainer of the job has gone, a
    trainer declaring another job starts it afresh (before: seerd's defaults,
    32 per batch and 1 epoch, whatever the script said)."""
    tmp = tmpdir("seer-di-")
    try:
        root, cat = dataset(tmp)
        s = {"dataset.path": root, "cache.ram": "1MiB", "cache.staging": "2MiB",
             "prefetch.io_threads": 1}
        with Daemon(tmp, s) as d:
            job = dict(batch_size=3, epochs=3, seed=11, shuffle=True, drop_last=True)
            sampler = seer.Sampler(len(cat), 11, 2, 3, drop_last=True)
            a = seer.Loader(socket=d.sock, rank=0, world_size=2, dataset=root, **job)
            check((a.batch_size, a.epochs, a.seed, a.drop_last, a.shuffle) == (3, 3, 11, True, True),
                  "the job seerd took: %s" % ((a.batch_size, a.epochs, a.seed, a.drop_last,
                                               a.shuffle),))
            try:
                seer.Loader(socket=d.sock, rank=1, world_size=2, **dict(job, batch_size=5)).connect()
                raise Fail("rank 1 with batch_size=5 accepted")
            except seer.JobError as e:
                check("job.batch_size: trainer rank 0 (pid %d) declared 3" % os.getpid() in str(e)
                      and "asks 5" in str(e), str(e))
            b = seer.Loader(socket=d.sock, rank=1, world_size=2, **job)
            got = {0: [], 1: []}
            for ep in range(2):  # of 3: the job is left unfinished (seerd ends with a job)
                for r, L in ((0, a), (1, b)):
                    for x in L:
                        check_batch(cat, sampler.batch(x.epoch, r, x.step), x.ids.tolist(),
                                    x.labels.tolist(), x.samples, "rank %d %d:%d" %
                                    (r, x.epoch, x.step))
                        got[r].append(x.ids.tolist())
            per = sampler.batches_per_epoch
            check(len(got[0]) == len(got[1]) == 2 * per, "batches: %d %d, want %d" %
                  (len(got[0]), len(got[1]), 2 * per))
            a.close()
            b.close()
            detached(d, 0)
            detached(d, 1)
            # every trainer of that job has gone: another job may start
            with seer.Loader(socket=d.sock, rank=0, world_size=1, batch_size=4, epochs=1,
                             seed=2) as L:
                one = seer.Sampler(len(cat), 2, 1, 4, drop_last=True)
                n = 0
                for x in L:
                    check_batch(cat, one.batch(0, 0, x.step), x.ids.tolist(), x.labels.tolist(),
                                x.samples, "new job 0:%d" % x.step)
                    n += 1
                check(n == one.batches_per_epoch, "new job: %d batches" % n)
        log("seerd took the script's job (%d x 2 ranks x 2 epochs exact), refused another "
            "batch size naming both, then served a new job once that one's trainers left" % per)
    finally:
        cleanup(tmp)


def test_daemon_follows_the_script():
    """TorchLoader(root, batch_size, shuffle, ...) with daemon="auto" (the
    default with a root) starts seerd when none serves the job's socket and
    declares the job to it; a script that died mid-epoch leaves seerd up, and
    one relaunched against it starts where its checkpoint says -- the job's
    start without one, the checkpoint's step with one -- never silently
    where the dead run was; seerd with no trainer left exits after
    daemon_idle seconds, saying so (before: a seerd to start and kill by
    hand, and a relaunch continued mid-epoch)."""
    tmp = tmpdir("seer-di-")
    try:
        root, cat = dataset(tmp)
        sock = os.path.join(tmp, "auto.sock")
        sets = {"cache.ram": "1MiB", "cache.staging": "2MiB", "prefetch.io_threads": 1,
                "daemon.state_dir": os.path.join(tmp, "state")}
        sampler = seer.Sampler(len(cat), 5, 1, 3)

        def loader(**kw):
            return TorchLoader(root, 3, True, epochs=2, seed=5, socket=sock, daemon_idle=2,
                               seerd_settings=sets, transform=len, **kw)

        def ids_of(L, n):
            out = []
            for _, y in L:
                out.append(L.last_batch.ids.tolist())
                check(y.tolist() == [cat[i][1] for i in out[-1]], "labels %s" % y.tolist())
                if len(out) == n:
                    break
            return out

        first = loader()
        got = ids_of(first, 3)
        check(got == [sampler.batch(0, 0, s) for s in range(3)], "first run: %s" % got)
        state = first.state_dict()
        seerd = first.seerd
        check(seerd is not None and seerd.poll() is None, "the loader started no seerd")
        first.close()  # the script "dies" mid-epoch 0: seerd stays
        # relaunched without a checkpoint: the job's start, not step 3
        again = loader()
        got = ids_of(again, 2)
        check(again.seerd is None, "a second seerd was started beside the running one")
        check(got == [sampler.batch(0, 0, s) for s in range(2)],
              "relaunch without checkpoint: %s, want epoch 0 from its start" % got)
        again.close()
        # relaunched with the checkpoint taken after 3 batches: step 3
        again = loader(state=state)
        got = ids_of(again, 2)
        check(got == [sampler.batch(0, 0, s) for s in range(3, 5)],
              "relaunch with the checkpoint: %s, want steps 3-4" % got)
        again.close()
        check(seerd.poll() is None, "seerd left while a relaunched script used it")
        # nobody comes back: seerd stops by itself, saying why
        wait_for(lambda: seerd.poll() is not None, LONG, "the idle seerd to exit")
        with open(sock + ".log") as f:
            text = f.read()
        check(seerd.returncode == 0 and "([daemon] idle_exit_s): stopping" in text,
              "seerd exit %s, log:\n%s" % (seerd.returncode, text[-1500:]))
        log("seerd started by the loader, relaunches at the job's start / the checkpoint's "
            "step, idle exit after the last script left")
    finally:
        cleanup(tmp)


def test_seerd_serves_successive_jobs():
    """[daemon] serve_jobs on one node: a seerd started without a job
    definition serves a whole job as its first trainer declares it, then
    the next job -- another batch size, seed and epoch count, from its own
    first trainer, from its start -- and, with no trainer left,
    [daemon] idle_exit_s ends it (before: seerd exited at the first job's
    end, and every run needed a newly started one)."""
    tmp = tmpdir("seer-di-")
    try:
        root, cat = dataset(tmp)
        s = {"dataset.path": root, "cache.ram": "1MiB", "cache.staging": "2MiB",
             "prefetch.io_threads": 1, "daemon.serve_jobs": "true", "daemon.idle_exit_s": 1}
        with Daemon(tmp, s) as d:
            for n, (bs, seed, epochs) in enumerate(((3, 11, 2), (4, 2, 1), (5, 7, 1))):
                sampler = seer.Sampler(len(cat), seed, 1, bs)
                with seer.Loader(socket=d.sock, rank=0, world_size=1, batch_size=bs, seed=seed,
                                 epochs=epochs, dataset=root) as L:
                    got = 0
                    for _ in range(L.epochs):
                        for b in L:
                            check_batch(cat, sampler.batch(b.epoch, 0, b.step), b.ids.tolist(),
                                        b.labels.tolist(), b.samples, "job %d %d:%d" %
                                        (n, b.epoch, b.step))
                            got += 1
                    check(got == epochs * sampler.batches_per_epoch, "job %d: %d batches" %
                          (n, got))
                check(d.proc.poll() is None, "seerd left after job %d" % n)
            wait_for(lambda: d.proc.poll() is not None, LONG, "the idle seerd to exit")
            check(d.proc.returncode == 0 and "([daemon] idle_exit_s): stopping" in d.log(),
                  "seerd exit %s:\n%s" % (d.proc.returncode, d.log()[-1500:]))
        check(d.log().count("serving the next job") == 3, "seerd took %d next jobs" %
              d.log().count("serving the next job"))
        log("one seerd served 3 jobs, each exactly as its script declared it, then exited idle")
    finally:
        cleanup(tmp)


# ---- finding 6: StatefulDataLoader's convention ----------------------------------

def test_load_state_dict_another_world_size():
    """Construct, load_state_dict(state), iterate, with a state saved by 2
    ranks after 3 batches, resumed with 1 rank and with 3: every batch is
    ElasticSampler's for that record (before: the constructor connected and
    fixed the job's plan, and load_state_dict was refused)."""
    tmp = tmpdir("seer-di-")
    try:
        root, cat = dataset(tmp, per_class=9)  # 27 samples
        n = len(cat)
        s = settings(tmp, root, **{"job.epochs": 2, "job.resume": "auto"})
        with Daemon(tmp, dict(s, **{"daemon.state_dir": os.path.join(tmp, "state-a")}),
                    name="a") as d:
            ls = [seer.Loader(socket=d.sock, rank=r, world_size=2) for r in range(2)]
            for _ in range(3):
                for L in ls:
                    L.next_batch().release()
            sd = ls[0].state_dict()
            h = ls[0].dataset_hash
            for L in ls:
                L.close()
        check(sd["epoch"] == 0 and sd["segments"] == [{"world_size": 2, "steps": [3]}],
              "the state after 3 batches: %s" % sd)
        for world in (1, 3):
            es = seer.ElasticSampler(n, SEED, world, BATCH, dataset_hash=h, state=sd)
            st = dict(s, **{"daemon.state_dir": os.path.join(tmp, "state-w%d" % world)})
            with Daemon(tmp, st, name="w%d" % world) as d:
                ls = []
                for r in range(world):
                    L = seer.Loader(socket=d.sock, rank=r, world_size=world)
                    L.load_state_dict(sd)  # StatefulDataLoader's order
                    ls.append(L)
                got = [[] for _ in range(world)]
                for e in range(2):
                    done = [False] * world
                    while not all(done):  # the ranks in lockstep
                        for r, L in enumerate(ls):
                            if done[r]:
                                continue
                            try:
                                b = L.next_batch()
                            except seer.EndOfEpoch:
                                done[r] = True
                                continue
                            got[r].append((b.epoch, b.step))
                            check_batch(cat, es.batch(b.epoch, r, b.step), b.ids.tolist(),
                                        b.labels.tolist(), b.samples,
                                        "world %d rank %d %d:%d" % (world, r, b.epoch, b.step))
                            b.release()
                for L in ls:
                    L.close()
            e0, s0 = es.start
            for r in range(world):
                want = [(e, st_) for e in range(e0, 2)
                        for st_ in range(s0 if e == e0 else 0, es.epoch_batches(e))]
                check(got[r] == want, "world %d rank %d: %s, want %s" % (world, r, got[r], want))
            log("2 ranks' state at 0:3 resumed on %d rank%s: %d batches each, ElasticSampler's"
                % (world, "" if world == 1 else "s", len(got[0])))
    finally:
        cleanup(tmp)


# ---- finding 7: the list of byte tensors ----------------------------------------

def test_sample_list_hint():
    """TorchLoader() with no transform and a seerd without [transform]: x is
    a list of the files' bytes whose tensor methods raise TypeError saying
    what x is and what to do (before: AttributeError: 'list' object has no
    attribute 'to')."""
    tmp = tmpdir("seer-di-")
    try:
        root, cat = dataset(tmp)
        with Daemon(tmp, settings(tmp, root)) as d:
            sampler = seer.Sampler(len(cat), SEED, 1, BATCH)
            with TorchLoader(socket=d.sock, rank=0, world_size=1) as L:
                x, y = next(iter(L))
                check(isinstance(x, SampleList) and isinstance(x, list) and len(x) == BATCH,
                      "x is %r" % type(x))
                check_batch(cat, sampler.batch(0, 0, 0), L.last_batch.ids.tolist(), y.tolist(),
                            [t.numpy() for t in x], "0:0")
                for call in (lambda: x.to("cpu"), lambda: x.cuda(), lambda: x.pin_memory(),
                             lambda: x.float()):
                    try:
                        call()
                        raise Fail("a tensor method on the list of samples worked")
                    except TypeError as e:
                        msg = str(e)
                        check("list of %d tensors" % BATCH in msg and "file bytes" in msg and
                              "transform=fn" in msg and "[transform]" in msg and
                              "decode = image" in msg, "hint: %s" % msg)
                check(not hasattr(x, "shape") and [t.to("cpu") for t in x][0].dtype ==
                      torch.uint8, "x.shape / moving the samples one by one")
        log("x.to(): %s" % msg[:150])
    finally:
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_rank_from_torch_distributed, test_len_sampler_and_epochs,
               test_len_and_epochs_with_workers, test_job_arguments_checked,
               test_job_from_the_script, test_daemon_follows_the_script,
               test_seerd_serves_successive_jobs,
               test_load_state_dict_another_world_size, test_sample_list_hint])
