#!/usr/bin/env bash
# `sluice proxy` before and after a change, side by side in one run: the same quick-mode
# proxy (one listener, one upstream, one worker) from two builds, against one `sluice echo`
# backend, driven in alternating rounds so that both see the same machine. Made for the
# tenancy limits (a proxy-wide replay budget, a write deadline toward clients: ac558b7);
# BEFORE is any other build.
#
#   BEFORE=/path/to/old/sluice e2e/bench/proxy_limits.sh
#   ROUNDS=5 DURATION=10 CONNECTIONS=50 BEFORE=... e2e/bench/proxy_limits.sh
#
# The build before the limits, sharing this checkout's target/ (only the workspace's own
# crates compile; the binary is copied out, and `touch cli/src/main.rs` relinks this one):
#
#   git worktree add /tmp/prelimits 2cd5e4a
#   (cd /tmp/prelimits && CARGO_TARGET_DIR=$PWD/../../work/main/target cargo build --release --bin sluice)
#   cp target/release/sluice /tmp/sluice-prelimits && touch cli/src/main.rs
#
# Per round and build (the proxy pinned to PROXY_CPU, backend and load to LOAD_CPU): HTTP/1.1 keep-alive max req/s (wrk -t1 -c CONNECTIONS), then h2c
# gRPC-shaped max req/s (h2load, 10 clients × 10 streams), each with the proxy's CPU time
# per request (/proc/PID/stat). Prints every round, min / median / max of each, and
# after/before of the medians; and each build's resident memory (VmRSS) before any request
# and idle after the rounds.
set -euo pipefail
cd "$(dirname "$0")/../.."
AFTER=${AFTER:-target/release/sluice}
BEFORE=${BEFORE:?set BEFORE to the sluice binary to compare against}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-50}
# Which loads to run: http1, grpc or both (a BEFORE that speaks only h2c, such as the
# h2 crate's floor, dataplane/examples/h2_floor.rs, takes LOADS=grpc).
LOADS=${LOADS:-http1 grpc}
# The proxies on one core, the backend and the load on the other (as e2e/bench/proxy.sh).
PROXY_CPU=${PROXY_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}

if ! command -v wrk >/dev/null || ! command -v h2load >/dev/null; then
  sudo=(); ((EUID == 0)) || sudo=(sudo)
  echo "installing wrk and nghttp2-client (h2load) with apt-get" >&2
  "${sudo[@]}" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    wrk nghttp2-client >&2
fi
# shellcheck source=e2e/bench/ab_common.sh
source e2e/bench/ab_common.sh

backend=$(port)
env POD_IP=127.0.0.1 ECHO_HTTP_PORT="$backend" ECHO_TCP_PORT="$(port)" \
  taskset -c "$LOAD_CPU" "$AFTER" echo \
  >"$work/echo.log" 2>&1 &
pids+=($!)
wait_line "$work/echo.log" '^echo: http '

declare -A ADDR PID
for build in before after; do
  bin=$([[ $build == before ]] && echo "$BEFORE" || echo "$AFTER")
  p=$(port)
  taskset -c "$PROXY_CPU" "$bin" proxy --listen "127.0.0.1:$p" --upstream "127.0.0.1:$backend" --protocol http \
    --workers 1 --admin "127.0.0.1:$(port)" >"$work/$build.log" 2>&1 &
  pids+=($!)
  PID[$build]=$!
  wait_line "$work/$build.log" '^proxy: listening on '
  ADDR[$build]=127.0.0.1:$p
done
printf '\0\0\0\0\0' >"$work/grpc-body"
# Resident memory before any request (a second after the listener is up) and, after the
# rounds, once the proxy has been quiet for a second: what it keeps of its traffic.
sleep 1
declare -A RSS0
for build in before after; do RSS0[$build]=$(rss_kib "${PID[$build]}"); done


h1() {
  [[ " $LOADS " == *" http1 "* ]] || { echo 0; return; }
  taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" "http://$1/" | awk '/^Requests\/sec:/ { print $2 }'; }
grpc() {
  [[ " $LOADS " == *" grpc "* ]] || { echo 0; return; }
  taskset -c "$LOAD_CPU" h2load -D "$DURATION" -c 10 -m 10 -d "$work/grpc-body" -H 'content-type: application/grpc' \
    -H 'te: trailers' "http://$1/sluice.Echo/Echo" |
    awk '/^finished in/ { gsub(",", ""); for (i = 1; i <= NF; i++) if ($(i+1) == "req/s") print $i }'
}

: >"$work/rows"
for r in $(seq "$ROUNDS"); do
  # Alternate which build goes first, so neither always runs on a warmer machine.
  order=(before after)
  ((r % 2 == 0)) && order=(after before)
  for build in "${order[@]}"; do
    a=${ADDR[$build]} pid=${PID[$build]}
    c0=$(cpu_us "$pid")
    v1=$(h1 "$a")
    c1=$(cpu_us "$pid")
    v2=$(grpc "$a")
    c2=$(cpu_us "$pid")
    # CPU per request: steadier than req/s when the load side shares the machine.
    u1=$(awk -v c=$((c1 - c0)) -v r="$v1" -v d="$DURATION" 'BEGIN { printf "%.2f", (r > 0 ? c / (r * d) : 0) }')
    u2=$(awk -v c=$((c2 - c1)) -v r="$v2" -v d="$DURATION" 'BEGIN { printf "%.2f", (r > 0 ? c / (r * d) : 0) }')
    echo "$build $v1 $v2 $u1 $u2" >>"$work/rows"
    echo "round $r $build: http1 ${v1} req/s ${u1} µs CPU/req, grpc ${v2} req/s ${u2} µs CPU/req"
  done
done

sleep 1
for build in before after; do
  echo "rss $build ${RSS0[$build]} $(rss_kib "${PID[$build]}")" >>"$work/rss"
done

python3 - "$work/rows" "$work/rss" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
rss = {l.split()[1]: [int(v) / 1024 for v in l.split()[2:]] for l in open(sys.argv[2])}
def col(build, i):
    return sorted(float(r[i]) for r in rows if r[0] == build)
print()
print("| load | before: min / median / max | after: min / median / max | after/before (medians) |")
print("|---|---|---|---|")
for i, name in [(1, "HTTP/1.1 max req/s"), (2, "h2c gRPC max req/s"),
                (3, "HTTP/1.1 proxy CPU µs per request"), (4, "h2c gRPC proxy CPU µs per request")]:
    b, a = col("before", i), col("after", i)
    if statistics.median(b) == 0 or statistics.median(a) == 0:
        continue  # a load not run (LOADS)
    p = 0 if i <= 2 else 2
    fmt = lambda v: f"{v[0]:,.{p}f} / {statistics.median(v):,.{p}f} / {v[-1]:,.{p}f}"
    print(f"| {name} | {fmt(b)} | {fmt(a)} | {statistics.median(a) / statistics.median(b):.3f} |")
for i, name in [(0, "RSS MiB before any request"), (1, "RSS MiB idle after the rounds")]:
    b, a = rss["before"][i], rss["after"][i]
    print(f"| {name} | {b:.1f} | {a:.1f} | {a / b:.3f} |")
PY
