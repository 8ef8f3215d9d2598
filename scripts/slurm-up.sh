#!/usr/bin/env bash
# Bring up a single-node Slurm cluster on this machine: munged, slurmctld and
# slurmd, all local. Idempotent: running it again while the cluster is up only
# checks it. Must run as root. See docs/slurm.md.
#
# Environment:
#   SEER_SLURM_TIMEOUT   seconds to wait for each daemon / the node (default 30)
#   SEER_SLURM_CLUSTER   ClusterName (default seer)
#   SEER_SLURM_PARTITION partition name (default debug)
set -euo pipefail

export PATH="/usr/sbin:/usr/bin:/sbin:/bin:${PATH:-}"
CONF=/etc/slurm/slurm.conf
export SLURM_CONF="$CONF" # ignore any SLURM_CONF from the caller's environment
TIMEOUT="${SEER_SLURM_TIMEOUT:-30}"
CLUSTER="${SEER_SLURM_CLUSTER:-seer}"
PARTITION="${SEER_SLURM_PARTITION:-debug}"

MUNGE_KEY=/etc/munge/munge.key
MUNGE_PID=/run/munge/munged.pid
MUNGE_LOG=/var/log/munge/munged.log
STATE_DIR=/run/seer-slurm # our marker files (what this script started)
MUNGE_MARK="$STATE_DIR/munged.started-by-slurm-up"
CTLD_PID=/run/slurm/slurmctld.pid
SLURMD_PID=/run/slurm/slurmd.pid
LOG_DIR=/var/log/slurm
CTLD_LOG="$LOG_DIR/slurmctld.log"
SLURMD_LOG="$LOG_DIR/slurmd.log"
CTLD_SPOOL=/var/spool/slurmctld
SLURMD_SPOOL=/var/spool/slurmd

log() { echo "slurm-up: $*"; }
die() {
  echo "slurm-up: ERROR: $*" >&2
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

# pid_of NAME PIDFILE: the live daemon's PID (pid file first, then by exact
# process name, for a daemon started some other way). Empty if none.
pid_of() {
  local name="$1" pidfile="$2" pid
  if [ -r "$pidfile" ]; then
    pid=$(tr -dc '0-9' <"$pidfile")
    if alive "$pid" "$name"; then
      echo "$pid"
      return
    fi
  fi
  for pid in $(pgrep -x "$name" 2>/dev/null || true); do
    if alive "$pid" "$name"; then
      echo "$pid"
      return
    fi
  done
}

[ "$(id -u)" -eq 0 ] || die "must run as root (it writes /etc/slurm and starts daemons)"
for b in munged munge unmunge slurmctld slurmd scontrol sinfo free nproc hostname su; do
  command -v "$b" >/dev/null || die "'$b' not found; install slurm-wlm and munge (scripts/deps.sh)"
done
id munge >/dev/null 2>&1 || die "user 'munge' missing; reinstall the munge package"

# ---------------------------------------------------------------- munge
mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge "$STATE_DIR"
if [ ! -s "$MUNGE_KEY" ]; then
  if command -v mungekey >/dev/null; then
    mungekey --create --keyfile="$MUNGE_KEY"
  else
    dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
  fi
  chmod 0400 "$MUNGE_KEY"
  log "created munge key $MUNGE_KEY"
fi
# munged refuses to start unless it owns its dirs and the key is private.
chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
chmod 0700 /etc/munge
chmod 0755 /run/munge
chmod go-rwx "$MUNGE_KEY"

pid=$(pid_of munged "$MUNGE_PID")
if [ -n "$pid" ]; then
  log "munged already running (pid $pid)"
else
  rm -f "$MUNGE_PID"
  su -s /bin/sh munge -c /usr/sbin/munged ||
    die "munged failed to start; read $MUNGE_LOG"
  touch "$MUNGE_MARK"
  log "started munged as user munge (pid $(pid_of munged "$MUNGE_PID"))"
fi
ok=0
for _ in $(seq $((TIMEOUT * 5))); do
  if munge -n 2>/dev/null | unmunge 2>/dev/null | grep -q 'STATUS: *Success'; then
    ok=1
    break
  fi
  sleep 0.2
done
[ "$ok" = 1 ] || die "'munge -n | unmunge' does not report Success after ${TIMEOUT}s; read $MUNGE_LOG"
log "munge -n | unmunge: Success"

# ---------------------------------------------------------------- slurm.conf
host=$(hostname -s)
[ -n "$host" ] || die "empty hostname"
cpus=$(nproc)
mem_total=$(free -m | awk '/^Mem:/ {print $2}')
[[ "$mem_total" =~ ^[0-9]+$ ]] || die "cannot read total memory from 'free -m'"
# a bit below the total: slurmd drains a node whose RealMemory exceeds what
# it measures, and the measurement varies slightly between boots.
realmem=$((mem_total * 95 / 100))

# Sockets/cores/threads as slurmd sees them (otherwise slurmctld assumes one
# core per socket and logs "Node reconfigured socket/core boundaries").
topo=""
if cfg=$(slurmd -C 2>/dev/null | head -n 1); then
  get() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$cfg"; }
  hw_cpus=$(get CPUs)
  boards=$(get Boards)
  sockets=$(get SocketsPerBoard)
  cores=$(get CoresPerSocket)
  threads=$(get ThreadsPerCore)
  if [ "$hw_cpus" = "$cpus" ] && [ -n "$boards" ] && [ -n "$sockets" ] &&
    [ -n "$cores" ] && [ -n "$threads" ]; then
    topo=" Boards=$boards SocketsPerBoard=$sockets CoresPerSocket=$cores ThreadsPerCore=$threads"
  fi
fi

# The node name must be the short hostname (slurmd looks itself up by it).
# If it does not resolve, give the loopback address explicitly.
ctld_host="$host"
node_addr=""
if ! getent hosts "$host" >/dev/null 2>&1; then
  ctld_host="$host(127.0.0.1)"
  node_addr=" NodeAddr=127.0.0.1"
fi

new_conf=$(mktemp)
trap 'rm -f "$new_conf"' EXIT
cat >"$new_conf" <<EOF
# Generated by seer scripts/slurm-up.sh: a single-node Slurm cluster for
# tests and local runs. Edit the script, not this file (see docs/slurm.md).
ClusterName=$CLUSTER
SlurmctldHost=$ctld_host
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$CTLD_SPOOL
SlurmdSpoolDir=$SLURMD_SPOOL
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$CTLD_LOG
SlurmdLogFile=$SLURMD_LOG
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName=$host CPUs=$cpus$topo RealMemory=$realmem$node_addr State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE OverSubscribe=FORCE State=UP
EOF

conf_changed=0
mkdir -p /etc/slurm
if [ -f "$CONF" ] && cmp -s "$new_conf" "$CONF"; then
  log "$CONF unchanged"
else
  if [ -f "$CONF" ]; then
    backup="$CONF.bak.$(date +%Y%m%d-%H%M%S)"
    n=1
    while [ -e "$backup" ]; do # never overwrite an earlier backup
      backup="$CONF.bak.$(date +%Y%m%d-%H%M%S).$n"
      n=$((n + 1))
    done
    cp -p "$CONF" "$backup"
    log "backed up the previous, different $CONF to $backup"
  fi
  install -m 0644 "$new_conf" "$CONF"
  conf_changed=1
  log "wrote $CONF (node $host: CPUs=$cpus$topo RealMemory=$realmem)"
fi

mkdir -p "$CTLD_SPOOL" "$SLURMD_SPOOL" "$LOG_DIR" "$(dirname "$CTLD_PID")"
chmod 0755 "$CTLD_SPOOL" "$SLURMD_SPOOL" "$LOG_DIR"

# ---------------------------------------------------------------- daemons
# wait_gone NAME PIDFILE: wait until the daemon has exited.
wait_gone() {
  for _ in $(seq $((TIMEOUT * 5))); do
    [ -z "$(pid_of "$1" "$2")" ] && return 0
    sleep 0.2
  done
  die "$1 still running ${TIMEOUT}s after 'scontrol shutdown'; run scripts/slurm-down.sh"
}

ctld=$(pid_of slurmctld "$CTLD_PID")
slurmd_pid=$(pid_of slurmd "$SLURMD_PID")
if [ "$conf_changed" = 1 ] && { [ -n "$ctld" ] || [ -n "$slurmd_pid" ]; }; then
  log "configuration changed while Slurm was running: restarting slurmctld and slurmd"
  scontrol shutdown >/dev/null 2>&1 || true
  wait_gone slurmctld "$CTLD_PID"
  wait_gone slurmd "$SLURMD_PID"
  ctld=""
  slurmd_pid=""
fi

if [ -n "$ctld" ]; then
  log "slurmctld already running (pid $ctld)"
else
  slurmctld || die "slurmctld failed to start; read $CTLD_LOG"
  log "started slurmctld"
fi
ok=0
for _ in $(seq $((TIMEOUT * 5))); do
  if scontrol ping 2>/dev/null | grep -q 'is UP'; then
    ok=1
    break
  fi
  if [ -z "$(pid_of slurmctld "$CTLD_PID")" ]; then
    sleep 0.2 # it may still be daemonizing
    [ -n "$(pid_of slurmctld "$CTLD_PID")" ] || die "slurmctld exited; read $CTLD_LOG"
  fi
  sleep 0.2
done
[ "$ok" = 1 ] || die "slurmctld not answering 'scontrol ping' after ${TIMEOUT}s; read $CTLD_LOG"
log "slurmctld is up (pid $(pid_of slurmctld "$CTLD_PID"))"

if [ -n "$slurmd_pid" ]; then
  log "slurmd already running (pid $slurmd_pid)"
else
  slurmd || die "slurmd failed to start; read $SLURMD_LOG"
  log "started slurmd"
fi

# Wait for the node to be usable. Idle is the normal result; mixed/allocated
# means jobs from an earlier run are still on it, which is fine too.
state=""
resumed=0
start=$SECONDS
while :; do
  state=$(sinfo -h -n "$host" -o '%T' 2>/dev/null | head -n 1 || true)
  case "$state" in
  idle | mixed | allocated | completing) break ;;
  drained | draining)
    # A drain recorded in the saved state (e.g. from an earlier config) is
    # kept across restarts; lift it once, then report if it comes back.
    if [ "$resumed" = 0 ] && [ -n "$(pid_of slurmd "$SLURMD_PID")" ]; then
      reason=$(sinfo -h -n "$host" -o '%E' 2>/dev/null || true)
      log "node $host is $state (reason: ${reason:-none}); resuming it"
      scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true
      resumed=1
    fi
    ;;
  esac
  if [ $((SECONDS - start)) -ge "$TIMEOUT" ]; then
    reason=$(sinfo -h -n "$host" -o '%E' 2>/dev/null || true)
    die "node $host not idle after ${TIMEOUT}s (state: ${state:-unknown}, reason: ${reason:-none}); read $SLURMD_LOG and $CTLD_LOG"
  fi
  if [ -z "$(pid_of slurmd "$SLURMD_PID")" ]; then
    sleep 0.5
    [ -n "$(pid_of slurmd "$SLURMD_PID")" ] || die "slurmd exited; read $SLURMD_LOG"
  fi
  sleep 0.2
done
log "slurmd is up (pid $(pid_of slurmd "$SLURMD_PID")); node $host is $state"
sinfo
