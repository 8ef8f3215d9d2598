"""Huge pages for the benchmarks' seer daemons ([cache] huge_pages, docs/design.md
"Huge pages").

seerd puts its arena in the node's reserved 2 MiB huge pages when enough are free
(hugetlbfs; an HPC node's administrator reserves them with vm.nr_hugepages, as Cray
and many sites do). A fresh Debian machine reserves none, so the benchmarks reserve
some for their own duration when they can (root, /proc/sys/vm/nr_hugepages writable)
and give them back at exit; the report says how many. Every daemon still logs
whether its arena got them ("arena in 2.00 MiB huge pages" or "arena in 4 KiB
pages: ..."): one that does not find enough free falls back to 4 KiB pages.
"""
import atexit
import os

NR = "/proc/sys/vm/nr_hugepages"


def _read(path):
    with open(path) as f:
        return int(f.read().split()[0])


def meminfo(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def reserve(mib, log=print):
    """Raise the pool to at least `mib` MiB of huge pages until exit. Returns a
    description for the report (what was reserved, or why nothing was)."""
    if mib <= 0:
        return "none reserved by the benchmark (--huge-pages-mib 0)"
    try:
        before = _read(NR)
    except OSError as e:
        return "none: %s unreadable (%s)" % (NR, e)
    size_kb = meminfo("Hugepagesize") or 2048
    want = -(-mib * 1024 // size_kb)
    if before >= want:
        return "%d of %d KiB already reserved on this node (vm.nr_hugepages)" % (before, size_kb)
    try:
        with open(NR, "w") as f:
            f.write(str(want))
        got = _read(NR)
    except OSError as e:
        return "none: cannot write %s (%s; needs root)" % (NR, e)

    def restore():
        try:
            with open(NR, "w") as f:
                f.write(str(before))
        except OSError:
            pass
    atexit.register(restore)
    log("huge pages: vm.nr_hugepages %d -> %d (%d KiB each) for this run" % (before, got, size_kb))
    return "%d of %d KiB reserved by the benchmark for its run (vm.nr_hugepages %d before%s)" % (
        got, size_kb, before, "" if got >= want else "; %d asked: memory too fragmented" % want)
