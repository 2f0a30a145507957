#!/usr/bin/env bash
# Busy polling against sleeping, for sluice and HAProxy, at a fixed HTTP/1.1 rate.
#
#   e2e/bench/busy-poll.sh                     # after cargo build --release
#   ROUNDS=6 DURATION=10 WINDOW_US=1000 e2e/bench/busy-poll.sh
#   # polling for due responses (the default) against none, beside HAProxy:
#   RUN="sluice sluice-bp haproxy" SLUICE_FLAGS="--poll-upstream-us 0" BP_FLAGS= e2e/bench/busy-poll.sh
#
# Four columns, each one worker pinned to CPU PROXY_CPU in front of nginx: sluice (its
# defaults, or SLUICE_FLAGS), sluice-bp (BP_FLAGS: --busy-poll-us WINDOW_US unless set),
# HAProxy (nbthread 1), HAProxy with `busy-polling`.
# HAProxy's busy polling never sleeps, so it would take the CPU from whatever shares it:
# unlike proxy.sh, each proxy runs alone, started before its run and stopped after it.
# Load: h2load --h1, RATE req/s from RATE/100 paced connections (as proxy.sh's fixed-rate
# run), ROUNDS interleaved rounds (odd rounds in column order, even ones reversed).
# Printed per column: p50 and p99 (median over the rounds), p99 over all rounds' requests
# pooled, and the proxy's CPU in % of a core; ratios of both sluice columns to HAProxy,
# and of the polling ones.
#
# Why: on a VM whose host does not halt-poll for the guest, a vCPU that went idle takes
# long to wake for the next packet, and that wake-up, not the proxy's work, makes most
# of a proxy's p99 at a modest rate (docs/benchmarks.md).
#
# Needs nginx, haproxy, h2load (nghttp2-client), taskset; proxy.sh installs them.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SLUICE=${SLUICE:-$ROOT/target/release/sluice}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-4}
RATE=${RATE:-5000}
WINDOW_US=${WINDOW_US:-1000}
SLUICE_FLAGS=${SLUICE_FLAGS:-}
BP_FLAGS=${BP_FLAGS---busy-poll-us $WINDOW_US}
PROXY_CPU=${PROXY_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
# RUN: the columns to run, of: sluice sluice-bp haproxy haproxy-bp.
read -ra COLUMNS_RUN <<<"${RUN:-sluice sluice-bp haproxy haproxy-bp}"

log() { echo "busy-poll-bench: $*" >&2; }
die() { log "$*"; exit 1; }

for t in nginx haproxy h2load taskset curl; do
    command -v "$t" >/dev/null || die "$t is missing (e2e/bench/proxy.sh installs it)"
done
[[ -x $SLUICE ]] || die "$SLUICE not found: cargo build --release"
"$SLUICE" proxy --help | grep -q -- --poll-upstream-us || die "$SLUICE has no --poll-upstream-us: rebuild it"
(($(nproc) >= 2)) || die "needs 2 CPUs (proxy and load pinned apart)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-busy-poll.XXXXXX")
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

BACKEND=$(free_port)
cat >"$WORK/nginx.conf" <<EOF
worker_processes 1;
daemon off;
error_log $WORK/nginx.err;
pid $WORK/nginx.pid;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    server { listen 127.0.0.1:$BACKEND; location / { return 200 "ok\n"; } }
}
EOF
taskset -c "$LOAD_CPU" nginx -p "$WORK" -c "$WORK/nginx.conf" &
PIDS+=($!)

# shellcheck source=e2e/bench/haproxy_cfg.sh
source "$ROOT/e2e/bench/haproxy_cfg.sh"

# start COLUMN PORT: the proxy alone on PROXY_CPU; its pid in STARTED.
start() {
    local c=$1 port=$2
    case $c in
    sluice | sluice-bp)
        local bp=()
        if [[ $c == sluice-bp ]]; then read -ra bp <<<"$BP_FLAGS"; else read -ra bp <<<"$SLUICE_FLAGS"; fi
        taskset -c "$PROXY_CPU" "$SLUICE" proxy --listen "127.0.0.1:$port" --upstream "127.0.0.1:$BACKEND" \
            --protocol http --workers 1 "${bp[@]}" --admin "127.0.0.1:$(free_port)" \
            >"$WORK/$c.out" 2>&1 &
        ;;
    haproxy | haproxy-bp)
        haproxy_http_cfg "127.0.0.1:$port" "127.0.0.1:$BACKEND" "" "$([[ $c == haproxy-bp ]] && echo busy-polling)" >"$WORK/$c.cfg"
        taskset -c "$PROXY_CPU" haproxy -db -f "$WORK/$c.cfg" >"$WORK/$c.out" 2>&1 &
        ;;
    esac
    STARTED=$!
    PIDS+=("$STARTED")
    local i
    for ((i = 0; i < 50; i++)); do
        curl -sf -o /dev/null "http://127.0.0.1:$port/" && return
        sleep 0.1
    done
    die "$c did not answer on :$port ($(tail -3 "$WORK/$c.out"))"
}

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

clients=$(((RATE + 99) / 100))
((clients < 50)) && clients=50
# Clients started a few per ms over one period, so that their ticks spread evenly (see
# paced_args in proxy.sh).
per_ms=$(awk -v r="$RATE" -v c="$clients" 'BEGIN { p = 1000 * c / r; if (p < 1) p = 1; x = c / p; print (x == int(x) ? x : int(x) + 1) }')
n=$((RATE * DURATION / clients * clients))
hz=$(getconf CLK_TCK)

for ((round = 1; round <= ROUNDS; round++)); do
    order=("${COLUMNS_RUN[@]}")
    ((round % 2)) || mapfile -t order < <(printf '%s\n' "${COLUMNS_RUN[@]}" | tac)
    for c in "${order[@]}"; do
        port=$(free_port)
        start "$c" "$port"
        # Warm the proxy's pools and caches; not measured.
        taskset -c "$LOAD_CPU" h2load --h1 -c "$clients" -n "$((clients * 20))" "http://127.0.0.1:$port/" >/dev/null 2>&1 || true
        log "$c: ${DURATION}s at $RATE req/s (round $round of $ROUNDS)"
        t0=$(cpu_ticks "$STARTED")
        s0=$EPOCHREALTIME
        taskset -c "$LOAD_CPU" h2load --h1 -c "$clients" --rps "$((RATE / clients))" -r "$per_ms" --rate-period 1ms \
            -n "$n" --log-file "$WORK/$c.$round.log" "http://127.0.0.1:$port/" >"$WORK/$c.$round.txt" 2>&1
        t1=$(cpu_ticks "$STARTED")
        s1=$EPOCHREALTIME
        awk -v t="$((t1 - t0))" -v hz="$hz" -v a="$s0" -v b="$s1" 'BEGIN { printf "%.0f\n", 100 * t / hz / (b - a) }' >"$WORK/$c.$round.cpu"
        grep -q "$n succeeded" "$WORK/$c.$round.txt" || log "warning: $c round $round: $(grep -E '^requests:' "$WORK/$c.$round.txt")"
        kill "$STARTED"
        wait "$STARTED" 2>/dev/null || true
    done
done

# p50/p99 of one log, or of several pooled; failed requests (status -1) count as slowest.
percentiles() {
    cat "$@" | awk -F'\t' '{ print ($2 == -1 ? 1e99 : $3) }' | sort -g | awk '
        { v[NR] = $1 }
        function pct(q,   i) { i = int(q * NR); if (i < q * NR) i++; return v[i] >= 1e98 ? "failed" : sprintf("%.3f", v[i] / 1000) }
        END { print pct(0.50), pct(0.99) }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

declare -A P50 P99 POOLED CPU ROUND_P99
for c in "${COLUMNS_RUN[@]}"; do
    p50s=() p99s=() cpus=()
    for ((round = 1; round <= ROUNDS; round++)); do
        read -r a b < <(percentiles "$WORK/$c.$round.log")
        p50s+=("$a") p99s+=("$b") cpus+=("$(cat "$WORK/$c.$round.cpu")")
    done
    P50[$c]=$(printf '%s\n' "${p50s[@]}" | median)
    P99[$c]=$(printf '%s\n' "${p99s[@]}" | median)
    CPU[$c]=$(printf '%s\n' "${cpus[@]}" | median)
    read -r _ POOLED[$c] < <(percentiles "$WORK"/"$c".*.log)
    ROUND_P99[$c]="${p99s[*]}"
    log "$c p99 per round: ${p99s[*]}"
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }'; }
echo
echo "Busy polling: HTTP/1.1 at $RATE req/s ($clients paced connections, h2load), one worker per proxy alone on CPU $PROXY_CPU,"
echo "${DURATION}s per run, $ROUNDS interleaved rounds; sluice: ${SLUICE_FLAGS:-defaults}; sluice-bp: ${BP_FLAGS:-defaults}; haproxy-bp: busy-polling"
echo "$(nproc) CPUs, $(uname -sr); haproxy $(haproxy -v | awk 'NR == 1 { print $3 }')"
printf '%-28s %9s %9s %9s %10s %15s %18s %18s\n' metric sluice sluice-bp haproxy haproxy-bp sluice/haproxy sluice-bp/haproxy "sluice-bp/hap-bp"
for m in P50:"p50 ms (median of rounds)" P99:"p99 ms (median of rounds)" POOLED:"p99 ms (rounds pooled)" CPU:"proxy CPU % of a core"; do
    key=${m%%:*} label=${m#*:}
    declare -n t=$key
    printf '%-28s %9s %9s %9s %10s %15s %18s %18s\n' "$label" "${t[sluice]:-}" "${t[sluice-bp]:-}" "${t[haproxy]:-}" "${t[haproxy-bp]:-}" \
        "$(ratio "${t[sluice]:-}" "${t[haproxy]:-}")" "$(ratio "${t[sluice-bp]:-}" "${t[haproxy]:-}")" \
        "$(ratio "${t[sluice-bp]:-}" "${t[haproxy-bp]:-}")"
    unset -n t
done

# Paired by round (a round's runs are adjacent in time, so they share the machine's
# slow spells): in how many rounds a sluice column's p99 was under HAProxy's.
if [[ -n ${ROUND_P99[haproxy]:-} ]]; then
    for c in sluice sluice-bp; do
        [[ -n ${ROUND_P99[$c]:-} ]] || continue
        awk -v a="${ROUND_P99[$c]}" -v b="${ROUND_P99[haproxy]}" -v c="$c" 'BEGIN {
            n = split(a, x, " "); split(b, y, " "); lower = 0
            for (i = 1; i <= n; i++) { r[i] = x[i] / y[i]; if (r[i] < 1) lower++ }
            for (i = 2; i <= n; i++) { v = r[i]; for (j = i - 1; j >= 1 && r[j] > v; j--) r[j + 1] = r[j]; r[j + 1] = v }
            m = n % 2 ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
            printf "%s/haproxy p99 paired by round: lower in %d of %d rounds, median ratio %.2fx\n", c, lower, n, m
        }'
    done
fi
