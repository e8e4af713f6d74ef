#!/bin/bash
# Alternates builds of pmhash-bench round by round, so that a host whose speed drifts slows
# every build alike: round i runs each binary once with --seed i, in the order given.
#   scripts/alternate_builds.sh OUT ROUNDS "BENCH ARGS" BIN...
# writes OUT-<build number>-<round>.json and prints one line per run (Mops/s and
# miss-equivalents per row). BENCH ARGS are added to the issue 19 setup below.
set -euo pipefail
out=$1 rounds=$2 extra=$3
shift 3
for i in $(seq 1 "$rounds"); do
  j=0
  for bin in "$@"; do
    j=$((j + 1))
    # shellcheck disable=SC2086  # extra holds several arguments
    "$bin" --schemes lineht --variants pm --threads 2 --keys 20000000 --ops 20000000 \
      --capacity-hint 20000000 --limit --no-recovery --seed "$i" --json "$out-$j-$i.json" \
      $extra >/dev/null 2>&1
    python3 - "$out-$j-$i.json" "$j" "$i" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], sys.argv[3], " ".join("%s=%.3f(%.3f)" % (r["workload"], r["mops"], r.get("miss_equiv", 0)) for r in d["rows"]))
PY
  done
done
