#!/usr/bin/env bash
# seer under a real (single-node) Slurm: the example sbatch job (one seerd,
# two trainers), then two daemons joined by MPI over PMIx with four trainers
# (two per daemon) launched with srun --overlap; delivered bytes, labels and
# order are checked against the files and the sampler, as everywhere else.
# The Slurm is shared: only this test's own jobs are ever cancelled, and the
# deadlines (jobs, trainers waiting for their daemon) hold on a busy machine.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
BIN="$root/${BIN:-bin}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export SLURM_CONF=/etc/slurm/slurm.conf
# the trainers start beside their daemon and wait for its socket (sbatch
# passes the environment on)
export SEER_CONNECT_TIMEOUT_MS=300000
fail() { echo "FAIL: $*" >&2; exit 1; }
JOBS=() # ours, cancelled on exit

bash "$root/scripts/slurm-up.sh" >/dev/null
tmp=$(mktemp -d /tmp/seer-slurm-XXXXXX)
trap '[ ${#JOBS[@]} -eq 0 ] || scancel "${JOBS[@]}" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
/usr/bin/python3 "$root/scripts/gen_dataset.py" "$tmp/data" --classes 4 --per-class 30 \
  --min-size 2KiB --max-size 24KiB >/dev/null

wait_job() { # job id, timeout s
  local t=0
  while squeue -h -j "$1" 2>/dev/null | grep -q .; do
    sleep 0.5; t=$((t + 1))
    [ $t -lt $(( $2 * 2 )) ] || { scancel "$1"; fail "job $1 did not finish in $2 s"; }
  done
}

verify() { # logs dir, world, epochs, batch, seed
  /usr/bin/python3 - "$@" <<'PY'
import sys, os
sys.path.insert(0, os.environ["HERE"])
from seertest import catalog, read_log, seer, verify_rank, verify_exactly_once
d, world, epochs, batch, seed = sys.argv[1], *map(int, sys.argv[2:])
cat = catalog(os.environ["DATA"])
s = seer.Sampler(len(cat), seed, world, batch)
logs = [read_log(os.path.join(d, "r%d.log" % r)) for r in range(world)]
for r in range(world):
    verify_rank(cat, s, r, logs[r], epochs)
verify_exactly_once(cat, logs, epochs, world, batch, drop_last=False)
print("   verified %d ranks x %d epochs: exact bytes, labels, order" % (world, epochs))
PY
}
export HERE="$here" DATA="$tmp/data"

echo "== example sbatch job: 1 seerd + 2 trainers"
cat > "$tmp/job.ini" <<INI
[dataset]
path = $tmp/data
[job]
seed = 8
epochs = 2
batch_size = 4
[cache]
ram = 512KiB
[daemon]
state_dir = $tmp/state
INI
cat > "$tmp/train.sh" <<SH
#!/bin/bash
exec "$BIN/seer-trainer" --log "$tmp/ex/r\$SLURM_PROCID.log" --quiet
SH
chmod +x "$tmp/train.sh"; mkdir -p "$tmp/ex"
jid=$(cd "$tmp" && SEER_BIN="$BIN" SEER_CONFIG="$tmp/job.ini" TRAIN_CMD="$tmp/train.sh" \
      sbatch --parsable -N 1 -n 2 --overcommit "$root/scripts/seer-job.sbatch")
JOBS+=("$jid")
wait_job "$jid" 600
state=$(scontrol show job "$jid" 2>/dev/null | grep -o 'JobState=[A-Z]*' || true)
[ -z "$state" ] || [ "$state" = "JobState=COMPLETED" ] || { cat "$tmp"/seer-*.out; fail "job $jid: $state"; }
grep -q "job finished: all trainers done" "$tmp/seer-$jid.out" || { cat "$tmp/seer-$jid.out"; fail "seerd did not finish the job"; }
verify "$tmp/ex" 2 2 4 8

echo "== two seerd (MPI over PMIx) + 4 trainers with srun --overlap"
mkdir -p "$tmp/two"
cat > "$tmp/two.sh" <<SH
#!/bin/bash
set -euo pipefail
srun -n 2 --overlap --mpi=pmix "$BIN/seerd" -c "$tmp/job.ini" \
  --set daemon.socket="$tmp/two/d-%n.sock" --set net.provider="tcp;ofi_rxm" \
  --set daemon.stats_file="$tmp/two/stats-%n.json" --set job.epochs=3 &
srun -n 4 --overlap bash -c 'SEER_SOCKET=$tmp/two/d-\$((SLURM_PROCID / 2)).sock exec "$BIN/seer-trainer" --log "$tmp/two/r\$SLURM_PROCID.log" --quiet'
wait
SH
chmod +x "$tmp/two.sh"
jid=$(cd "$tmp" && sbatch --parsable -N 1 -n 4 --overcommit --output="$tmp/two.out" "$tmp/two.sh")
JOBS+=("$jid")
wait_job "$jid" 600
grep -q "rank map agreed: 4 trainers on 2 nodes" "$tmp/two.out" || { cat "$tmp/two.out"; fail "the daemons did not agree on the rank map"; }
verify "$tmp/two" 4 3 4 8
python_peer=$(/usr/bin/python3 -c "
import json; print(sum(e['peer_bytes'] for n in (0, 1) for e in json.load(open('$tmp/two/stats-%d.json' % n))['epochs']))")
[ "$python_peer" -gt 0 ] || fail "no peer transfer between the two daemons"
echo "   peer bytes between the daemons: $python_peer"
echo "test_slurm_launch: PASS"
