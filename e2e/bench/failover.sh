#!/usr/bin/env bash
# Failover after a whole cluster is killed (docs/moves.md): ROUNDS runs of the end-to-end
# test `a_killed_cluster_costs_no_idempotent_request_and_its_workloads_move`
# (cli/tests/failures.rs): an app spread over east and west, 100 HTTP/1.1 and 100 HTTP/2
# GETs a second through west's clusterset VIP, every process of east SIGKILLed. Per run:
# ms until west's dataplane stopped sending to east (its gateway marked down), ms until
# east's endpoints left west's imports (the MCS lease), requests answered and failed. Then
# min/median/max.
#
#   e2e/bench/failover.sh           # ROUNDS=5
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for i in $(seq "$ROUNDS"); do
  cargo test --release --workspace --test end_to_end failures::a_killed_cluster -- --nocapture \
    > "$work/out.$i" 2>&1 || { echo "round $i failed:"; tail -30 "$work/out.$i"; exit 1; }
  down=$(sed -n 's/.*stopped sending to it after \([0-9]*\) ms.*/\1/p' "$work/out.$i")
  left=$(sed -n "s/.*left west's imports within \([0-9]*\) ms.*/\1/p" "$work/out.$i")
  ok=$(sed -n 's/.*while east died: \([0-9]*\) ok, \([0-9]*\) failed.*/\1/p' "$work/out.$i" | awk '{s+=$1} END {print s+0}')
  failed=$(sed -n 's/.*while east died: \([0-9]*\) ok, \([0-9]*\) failed.*/\2/p' "$work/out.$i" | awk '{s+=$1} END {print s+0}')
  echo "$down $left $ok $failed" >> "$work/rows"
  echo "round $i: gateway down after ${down} ms, imports without east after ${left} ms, ${ok} ok, ${failed} failed"
done
python3 - "$work/rows" <<'PY'
import sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
def stat(i):
    v = sorted(r[i] for r in rows)
    return "min %.0f  median %.0f  max %.0f" % (v[0], v[(len(v) - 1) // 2], v[-1])
print("rounds:", len(rows))
print("kill -> west's dataplane stops sending to east (ms):", stat(0))
print("kill -> east's endpoints out of west's imports (ms): ", stat(1))
print("requests: %d answered, %d failed" % (sum(r[2] for r in rows), sum(r[3] for r in rows)))
PY
