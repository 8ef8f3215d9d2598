"""A rank's stream restarted under it -- by a seek, or by closing and
connecting again -- goes on at once (issue 28, finding 7).

An idle seerd sleeps until the 1 s timer while every trainer has half its
lookahead ready (engine_arm's ring_below): a trainer wakes it only once its
ring runs low. After a seek the trainer skips its consumer index past the
batches the seek dropped without waking anyone, so a seerd that counted them
as still in the trainer's hands prepared nothing, slept, and the trainer
waited on an empty ring for the timer: up to 1 s per seek.

Each test asserts on the delivered stream (the sampler's ids, the catalog's
labels, the files' bytes) and on seerd's own count of the time the trainer
waited for batches (`seerctl status`: the trainer's stall_s), with a bound
far above what serving RAM-cached batches takes on a loaded machine and far
below what the timer costs. The tests wait for states, never for a sleep."""

import os
import zlib

from seertest import (LONG, Daemon, catalog, check, cleanup, log, make_classes, run_tests,
                      seer, tmpdir, wait_for)

BATCH, LOOKAHEAD = 4, 8
# Seek rounds: before the fix a third to three quarters of them (the
# trainer's consumer index moving after seerd looked at it: a race) waited
# for seerd's next 1 s tick, 0.7-0.97 s each; 20 rounds without one is
# ~1e-4 likely even at the lowest rate seen.
ROUNDS = 20
# what a round (a seek, then an epoch of RAM-cached batches) may wait for
# its batches in all: milliseconds, tens on a loaded machine
ROUND_BOUND_S = 0.5
# what the rank may wait for its batches in all (3 epochs of them)
STALL_BOUND_S = 1.0

def job(tmp, epochs):
    """40 small files (10 batches an epoch), every one cached in RAM."""
    root = os.path.join(tmp, "data")
    make_classes(root, ["a", "b"], 20, 16, 256, seed=7)
    s = {"dataset.path": root, "job.epochs": epochs, "job.batch_size": BATCH,
         "prefetch.lookahead": LOOKAHEAD}
    return catalog(root), s


def check_batch(cat, sampler, b, epoch, step):
    """b is batch (epoch, step) of rank 0: the sampler's ids with the files'
    labels and bytes."""
    check((b.epoch, b.step) == (epoch, step), "got batch %d:%d, expected %d:%d" %
          (b.epoch, b.step, epoch, step))
    want = sampler.batch(epoch, 0, step)
    check([int(x) for x in b.ids] == want, "batch %d:%d: ids %s, the sampler says %s" %
          (epoch, step, list(b.ids), want))
    for i, sid in enumerate(want):
        p, label, size, crc = cat[sid]
        data = bytes(b.samples[i])
        check(int(b.labels[i]) == label and len(data) == size and zlib.crc32(data) == crc,
              "batch %d:%d sample %d (%s): label %d, %d bytes crc %08x; the file: label %d, "
              "%d bytes crc %08x" % (epoch, step, sid, p, b.labels[i], len(data),
                                     zlib.crc32(data), label, size, crc))


def read_to_end(l, cat, sampler, g, epochs):
    """Take every batch from global batch g to the job's end, checking each."""
    bpe = sampler.batches_per_epoch
    while True:
        try:
            b = l.next_batch()
        except seer.EndOfEpoch:
            continue
        except seer.EndOfJob:
            break
        check_batch(cat, sampler, b, g // bpe, g % bpe)
        b.release()
        g += 1
    check(g == epochs * bpe, "the stream ended after %d batches, the job has %d" %
          (g, epochs * bpe))


def take(l):
    """The next batch, past an epoch's end."""
    try:
        return l.next_batch(timeout=LONG)
    except seer.EndOfEpoch:
        return l.next_batch(timeout=LONG)


def stall_s(d):
    (t,) = d.status()["trainers"]
    check(t["attached"], "rank 0 is not attached")
    return t["stall_s"]


def test_seek_with_a_full_ring():
    """Epoch 0 warms the cache; then in each later epoch the trainer takes
    the epoch's first batch, waits until seerd has filled its ring (the
    lookahead is ready: seerd goes idle), and seeks back to the epoch's
    start. Every batch after each seek is the sampler's, and the trainer
    waits for them about as long as for any RAM-cached batch (before the
    fix: until seerd's next 1 s tick, in about half the rounds)."""
    tmp = tmpdir("seer-stall-")
    try:
        cat, s = job(tmp, ROUNDS + 1)
        with Daemon(tmp, s) as d:
            l = seer.Loader(socket=d.sock, rank=0, world_size=1, connect_timeout=LONG)
            sampler = seer.Sampler(len(cat), l.seed, 1, BATCH)
            bpe = sampler.batches_per_epoch
            for step in range(bpe):
                b = take(l)
                check_batch(cat, sampler, b, 0, step)
                b.release()
            rounds = []
            for epoch in range(1, ROUNDS + 1):
                before = stall_s(d)
                b = take(l)
                check_batch(cat, sampler, b, epoch, 0)
                b.release()
                wait_for(lambda: d.status()["trainers"][0]["ready_unread"] >= LOOKAHEAD, LONG,
                         "seerd to fill rank 0's ring")
                l.seek(epoch, 0)
                for step in range(bpe):
                    b = take(l)
                    check_batch(cat, sampler, b, epoch, step)
                    b.release()
                rounds.append(stall_s(d) - before)
            l.close()
        log("%d seeks with a full ring: the trainer waited %.3f s for its batches in all, "
            "at most %.3f s in a round" % (ROUNDS, sum(rounds), max(rounds)))
        slow = ["epoch %d: %.3f s" % (k + 1, w) for k, w in enumerate(rounds)
                if w >= ROUND_BOUND_S]
        check(not slow, "after a seek the trainer waited for its batches (seerd slept until "
              "its 1 s timer?): %s" % ", ".join(slow))
    finally:
        cleanup(tmp)


def test_reconnect_twice():
    """Two trainers of rank 0 in turn take a batch and close holding it; the
    third takes the rest of the job: from where seerd says the rank resumes,
    every batch the sampler's, with waits like any RAM-cached batch's."""
    tmp = tmpdir("seer-stall-")
    try:
        epochs = 3
        cat, s = job(tmp, epochs)
        with Daemon(tmp, s) as d:
            for _ in range(2):
                l = seer.Loader(socket=d.sock, rank=0, world_size=1, connect_timeout=LONG)
                l.next_batch(timeout=LONG)
                l.close()
                wait_for(lambda: not d.status()["trainers"][0]["attached"], LONG,
                         "seerd to see rank 0 leave")
            (t,) = d.status()["trainers"]
            l = seer.Loader(socket=d.sock, rank=0, world_size=1, connect_timeout=LONG)
            sampler = seer.Sampler(len(cat), l.seed, 1, BATCH)
            g = t["resume_epoch"] * sampler.batches_per_epoch + t["resume_step"]
            read_to_end(l, cat, sampler, g, epochs)
            waited = stall_s(d)
            l.close()
        log("third session from batch %d: waited %.3f s for batches in all" % (g, waited))
        check(waited < STALL_BOUND_S, "after two reconnects the trainer waited %.3f s for "
              "its batches" % waited)
    finally:
        cleanup(tmp)


if __name__ == "__main__":
    run_tests([test_seek_with_a_full_ring, test_reconnect_twice])
