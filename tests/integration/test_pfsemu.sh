#!/usr/bin/env bash
# Integration test of the PFS emulator (tools/seer-pfsemu.c, docs/pfsemu.md).
# Self-contained: generates its data in a temporary directory, mounts the
# emulator through scripts/pfsemu-mount.sh, unmounts on exit (trap). Checks
#   - bytes through the mount equal the source, .pfsemu hidden, writes refused;
#   - the counters count exactly the bytes and files read, again on a re-read;
#   - large reads reach the emulator as max_read (1 MiB) requests;
#   - the bandwidth limit (fails if the rate exceeds it by more than 15 %);
#   - read and metadata latency, max-inflight, concurrency without it;
#   - fault injection: rate, kinds, --fault-path, --fault-seed, short reads;
#   - the RPC model, by counts: reads split into --rpc-size RPCs, in-flight
#     high-water marks of the OST and mount queues (never above the bound,
#     and reached), readahead RPCs/hits/unused bytes, no readahead for
#     random reads;
#   - the stats as strict JSON (libjansson) with names and a label holding
#     quotes, backslashes, newlines and non-UTF-8 bytes; --preset lustre;
#   - --stats at unmount (fusermount3 and SIGTERM), start-up errors.
# Timing checks are lower bounds only (a busy machine makes them slower, never
# faster), except the bandwidth's upper bound.
# BIN selects the build variant (bin, build/asan/bin); PFSEMU overrides.
# Run as root (FUSE). Takes 15-60 s (most of it starting processes).
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN_DIR=${BIN:-bin}
[[ $BIN_DIR == /* ]] || BIN_DIR=$ROOT/$BIN_DIR
export PFSEMU=${PFSEMU:-$BIN_DIR/seer-pfsemu}
PY=/usr/bin/python3
MIB=1048576
T0=$SECONDS

TMP=$(mktemp -d /tmp/seer-pfsemu-test.XXXXXX)
SRC=$TMP/src
declare -A MNT_PID=() # mountpoint -> emulator pid
NFAIL=0
NPASS=0

# Running and not a zombie.
alive() {
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  case "${st%% *}" in Z | X | "") return 1 ;; esac
}

cleanup() {
  local rc=$? m p i
  for m in "${!MNT_PID[@]}"; do
    fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null || true
    kill -TERM "${MNT_PID[$m]}" 2>/dev/null || true
  done
  # the emulators write their --stats files as they exit
  for p in "${MNT_PID[@]}"; do
    for i in $(seq 100); do alive "$p" || break; sleep 0.05; done
  done
  # anything else of ours still mounted (e.g. a failed start)
  for m in $(findmnt -rn -o TARGET 2>/dev/null | grep -F "$TMP/" || true); do
    fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null || true
  done
  if [ "$rc" -ne 0 ] || [ "$NFAIL" -ne 0 ]; then
    echo "test_pfsemu: FAILED ($NFAIL checks failed, rc=$rc) after $((SECONDS - T0)) s;" \
      "emulator logs:" >&2
    tail -n 20 "$TMP"/*.log >&2 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

pass() { NPASS=$((NPASS + 1)); echo "  ok   $*"; }
fail() { NFAIL=$((NFAIL + 1)); echo "  FAIL $*" >&2; }
# check DESCRIPTION COMMAND...: pass if the command succeeds
check() {
  local what=$1
  shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}
# Float comparison and arithmetic through awk.
fcmp() { awk -v a="$1" -v b="$3" "BEGIN { exit !(a $2 b) }"; }
calc() { awk "BEGIN { printf \"%.3f\", $* }"; }
now() { echo "$EPOCHREALTIME"; }
ms_since() { calc "($(now) - $1) * 1000"; }

# j FILE EXPR: evaluate a Python expression over the JSON document d.
j() { "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }
# js MNT EXPR: the same over the live counters of a mount.
js() {
  cat "$1/.pfsemu/stats" >"$TMP/live.json"
  j "$TMP/live.json" "$2"
}
reset() { [ "$(cat "$1/.pfsemu/reset")" = ok ]; }

# emu_mount NAME [options]: mount $SRC at M=$TMP/NAME with the emulator.
emu_mount() {
  local name=$1 pid
  shift
  M=$TMP/$name
  pid=$(PFSEMU_LOG=$TMP/$name.log "$ROOT/scripts/pfsemu-mount.sh" "$SRC" "$M" "$@")
  MNT_PID[$M]=$pid
}
emu_umount() {
  "$ROOT/scripts/pfsemu-umount.sh" "$1"
  unset "MNT_PID[$1]"
}

[ -x "$PFSEMU" ] || { echo "test_pfsemu: $PFSEMU not built (make all)" >&2; exit 1; }
[ -w /dev/fuse ] || { echo "test_pfsemu: /dev/fuse not usable (run as root)" >&2; exit 1; }
echo "test_pfsemu: $PFSEMU, data in $TMP"

# ---- data -------------------------------------------------------------------
mkdir -p "$SRC"/{files/sub,bw,lat,meta,par,bad,good,short}
rnd() { head -c "$2" /dev/urandom >"$1"; }
rnd "$SRC/files/empty" 0
rnd "$SRC/files/one" 1
rnd "$SRC/files/page-1" 4095
rnd "$SRC/files/page" 4096
rnd "$SRC/files/k128" 131072
rnd "$SRC/files/m1plus" $((MIB + 3))
rnd "$SRC/files/m3" $((3 * MIB))
rnd "$SRC/files/sub/deep name" 70000
for i in 0 1 2 3; do rnd "$SRC/bw/b$i" $((16 * MIB)); done
rnd "$SRC/lat/l" "$MIB"
for i in $(seq 0 9); do rnd "$SRC/meta/m$i" 100; done
for i in $(seq 0 7); do rnd "$SRC/par/p$i" 4096; done
for i in $(seq -w 0 199); do rnd "$SRC/bad/b$i" 4096; done
for i in $(seq -w 0 49); do rnd "$SRC/good/g$i" 4096; done
rnd "$SRC/short/s" $((4 * MIB))
FILES=$(cd "$SRC" && find files -type f | sort)
NFILES=$(echo "$FILES" | wc -l)
FILE_BYTES=$(cd "$SRC" && find files -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')

# ---- 1. pass-through, counters, hiding, read-only ----------------------------
echo "1. pass-through and counters"
emu_mount basic --stats-per-file --stats "$TMP/basic.json"
check "root listing equals the source, no .pfsemu" \
  [ "$(ls -A "$M")" = "$(ls -A "$SRC")" ]
check "a recursive scan never sees .pfsemu" \
  [ -z "$(find "$M" -name '.pfsemu*')" ]
check ".pfsemu/stats is readable by path" [ "$(j "$M/.pfsemu/stats" 'd["pid"]')" = "${MNT_PID[$M]}" ]
check "reset answers ok" reset "$M"
ok=1
while IFS= read -r f; do cmp -s "$SRC/$f" "$M/$f" || { ok=0; echo "    differs: $f"; }; done <<<"$FILES"
check "every file reads back identical ($NFILES files, $FILE_BYTES bytes)" [ $ok = 1 ]
js "$M" 'd["totals"]' | sed 's/^/    /'
check "bytes counted = sum of file sizes" [ "$(js "$M" 'd["totals"]["bytes"]')" = "$FILE_BYTES" ]
check "opens counted = files read" [ "$(js "$M" 'd["totals"]["opens"]')" = "$NFILES" ]
check "per-file bytes and opens match every file" "$PY" - "$TMP/live.json" "$SRC" <<'EOF'
import json, os, sys
d = json.load(open(sys.argv[1]))
got = {f["path"]: f for f in d["files"]}
want = {}
for dp, _, names in os.walk(os.path.join(sys.argv[2], "files")):
    for n in names:
        p = os.path.join(dp, n)
        want[os.path.relpath(p, sys.argv[2])] = os.path.getsize(p)
bad = [p for p in want if p not in got or got[p]["bytes"] != want[p] or got[p]["opens"] != 1]
bad += [p for p in got if p not in want]
sys.exit(1 if bad else 0)
EOF
cat "$M/files/m3" >/dev/null
check "a second read of a file counts again (no page cache)" \
  [ "$(js "$M" '[f["bytes"] for f in d["files"] if f["path"] == "files/m3"][0]')" = $((6 * MIB)) ]
check "... and so do the totals" [ "$(js "$M" 'd["totals"]["bytes"]')" = $((FILE_BYTES + 3 * MIB)) ]
reset "$M"
check "reset zeroes totals and the file list" \
  [ "$(js "$M" '(d["totals"]["bytes"], d["totals"]["reads"], len(d["files"]))')" = "(0, 0, 0)" ]
dd if="$M/files/m3" of=/dev/null bs=4M status=none
check "a 4 MiB read() arrives as 1 MiB requests (3 for 3 MiB)" \
  [ "$(js "$M" 'd["totals"]["reads"]')" = 3 ]
reset "$M"
dd if="$M/files/m3" of=/dev/null bs=64k status=none
check "64 KiB reads arrive unchanged (48 for 3 MiB)" [ "$(js "$M" 'd["totals"]["reads"]')" = 48 ]
for op in "touch $M/new" "cp /etc/hostname $M/files/one" "rm $M/files/one" "mkdir $M/d" \
  "mv $M/files/one $M/files/two"; do
  if err=$($op 2>&1); then fail "refused: $op"; else
    check "refused with EROFS: ${op//$M/MNT}" grep -q "Read-only file system" <<<"$err"
  fi
done
LIVE_BYTES=$(js "$M" 'd["totals"]["bytes"]')
emu_umount "$M"
check "fusermount3 -u: --stats written with the final counters" \
  [ "$(j "$TMP/basic.json" 'd["totals"]["bytes"]')" = "$LIVE_BYTES" ]
check "unmounted" [ -z "$(findmnt -rn "$M" || true)" ]

# ---- 2. bandwidth ---------------------------------------------------------------
echo "2. bandwidth 32MB/s, 4 parallel readers x 16 MiB"
emu_mount bw --bandwidth 32MB/s --stats "$TMP/bw.json"
BW_PID=${MNT_PID[$M]}
reset "$M"
t=$(now)
for i in 0 1 2 3; do dd if="$M/bw/b$i" of=/dev/null bs=1M status=none & done
wait
ms=$(ms_since "$t")
rate=$(calc "64 * $MIB / ($ms / 1000) / 1e6")
echo "    64 MiB in $ms ms = $rate MB/s (limit 32 MB/s, ideal $(calc "64 * $MIB / 32e6 * 1000") ms)"
check "took >= 1.8 s" fcmp "$ms" ">=" 1800
check "rate $rate MB/s <= 36.8 MB/s (limit + 15 %)" fcmp "$rate" "<=" 36.8
check "all 64 MiB counted" [ "$(js "$M" 'd["totals"]["bytes"]')" = $((64 * MIB)) ]
kill -TERM "$BW_PID"
for _ in $(seq 1200); do [ -s "$TMP/bw.json" ] && [ -z "$(findmnt -rn "$M" || true)" ] && break; sleep 0.05; done
check "SIGTERM: unmounted and --stats written" \
  [ "$(j "$TMP/bw.json" 'd["totals"]["bytes"]')" = $((64 * MIB)) ]
unset "MNT_PID[$M]"

# ---- 3. latency -------------------------------------------------------------------
echo "3. latency 20 ms per read, 20 ms per metadata op"
emu_mount lat --latency-ms 20 --meta-latency-ms 20
cat "$M/lat/l" >/dev/null # look the file up once: the timing below is reads only
reset "$M"
t=$(now)
dd if="$M/lat/l" of=/dev/null bs=4k count=20 status=none
ms=$(ms_since "$t")
echo "    20 sequential 4 KiB reads: $ms ms"
check "20 reads took >= 20 x 20 ms" fcmp "$ms" ">=" 400
check "20 reads counted" [ "$(js "$M" 'd["totals"]["reads"]')" = 20 ]
t=$(now)
stat "$M"/meta/m{0..9} >/dev/null
ms=$(ms_since "$t")
echo "    10 lookups of new names: $ms ms"
check "10 lookups took >= 10 x 20 ms" fcmp "$ms" ">=" 200
# Lookups in one directory are serialized by the kernel (libfuse 3.14 does not
# negotiate FUSE_PARALLEL_DIROPS; docs/pfsemu.md): look the names up first.
stat "$M"/par/p* >/dev/null
# 8 readers (open + read each) in threads of one process, first one after
# another, then all at once: the sequential run is the yardstick, taken in the
# same conditions, so a busy machine (make test-stress) slows both alike.
read -r seq_ms par_ms < <("$PY" - "$M"/par/p{0..7} <<'EOF'
import os, sys, threading, time
paths = sys.argv[1:]
def one(p):
    fd = os.open(p, os.O_RDONLY)
    os.pread(fd, 4096, 0)
    os.close(fd)
def timed(run):
    for p in paths:
        os.stat(p)  # cached lookups (1 s entry timeout)
    t = time.monotonic()
    run()
    return (time.monotonic() - t) * 1e3
def at_once():
    go = threading.Barrier(len(paths))
    th = [threading.Thread(target=lambda p=p: (go.wait(), one(p))) for p in paths]
    for x in th:
        x.start()
    for x in th:
        x.join()
print("%.1f %.1f" % (timed(lambda: [one(p) for p in paths]), timed(at_once)))
EOF
)
echo "    8 readers (open + read each): one after another $seq_ms ms (8 x 40 ms), all at once $par_ms ms"
check "one after another they are serialized (>= 8 x 40 ms)" fcmp "$seq_ms" ">=" 320
check "8 parallel readers are served concurrently (< half the time one after another)" \
  fcmp "$par_ms" "<" "$(calc "$seq_ms / 2")"
check "several requests were in flight at once" fcmp "$(js "$M" 'd["totals"]["max_inflight_seen"]')" ">" 1
emu_umount "$M"

# ---- 4. max-inflight -----------------------------------------------------------------
echo "4. max-inflight 1, latency 50 ms"
emu_mount inflight --latency-ms 50 --max-inflight 1
stat "$M"/par/p* >/dev/null
t=$(now)
for i in $(seq 0 7); do dd if="$M/par/p$i" of=/dev/null bs=4k status=none & done
wait
ms=$(ms_since "$t")
echo "    8 parallel readers: $ms ms"
check "8 parallel reads took >= 8 x 50 ms" fcmp "$ms" ">=" 400
check "never more than one request in flight" [ "$(js "$M" 'd["totals"]["max_inflight_seen"]')" = 1 ]
emu_umount "$M"

# ---- 5. fault injection ------------------------------------------------------------------
echo "5. faults: rate 0.3, eio+enoent, only bad/"
FOPTS=(--fault-rate 0.3 --fault-kinds "eio,enoent" --fault-path bad/ --fault-seed 42 --stats-per-file)
read_all() { # DIR ERRLOG -> prints the files that failed
  local f
  for f in "$1"/*; do cat "$f" >/dev/null 2>>"$2" || echo "${f##*/}"; done
}
emu_mount faults "${FOPTS[@]}"
failed=$(read_all "$M/bad" "$TMP/bad.err")
nfail=$(grep -c . <<<"$failed" || true)
ok=1
for f in "$SRC"/good/*; do cmp -s "$f" "$M/good/${f##*/}" || ok=0; done
echo "    bad/: $nfail of 200 reads failed; $(js "$M" 'd["totals"]["faults"]')"
check "failures seen by clients = errors_injected" \
  [ "$(js "$M" 'd["totals"]["errors_injected"]')" = "$nfail" ]
check "fault rate near 0.3 (40..80 of 200)" fcmp "$nfail" ">=" 40
check "... upper bound" fcmp "$nfail" "<=" 80
check "both kinds occur: EIO" grep -q "Input/output error" "$TMP/bad.err"
check "both kinds occur: ENOENT" grep -q "No such file or directory" "$TMP/bad.err"
check "good/ files all read correctly" [ $ok = 1 ]
check "faults only in bad/ files" \
  [ "$(js "$M" 'sorted({f["path"].split("/")[0] for f in d["files"] if f["errors_injected"]})')" = "['bad']" ]
emu_umount "$M"
emu_mount faults2 "${FOPTS[@]}"
check "the same --fault-seed fails the same files" \
  [ "$(read_all "$M/bad" /dev/null)" = "$failed" ]
emu_umount "$M"

echo "6. short reads: rate 0.5 on short/"
emu_mount short --fault-rate 0.5 --fault-kinds short --fault-path short/ --fault-seed 7
check "a reader that loops still gets every byte" cmp -s "$SRC/short/s" "$M/short/s"
reset "$M"
# 1 MiB reads into a page-aligned buffer: one request each
nshort=$("$PY" - "$M/short/s" <<'EOF'
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
buf = mmap.mmap(-1, 1 << 20)
print(sum(os.preadv(fd, [buf], 0) < (1 << 20) for _ in range(40)))
EOF
)
echo "    $nshort of 40 single 1 MiB reads were short; $(js "$M" 'd["totals"]["reads"]') requests"
check "every injected short read reached the client" \
  [ "$(js "$M" 'd["totals"]["faults"]["short"]')" = "$nshort" ]
check "short reads at about the rate (8..32 of 40)" fcmp "$nshort" ">=" 8
check "... upper bound" fcmp "$nshort" "<=" 32
emu_umount "$M"

# ---- 8. the RPC model: counts, not speeds ------------------------------------------------
# q MNT NAME FIELD: a field of one queue in the live counters.
q() { js "$1" "[x['$3'] for x in d['queues'] if x['name'] == '$2'][0]"; }
# Page-aligned preads through one open file: PATH then OFFSET:LENGTH...
preads() {
  "$PY" - "$@" <<'EOF'
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
buf = mmap.mmap(-1, 1 << 20)
for a in sys.argv[2:]:
    off, n = (int(x) for x in a.split(":"))
    got = os.preadv(fd, [memoryview(buf)[:n]], off)
    assert got == n, (a, got)
EOF
}

echo "8. RPCs: --rpc-size 256KiB, --ost-inflight 2, latency 5 ms"
emu_mount rpc --rpc-size 256KiB --ost-inflight 2 --latency-ms 5 --stats-per-file
reset "$M"
t=$(now)
dd if="$M/files/m3" of=/dev/null bs=1M status=none
ms=$(ms_since "$t")
echo "    3 MiB in 1 MiB reads: $ms ms; $(js "$M" 'd["queues"]')"
check "3 reads of 1 MiB became 12 RPCs of 256 KiB" \
  [ "$(js "$M" '(d["totals"]["reads"], d["totals"]["rpcs"], d["totals"]["rpc_bytes"])')" = "(3, 12, $((3 * MIB)))" ]
check "... counted per file" \
  [ "$(js "$M" '[(f["rpcs"], f["rpc_bytes"]) for f in d["files"] if f["path"] == "files/m3"][0]')" = "(12, $((3 * MIB)))" ]
check "the OST queue never had more than 2 RPCs in flight, and had 2" [ "$(q "$M" ost0 max_inflight_seen)" = 2 ]
check "... and admitted all 12" [ "$(q "$M" ost0 requests)" = 12 ]
check "2 at a time: 12 RPCs took >= 6 x 5 ms" fcmp "$ms" ">=" 30
reset "$M"
preads "$M/files/m3" 1000:2500 600000:2500 5:100 2000000:70000
check "small reads inside one RPC size: one RPC each, bytes as asked" \
  [ "$(js "$M" '(d["totals"]["rpcs"], d["totals"]["rpc_bytes"], d["totals"]["bytes"])')" = "(4, 75100, 75100)" ]
emu_umount "$M"

echo "   mount-wide bound: --max-inflight 3, --ost-inflight 8, --rpc-size 128KiB"
emu_mount mountq --max-inflight 3 --ost-inflight 8 --rpc-size 128KiB --latency-ms 2
reset "$M"
preads "$M/files/m3" 0:1048576 1048576:1048576
check "a 1 MiB read is 8 RPCs" [ "$(js "$M" 'd["totals"]["rpcs"]')" = 16 ]
check "never more than 3 in flight over the mount, and 3 reached" [ "$(q "$M" mount max_inflight_seen)" = 3 ]
check "... nor in the OST queue behind it" [ "$(js "$M" 'max(x["max_inflight_seen"] for x in d["queues"])')" = 3 ]
check "totals.max_inflight_seen is the mount's" [ "$(js "$M" 'd["totals"]["max_inflight_seen"]')" = 3 ]
emu_umount "$M"

echo "9. readahead: --readahead 8MiB --rpc-size 1MiB"
emu_mount ra --readahead 8MiB --rpc-size 1MiB --latency-ms 2
reset "$M"
dd if="$M/files/m3" of=/dev/null bs=1M status=none
echo "    $(js "$M" '(d["totals"]["reads"], d["totals"]["rpcs"], d["totals"]["readahead"])')"
# read 1: [0,1) on demand; read 2 (sequential): [1,2) and readahead [2,3); read 3: from readahead
check "sequential 1 MiB reads: 3 reads, 3 RPCs, one of them readahead" \
  [ "$(js "$M" '(d["totals"]["reads"], d["totals"]["rpcs"], d["totals"]["readahead"]["rpcs"])')" = "(3, 3, 1)" ]
check "readahead fetched 1 MiB and the third read used it" \
  [ "$(js "$M" '(d["totals"]["readahead"]["bytes"], d["totals"]["readahead"]["hit_bytes"])')" = "($MIB, $MIB)" ]
check "no byte fetched twice or past EOF" [ "$(js "$M" 'd["totals"]["rpc_bytes"]')" = $((3 * MIB)) ]
reset "$M"
preads "$M/files/m3" 0:$MIB $MIB:$MIB 4096:4096
check "a seek drops the window: its unread 1 MiB counts as unused" \
  [ "$(js "$M" '(d["totals"]["rpcs"], d["totals"]["readahead"]["unused_bytes"])')" = "(4, $MIB)" ]
reset "$M"
preads "$M/files/m3" 900000:2500 100000:2500 2500000:2500 102500:2500 1700000:2500 5000:2500
check "random reads get no readahead" \
  [ "$(js "$M" '(d["totals"]["rpcs"], d["totals"]["readahead"]["bytes"])')" = "(6, 0)" ]
emu_umount "$M"

echo "10. stats JSON through libjansson: quotes, backslashes, newlines, non-UTF-8 names"
mkdir -p "$SRC/names"
"$PY" - "$SRC/names" <<'EOF'
import os, sys
for n in [b'q"uote', b'back\\slash', b'new\nline', b'tab\there', b'bad\xffbyte', b'caf\xc3\xa9']:
    with open(os.path.join(sys.argv[1].encode(), n), "wb") as f:
        f.write(b"x" * 10)
EOF
LABEL=$'job "7" \\ x\ny'
emu_mount names --stats-per-file --label "$LABEL" --fault-path $'"\\\n' --fault-rate 0.5 \
  --stats "$TMP/names.json"
for f in "$M"/names/*; do cat "$f" >/dev/null; done
cat "$M/.pfsemu/stats" >"$TMP/names-live.json"
emu_umount "$M"
strict_json() { # FILE LABEL: strict UTF-8 JSON holding the label and every name
  "$PY" - "$1" "$2" <<'EOF'
import json, sys
d = json.loads(open(sys.argv[1], "rb").read().decode("utf-8", errors="strict"))
names = sorted(f["path"] for f in d["files"])
want = sorted(["names/" + n for n in ['q"uote', 'back\\slash', 'new\nline', 'tab\there',
                                      'bad\\xffbyte', 'caf\u00e9']])
assert names == want, names
assert d["label"] == sys.argv[2], d["label"]
assert d["config"]["fault_path"] == '"\\\n', d["config"]["fault_path"]
assert all(f["bytes"] == 10 and f["opens"] == 1 for f in d["files"]), d["files"]
EOF
}
check "the live counters are strict JSON with every name and the label" strict_json "$TMP/names-live.json" "$LABEL"
check "... and so is --stats at unmount" strict_json "$TMP/names.json" "$LABEL"

echo "11. --preset lustre"
emu_mount preset --ost-inflight 3 --preset lustre --readahead 0
check "the preset's numbers, explicit options winning wherever they stand" \
  [ "$(js "$M" 'tuple(d["config"][k] for k in ("preset", "bandwidth_Bps", "latency_ms", "meta_latency_ms", "ost_inflight", "meta_inflight", "rpc_size", "readahead_bytes", "max_inflight"))')" \
  = "('lustre', 2000000000, 2.0, 1.0, 3, 8, $((4 * MIB)), 0, 0)" ]
emu_umount "$M"
emu_mount preset2 --preset=lustre
check "--preset=lustre: 8 per OST, 256 MiB readahead" \
  [ "$(js "$M" '(d["config"]["ost_inflight"], d["config"]["readahead_bytes"])')" = "(8, $((256 * MIB)))" ]
emu_umount "$M"

# ---- 7. start-up errors ------------------------------------------------------------------
echo "7. start-up errors"
expect_err() { # DESCRIPTION PATTERN ARGS...: the emulator fails with PATTERN on stderr
  local what=$1 pat=$2 out rc=0
  shift 2
  out=$("$PFSEMU" "$@" 2>&1) || rc=$?
  if [ $rc -ne 0 ] && grep -q "$pat" <<<"$out"; then pass "$what"; else
    fail "$what (rc=$rc: $out)"
  fi
}
mkdir -p "$TMP/empty" "$TMP/full" "$SRC/inner"
touch "$TMP/full/x"
expect_err "missing SRC_DIR" "source directory" "$TMP/nope" "$TMP/empty" -f
expect_err "mountpoint not empty" "is not empty" "$SRC" "$TMP/full" -f
expect_err "mountpoint missing" "mountpoint" "$SRC" "$TMP/nope" -f
expect_err "mountpoint inside SRC_DIR" "inside the source" "$SRC" "$SRC/inner" -f
expect_err "bad bandwidth" "bad value" "$SRC" "$TMP/empty" --bandwidth fast
expect_err "bad fault kind" "bad value" "$SRC" "$TMP/empty" --fault-kinds eio,lost
expect_err "fault rate > 1" "out of range" "$SRC" "$TMP/empty" --fault-rate 2
expect_err "unknown preset, listing the known ones" "known presets: lustre" "$SRC" "$TMP/empty" --preset gpfs
expect_err "no OSTs" "out of range" "$SRC" "$TMP/empty" --osts 0
if unshare -m true 2>/dev/null; then
  # shellcheck disable=SC2016 # $0 and $@ expand in the inner shell
  out=$(unshare -m sh -c 'mount -t tmpfs none /dev && exec "$0" "$@"' \
    "$PFSEMU" "$SRC" "$TMP/empty" -f 2>&1) && rc=0 || rc=$?
  check "no /dev/fuse: clear error" grep -q "cannot open /dev/fuse" <<<"$out"
fi
check "--help" "$PFSEMU" --help >/dev/null

# Sanitizer builds (BIN=build/asan/bin) report into the emulator logs.
check "no sanitizer report in the emulator logs" \
  bash -c '! grep -l "Sanitizer\|runtime error" "$@"' _ "$TMP"/*.log

echo "test_pfsemu: $NPASS checks passed, $NFAIL failed in $((SECONDS - T0)) s"
[ "$NFAIL" -eq 0 ]
