#!/usr/bin/env bash
# Stop the single-node Slurm cluster that scripts/slurm-up.sh started: cancel
# jobs, shut down slurmctld and slurmd, and stop munged if slurm-up.sh started
# it. Idempotent: does nothing when nothing runs. Must run as root.
#
# Environment:
#   SEER_SLURM_TIMEOUT   seconds to wait for each step (default 30)
set -euo pipefail

PROG=slurm-down
# shellcheck source=scripts/slurm-common.sh
. "$(dirname "$0")/slurm-common.sh"

# stop NAME PIDFILE: wait for the daemon to exit; after TIMEOUT send SIGTERM,
# then SIGKILL, to those PIDs only.
stop() {
  local name="$1" pidfile="$2" pids sig
  for sig in "" TERM KILL; do
    if [ -n "$sig" ]; then
      pids=$(pids_of "$name" "$pidfile")
      [ -z "$pids" ] && break
      log "$name (pid ${pids//$'\n'/ }) still running; sending SIG$sig"
      # shellcheck disable=SC2086
      kill -s "$sig" $pids 2>/dev/null || true
    fi
    for _ in $(seq $((TIMEOUT * 5))); do
      [ -z "$(pids_of "$name" "$pidfile")" ] && return 0
      sleep 0.2
    done
  done
  [ -z "$(pids_of "$name" "$pidfile")" ] || die "$name still running after SIGKILL"
}

[ "$(id -u)" -eq 0 ] || die "must run as root"

ctld=$(pids_of slurmctld "$CTLD_PID")
slurmd=$(pids_of slurmd "$SLURMD_PID")
if [ -z "$ctld" ] && [ -z "$slurmd" ]; then
  log "slurmctld and slurmd are not running"
else
  if [ -n "$ctld" ] && scontrol ping 2>/dev/null | grep -q 'is UP'; then
    jobs=$(squeue -h -o '%i' 2>/dev/null || true)
    if [ -n "$jobs" ]; then
      log "cancelling jobs: ${jobs//$'\n'/ }"
      # shellcheck disable=SC2086
      scancel $jobs 2>/dev/null || true
      for _ in $(seq $((TIMEOUT * 5))); do
        [ -z "$(squeue -h -o '%i' 2>/dev/null || true)" ] && break
        sleep 0.2
      done
      left=$(squeue -h -o '%i' 2>/dev/null || true)
      [ -z "$left" ] || log "WARNING: jobs still listed after ${TIMEOUT}s: ${left//$'\n'/ }"
    fi
    log "scontrol shutdown"
    scontrol shutdown >/dev/null 2>&1 || log "WARNING: 'scontrol shutdown' failed"
  else
    log "slurmctld not answering; stopping the daemons by pid"
    for p in $ctld $slurmd; do kill -s TERM "$p" 2>/dev/null || true; done
  fi
  stop slurmctld "$CTLD_PID"
  stop slurmd "$SLURMD_PID"
  log "slurmctld and slurmd stopped"
fi

# Job step daemons exit with their steps; give them a moment and report.
for _ in $(seq $((TIMEOUT * 5))); do
  [ -z "$(pids_of slurmstepd /nonexistent)" ] && break
  sleep 0.2
done
left=$(pids_of slurmstepd /nonexistent)
[ -z "$left" ] || log "WARNING: slurmstepd processes still running: ${left//$'\n'/ }"

if [ -f "$MUNGE_MARK" ]; then
  if [ -n "$(pids_of munged "$MUNGE_PID")" ]; then
    for p in $(pids_of munged "$MUNGE_PID"); do kill -s TERM "$p" 2>/dev/null || true; done
    stop munged "$MUNGE_PID"
    log "stopped munged (slurm-up.sh had started it)"
  else
    log "munged (started by slurm-up.sh) is not running"
  fi
  rm -f "$MUNGE_MARK"
elif [ -n "$(pids_of munged "$MUNGE_PID")" ]; then
  log "munged left running (slurm-up.sh did not start it)"
fi
log "done"
