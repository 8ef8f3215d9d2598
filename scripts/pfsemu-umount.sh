#!/usr/bin/env bash
# Unmount a PFS emulator mount and wait until the emulator has exited, so that
# its --stats file is complete.
#
#   scripts/pfsemu-umount.sh MNT
#
# Retries while the mount is busy (a file still open) for up to
# $PFSEMU_TIMEOUT seconds (default 10). Also clears a dead mount whose
# emulator is gone ("Transport endpoint is not connected").
# Exit status: 0 when MNT is unmounted and the emulator has exited, else 1.
set -euo pipefail

TIMEOUT=${PFSEMU_TIMEOUT:-10}
if [ $# -ne 1 ]; then
  echo "usage: $0 MNT" >&2
  exit 2
fi
mnt=$1

is_mounted() { findmnt -rn --target "$1" -o TARGET 2>/dev/null | grep -qxF "$(realpath -m "$1")"; }

# Running and not a zombie: an emulator started in a background job is
# reparented and stays a zombie until init reaps it, after its last write.
alive() {
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  case "${st%% *}" in Z | X | "") return 1 ;; esac
}

if ! is_mounted "$mnt"; then
  echo "$0: $mnt is not mounted" >&2
  exit 1
fi
# The emulator publishes its pid in the stats; unreadable on a dead mount.
pid=$(grep -o '"pid": *[0-9]*' "$mnt/.pfsemu/stats" 2>/dev/null | grep -o '[0-9]*$' || true)

deadline=$((SECONDS + TIMEOUT))
until fusermount3 -u "$mnt" 2>/dev/null; do
  if ! is_mounted "$mnt"; then
    break
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "$0: cannot unmount $mnt after ${TIMEOUT}s:" >&2
    fusermount3 -u "$mnt" || true
    exit 1
  fi
  sleep 0.05
done

if [ -n "$pid" ]; then
  while alive "$pid"; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "$0: emulator pid $pid still running ${TIMEOUT}s after the unmount" >&2
      exit 1
    fi
    sleep 0.02
  done
fi
