#!/usr/bin/env bash
# Stop and resume under a real (single-node) Slurm, as a job ends on its time
# limit: two seerd joined by MPI over PMIx and four trainers; while every
# trainer holds batch 1:2, `scancel --signal=TERM` (what Slurm sends at the
# time limit: to every step, daemons and trainers alike). The trainers die
# holding their batch; both daemons drain and save every rank's position. The
# job is resubmitted with `job.resume = auto`, the ranks placed on the other
# daemon, and each rank's stream before and after is one unbroken run: no
# batch twice, none missing (the held batch, never finished, comes again).
#
# The Slurm is shared: only this test's jobs are ever cancelled; the trainers'
# pause holds the first job open, so nothing races it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
BIN="$root/${BIN:-bin}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export SLURM_CONF=/etc/slurm/slurm.conf
export SEER_CONNECT_TIMEOUT_MS=300000
fail() { echo "FAIL: $*" >&2; exit 1; }
JOBS=() # ours, cancelled on exit

bash "$root/scripts/slurm-up.sh" >/dev/null
tmp=$(mktemp -d /tmp/seer-slurm-rs-XXXXXX)
trap '[ ${#JOBS[@]} -eq 0 ] || scancel "${JOBS[@]}" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
/usr/bin/python3 "$root/scripts/gen_dataset.py" "$tmp/data" --classes 4 --per-class 25 \
  --min-size 2KiB --max-size 16KiB >/dev/null

wait_job() { # job id, timeout s
  local t=0
  while squeue -h -j "$1" 2>/dev/null | grep -q .; do
    sleep 0.5; t=$((t + 1))
    [ $t -lt $(( $2 * 2 )) ] || { scancel "$1"; fail "job $1 did not finish in $2 s"; }
  done
}

cat > "$tmp/job.ini" <<INI
[dataset]
path = $tmp/data
[job]
id = seer-resume-$$
seed = 23
epochs = 3
batch_size = 3
resume = auto
[cache]
ram = 256KiB
[net]
provider = tcp;ofi_rxm
[daemon]
state_dir = $tmp/state
socket = $tmp/d-%n.sock
INI

job() { # name, node of rank r as a shell expression, extra trainer options
  cat > "$tmp/$1.sh" <<SH
#!/bin/bash
srun -n 2 --overlap --mpi=pmix "$BIN/seerd" -c "$tmp/job.ini" &
srun -n 4 --overlap bash -c 'SEER_JOB_ID=seer-resume-$$ SEER_SOCKET=$tmp/d-\$(( $2 )).sock exec "$BIN/seer-trainer" --log "$tmp/$1-r\$SLURM_PROCID.log" --quiet $3'
wait
SH
  chmod +x "$tmp/$1.sh"
  (cd "$tmp" && sbatch --parsable -N 1 -n 4 --overcommit --output="$tmp/$1.out" "$tmp/$1.sh")
}

echo "== job 1: ranks 0,1 on daemon 0 and 2,3 on daemon 1; scancel --signal=TERM at 1:2"
mkdir -p "$tmp/sync"
jid=$(job first 'SLURM_PROCID / 2' "--sync $tmp/sync --pause-at 1:2")
JOBS+=("$jid")
for r in 0 1 2 3; do
  for _ in $(seq 2400); do [ -e "$tmp/sync/paused-$r-1-2" ] && break; sleep 0.1; done
  [ -e "$tmp/sync/paused-$r-1-2" ] || { cat "$tmp/first.out"; fail "rank $r never paused at 1:2"; }
done
scancel --signal=TERM "$jid"
wait_job "$jid" 300
out="$tmp/first.out"
grep -q "seerd\[0\] INFO  Terminated: stopping" "$out" && grep -q "seerd\[1\] INFO  Terminated: stopping" "$out" ||
  { cat "$out"; fail "a daemon did not take SIGTERM as a stop"; }
[ "$(grep -c 'INFO  resume positions saved' "$out")" -eq 2 ] || { cat "$out"; fail "positions not saved by both daemons"; }
if grep -q "exited on signal\|terminated with signal" "$out"; then cat "$out"; fail "a daemon died of the signal"; fi
echo "   both daemons drained and saved 4 ranks' positions"

echo "== job 2: resubmitted, ranks on the other daemon (0,2 -> 0; 1,3 -> 1), resume = auto"
jid=$(job second 'SLURM_PROCID % 2' "")
JOBS+=("$jid")
wait_job "$jid" 600
grep -q "the last run's 4 ranks continue where they stopped" "$tmp/second.out" ||
  { cat "$tmp/second.out"; fail "job 2 did not resume from the saved positions"; }
grep -q "job finished: all trainers done" "$tmp/second.out" || { cat "$tmp/second.out"; fail "job 2 did not finish"; }

HERE="$here" DATA="$tmp/data" /usr/bin/python3 - "$tmp" <<'PY'
import os, sys
sys.path.insert(0, os.environ["HERE"])
from seertest import catalog, check, read_log, seer, verify_rank
tmp = sys.argv[1]
cat = catalog(os.environ["DATA"])
s = seer.Sampler(len(cat), 23, 4, 3)
for r in range(4):
    before, after = read_log("%s/first-r%d.log" % (tmp, r)), read_log("%s/second-r%d.log" % (tmp, r))
    check(max(before) == (1, 1), "rank %d released up to %s before the stop" % (r, max(before)))
    check(min(after) == (1, 2), "rank %d resumed at %s" % (r, min(after)))
    check(not set(before) & set(after), "rank %d: batches delivered twice" % r)
    both = dict(before)
    both.update(after)
    n = verify_rank(cat, s, r, both, 3)
print("   every rank: %d batches before and after, one unbroken run, bytes checked" % n)
PY
echo "test_slurm_resume: PASS"
