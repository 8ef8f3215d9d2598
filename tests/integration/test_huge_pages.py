"""[cache] huge_pages: the arena in the node's reserved 2 MiB huge pages.

Reserves huge pages for its own duration (vm.nr_hugepages; root) and gives the
node's setting back after. Asserts that with huge_pages = on the daemon's arena
mapping is in 2 MiB kernel pages (its smaps) and a C and a Python trainer get
exactly the batches, bytes and labels they get with huge_pages = off; that
with too few free huge pages, on stops the daemon with the numbers to reserve
and auto falls back to 4 KiB pages (logged) and delivers the same batches."""

import os

from seertest import (LONG, Daemon, Fail, catalog, check, cleanup, finish, log, make_classes,
                      read_log, run_tests, seer, start_trainer, tmpdir, verify_exactly_once,
                      verify_rank)

NR = "/proc/sys/vm/nr_hugepages"
CLASSES = ["a", "b", "c"]


def meminfo(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise Fail("no %s in /proc/meminfo" % key)


class Pool:
    """vm.nr_hugepages set to leave `free` pages free, the old value back at exit."""

    def __init__(self, free):
        with open(NR) as f:
            self.before = int(f.read())
        used = meminfo("HugePages_Total") - meminfo("HugePages_Free")
        self.set(used + free)
        got = meminfo("HugePages_Free")
        check(got == free, "asked the kernel for %d free huge pages, it has %d" % (free, got))

    def set(self, n):
        with open(NR, "w") as f:
            f.write(str(n))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.set(self.before)
        return False


def settings(root, huge):
    return {"dataset.path": root, "job.seed": 5, "job.epochs": 2, "job.batch_size": 8,
            "cache.ram": "2MiB", "cache.staging": "4MiB", "prefetch.io_threads": 2,
            "cache.huge_pages": huge}


def arena_page_kib(pid):
    """The kernel page size of the daemon's arena mapping (its smaps)."""
    with open("/proc/%d/smaps" % pid) as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        if "seer-arena" in line:
            for nxt in lines[i + 1:]:
                if nxt.startswith("KernelPageSize:"):
                    return int(nxt.split()[1])
    raise Fail("no seer-arena mapping in seerd's smaps")


def run(tmp, root, cat, huge, tag):
    """A job with a C and a Python trainer; (batches per rank, page KiB, log)."""
    with Daemon(tmp, settings(root, huge), name="seerd-" + tag) as d:
        kib = arena_page_kib(d.proc.pid)
        logs = [os.path.join(tmp, "%s-r%d.log" % (tag, r)) for r in range(2)]
        procs = [start_trainer(k, r, 2, d.sock, logs[r]) for r, k in enumerate(["c", "py"])]
        for r, (rc, _, err) in enumerate(finish(procs)):
            check(rc == 0, "%s: trainer %d exited %d: %s\n%s" % (tag, r, rc, err, d.log()))
        check(d.wait(LONG) == 0, "%s: seerd failed:\n%s" % (tag, d.log()))
        text = d.log()
    batches = [read_log(p) for p in logs]
    sampler = seer.Sampler(len(cat), 5, 2, 8, drop_last=False)
    for r in range(2):
        n = verify_rank(cat, sampler, r, batches[r], 2)
        check(n == 2 * sampler.batches_per_epoch, "%s: rank %d got %d batches" % (tag, r, n))
    verify_exactly_once(cat, batches, 2, 2, 8, drop_last=False)
    return batches, kib, text


def with_dataset(body):
    """body(tmp, root, cat) on a fresh dataset, as root (the pool is the node's)."""
    if os.geteuid() != 0:
        log("SKIPPED: reserving huge pages (vm.nr_hugepages) needs root")
        return
    tmp = tmpdir("seer-it-huge-")
    try:
        root = os.path.join(tmp, "data")
        make_classes(root, CLASSES, 30, 1000, 60000, seed=3)
        body(tmp, root, catalog(root))
    finally:
        cleanup(tmp)


def test_huge_pages_same_batches():
    def body(tmp, root, cat):
        with Pool(64):
            on, kib_on, text = run(tmp, root, cat, "on", "on")
            check(kib_on == 2048, "huge_pages = on: the arena is in %d KiB pages" % kib_on)
            check("arena in 2.00 MiB huge pages" in text, "no huge-page line:\n" + text)
        off, kib_off, _ = run(tmp, root, cat, "off", "off")
        check(kib_off == 4, "huge_pages = off: the arena is in %d KiB pages" % kib_off)
        check(on == off, "the batches differ between huge_pages = on and off")
        log("%d + %d batches, the same bytes in 2 MiB and 4 KiB pages" % (len(on[0]), len(on[1])))
    with_dataset(body)


def test_too_few_huge_pages():
    def body(tmp, root, cat):
        with Pool(1):  # the arena (2 MiB cache + 4 MiB staging) needs 4
            d = Daemon(tmp, settings(root, "on"), name="seerd-refused", wait=False)
            rc = d.wait(LONG)
            text = d.log()
            d.stop()
            check(rc != 0, "huge_pages = on without enough huge pages: seerd exited 0")
            for want in ("[cache] huge_pages = on", "huge pages of 2.00 MiB",
                         "1 free", "vm.nr_hugepages"):
                check(want in text, "the error lacks %r:\n%s" % (want, text))
            auto, kib, text = run(tmp, root, cat, "auto", "auto")
            check(kib == 4, "huge_pages = auto with 1 free huge page: %d KiB pages" % kib)
            check("arena in 4 KiB pages" in text and "1 free" in text,
                  "no fallback line:\n" + text)
        off, _, _ = run(tmp, root, cat, "off", "off")
        check(auto == off, "the batches differ between the fallback and huge_pages = off")
    with_dataset(body)


if __name__ == "__main__":
    run_tests([test_huge_pages_same_batches, test_too_few_huge_pages])
