#!/usr/bin/env bash
# libseer must never abort or exit the trainer, and links client code only:
# no abort/exit-family call, no daemon helper (logging, the allocators that
# abort on out of memory), and it exports seer_* and nothing else.
# Usage: libseer_symbols.sh path/to/libseer.so
set -euo pipefail
lib="${1:?usage: $0 libseer.so}"
[ -f "$lib" ] || { echo "FAIL: $lib not found"; exit 1; }
fail=0
# names only, without a @VERSION suffix
dyn_undef=$(nm -D --undefined-only "$lib" | awk '{print $NF}' | sed 's/@.*//')
all=$(nm "$lib" 2>/dev/null | awk '{print $NF}' | sed 's/@.*//')
for s in abort exit _exit _Exit quick_exit __assert_fail; do
  if grep -qx "$s" <<<"$dyn_undef$(printf '\n')$all"; then
    echo "FAIL: $lib refers to $s (the library must never end the trainer's process)"
    fail=1
  fi
done
for s in xmalloc xcalloc xrealloc xstrdup xasprintf oom log_msg log_set_level mkdir_p \
         write_file_atomic parse_size; do
  if grep -qx "$s" <<<"$all"; then
    echo "FAIL: $lib contains the daemon helper $s (libseer links client code only)"
    fail=1
  fi
done
exported=$(nm -D --defined-only "$lib" | awk '$2 != "A" {print $NF}' | sed 's/@.*//')
bad=$(grep -v '^seer_' <<<"$exported" || true)
if [ -n "$bad" ]; then
  echo "FAIL: $lib exports symbols outside seer_*: $(echo $bad)"
  fail=1
fi
n=$(grep -c '^seer_' <<<"$exported" || true)
[ "$n" -gt 0 ] || { echo "FAIL: $lib exports no seer_* symbol"; fail=1; }
[ $fail -eq 0 ] && echo "libseer symbols: $n seer_* exports, no abort/exit, no daemon helper"
exit $fail
