#!/bin/sh
# OpGate's fast path (common/op_gate.cpp) must not execute a locked instruction: a `lock`
# prefix or an `xchg` with memory (locked by definition) waits for the thread's earlier
# stores and loads. Disassembles, in LIB (libpmhash.a), OpGate::exit and every out-of-line
# OpGate::add (no `lock`, no memory `xchg`) and OpGate::enter (no memory `xchg`: its slow
# path takes the gate with a `lock cmpxchg`). Skipped (77) where objdump is missing, the
# machine is not x86-64, or under TSan (its atomics are calls, never an `xchg`).
# Optimized builds only (CMakeLists.txt): at -O0 every std::atomic store is an `xchg`.
# A regression test: the counter's store once took its memory order as a run-time
# argument, which GCC compiles as seq_cst, an `xchg`.
lib=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
[ "$(uname -m)" = x86_64 ] || exit 77
command -v objdump >/dev/null && command -v nm >/dev/null && command -v c++filt >/dev/null ||
  exit 77
# Only the gate's object file, when LIB is an archive (disassembling all of it is slow).
member=$(ar t "$lib" 2>/dev/null | grep '^op_gate\.' | head -n 1)
if [ -n "$member" ]; then
  dir=$(mktemp -d) && trap 'rm -rf "$dir"' EXIT
  (cd "$dir" && ar x "$lib" "$member") && lib="$dir/$member"
fi
nm -u "$lib" 2>/dev/null | grep -q __tsan_ && exit 77
found=0
for m in $(nm --defined-only "$lib" 2>/dev/null | awk '$2 ~ /^[TtWw]$/ {print $3}' | sort -u); do
  name=$(echo "$m" | c++filt)
  case "$name" in
  "pmhash::common::OpGate::exit("* | *"OpGate::add<"* | *"OpGate::add("*)
    bad='[[:space:]](lock|xchg)[[:space:]]'
    ;;
  "pmhash::common::OpGate::enter("*)
    bad='[[:space:]]xchg[[:space:]]+[^[:space:]]*\('
    ;;
  *) continue ;;
  esac
  found=$((found + 1))
  body=$(objdump -d --no-show-raw-insn --disassemble="$m" "$lib")
  # An objdump without --disassemble=SYM (binutils < 2.32) prints no body: not a pass.
  echo "$body" | grep -Eq '[[:space:]](ret|jmp)' || { echo "no code for $name"; exit 1; }
  if echo "$body" | grep -Eq "$bad"; then
    echo "locked instruction in $name:"
    echo "$body" | grep -E "$bad"
    exit 1
  fi
  echo "ok: $name"
done
[ "$found" -ge 2 ] || { echo "OpGate::exit and enter not found in $lib"; exit 1; }
