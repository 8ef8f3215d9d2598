#!/usr/bin/env bash
# Soak test (not run in CI): one seerd, 8 trainers (C and Python, drawn at
# random per session) on a long job, trainers SIGKILLed at random and
# restarted for --minutes; every delivered batch is verified against the files
# and the sampler; the daemon's RSS is sampled and must stay flat; under
# --asan the daemon is the ASan/UBSan build and LeakSanitizer's report at
# its exit must be empty. See docs/faults.md.
#
#   scripts/soak.sh [--minutes N] [--asan] [--trainers N] [--kill-every S]
#                   [--compute-ms MS] [--seed N] [--rss-every S] [--keep]
#
#   --minutes N      how long trainers run and get killed (default 30)
#   --asan           daemon from build/asan/bin (built with make V=asan); the
#                    trainers stay the release build; HWLOC_COMPONENTS=-pci
#                    unless set (hwloc's pci plugin leaks 1016 B at start-up)
#   --trainers N     trainer ranks (default 8)
#   --kill-every S   mean seconds between kills (default 8; uniform in [S/2, 3S/2])
#   --compute-ms MS  emulated compute per batch in each trainer (default 20)
#   --seed N         random seed of the kills and trainer kinds (default: time)
#   --rss-every S    seconds between samples of the daemon's VmRSS (default 5)
#   --keep           keep the work directory (logs, rss.csv) even on success
#
# Kills are of two kinds, about half each: an external SIGKILL at a random
# moment (the trainer may die mid-batch with its log buffer unwritten), and a
# session started with --kill-after N (the trainer flushes its log and kills
# itself while holding its N-th batch). After each death the script measures
# how long the daemon takes to reclaim the rank (detached, staging_used 0)
# and starts a new session of that rank, which must resume at its first
# unreleased batch. At the end `seerctl stop` ends the job.
#
# Exit status 0 when every batch verified, no trainer failed other than by
# the kills and the final stop, the daemon exited 0, RSS stayed flat (release
# build) and no sanitizer reported anything.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
minutes=30 asan=0 trainers=8 kill_every=8 compute_ms=20 seed="" rss_every=5 keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --asan) asan=1; shift ;;
    --trainers) trainers=$2; shift 2 ;;
    --kill-every) kill_every=$2; shift 2 ;;
    --compute-ms) compute_ms=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --rss-every) rss_every=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h | --help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
seed=${seed:-$(date +%s)}

if [ "$asan" = 1 ]; then
  daemon_bin="$ROOT/build/asan/bin/seerd"
  [ -x "$daemon_bin" ] || { echo "soak.sh: $daemon_bin missing: run make V=asan all" >&2; exit 1; }
else
  daemon_bin="$ROOT/bin/seerd"
fi
for b in "$daemon_bin" "$ROOT/bin/seer-trainer" "$ROOT/bin/seerctl" "$ROOT/lib/libseer.so.0"; do
  [ -e "$b" ] || { echo "soak.sh: $b missing: run make all" >&2; exit 1; }
done

export SOAK_MINUTES=$minutes SOAK_ASAN=$asan SOAK_TRAINERS=$trainers SOAK_KILL_EVERY=$kill_every \
  SOAK_COMPUTE_MS=$compute_ms SOAK_SEED=$seed SOAK_RSS_EVERY=$rss_every SOAK_KEEP=$keep \
  SOAK_DAEMON=$daemon_bin SOAK_ROOT=$ROOT
exec /usr/bin/python3 - <<'PY'
import os, random, signal, subprocess, sys, time

E = os.environ
ROOT = E["SOAK_ROOT"]
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from seertest import BIN, catalog, make_classes, seer, start_trainer, tmpdir  # noqa: E402

minutes = float(E["SOAK_MINUTES"])
asan = E["SOAK_ASAN"] == "1"
world = int(E["SOAK_TRAINERS"])
kill_every = float(E["SOAK_KILL_EVERY"])
compute = E["SOAK_COMPUTE_MS"]
seed = int(E["SOAK_SEED"])
rss_every = float(E["SOAK_RSS_EVERY"])
rnd = random.Random(seed)
SEED_JOB, BATCH, EPOCHS = 11, 8, 100000


def say(msg):
    print("soak: " + msg, flush=True)


work = tmpdir("seer-soak-")
say("work directory %s, seed %d, %g min, %d trainers, %s daemon" %
    (work, seed, minutes, world, "ASan (HWLOC_COMPONENTS=%s)" %
     os.environ.get("HWLOC_COMPONENTS", "-pci") if asan else "release"))
data = os.path.join(work, "data")
make_classes(data, ["k%02d" % i for i in range(16)], 125, 1000, 16000, seed=seed & 0xffff)
cat = catalog(data)
D = sum(c[2] for c in cat)
say("dataset: %d samples, %.1f MiB (RAM cache 4 MiB: most reads go to the files)" %
    (len(cat), D / 2 ** 20))

sock = os.path.join(work, "seerd.sock")
args = [E["SOAK_DAEMON"]]
for k, v in {"dataset.path": data, "job.seed": SEED_JOB, "job.epochs": EPOCHS,
             "job.batch_size": BATCH, "cache.ram": "4MiB", "cache.staging": "16MiB",
             "prefetch.io_threads": 4, "prefetch.lookahead": 4, "daemon.socket": sock,
             "daemon.state_dir": os.path.join(work, "state"),
             "daemon.stats_file": os.path.join(work, "stats.json")}.items():
    args += ["--set", "%s=%s" % (k, v)]
denv = dict(os.environ, IPATH_NO_BACKTRACE="1")
if asan:
    denv["ASAN_OPTIONS"] = "detect_leaks=1:halt_on_error=1:abort_on_error=0"
    denv["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    # hwloc's pci plugin (libpciaccess) leaves 1016 bytes in 9 blocks that
    # LeakSanitizer reports once the plugin is unloaded, whatever seerd does
    # (a daemon started and stopped with no trainer shows the same report);
    # without the plugin the report is about seerd alone
    denv.setdefault("HWLOC_COMPONENTS", "-pci")
dlog_path = os.path.join(work, "seerd.log")
dlog = open(dlog_path, "w")
daemon = subprocess.Popen(args, stdout=dlog, stderr=subprocess.STDOUT, env=denv)
t_wait = time.time()
while not os.path.exists(sock):
    if daemon.poll() is not None or time.time() - t_wait > 60:
        sys.exit("soak: seerd did not start:\n" + open(dlog_path).read())
    time.sleep(0.05)


def status():
    out = subprocess.run([os.path.join(BIN, "seerctl"), "--socket", sock, "--json", "status"],
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        return None
    import json
    return json.loads(out.stdout)


def rss_kib():
    with open("/proc/%d/status" % daemon.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Session:
    def __init__(self, rank, n):
        self.rank, self.n = rank, n
        self.kind = rnd.choice(["c", "py"])
        self.self_kill = rnd.random() < 0.5
        self.kill_after = rnd.randint(3, 400) if self.self_kill else None
        self.log = os.path.join(work, "r%d-s%03d-%s.log" % (rank, n, self.kind))
        extra = ["--compute-ms", compute]
        if self.self_kill:
            extra += ["--kill-after", str(self.kill_after)]
        self.proc = start_trainer(self.kind, rank, world, sock, self.log, extra)
        self.end = None      # "killed", "self-killed", "stopped", "failed"
        self.err = ""
        self.t_kill = None


sessions = {r: [Session(r, 0)] for r in range(world)}
t0 = time.time()
deadline = t0 + minutes * 60
next_kill = t0 + rnd.uniform(kill_every / 2, kill_every * 1.5)
next_rss = t0
rss = []                     # (seconds, KiB)
reclaim = []                 # seconds from death to detached + staging 0
ext_kills = self_kills = failures = 0


def reclaimed_after(rank, t_death):
    while time.time() - t_death < 5:
        st = status()
        if st:
            t = [x for x in st["trainers"] if x["rank"] == rank]
            if t and not t[0]["attached"] and t[0]["staging_used"] == 0 and t[0]["inflight"] == 0:
                return time.time() - t_death
        time.sleep(0.005)
    return None


last_report = t0
while time.time() < deadline:
    now = time.time()
    if daemon.poll() is not None:
        say("seerd exited %s during the soak" % daemon.returncode)
        failures += 1
        break
    if now >= next_rss:
        rss.append((now - t0, rss_kib()))
        next_rss = now + rss_every
    if now >= next_kill:
        r = rnd.randrange(world)
        s = sessions[r][-1]
        if s.proc.poll() is None:
            s.t_kill = time.time()
            s.proc.send_signal(signal.SIGKILL)
            s.proc.wait()
            s.end = "killed"
            ext_kills += 1
        next_kill = now + rnd.uniform(kill_every / 2, kill_every * 1.5)
    for r in range(world):
        s = sessions[r][-1]
        rc = s.proc.poll()
        if rc is None:
            continue
        t_death = s.t_kill or time.time()  # a self-kill is noticed within ~50 ms
        _, s.err = s.proc.communicate()
        if s.end is None:
            if rc == -signal.SIGKILL and s.self_kill:
                s.end = "self-killed"
                self_kills += 1
            else:
                s.end = "failed"
                failures += 1
                say("rank %d session %d (%s) failed: exit %s: %s" %
                    (r, s.n, s.kind, rc, s.err.strip()[-300:]))
        dt = reclaimed_after(r, t_death)
        if dt is None:
            say("rank %d: not reclaimed 5 s after its trainer died" % r)
            failures += 1
        else:
            reclaim.append(dt)
        sessions[r].append(Session(r, len(sessions[r])))
    if now - last_report >= 60:
        last_report = now
        say("%4.0f s: %d kills + %d self-kills, RSS %.1f MiB" %
            (now - t0, ext_kills, self_kills, rss[-1][1] / 1024))
    time.sleep(0.05)

duration = time.time() - t0
rss.append((duration, rss_kib()))
say("stopping the job after %.1f s (seerctl stop)" % duration)
subprocess.run([os.path.join(BIN, "seerctl"), "--socket", sock, "stop"], capture_output=True,
               timeout=30)
for r in range(world):
    s = sessions[r][-1]
    try:
        _, s.err = s.proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        s.proc.kill()
        _, s.err = s.proc.communicate()
        say("rank %d did not stop within 30 s of seerctl stop" % r)
        failures += 1
    if s.end is None:
        s.end = "stopped"
        if s.proc.returncode == 0:
            pass  # finished the (very long) job: fine
        elif "shutting down" not in s.err and not (s.self_kill and
                                                   s.proc.returncode == -signal.SIGKILL):
            say("rank %d: exit %s at the stop without 'shutting down': %s" %
                (r, s.proc.returncode, s.err.strip()[-300:]))
            failures += 1
try:
    drc = daemon.wait(120)
except subprocess.TimeoutExpired:
    daemon.kill()
    drc = daemon.wait()
    say("seerd did not exit within 120 s of the stop")
dlog.close()
dtext = open(dlog_path).read()
if drc != 0:
    say("seerd exit status %s" % drc)
    failures += 1
san = [ln for ln in dtext.splitlines() if "Sanitizer" in ln or "runtime error" in ln]
if san:
    failures += 1
    say("sanitizer reports:\n  " + "\n  ".join(san[:20]))

# ---- verify every delivered batch ---------------------------------------------------
sampler = seer.Sampler(len(cat), SEED_JOB, world, BATCH)
bpe = sampler.batches_per_epoch


def parse(path):
    """{g: {index: (id, label, len, crc)}} from a trainer log. A trainer
    killed mid-write leaves its last line torn anywhere, even inside a number
    ("... 14285 9f"): only lines ending in a newline, with all eight hex
    digits of the CRC, count."""
    out, failed = {}, []
    with open(path, errors="replace") as f:
        for line in f:
            if not line.endswith("\n"):
                continue
            p = line.split()
            if len(p) >= 3 and p[2] == "FAILED":
                failed.append(line.strip())
                continue
            if len(p) != 7 or len(p[6]) != 8:
                continue
            try:
                e, st, i, sid, lab, ln = (int(x) for x in p[:6])
                crc = int(p[6], 16)
            except ValueError:
                continue
            out.setdefault(e * bpe + st, {})[i] = (sid, lab, ln, crc)
    return out, failed


batches = samples = nbytes = 0
problems = []
for r in range(world):
    prev = None
    for s in sessions[r]:
        got, failed = parse(s.log)
        if failed:
            problems.append("rank %d session %d: failed batches %s" % (r, s.n, failed[:3]))
        if not got:
            prev = (s.end, None)
            continue
        gs = sorted(got)
        first, last = gs[0], gs[-1]
        # a trainer killed from outside may have logged its last batch in part
        if s.end == "killed" and len(got[last]) < len(sampler.batch(last // bpe, r, last % bpe)):
            del got[last]
            gs.pop()
        missing = [g for g in range(first, gs[-1] + 1) if g not in got] if gs else []
        if missing:
            problems.append("rank %d session %d: batches %s missing inside its log" %
                            (r, s.n, missing[:5]))
        for g in gs:
            want = sampler.batch(g // bpe, r, g % bpe)
            b = got[g]
            ids = [b[i][0] for i in sorted(b)]
            if ids != want:
                problems.append("rank %d batch %d: ids %s, sampler %s" % (r, g, ids[:4], want[:4]))
                continue
            for i in sorted(b):
                sid, lab, ln, crc = b[i]
                _, wl, wlen, wcrc = cat[sid]
                if (lab, ln, crc) != (wl, wlen, wcrc):
                    problems.append("rank %d batch %d sample %d: label/len/crc %s, file %s" %
                                    (r, g, sid, (lab, ln, crc), (wl, wlen, wcrc)))
                nbytes += ln
            batches += 1
            samples += len(b)
        # resume rules: session 0 starts the job; after a self-kill (log
        # flushed, died holding its last batch) exactly at that batch; after
        # an outside kill not before the last complete batch it logged
        if prev is None:
            if first != 0:
                problems.append("rank %d: first session started at %d" % (r, first))
        elif prev[0] == "self-killed" and prev[1] is not None and first != prev[1]:
            problems.append("rank %d session %d resumed at %d; the previous one died holding %d" %
                            (r, s.n, first, prev[1]))
        elif prev[0] == "killed" and prev[1] is not None and first < prev[1]:
            problems.append("rank %d session %d resumed at %d, before batch %d it had logged" %
                            (r, s.n, first, prev[1]))
        if s.end == "self-killed" and len(got) != s.kill_after:
            problems.append("rank %d session %d logged %d batches, it killed itself after %d" %
                            (r, s.n, len(got), s.kill_after))
        prev = (s.end, gs[-1] if gs else None)
failures += len(problems)
for p in problems[:20]:
    say("VERIFY: " + p)

nsess = sum(len(v) for v in sessions.values())
kinds = sum(1 for v in sessions.values() for s in v if s.kind == "c")
rs = [k for _, k in rss]
warm = [k for t, k in rss if t >= min(60.0, duration / 5)]
r_start, r_warm, r_end, r_max = rs[0], (warm or rs)[0], rs[-1], max(rs)
reclaim.sort()
say("---- report ----")
say("duration %.1f s (%.1f min), seed %d, %s daemon, exit %s" %
    (duration, duration / 60, seed, "ASan" if asan else "release", drc))
say("trainer sessions %d (%d C, %d Python); SIGKILLs from outside %d, self-kills while "
    "holding a batch %d; restarts %d" % (nsess, kinds, nsess - kinds, ext_kills, self_kills,
                                          nsess - world))
if reclaim:
    say("rank reclaimed after a death: median %.0f ms, max %.0f ms (%d deaths; includes "
        "seerctl's start-up)" % (reclaim[len(reclaim) // 2] * 1e3, reclaim[-1] * 1e3,
                                 len(reclaim)))
say("verified: %d batches, %d samples, %.1f MiB, exact bytes, labels and order" %
    (batches, samples, nbytes / 2 ** 20))
say("daemon VmRSS: start %.1f MiB, after warm-up %.1f MiB, end %.1f MiB, max %.1f MiB "
    "(%d samples every %g s, in %s/rss.csv)" % (r_start / 1024, r_warm / 1024, r_end / 1024,
                                                r_max / 1024, len(rs), rss_every, work))
with open(os.path.join(work, "rss.csv"), "w") as f:
    f.write("seconds,vmrss_kib\n" + "".join("%.1f,%d\n" % x for x in rss))
grow = r_end - r_warm
if not asan and grow > r_warm * 0.10 + 8192:
    say("RSS grew by %.1f MiB after warm-up: a leak?" % (grow / 1024))
    failures += 1
if asan:
    say("LeakSanitizer/ASan/UBSan reports in the daemon's log: %d" % len(san))
say("RESULT: %s" % ("PASS" if failures == 0 else "FAIL (%d problems)" % failures))
if failures or E["SOAK_KEEP"] == "1":
    say("kept %s" % work)
else:
    import shutil
    shutil.rmtree(work, ignore_errors=True)
sys.exit(1 if failures else 0)
PY
