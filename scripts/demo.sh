#!/usr/bin/env bash
# The example job: a generated dataset, one seerd, two trainers (C and Python)
# that print what they received and their throughput.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${SEER_DEMO_DATA:-data/example}"
export SEER_DEMO_DATA="$DATA"
export SEER_JOB_ID="demo-$$"
export SEER_RUNTIME_DIR="${TMPDIR:-/tmp}"
export SEER_CONNECT_TIMEOUT_MS=20000
/usr/bin/python3 scripts/gen_dataset.py "$DATA" --classes 10 --per-class 100 --min-size 4KiB --max-size 32KiB

state=$(mktemp -d)
trap 'kill $daemon 2>/dev/null || true; rm -rf "$state"' EXIT
echo "== starting seerd (config/example.ini)"
bin/seerd -c config/example.ini --set daemon.state_dir="$state" \
  --set daemon.stats_file="$state/stats.json" &
daemon=$!

echo "== trainer 0 (C, libseer) and trainer 1 (Python, seer ctypes shim)"
bin/seer-trainer --rank 0 --world 2 --show 2 --compute-ms 2 &
t0=$!
PYTHONPATH=client/python /usr/bin/python3 - <<'PY' &
import time, seer
with seer.Loader(rank=1, world_size=2) as loader:
    t = time.time(); n = nbytes = 0
    for epoch in range(loader.epochs):
        for batch in loader:
            if epoch == 0 and batch.step < 2:
                print("trainer 1: epoch %d step %d: %d samples, ids %s..., labels %s..., first sample %s %s"
                      % (batch.epoch, batch.step, len(batch), batch.ids[:4].tolist(),
                         batch.labels[:4].tolist(), batch.samples[0].dtype, batch.samples[0].shape))
            n += len(batch); nbytes += int(batch.sizes.sum())
            time.sleep(0.002)
    dt = time.time() - t
    print("trainer 1: %d samples, %.1f MB in %.2f s: %.0f samples/s" % (n, nbytes / 1e6, dt, n / dt))
PY
t1=$!
wait $t0
wait $t1
wait $daemon
trap 'rm -rf "$state"' EXIT
echo "== daemon statistics per epoch (PFS bytes fall once the RAM cache is warm):"
/usr/bin/python3 -c "
import json
s = json.load(open('$state/stats.json'))
print('dataset %d samples, %.1f MB; RAM cache holds %d samples' % (s['dataset']['samples'], s['dataset']['bytes']/1e6, s['cache']['ram_planned_samples']))
for e in s['epochs']:
    print('  epoch %d: %d samples delivered, %d from RAM cache, %.1f MB read from the PFS in %.3f s' % (e['epoch'], e['samples'], e['ram_samples'], e['pfs_bytes']/1e6, e['seconds']))
"
echo "== demo finished"
