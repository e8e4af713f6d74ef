#!/bin/bash
# LineHT's load growing from empty (no capacity hint) against the pre-sized load, release
# builds alternated round by round (docs/RESULTS.md "Issue 19 after session 15").
#   scripts/lineht_growing.sh KEYS ROUNDS BENCH... [-- extra pmhash-bench args, e.g. --prefault]
# Pools go to $POOL_DIR (default /mnt/pmhuge, a huge=always tmpfs: docs/bench.md). Prints per
# binary and mode the median load Mops/s, [min max] and every run.
set -euo pipefail
keys=$1 rounds=$2
shift 2
bins=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do bins+=("$1"); shift; done
[ $# -gt 0 ] && shift
dir=${POOL_DIR:-/mnt/pmhuge}
for r in $(seq "$rounds"); do
  for b in "${bins[@]}"; do
    for mode in growing pre-sized; do
      hint=()
      [ $mode = pre-sized ] && hint=(--capacity-hint "$keys")
      "$b" --schemes lineht --variants pm --threads 2 --keys "$keys" --ops 1000 \
        --workloads read --no-recovery --pool-dir "$dir" --seed "$r" "${hint[@]}" "$@" 2>&1 |
        awk -v b="$b" -v m=$mode '$1 == "lineht" && $5 == "load" {print b, m, $6}'
    done
  done
done | python3 -c '
import statistics, sys
runs = {}
for line in sys.stdin:
    b, m, v = line.split()
    runs.setdefault((b, m), []).append(float(v.split("±")[0]))
for (b, m), x in sorted(runs.items()):
    print(f"{b} {m}: median {statistics.median(x):.3f} [{min(x):.3f} {max(x):.3f}] {x}")
'
