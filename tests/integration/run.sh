#!/usr/bin/env bash
# Run every integration test (tests/integration/test_*.{py,sh}); a failing test
# fails the run. BIN/LIB select the build variant's binaries (see Makefile).
set -uo pipefail
cd "$(dirname "$0")"
export BIN="${BIN:-bin}" LIB="${LIB:-lib}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# sanitizer builds: a report must fail the run, not just print
export TSAN_OPTIONS="halt_on_error=1:exitcode=66${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
# full unwinding on malloc, so leaks inside plugins still show their library
export ASAN_OPTIONS="detect_leaks=1:fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$(cd .. && pwd)/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
only="${SEER_TESTS:-}"
fail=0
for t in test_*.py test_*.sh; do
  [ -e "$t" ] || continue
  if [ -n "$only" ] && [[ " $only " != *" ${t%.*} "* ]]; then continue; fi
  echo "=== $t ($BIN)"
  start=$(date +%s)
  case "$t" in
    *.py) /usr/bin/python3 "$t" ;;
    *.sh) bash "$t" ;;
  esac
  rc=$?
  echo "=== $t: $([ $rc -eq 0 ] && echo ok || echo FAILED) in $(( $(date +%s) - start )) s"
  [ $rc -eq 0 ] || fail=1
done
exit $fail
