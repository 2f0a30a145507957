#!/usr/bin/env bash
# Cross-cluster TCP bulk through two builds' tunnels, side by side in one run: for each
# build a pair of `sluice proxy --config --workers 1` (proxy A, whose service's endpoint is
# reached `via: b`, and gateway B, which exports it) over TRANSPORT (h2: mTLS TCP + HTTP/2
# CONNECT; quic), and iperf3 through A in alternating rounds, so that both see the same
# machine. The pairs are pinned to PROXY_CPU, iperf3 to LOAD_CPU (as e2e/bench/proxy.sh's
# tunnel phase, whose Envoy pair gives the issue's ratio).
#
#   BEFORE=/path/to/old/sluice e2e/bench/tunnel_ab.sh
#   TRANSPORT=quic ROUNDS=7 DURATION=5 BEFORE=... e2e/bench/tunnel_ab.sh
#
# Per round and build: Gbit/s (iperf3 receiver) and the pair's CPU time per GiB carried
# (/proc/PID/stat of both processes). Prints every round, min / median / max of each, and
# after/before of the medians.
set -euo pipefail
cd "$(dirname "$0")/../.."
AFTER=${AFTER:-target/release/sluice}
BEFORE=${BEFORE:?set BEFORE to the sluice binary to compare against}
TRANSPORT=${TRANSPORT:-h2}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5}
PROXY_CPU=${PROXY_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}

if ! command -v iperf3 >/dev/null || ! command -v jq >/dev/null; then
  sudo=(); ((EUID == 0)) || sudo=(sudo)
  echo "installing iperf3 and jq with apt-get" >&2
  "${sudo[@]}" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    iperf3 jq >&2
fi
# shellcheck source=e2e/bench/ab_common.sh
source e2e/bench/ab_common.sh

"$AFTER" tunnel certs --clusterset bench --clusters a,b --out "$work/certs" >/dev/null
backend=$(port)
taskset -c "$LOAD_CPU" iperf3 -s -p "$backend" >"$work/iperf3-server.log" 2>&1 &
pids+=($!)

declare -A ADDR PIDS
for build in before after; do
  bin=$([[ $build == before ]] && echo "$BEFORE" || echo "$AFTER")
  gw=$(port) a_port=$(port) a_admin=$(port)
  cat >"$work/$build-b.yaml" <<YAML
services:
- name: web
  listen: 127.0.0.1:$(port)
  protocol: tcp
  exported: true
  endpoints:
  - address: 127.0.0.1:$backend
tunnel:
  cert: $work/certs/b.crt
  key: $work/certs/b.key
  trustBundle: [$work/certs/ca.crt]
  gateway: 127.0.0.1:$gw
YAML
  cat >"$work/$build-a.yaml" <<YAML
services:
- name: web
  listen: 127.0.0.1:$a_port
  protocol: tcp
  endpoints:
  - address: 127.0.0.1:$backend
    cluster: b
    via: b
tunnel:
  cert: $work/certs/a.crt
  key: $work/certs/a.key
  trustBundle: [$work/certs/ca.crt]
  peers:
  - cluster: b
    address: 127.0.0.1:$gw
    transport: $TRANSPORT
YAML
  taskset -c "$PROXY_CPU" "$bin" proxy --config "$work/$build-b.yaml" --workers 1 \
    --admin "127.0.0.1:$(port)" >"$work/$build-b.log" 2>&1 &
  pids+=($!)
  b_pid=$!
  wait_line "$work/$build-b.log" '^proxy: listening on '
  taskset -c "$PROXY_CPU" "$bin" proxy --config "$work/$build-a.yaml" --workers 1 \
    --admin "127.0.0.1:$a_admin" >"$work/$build-a.log" 2>&1 &
  pids+=($!)
  PIDS[$build]="$! $b_pid"
  wait_line "$work/$build-a.log" '^proxy: listening on '
  for _ in $(seq 300); do
    curl -fsS "http://127.0.0.1:$a_admin/config_dump" 2>/dev/null |
      jq -e '.tunnels.peers | length > 0 and all(.up)' >/dev/null 2>&1 && break
    sleep 0.1
  done
  ADDR[$build]=$a_port
done

: >"$work/rows"
for r in $(seq "$ROUNDS"); do
  # Alternate which build goes first, so neither always runs on a warmer machine.
  order=(before after)
  ((r % 2 == 0)) && order=(after before)
  for build in "${order[@]}"; do
    # shellcheck disable=SC2086
    c0=$(cpu_us ${PIDS[$build]})
    out=$(taskset -c "$LOAD_CPU" iperf3 -c 127.0.0.1 -p "${ADDR[$build]}" -t "$DURATION" -J)
    # shellcheck disable=SC2086
    c1=$(cpu_us ${PIDS[$build]})
    bits=$(jq '.end.sum_received.bits_per_second' <<<"$out")
    bytes=$(jq '.end.sum_received.bytes' <<<"$out")
    gbit=$(awk -v b="$bits" 'BEGIN { printf "%.3f", b / 1e9 }')
    # The pair's CPU seconds per GiB carried.
    s_gib=$(awk -v c=$((c1 - c0)) -v b="$bytes" 'BEGIN { printf "%.3f", (c / 1e6) / (b / 2^30) }')
    echo "$build $gbit $s_gib" >>"$work/rows"
    echo "round $r $build: $gbit Gbit/s, $s_gib CPU s/GiB ($TRANSPORT)"
  done
done

python3 - "$work/rows" "$TRANSPORT" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def col(build, i):
    return sorted(float(r[i]) for r in rows if r[0] == build)
print()
print(f"| {sys.argv[2]} tunnel, TCP bulk | before: min / median / max | after: min / median / max | after/before (medians) |")
print("|---|---|---|---|")
for i, name in [(1, "Gbit/s (iperf3)"), (2, "pair CPU s per GiB")]:
    b, a = col("before", i), col("after", i)
    fmt = lambda v: f"{v[0]:.3f} / {statistics.median(v):.3f} / {v[-1]:.3f}"
    print(f"| {name} | {fmt(b)} | {fmt(a)} | {statistics.median(a) / statistics.median(b):.3f} |")
PY
