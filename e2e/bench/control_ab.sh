#!/usr/bin/env bash
# The API server's control benchmark from two builds, side by side in one run: each
# build's own `cargo bench -p sluice --bench control` binary (which starts that build's
# `sluice control`) in alternating rounds (ABBA), so both see the same machine. Made for
# issue 36's create p99: the server before placement ran in it against this one.
#
#   BEFORE=/path/to/old/control-bench e2e/bench/control_ab.sh
#   ROUNDS=6 OPS=4000 BEFORE=... e2e/bench/control_ab.sh
#
# The build before placement ran in `sluice control` (c45df01, 2026-11-24), in its own
# target directory (its dependency versions differ; about 13 minutes on 2 cores):
#
#   git worktree add /work/old c45df01
#   (cd /work/old && CARGO_TARGET_DIR=/work/old-target cargo bench -p sluice --bench control --no-run)
#   BEFORE=$(ls -t /work/old-target/release/deps/control-* | grep -v '\.d$' | head -1) e2e/bench/control_ab.sh
#
# AFTER defaults to this checkout's bench binary (built here if missing). Each round runs
# OPS sequential creates and gets on a server with CLUSTERS logical clusters (the scale
# part, which reports memory, is kept small: the latency figures come first). Prints every
# round, min / median / max of each figure per build, and after/before of the medians.
set -euo pipefail
cd "$(dirname "$0")/../.."
BEFORE=${BEFORE:?set BEFORE to the control bench binary of the build to compare against}
ROUNDS=${ROUNDS:-4}
OPS=${OPS:-2000}
CLUSTERS=${CLUSTERS:-10}
if [[ -z ${AFTER:-} ]]; then
  AFTER=$(cargo bench -p sluice --bench control --no-run 2>&1 |
    sed -n 's/.*Executable .*(\(.*\))$/\1/p' | tail -1)
fi
[[ -x $AFTER && -x $BEFORE ]] || { echo "no bench binary: AFTER=$AFTER BEFORE=$BEFORE" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT

echo "control bench, before: $BEFORE"
echo "               after:  $AFTER"
echo "rounds=$ROUNDS ops=$OPS clusters=$CLUSTERS, $(nproc) cores, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-7s %12s %12s %10s %10s\n' round build "create p50" "create p99" "get p50" "get p99"
for r in $(seq 1 "$ROUNDS"); do
  order=(before after)
  ((r % 2)) || order=(after before)
  for build in "${order[@]}"; do
    bin=$BEFORE
    [[ $build == after ]] && bin=$AFTER
    res=$(SLUICE_BENCH_CLUSTERS=$CLUSTERS SLUICE_BENCH_OPS=$OPS "$bin" --bench 2>&1)
    create=$(awk '/^create \(sequential\)/ {print $4, $7}' <<<"$res")
    get=$(awk '/^get  / {print $3, $6}' <<<"$res")
    [[ -n $create && -n $get ]] || { echo "round $r $build: no figures in its output:"; echo "$res"; exit 1; }
    # shellcheck disable=SC2086
    printf '%-6s %-7s %12s %12s %10s %10s\n' "$r" "$build" $create $get
    echo "$build $create $get" >>"$out"
  done
done

python3 - "$out" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
names = ["create p50", "create p99", "get p50", "get p99"]
med = {}
print()
print(f"{'figure (ms)':<12} {'build':<7} {'min':>8} {'median':>8} {'max':>8}")
for i, name in enumerate(names):
    for build in ("before", "after"):
        v = sorted(float(r[i + 1]) for r in rows if r[0] == build)
        med[(build, name)] = statistics.median(v)
        print(f"{name:<12} {build:<7} {v[0]:8.3f} {med[(build, name)]:8.3f} {v[-1]:8.3f}")
print()
for name in names:
    print(f"{name:<12} after/before of the medians: {med[('after', name)] / med[('before', name)]:.2f}x")
p99 = med[("after", "create p99")]
print(f"TARGET create p99 (issue 36) <= 1 ms: after {p99:.3f} ms ({1 / p99:.2f}x); "
      f"before {med[('before', 'create p99')]:.3f} ms on the same machine")
EOF
