#!/bin/sh
# Run "$@" with SEER_SOCKET set to the socket of this trainer's node daemon.
#
#   mpirun -np T -x SEER_SOCKET_PATTERN -x SEER_TRAINERS_PER_NODE \
#       scripts/bench/node-socket.sh bin/seer-bench --source seer ...
#
# Block placement: trainer r (OMPI_COMM_WORLD_RANK, else SLURM_PROCID, else
# RANK) belongs to node r / SEER_TRAINERS_PER_NODE; "%n" in
# SEER_SOCKET_PATTERN is replaced by that node number (as seerd's
# daemon.socket does).
r=${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-${RANK:-0}}}
tpn=${SEER_TRAINERS_PER_NODE:-1}
n=$((r / tpn))
SEER_SOCKET=$(printf '%s\n' "$SEER_SOCKET_PATTERN" | sed "s/%n/$n/g")
export SEER_SOCKET
exec "$@"
