#!/usr/bin/env bash
# Integration test of the local single-node Slurm cluster (docs/slurm.md):
# brings it up with scripts/slurm-up.sh, then checks srun, an Open MPI program
# under srun --mpi=pmix, two overlapping steps in one allocation (how seer
# daemons run beside trainers) and an sbatch job. Run as root.
#
# The cluster is left running afterwards (scripts/slurm-down.sh stops it);
# set SEER_SLURM_TEST_DOWN=1 to stop it at the end of the test.
#
# The Slurm is shared and the machine may be busy: the overlapping steps hold
# each other with files (no sleep decides the order) and every deadline only
# bounds a failure.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export PATH="/usr/sbin:/usr/bin:/sbin:/bin:${PATH:-}"
export SLURM_CONF=/etc/slurm/slurm.conf
LIMIT=600 # seconds for the whole test (~10 s on an idle machine)
T0=$SECONDS
TMP=$(mktemp -d /tmp/seer-slurm-test.XXXXXX)
TAG="seer-test-$$" # job name, to cancel only our jobs on failure
PASS=0

cleanup() {
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    scancel --quiet --name="$TAG" 2>/dev/null || true
    echo "test_slurm: FAILED (rc=$rc) after $((SECONDS - T0))s; logs: /var/log/slurm/" >&2
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
  echo "test_slurm: FAIL: $*" >&2
  exit 1
}
indent() { sed 's/^/   | /'; }
step() { echo "== $* [t=$((SECONDS - T0))s]"; }
ok() {
  PASS=$((PASS + 1))
  echo "   ok: $*"
}

[ "$(id -u)" -eq 0 ] || fail "must run as root"
host=$(hostname -s)

step "slurm-up.sh"
"$ROOT/scripts/slurm-up.sh"
ok "cluster up"

# ------------------------------------------------------------------ srun
step "srun -n 2 hostname"
out=$(timeout 120 srun -J "$TAG" -n 2 hostname) || fail "srun -n 2 hostname failed"
indent <<<"$out"
[ "$(grep -cx "$host" <<<"$out")" -eq 2 ] || fail "expected 2 lines '$host', got: $out"
ok "2 tasks ran on $host"

# ------------------------------------------------------------------ Open MPI
step "Open MPI program under srun --mpi=pmix -n 2"
cat >"$TMP/mpi_hello.c" <<'EOF'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    int rank, size, sum = 0;
    char host[MPI_MAX_PROCESSOR_NAME];
    int len;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    /* a collective, so the ranks really talk to each other */
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d of %d on %s sum %d\n", rank, size, host, sum);
    MPI_Finalize();
    return 0;
}
EOF
mpicc -O1 -o "$TMP/mpi_hello" "$TMP/mpi_hello.c" || fail "mpicc failed"
out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  timeout 120 srun -J "$TAG" --mpi=pmix -n 2 "$TMP/mpi_hello") ||
  fail "srun --mpi=pmix -n 2 mpi_hello failed"
indent <<<"$out"
for r in 0 1; do
  grep -q "^rank $r of 2 on .* sum 1$" <<<"$out" || fail "no line for rank $r of 2 in: $out"
done
[ "$(wc -l <<<"$out")" -eq 2 ] || fail "expected exactly 2 lines, got: $out"
ok "ranks 0 and 1 report world size 2 (allreduce ok)"

# ------------------------------------------------------------------ --overlap
# Inside one allocation: a long step (the "daemon", one task per node) runs in
# the background; a second step (the "trainer") must start and finish while
# the first one is still running. The first step runs until the second one is
# done (a file), so "still running" does not depend on how fast srun starts.
step "two overlapping steps in one salloc -n 2"
cat >"$TMP/overlap.sh" <<'EOF'
set -euo pipefail
d=$1
# -n must be given: SLURM_NTASKS=2 from the allocation would otherwise
# override --ntasks-per-node=1 (srun warns and starts 2 tasks).
srun --overlap --ntasks-per-node=1 -n "$SLURM_JOB_NUM_NODES" bash -c "touch $d/daemon.started
  for _ in \$(seq 1200); do [ -e $d/trainer.done ] && break; sleep 0.1; done
  touch $d/daemon.finished" &
daemon=$!
for _ in $(seq 1200); do [ -e "$d/daemon.started" ] && break; sleep 0.1; done
[ -e "$d/daemon.started" ] || { echo "first step did not start"; exit 1; }
timeout 120 srun --overlap -n 2 hostname >"$d/trainer.out"
if [ -e "$d/daemon.finished" ]; then echo "second step did not run beside the first"; exit 1; fi
echo "second step finished while the first was running"
touch "$d/trainer.done"
wait "$daemon"
[ -e "$d/daemon.finished" ] || { echo "first step did not finish"; exit 1; }
echo "first step finished"
EOF
t=$SECONDS
out=$(timeout 300 salloc -J "$TAG" -n 2 bash "$TMP/overlap.sh" "$TMP" 2>&1) ||
  fail "overlap test failed: $out"
indent <<<"$out"
[ "$(grep -cx "$host" "$TMP/trainer.out")" -eq 2 ] || fail "second step output: $(cat "$TMP/trainer.out")"
grep -q "second step finished while the first was running" <<<"$out" || fail "no overlap"
ok "srun --overlap step ran beside a running step ($((SECONDS - t))s)"

# ------------------------------------------------------------------ sbatch
# Accounting storage is none (no sacct), so completion is read from squeue /
# scontrol and the job's output file.
step "sbatch job"
cat >"$TMP/job.sh" <<EOF
#!/bin/bash
#SBATCH -J $TAG
#SBATCH -n 2
#SBATCH -o $TMP/job-%j.out
srun hostname
echo "JOB-DONE \$SLURM_JOB_ID"
EOF
jobid=$(sbatch --parsable "$TMP/job.sh") || fail "sbatch failed"
jobid=${jobid%%;*}
echo "   submitted job $jobid"
for _ in $(seq 1500); do
  squeue -h -j "$jobid" 2>/dev/null | grep -q . || break
  sleep 0.2
done
squeue -h -j "$jobid" 2>/dev/null | grep -q . && fail "job $jobid still queued/running after 300s"
outf="$TMP/job-$jobid.out"
[ -f "$outf" ] || fail "no output file $outf"
indent <"$outf"
grep -q "^JOB-DONE $jobid$" "$outf" || fail "job $jobid did not reach its end"
[ "$(grep -cx "$host" "$outf")" -eq 2 ] || fail "job $jobid: expected 2 lines '$host'"
state=$(scontrol -o show job "$jobid" 2>/dev/null | grep -o 'JobState=[A-Z_]*' || true)
[ -z "$state" ] || [ "$state" = JobState=COMPLETED ] || fail "job $jobid: $state"
ok "job $jobid completed${state:+ ($state)}"

# ------------------------------------------------------------------ end
if [ "${SEER_SLURM_TEST_DOWN:-0}" = 1 ]; then
  step "slurm-down.sh"
  "$ROOT/scripts/slurm-down.sh"
fi
elapsed=$((SECONDS - T0))
[ "$elapsed" -lt "$LIMIT" ] || fail "took ${elapsed}s, limit ${LIMIT}s"
echo "test_slurm: PASS ($PASS checks, ${elapsed}s)"
