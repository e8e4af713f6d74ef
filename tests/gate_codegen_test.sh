#!/bin/sh
# OpGate's fast path (common/op_gate.cpp) must not execute a locked instruction: a `lock`
# prefix or an `xchg` (locked by definition) waits for the thread's earlier stores and
# loads, so one call's misses and flushes cannot overlap the next call's. Disassembles
# OpGate::exit and every out-of-line OpGate::add in LIB (libpmhash.a) and fails if one
# holds either; skipped (77) where objdump is missing or the machine is not x86-64.
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
found=0
for m in $(nm --defined-only "$lib" 2>/dev/null | awk '$2 ~ /^[TtWw]$/ {print $3}' | sort -u); do
  case "$(echo "$m" | c++filt)" in
  "pmhash::common::OpGate::exit("* | "pmhash::common::OpGate::add"*) ;;
  *) continue ;;
  esac
  found=$((found + 1))
  body=$(objdump -d --no-show-raw-insn --disassemble="$m" "$lib")
  if echo "$body" | grep -Eq '[[:space:]](lock|xchg)[[:space:]]'; then
    echo "locked instruction in $(echo "$m" | c++filt):"
    echo "$body" | grep -E '[[:space:]](lock|xchg)[[:space:]]'
    exit 1
  fi
  echo "ok: $(echo "$m" | c++filt)"
done
[ "$found" -gt 0 ] || { echo "OpGate::exit not found in $lib"; exit 1; }
