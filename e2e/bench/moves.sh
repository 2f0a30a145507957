#!/usr/bin/env bash
# Moves and drains under load, from `sluice demo` (docs/moves.md): ROUNDS runs, each with
# 4 consumers at RATE requests/s (HTTP/1.1, HTTP/2, gRPC to `shop`, HTTP/1.1 to `cart`)
# and TCP streams, through west's clusterset VIPs. Per run: p99 steady (on east) against
# p99 during the move and during the drain (the ratio), seconds from the label change until
# east left and until all of shop's answers came from west, seconds for the drain of east
# (one namespace, cart), failed requests and broken streams. Then min/median/max.
#
#   e2e/bench/moves.sh            # needs target/release/sluice; ROUNDS=5 RATE=100
set -euo pipefail
cd "$(dirname "$0")/../.."
SLUICE=${SLUICE:-target/release/sluice}
ROUNDS=${ROUNDS:-5}
RATE=${RATE:-100}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for i in $(seq "$ROUNDS"); do
  if ! SLUICE_LOG=warn "$SLUICE" demo --state "$work/demo" --rate "$RATE" > "$work/out.$i" 2>&1; then
    echo "round $i: the demo failed:"; tail -20 "$work/out.$i"; exit 1
  fi
  python3 - "$work/demo/demo.json" >> "$work/rows" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = {x["name"]: x for x in r["phases"]}
steady = p["steady on east"]["p99Ms"]
f = r["facts"]
print(steady, p["move shop to west"]["p99Ms"], p["drain east"]["p99Ms"],
      f["moveSeconds"], f["shopAllOnWestAfterSeconds"], f["drainSeconds"],
      r["requests"], r["failed"], r["streams"]["broken"])
PY
  echo "round $i: $(tail -1 "$work/rows")"
done

python3 - "$work/rows" <<'PY'
import sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
def stat(i, fmt="%.2f"):
    v = sorted(r[i] for r in rows)
    return ("min " + fmt + "  median " + fmt + "  max " + fmt) % (v[0], v[(len(v) - 1) // 2], v[-1])
print("rounds:", len(rows))
print("p99 steady on east (ms):        ", stat(0))
print("p99 during the move (ms):       ", stat(1))
print("p99 during the drain (ms):      ", stat(2))
ratio = sorted(r[1] / r[0] for r in rows)
print("p99 move / steady:               min %.2f  median %.2f  max %.2f" % (ratio[0], ratio[(len(ratio) - 1) // 2], ratio[-1]))
print("label change -> east gone (s):  ", stat(3))
print("label change -> 100% on west (s):", stat(4, "%.0f"))
print("drain of east, 1 namespace (s): ", stat(5))
print("requests: %d in all, failed: %d, broken streams: %d" % (
    sum(r[6] for r in rows), sum(r[7] for r in rows), sum(r[8] for r in rows)))
PY
