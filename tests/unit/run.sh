#!/usr/bin/env bash
# Run the unit test binaries given as arguments (make unit), SEER_UNIT_JOBS at
# a time (default 2; 1 = one after the other), each with Criterion's --jobs 1.
# A binary's output goes to a log of its own, printed whole when it ends with
# its "== ... in N s" line; a failing binary fails the run. The binaries that
# mostly wait (test_net's timeouts) or take longest under the sanitizers start
# first, so the others run beside them. PREFIX: a command to run each under
# (make unit passes setarch -R for TSan).
set -uo pipefail
jobs="${SEER_UNIT_JOBS:-2}"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "SEER_UNIT_JOBS=$jobs: give a number >= 1"; exit 2; }
read -r -a prefix <<< "${PREFIX:-}"
first=(test_net test_xform_decode test_config test_plan test_util test_catalog)
bins=()
for n in "${first[@]}"; do
  for b in "$@"; do [ "$(basename "$b")" = "$n" ] && bins+=("$b"); done
done
for b in "$@"; do
  [[ " ${first[*]} " == *" $(basename "$b") "* ]] || bins+=("$b")
done
[ ${#bins[@]} -gt 0 ] || { echo "no unit test binaries given"; exit 2; }

logs=$(mktemp -d "${TMPDIR:-/tmp}/seer-unit-logs.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$logs"; exit 130' INT TERM HUP
declare -A pid_of=() start_of=()
fail=0 running=0 done_n=0
report() {
  local b=$1 n rc
  n=$(basename "$b")
  wait "${pid_of[$b]}"
  rc=$(cat "$logs/$n.rc" 2>/dev/null || echo 255)
  echo "== $b"
  cat "$logs/$n.log"
  [ "$rc" -eq 0 ] || { echo "== $b FAILED (status $rc)"; fail=1; }
  echo "== $b: $(( $(date +%s) - ${start_of[$b]} )) s"
  unset "pid_of[$b]"
  running=$((running - 1)) done_n=$((done_n + 1))
}
queue=("${bins[@]}")
while [ ${#queue[@]} -gt 0 ] || [ $running -gt 0 ]; do
  while [ ${#queue[@]} -gt 0 ] && [ $running -lt "$jobs" ]; do
    b=${queue[0]}; queue=("${queue[@]:1}"); n=$(basename "$b")
    start_of[$b]=$(date +%s)
    ( "${prefix[@]}" "$b" --jobs 1 > "$logs/$n.log" 2>&1; echo $? > "$logs/$n.rc" ) &
    pid_of[$b]=$!
    running=$((running + 1))
  done
  wait -n 2>/dev/null
  for b in "${!pid_of[@]}"; do
    if [ -e "$logs/$(basename "$b").rc" ] || ! kill -0 "${pid_of[$b]}" 2>/dev/null; then
      report "$b"
    fi
  done
done
rm -rf "$logs"
[ $done_n -eq ${#bins[@]} ] || { echo "== only $done_n of ${#bins[@]} unit binaries ran"; fail=1; }
exit $fail
