# shellcheck shell=bash disable=SC2034
# Shared by scripts/slurm-up.sh and scripts/slurm-down.sh (sourced, not run):
# paths of the single-node Slurm cluster and helpers to find its daemons.
# The sourcing script sets PROG (its name, for messages) first.

export PATH="/usr/sbin:/usr/bin:/sbin:/bin:${PATH:-}"
CONF=/etc/slurm/slurm.conf
export SLURM_CONF="$CONF" # ignore any SLURM_CONF from the caller's environment
TIMEOUT="${SEER_SLURM_TIMEOUT:-30}"
MUNGE_PID=/run/munge/munged.pid
STATE_DIR=/run/seer-slurm # our marker files (what slurm-up.sh started)
MUNGE_MARK="$STATE_DIR/munged.started-by-slurm-up"
CTLD_PID=/run/slurm/slurmctld.pid
SLURMD_PID=/run/slurm/slurmd.pid

log() { echo "$PROG: $*"; }
die() {
  echo "$PROG: ERROR: $*" >&2
  exit 1
}

# alive PID NAME: PID exists, is not a zombie and its command is NAME.
# (Daemons here are re-parented to a PID 1 that reaps late, so a dead daemon
# can linger as a zombie for a second; that counts as gone.)
alive() {
  local pid="$1" name="$2" stat comm
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  comm=${stat#*(}
  comm=${comm%%)*}
  [ "$comm" = "$name" ] || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# pids_of NAME PIDFILE: live PIDs of the daemon, one per line (the pid file's,
# and any process of exactly that name, for a daemon started some other way).
pids_of() {
  local name="$1" pidfile="$2" pid
  {
    if [ -r "$pidfile" ]; then tr -dc '0-9' <"$pidfile" && echo; fi
    pgrep -x "$name" 2>/dev/null || true
  } | sort -u | while read -r pid; do
    if alive "$pid" "$name"; then echo "$pid"; fi
  done
}

# pid_of NAME PIDFILE: one live PID of the daemon; empty if none.
pid_of() {
  local pids
  pids=$(pids_of "$1" "$2")
  echo "${pids%%$'\n'*}"
}
