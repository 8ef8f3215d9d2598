#!/usr/bin/env bash
# Mount SRC at MNT through the PFS emulator (tools/seer-pfsemu.c, docs/pfsemu.md)
# in the background, wait until the mount answers, and print the emulator's pid.
#
#   scripts/pfsemu-mount.sh SRC MNT [seer-pfsemu options...]
#   e.g. scripts/pfsemu-mount.sh /data/imagenet /mnt/pfs --bandwidth 500MB/s --latency-ms 2
#
# MNT is created if missing and must be empty. The emulator's messages go to
# $PFSEMU_LOG (default: /tmp/pfsemu-<basename of MNT>.log). Environment:
#   PFSEMU          emulator binary (default: bin/seer-pfsemu of this tree)
#   PFSEMU_TIMEOUT  seconds to wait for the mount (default 10)
# Exit status: 0 once MNT/.pfsemu/stats is readable; 1 if the emulator exits
# or the timeout passes first (the emulator is then stopped and its log shown).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PFSEMU=${PFSEMU:-$ROOT/bin/seer-pfsemu}
TIMEOUT=${PFSEMU_TIMEOUT:-10}

if [ $# -lt 2 ]; then
  echo "usage: $0 SRC MNT [seer-pfsemu options...]" >&2
  exit 2
fi
src=$1 mnt=$2
shift 2
if [ ! -x "$PFSEMU" ]; then
  echo "$0: emulator $PFSEMU not found (run make, or set PFSEMU)" >&2
  exit 1
fi
mkdir -p "$mnt"
log=${PFSEMU_LOG:-/tmp/pfsemu-$(basename "$(realpath -m "$mnt")").log}
: >"$log"

# Foreground mode in a background job: $! is the emulator itself.
"$PFSEMU" "$src" "$mnt" -f "$@" </dev/null >>"$log" 2>&1 &
pid=$!

# Running and not a zombie (kill -0 succeeds on a zombie).
alive() {
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  case "${st%% *}" in Z | X | "") return 1 ;; esac
}

deadline=$((SECONDS + TIMEOUT))
until cat "$mnt/.pfsemu/stats" >/dev/null 2>&1; do
  if ! alive "$pid"; then
    wait "$pid" || true
    echo "$0: seer-pfsemu exited before the mount was ready; its log ($log):" >&2
    cat "$log" >&2
    exit 1
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "$0: $mnt not ready after ${TIMEOUT}s; stopping pid $pid; log ($log):" >&2
    kill -TERM "$pid" 2>/dev/null || true
    cat "$log" >&2
    exit 1
  fi
  sleep 0.02
done
echo "$pid"
