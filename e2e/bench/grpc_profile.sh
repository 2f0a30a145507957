#!/usr/bin/env bash
# Where a quick-mode `sluice proxy` spends its CPU under the gRPC-shaped load of
# e2e/bench/proxy_limits.sh: the proxy (one worker) on CPU 1, `sluice echo` and h2load
# (10 connections × 10 streams) on CPU 0, `perf record -g` on the proxy for PROFILE
# seconds while the load runs, then the proxy's CPU per request over a separate run of
# DURATION seconds, and the report's top symbols grouped by where they come from.
#
#   e2e/bench/grpc_profile.sh                      # target/release/sluice
#   SLUICE=/tmp/sluice-after OUT=/tmp/after.data e2e/bench/grpc_profile.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
SLUICE=${SLUICE:-target/release/sluice}
OUT=${OUT:-/tmp/sluice-grpc.perf.data}
PROFILE=${PROFILE:-2}
DURATION=${DURATION:-5}
command -v perf >/dev/null || { echo "perf is needed (Debian: linux-perf)" >&2; exit 1; }
command -v h2load >/dev/null || { echo "h2load is needed (Debian: nghttp2-client)" >&2; exit 1; }
# shellcheck source=e2e/bench/ab_common.sh
source e2e/bench/ab_common.sh

backend=$(port)
env POD_IP=127.0.0.1 ECHO_HTTP_PORT="$backend" ECHO_TCP_PORT="$(port)" \
  taskset -c 0 "$SLUICE" echo >"$work/echo.log" 2>&1 &
pids+=($!)
wait_line "$work/echo.log" '^echo: http '
listen=$(port)
taskset -c 1 "$SLUICE" proxy --listen "127.0.0.1:$listen" --upstream "127.0.0.1:$backend" \
  --protocol http --workers 1 --admin "127.0.0.1:$(port)" >"$work/proxy.log" 2>&1 &
proxy=$!
pids+=("$proxy")
sleep 0.5
printf '\0\0\0\0\1A' >"$work/body"
load() { # SECONDS
  taskset -c 0 h2load -D "$1" -c 10 -m 10 -t 1 -d "$work/body" \
    -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://127.0.0.1:$listen/echo.Echo/Say"
}
load $((PROFILE + 1)) >/dev/null 2>&1 &
pids+=($!)
sleep 0.5
perf record -q ${CALLGRAPH:--g} -p "$proxy" -o "$OUT" -- sleep "$PROFILE" 2>/dev/null
wait "${pids[-1]}" 2>/dev/null || true
before=$(cpu_us "$proxy")
done_=$(load "$DURATION" 2>&1 | awk '/^requests:/ { print $8 }')
after=$(cpu_us "$proxy")
echo "requests done: $done_, proxy CPU µs per request: $(awk -v c=$((after - before)) -v n="$done_" 'BEGIN { printf "%.2f", c / n }')"
echo "profile: $OUT; its self time by origin (% of the proxy's samples):"
perf report -i "$OUT" --no-children --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep '%' |
  awk '{ p = $1; sub("%", "", p); $1 = ""; s = $0; k = "other"
    if (s ~ /\[k\]/) k = "kernel"
    else if (s ~ /h2::/) k = "h2 crate"
    else if (s ~ /http2::|h2_server|h2_recv/) k = "own HTTP/2"
    else if (s ~ /huffman/) k = "huffman"
    else if (s ~ /mi_|malloc|free/) k = "allocation"
    else if (s ~ /memmove|memcpy|memcmp|memset/) k = "memory copies"
    else if (s ~ /tokio/) k = "tokio"
    else if (s ~ /hyper|http::|http_body/) k = "hyper, http types"
    else if (s ~ /sluice/) k = "sluice, other"
    t[k] += p }
    END { for (k in t) printf "  %6.2f  %s\n", t[k], k }' | sort -nr
