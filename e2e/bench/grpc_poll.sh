#!/usr/bin/env bash
# gRPC p99 at a fixed rate with polling for due responses (the default) against sleeping
# (`--poll-upstream-us 0`), one build, paired rounds: two quick-mode proxies (one worker
# each, CPU 1) in front of one `sluice echo` (CPU 0), loaded in turn by h2load on CPU 0
# (50 connections x 100 req/s, one stream each, gRPC-shaped unary calls). Prints each
# round's p99 of both (from h2load's per-request log) and poll/sleep.
# e2e/bench/busy-poll.sh is the HTTP/1.1 counterpart, beside HAProxy.
#
#   ROUNDS=8 D=5 e2e/bench/grpc_poll.sh       # after cargo build --release
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=e2e/bench/ab_common.sh
source e2e/bench/ab_common.sh
BIN=${BIN:-target/release/sluice}; ROUNDS=${ROUNDS:-8}; D=${D:-5}
backend=$(port)
env POD_IP=127.0.0.1 ECHO_HTTP_PORT="$backend" ECHO_TCP_PORT="$(port)" taskset -c 0 "$BIN" echo >"$work/echo.log" 2>&1 &
pids+=($!); wait_line "$work/echo.log" '^echo: http '
declare -A ADDR
for v in sleep poll; do
  p=$(port); flags=(); [[ $v == sleep ]] && flags=(--poll-upstream-us 0)
  taskset -c 1 "$BIN" proxy --listen "127.0.0.1:$p" --upstream "127.0.0.1:$backend" --protocol http --workers 1 --admin "127.0.0.1:$(port)" "${flags[@]}" >"$work/$v.log" 2>&1 &
  pids+=($!); wait_line "$work/$v.log" '^proxy: listening on '; ADDR[$v]=127.0.0.1:$p
done
printf '\0\0\0\0\0' >"$work/body"
run() { rm -f "$work/lat"; taskset -c 0 h2load -D "$D" -c 50 -m 1 --rps 100 -d "$work/body" -H 'content-type: application/grpc' -H 'te: trailers' --log-file "$work/lat" "http://$1/sluice.Echo/Echo" >/dev/null 2>&1
  sort -n -k3 "$work/lat" | awk '{a[NR]=$3} END {printf "%.3f %d\n", a[int(NR*0.99)]/1000, NR}'; }
for a in sleep poll; do run "${ADDR[$a]}" >/dev/null; done  # warm-up
for r in $(seq "$ROUNDS"); do
  order=(sleep poll); ((r % 2 == 0)) && order=(poll sleep)
  line="round $r:"
  declare -A P
  for v in "${order[@]}"; do read -r p n < <(run "${ADDR[$v]}"); P[$v]=$p; line+=" $v p99 ${p} ms ($n req)"; done
  echo "$line ratio poll/sleep $(awk -v a="${P[poll]}" -v b="${P[sleep]}" 'BEGIN{printf "%.2f", a/b}')"
done
