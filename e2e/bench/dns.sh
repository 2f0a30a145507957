#!/usr/bin/env bash
# Benchmark `sluice dns` against Knot DNS (NSD when knotd is missing), side by side in one
# run: both serve the same ClusterSetIP services (10,000 by default), each with one thread,
# and dnsperf measures each in turn with the same query file.
#
#   e2e/bench/dns.sh              # from anywhere; builds nothing, needs target/release/sluice
#   DURATION=60 e2e/bench/dns.sh
#
# What it does:
#   1. starts `sluice control --single-cluster` (a local physical cluster's API server);
#   2. creates namespace `bench` and ServiceImports svc-0..svc-N-1 (ClusterSetIP, VIP
#      127.60.(i/250).(i%250+1), port http/TCP/80) with kubectl;
#   3. starts `sluice dns --threads 1` against it and waits for /readyz;
#   4. writes the same records as a zone file and serves it with knotd (udp-workers,
#      tcp-workers and background-workers 1) or NSD (server-count 1);
#   5. checks that both servers give the right answers;
#   6. per server: a max-throughput dnsperf run (many queries in flight, no rate limit) and
#      a fixed-rate run (RATE q/s) whose per-query latencies give p50/p99/p99.9 (dnsperf
#      2.10 prints only average and stddev, so the percentiles come from its -v lines);
#      meanwhile it reads the server's CPU time from /proc;
#   7. prints a table and the ratios sluice/knot.
#
# Reading it: on a 2-CPU machine dnsperf gets one core and the server the other. One core
# of dnsperf may not saturate an efficient server (knotd spends a few microseconds of CPU
# per query), so next to max q/s the table gives each server's CPU share and its CPU time
# per answered query (us/q), which does not depend on saturation, and warns when a server
# was not saturated.
#
# Environment (default):
#   DURATION (20)       seconds of each measured dnsperf run
#   SERVICES (10000)    ServiceImports, and A + SRV records in the zone
#   SRV_QUERIES (2000)  SRV names in the query file, next to one A name per service
#   RATE (20000)        q/s of the fixed-rate (latency) run
#   CLIENTS (8)         dnsperf -c: UDP sockets the load comes from
#   OUTSTANDING (200)   dnsperf -q: queries in flight
#   TIMEOUT (2)         dnsperf -t: seconds after which a query counts as lost
#   WARMUP (2)          seconds of unmeasured load on each server before its first run
#   SERVERS ("sluice knot")  which servers to measure; `knot` means knotd, or NSD when
#                       knotd is missing; `nsd` forces NSD
#   PIN (1)             pin every server to CPU $SERVER_CPU (1) and dnsperf to CPU
#                       $LOAD_CPU (0), so that "one thread" is also one core and the load
#                       generator never steals the server's core (needs 2 CPUs, taskset)
#   KEEP (0)            1: keep the work dir (logs, zone, configs, raw dnsperf output)
#   RESULTS (unset)     a file to write the results to as TSV
#   SLUICE (target/release/sluice), KUBECTL (/usr/bin/kubectl)
#   BEFORE (unset)      an older sluice binary; with `before` in SERVERS it is measured as
#                       one more server beside this one, and the ratios include sluice/before:
#                       BEFORE=/tmp/sluice-old SERVERS="sluice before knot" e2e/bench/dns.sh
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SLUICE=${SLUICE:-$ROOT/target/release/sluice}
KUBECTL=${KUBECTL:-/usr/bin/kubectl}
DURATION=${DURATION:-20}
SERVICES=${SERVICES:-10000}
SRV_QUERIES=${SRV_QUERIES:-2000}
RATE=${RATE:-20000}
CLIENTS=${CLIENTS:-8}
OUTSTANDING=${OUTSTANDING:-200}
TIMEOUT=${TIMEOUT:-2}
WARMUP=${WARMUP:-2}
SERVERS=${SERVERS:-sluice knot}
PIN=${PIN:-1}
SERVER_CPU=${SERVER_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
KEEP=${KEEP:-0}
RESULTS=${RESULTS:-}

ZONE=clusterset.local
NS=bench
BATCH=1000 # ServiceImports per kubectl create (one List file each)

WORK=
LOADAVG=
PIDS=()          # every process this script started, in start order
LOAD_PID=        # the dnsperf running now
declare -A PORT  # server name -> DNS port on 127.0.0.1
declare -A PID   # server name -> pid (whose process tree is the server)
PIN_SERVER=()
PIN_LOAD=()

log() { printf 'dns-bench: %s\n' "$*" >&2; }
die() {
    printf 'dns-bench: error: %s\n' "$*" >&2
    exit 1
}

# ---------------------------------------------------------------------------------------
# Processes and cleanup

# PID and every descendant of it (NSD forks; the others are single processes).
tree_pids() {
    local p=$1 c
    echo "$p"
    # shellcheck disable=SC2013 # the file holds space-separated pids
    for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do tree_pids "$c"; done
}

# CPU time (user + system, in clock ticks) used so far by a process tree, all threads.
tree_cpu_ticks() {
    local total=0 p t
    for p in $(tree_pids "$1"); do
        # Fields after "pid (comm) ": state is 1, utime 12, stime 13.
        t=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' /proc/"$p"/stat 2>/dev/null) || t=0
        total=$((total + ${t:-0}))
    done
    echo "$total"
}

# Stop a process tree: SIGTERM to the root (servers shut down cleanly on it), SIGKILL to
# whatever is left after 5 s.
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

# Show the end of a process's stderr and fail.
die_with_log() {
    local name=$1
    shift
    tail -n 20 "$WORK/logs/$name.err" >&2 || true
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

# wait_http NAME PID URL SECONDS [curl args]: until URL answers 2xx.
wait_http() {
    local name=$1 pid=$2 url=$3 secs=$4
    shift 4
    for _ in $(seq $((secs * 10))); do
        curl -sf -o /dev/null --max-time 2 "$@" "$url" && return
        kill -0 "$pid" 2>/dev/null || die_with_log "$name" "$name exited while waiting for $url"
        sleep 0.1
    done
    die_with_log "$name" "$url not ready within ${secs}s"
}

# wait_answer NAME PID PORT QNAME WANT SECONDS: until `dig +short QNAME A` is WANT.
wait_answer() {
    local name=$1 pid=$2 port=$3 qname=$4 want=$5 secs=$6
    for _ in $(seq $((secs * 5))); do
        [[ $(dig_short "$port" "$qname" A) == "$want" ]] && return
        kill -0 "$pid" 2>/dev/null || die_with_log "$name" "$name exited"
        sleep 0.2
    done
    die_with_log "$name" "$name does not answer $qname A with $want within ${secs}s"
}

dig_short() { # PORT QNAME QTYPE
    dig -r +tries=1 +time=2 @127.0.0.1 -p "$1" +short -q "$2" -t "$3" 2>/dev/null || true
}

# A free port on 127.0.0.1 for both UDP and TCP, below the ephemeral range (32768+) so that
# no client socket (dnsperf's, kubectl's) can take it before the server binds it.
pick_port() {
    local p
    for _ in $(seq 200); do
        p=$((20000 + RANDOM % 10000))
        if [[ -z $(ss -Hlnut "sport = :$p" 2>/dev/null) ]]; then
            echo "$p"
            return
        fi
    done
    die "no free port found in 20000-29999"
}

# ---------------------------------------------------------------------------------------
# Steps

check_prerequisites() {
    [[ -x $SLUICE ]] || die "$SLUICE not found: build it first (cargo build --release); this script builds nothing"
    if [[ " $SERVERS " == *" sluice "* ]]; then
        "$SLUICE" dns --help >/dev/null 2>&1 ||
            die "$SLUICE has no \`dns\` subcommand: rebuild it (cargo build --release)"
    fi
    [[ -x $KUBECTL ]] || die "kubectl not found at $KUBECTL (set KUBECTL)"
    local tool
    for tool in dnsperf dig curl ss awk shuf seq; do
        command -v "$tool" >/dev/null || die "$tool not found (Debian: dnsperf, dnsutils, curl, iproute2, coreutils)"
    done
    [[ $SERVICES -ge 1 && $SERVICES -le 64000 ]] || die "SERVICES must be 1..64000 (VIPs come from 127.60.0.0/16)"
    [[ $SRV_QUERIES -le $SERVICES ]] || die "SRV_QUERIES must be at most SERVICES"

    # Resolve `knot` to knotd, or NSD when knotd is not installed.
    local s resolved=()
    for s in $SERVERS; do
        case $s in
        sluice) resolved+=(sluice) ;;
        before)
            [[ -x ${BEFORE:-} ]] || die "server 'before' needs BEFORE=<an older sluice binary>"
            resolved+=(before)
            ;;
        knot)
            if command -v knotd >/dev/null; then
                resolved+=(knot)
            elif command -v nsd >/dev/null; then
                log "knotd not found: comparing with NSD instead"
                resolved+=(nsd)
            else
                die "neither knotd (Debian: knot) nor nsd (Debian: nsd) is installed"
            fi
            ;;
        nsd)
            command -v nsd >/dev/null || die "nsd not found (Debian: nsd)"
            resolved+=(nsd)
            ;;
        *) die "unknown server in SERVERS: $s (sluice, before, knot, nsd)" ;;
        esac
    done
    SERVERS=${resolved[*]}

    if [[ $PIN == 1 ]]; then
        if command -v taskset >/dev/null && (($(nproc) >= 2)); then
            PIN_SERVER=(taskset -c "$SERVER_CPU")
            PIN_LOAD=(taskset -c "$LOAD_CPU")
        else
            log "not pinning (needs taskset and 2 CPUs): server and dnsperf share the CPUs"
            PIN=0
        fi
    fi
}

make_workdir() {
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-dns-bench.XXXXXX")
    mkdir -p "$WORK/logs" "$WORK/results"
}

# The API server of one local physical cluster, on an ephemeral port.
start_control() {
    log "starting sluice control --single-cluster"
    spawn control "$SLUICE" control --single-cluster --data-dir "$WORK/control" --listen 127.0.0.1:0
    local pid=$SPAWNED line
    # It prints "serving https://127.0.0.1:PORT (kubeconfig: DIR/admin.kubeconfig)".
    line=$(wait_for_line control "$pid" '^serving ' 60)
    API_URL=$(awk '{ print $2 }' <<<"$line")
    KUBECONFIG_FILE=$WORK/control/admin.kubeconfig
    wait_http control "$pid" "$API_URL/readyz" 60 -k
    log "API server at $API_URL"
}

kc() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# ServiceImport is a built-in type of `sluice control`. A server without it gets the
# type as a CRD (schema-less), so that the benchmark still runs; the note says so.
ensure_serviceimport_type() {
    local resource=serviceimports.multicluster.x-k8s.io
    kc api-resources --api-group=multicluster.x-k8s.io -o name 2>/dev/null | grep -qx "$resource" && return
    log "note: the API server does not serve ServiceImport: installing a CRD for it"
    kc create -f - >/dev/null <<'EOF'
{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
 "metadata": {"name": "serviceimports.multicluster.x-k8s.io"},
 "spec": {"group": "multicluster.x-k8s.io", "scope": "Namespaced",
  "names": {"kind": "ServiceImport", "listKind": "ServiceImportList",
            "plural": "serviceimports", "singular": "serviceimport"},
  "versions": [{"name": "v1beta1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object",
                           "x-kubernetes-preserve-unknown-fields": true}}}]}}
EOF
    for _ in $(seq 100); do
        kc api-resources --api-group=multicluster.x-k8s.io -o name 2>/dev/null | grep -qx "$resource" && return
        sleep 0.1
    done
    die "the ServiceImport CRD was not served within 10s"
}

# VIP of service i (the same formula is in the awk programs below).
vip() { echo "127.60.$(($1 / 250)).$(($1 % 250 + 1))"; }

# A v1 List of the ServiceImports FROM..TO-1, as JSON.
import_list() {
    awk -v from="$1" -v to="$2" -v ns="$NS" 'BEGIN {
        print "{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": ["
        for (i = from; i < to; i++)
            printf "%s{\"apiVersion\": \"multicluster.x-k8s.io/v1beta1\", \"kind\": \"ServiceImport\", " \
                   "\"metadata\": {\"name\": \"svc-%d\", \"namespace\": \"%s\"}, " \
                   "\"spec\": {\"type\": \"ClusterSetIP\", \"ips\": [\"127.60.%d.%d\"], " \
                   "\"ports\": [{\"name\": \"http\", \"protocol\": \"TCP\", \"port\": 80}]}}\n",
                   (i > from ? "," : ""), i, ns, int(i / 250), i % 250 + 1
        print "]}"
    }'
}

create_imports() {
    log "creating namespace $NS and $SERVICES ServiceImports"
    kc create namespace "$NS" >/dev/null
    ensure_serviceimport_type
    mkdir -p "$WORK/imports"
    local from to f started=$SECONDS
    for ((from = 0; from < SERVICES; from += BATCH)); do
        to=$((from + BATCH > SERVICES ? SERVICES : from + BATCH))
        f=$WORK/imports/$from.json
        import_list "$from" "$to" >"$f"
        # --validate=false: for a List kubectl validates against /openapi/v2 in protobuf,
        # which sluice control does not serve (406), instead of asking the server to
        # validate each item. The objects are checked below and through DNS anyway.
        kc create --validate=false -f "$f" >/dev/null
    done
    local n
    n=$(kc get serviceimports.multicluster.x-k8s.io -n "$NS" -o name | wc -l)
    [[ $n -eq $SERVICES ]] || die "expected $SERVICES ServiceImports in $NS, the API server lists $n"
    log "created $SERVICES ServiceImports in $((SECONDS - started))s"
}

# start_sluice_dns NAME BINARY: `BINARY dns --threads 1` as server NAME (sluice, before).
start_sluice_dns() {
    local s=$1 bin=$2
    log "starting $s: $bin dns --threads 1"
    spawn "$s" "${PIN_SERVER[@]}" "$bin" dns \
        --listen 127.0.0.1:0 --admin 127.0.0.1:0 \
        --kubeconfig "$KUBECONFIG_FILE" --cluster-id bench --zone "$ZONE" \
        --threads 1 --ttl 5
    local pid=$SPAWNED line addr admin
    # "dns: listening on 127.0.0.1:PORT admin 127.0.0.1:APORT"
    line=$(wait_for_line "$s" "$pid" '^dns: listening on ' 60)
    addr=$(awk '{ print $4 }' <<<"$line")
    admin=$(awk '{ print $6 }' <<<"$line")
    PORT[$s]=${addr##*:}
    PID[$s]=$pid
    # /readyz: the informers have synced, so every ServiceImport is known.
    wait_http "$s" "$pid" "http://$admin/readyz" 120
    local last=$((SERVICES - 1))
    wait_answer "$s" "$pid" "${PORT[$s]}" "svc-$last.$NS.svc.$ZONE" "$(vip "$last")" 10
    log "$s dns on port ${PORT[$s]}, ready"
}

# The same data as a zone file: A and SRV per service, TTL 5 like sluice dns --ttl 5.
write_zone() {
    awk -v n="$SERVICES" -v ns="$NS" -v zone="$ZONE" 'BEGIN {
        printf "$ORIGIN %s.\n$TTL 5\n", zone
        printf "@ IN SOA ns.%s. hostmaster.%s. 1 3600 600 86400 5\n", zone, zone
        printf "@ IN NS ns.%s.\nns IN A 127.0.0.1\n", zone
        for (i = 0; i < n; i++) {
            name = sprintf("svc-%d.%s.svc.%s.", i, ns, zone)
            printf "%s 5 IN A 127.60.%d.%d\n", name, int(i / 250), i % 250 + 1
            printf "_http._tcp.%s 5 IN SRV 0 100 80 %s\n", name, name
        }
    }' >"$WORK/zone"
}

start_knot() {
    local port dir=$WORK/knot
    port=$(pick_port)
    mkdir -p "$dir/run" "$dir/storage"
    # One worker per kind: one thread answers UDP, as sluice dns --threads 1. knotd keeps
    # running as the current user (no `user:`), in the foreground (no -d). No journal and no
    # zone file flush: the zone is static.
    cat >"$dir/knot.conf" <<EOF
server:
    rundir: "$dir/run"
    listen: 127.0.0.1@$port
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1

database:
    storage: "$dir/storage"

log:
  - target: stderr
    any: notice

zone:
  - domain: $ZONE
    file: "$WORK/zone"
    journal-content: none
    zonefile-sync: -1
EOF
    if command -v knotc >/dev/null; then
        knotc -c "$dir/knot.conf" conf-check >/dev/null 2>"$WORK/logs/knot-conf.err" ||
            die_with_log knot-conf "knotd rejects $dir/knot.conf"
    fi
    log "starting knotd (1 UDP worker) on port $port"
    spawn knot "${PIN_SERVER[@]}" knotd -c "$dir/knot.conf"
    PORT[knot]=$port
    PID[knot]=$SPAWNED
    wait_answer knot "$SPAWNED" "$port" "svc-0.$NS.svc.$ZONE" "$(vip 0)" 60
}

start_nsd() {
    local port dir=$WORK/nsd
    port=$(pick_port)
    mkdir -p "$dir"
    # server-count 1: one serving process. No chroot, no privilege drop, no database file,
    # no remote control: everything stays in the work dir.
    cat >"$dir/nsd.conf" <<EOF
server:
    ip-address: 127.0.0.1
    port: $port
    server-count: 1
    do-ip6: no
    username: ""
    chroot: ""
    database: ""
    zonesdir: "$dir"
    zonelistfile: "$dir/zone.list"
    xfrdfile: "$dir/xfrd.state"
    xfrdir: "$dir"
    pidfile: "$dir/nsd.pid"
    logfile: "$dir/nsd.log"
    verbosity: 1

remote-control:
    control-enable: no

zone:
    name: $ZONE
    zonefile: "$WORK/zone"
EOF
    if command -v nsd-checkconf >/dev/null; then
        nsd-checkconf "$dir/nsd.conf" 2>"$WORK/logs/nsd-conf.err" ||
            die_with_log nsd-conf "nsd rejects $dir/nsd.conf"
    fi
    log "starting nsd (server-count 1) on port $port"
    spawn nsd "${PIN_SERVER[@]}" nsd -d -c "$dir/nsd.conf"
    PORT[nsd]=$port
    PID[nsd]=$SPAWNED
    wait_answer nsd "$SPAWNED" "$port" "svc-0.$NS.svc.$ZONE" "$(vip 0)" 60
}

# A benchmark of wrong answers means nothing: check every server before measuring.
verify_answers() {
    local s port got name prio weight p target
    name=svc-42.$NS.svc.$ZONE
    for s in $SERVERS; do
        port=${PORT[$s]}
        got=$(dig_short "$port" "$name" A)
        [[ $got == "$(vip 42)" ]] || die "$s: $name A is '${got//$'\n'/ }', want $(vip 42)"
        # SRV: priority 0, port 80, target the service name. The weight is the server's
        # choice (the zone file says 100), so only reported.
        got=$(dig_short "$port" "_http._tcp.$name" SRV)
        read -r prio weight p target <<<"$got"
        [[ ${prio:-} == 0 && ${p:-} == 80 && ${target,,} == "${name,,}." ]] ||
            die "$s: _http._tcp.$name SRV is '${got//$'\n'/ }', want '0 <weight> 80 $name.'"
        [[ $weight == 100 ]] || log "note: $s answers SRV weight $weight (the zone file has 100)"

        # A random sample of 200 A names in one dig batch, against the VIP formula.
        local i sample=$WORK/sample-$s want_file=$WORK/sample-$s.want
        : >"$sample"
        : >"$want_file"
        for i in $(shuf -i 0-$((SERVICES - 1)) -n 200); do
            echo "svc-$i.$NS.svc.$ZONE A" >>"$sample"
            vip "$i" >>"$want_file"
        done
        dig -r +tries=1 +time=2 @127.0.0.1 -p "$port" +short -f "$sample" >"$sample.got" 2>/dev/null || true
        diff -q "$want_file" "$sample.got" >/dev/null ||
            die "$s: wrong answers for sampled names: $(diff "$want_file" "$sample.got" | head -5 | tr '\n' ' ')"
        log "$s: answers check out ($name A $(vip 42), SRV, 200 sampled names)"
    done
    # The brief's acceptance check, spelled out: the same address from every server.
    local first=
    for s in $SERVERS; do
        got=$(dig_short "${PORT[$s]}" "$name" A)
        [[ -z $first || $got == "$first" ]] || die "servers disagree on $name A"
        first=$got
    done
}

# One A query per service and SRV_QUERIES SRV queries, shuffled with a fixed seed so that
# every run (and every server) sees the same order.
write_queries() {
    QUERIES=$WORK/queries.txt
    {
        seq 0 $((SERVICES - 1)) | awk -v ns="$NS" -v zone="$ZONE" '{ printf "svc-%d.%s.svc.%s A\n", $1, ns, zone }'
        seq 0 $((SERVICES - 1)) | shuf -n "$SRV_QUERIES" --random-source=<(yes) |
            awk -v ns="$NS" -v zone="$ZONE" '{ printf "_http._tcp.svc-%d.%s.svc.%s SRV\n", $1, ns, zone }'
    } | shuf --random-source=<(yes) >"$QUERIES"
    log "query file: $(wc -l <"$QUERIES") queries ($SERVICES A, $SRV_QUERIES SRV)"
}

# run_dnsperf SERVER MODE SECONDS: MODE is max (as fast as the server answers, OUTSTANDING
# queries in flight), rate (RATE q/s, every query's latency printed with -v) or warmup.
# Leaves dnsperf's output in $WORK/results/SERVER-MODE.txt and, in .cpu, the CPU seconds
# the server and dnsperf used during the SECONDS of load, and that window's exact length.
run_dnsperf() {
    local s=$1 mode=$2 secs=$3 out=$WORK/results/$1-$2
    local args=(-s 127.0.0.1 -p "${PORT[$s]}" -d "$QUERIES" -l "$secs" -T 1 -c "$CLIENTS"
        -q "$OUTSTANDING" -t "$TIMEOUT")
    [[ $mode == rate ]] && args+=(-Q "$RATE" -v)
    local tck t0 s0 t1 s1 g1
    tck=$(getconf CLK_TCK)
    "${PIN_LOAD[@]}" dnsperf "${args[@]}" >"$out.txt" 2>"$out.err" &
    LOAD_PID=$!
    t0=$EPOCHREALTIME
    s0=$(tree_cpu_ticks "${PID[$s]}")
    # CPU use is sampled when the time limit is reached rather than when dnsperf exits: after
    # its time limit dnsperf waits up to -t seconds for late answers, spinning (its CPU time
    # would count it) while the server idles (its CPU share would be diluted).
    sleep "$secs"
    t1=$EPOCHREALTIME
    s1=$(tree_cpu_ticks "${PID[$s]}")
    g1=$(tree_cpu_ticks "$LOAD_PID")
    wait "$LOAD_PID" || die "dnsperf failed against $s: $(tail -n 5 "$out.err" | tr '\n' ' ')"
    LOAD_PID=
    awk -v s="$((s1 - s0))" -v g="$g1" -v hz="$tck" -v t0="$t0" -v t1="$t1" \
        'BEGIN { printf "%.3f %.3f %.3f\n", s / hz, g / hz, t1 - t0 }' >"$out.cpu"
    kill -0 "${PID[$s]}" 2>/dev/null || die_with_log "$s" "$s died during the $mode run"
}

# The figures of one run (RESULT is $WORK/results/SERVER-MODE):
#   q/s, lost, answers other than NOERROR, average latency ms, average response bytes,
#   server CPU %, dnsperf CPU % (of one core), server CPU microseconds per answered query.
# The CPU figures are over the window of load (see run_dnsperf).
run_figures() { # RESULT
    awk '
        FNR == NR { server_s = $1; dnsperf_s = $2; window = $3; next } # the .cpu file
        /Queries completed:/     { completed = $3 }
        /Queries lost:/          { lost = $3 }
        /Queries per second:/    { qps = $4 }
        /Average Latency \(s\):/ { avg = $4 * 1000 }
        /Average packet size:/   { for (i = 1; i <= NF; i++) if ($i == "response") resp = $(i + 1) }
        /Response codes:/        { for (i = 1; i <= NF; i++) if ($i == "NOERROR") noerror = $(i + 1) }
        END {
            printf "%.0f %d %d %.3f %d %.0f %.0f %.2f\n", qps, lost, completed - noerror, avg, resp,
                (window > 0 ? 100 * server_s / window : 0), (window > 0 ? 100 * dnsperf_s / window : 0),
                (completed > 0 ? 1e6 * server_s / completed : 0)
        }
    ' "$1.cpu" "$1.txt"
}

# p50 p99 p99.9 (ms) of the per-query lines of dnsperf -v ("> NOERROR name type 0.000123";
# "> T name type" for a lost query, counted as infinitely slow so that losses show).
latency_percentiles() {
    awk '/^> / { print ($2 == "T" ? 1e99 : $NF) }' "$1" | sort -g | awk '
        { v[NR] = $1 }
        function pct(q,   i) {
            if (NR == 0) return "-"
            i = int(q * NR); if (i < q * NR) i++; if (i < 1) i = 1
            return v[i] >= 1e98 ? "lost" : sprintf("%.3f", v[i] * 1000)
        }
        END { print pct(0.50), pct(0.99), pct(0.999) }
    '
}

measure() {
    local s
    for s in $SERVERS; do
        log "$s: warm-up ${WARMUP}s"
        run_dnsperf "$s" warmup "$WARMUP"
    done
    # Interleaved (every server's max run, then every server's rate run) so that a change
    # of the machine's state during the run does not land on one server only.
    for s in $SERVERS; do
        log "$s: max throughput, ${DURATION}s, $CLIENTS clients, $OUTSTANDING in flight"
        run_dnsperf "$s" max "$DURATION"
    done
    for s in $SERVERS; do
        log "$s: fixed rate $RATE q/s, ${DURATION}s"
        run_dnsperf "$s" rate "$DURATION"
    done
}

report() {
    local s r=$WORK/results tsv=$WORK/results.tsv
    printf '%s\t' server max_qps max_lost max_avg_ms resp_bytes max_server_cpu_pct \
        max_dnsperf_cpu_pct max_cpu_us_per_query rate rate_qps rate_lost p50_ms p99_ms \
        p999_ms rate_cpu_us_per_query >"$tsv"
    printf 'not_noerror\n' >>"$tsv"
    for s in $SERVERS; do
        local qps lost bad avg resp scpu lcpu us rqps rlost rbad rus p50 p99 p999
        read -r qps lost bad avg resp scpu lcpu us < <(run_figures "$r/$s-max")
        read -r rqps rlost rbad _ _ _ _ rus < <(run_figures "$r/$s-rate")
        read -r p50 p99 p999 < <(latency_percentiles "$r/$s-rate.txt")
        printf '%s\t' "$s" "$qps" "$lost" "$avg" "$resp" "$scpu" "$lcpu" "$us" \
            "$RATE" "$rqps" "$rlost" "$p50" "$p99" "$p999" "$rus" >>"$tsv"
        printf '%s\n' "$((bad + rbad))" >>"$tsv"
    done

    echo
    echo "clusterset DNS: $SERVICES services, $(wc -l <"$QUERIES") queries ($SRV_QUERIES SRV), ${DURATION}s per run, one server thread"
    echo "$(nproc) CPUs, load average $LOADAVG before the runs, Linux $(uname -r), dnsperf $(dnsperf -h 2>&1 | awk '/^Version/ { print $2 }'), pinning: $(
        [[ $PIN == 1 ]] && echo "server CPU $SERVER_CPU, dnsperf CPU $LOAD_CPU" || echo off)"
    echo
    local fmt='%-7s | %9s %6s %7s %5s %5s %5s %7s | %9s %6s %7s %7s %7s %7s\n'
    # shellcheck disable=SC2059 # the format is ours
    {
        printf '%-7s | %-50s | %s\n' "" "max throughput ($CLIENTS clients, $OUTSTANDING in flight)" "fixed rate $RATE q/s"
        printf "$fmt" "" "" "" "avg" "resp" "srv" "gen" "srv CPU" "" "" "" "" "" "srv CPU"
        printf "$fmt" server "q/s" lost ms bytes "CPU%" "CPU%" "us/q" "q/s" lost "p50 ms" "p99 ms" "p99.9ms" "us/q"
        printf '%s+%s+%s\n' "--------" "$(printf -- '-%.0s' {1..52})" "$(printf -- '-%.0s' {1..50})"
        tail -n +2 "$tsv" | while IFS=$'\t' read -r s qps lost avg resp scpu lcpu us _ rqps rlost p50 p99 p999 rus _; do
            printf "$fmt" "$s" "$qps" "$lost" "$avg" "$resp" "$scpu" "$lcpu" "$us" "$rqps" "$rlost" "$p50" "$p99" "$p999" "$rus"
        done
    }
    echo
    echo "srv CPU% / gen CPU%: share of one core used by the server / by dnsperf; us/q: server CPU time per answered query"

    # Ratios sluice / the reference server (knot or nsd), and / the older build.
    local ref
    for ref in knot nsd before; do
        [[ " $SERVERS " == *" sluice "* && " $SERVERS " == *" $ref "* ]] || continue
        awk -F'\t' -v ref="$ref" -v rate="$RATE" '
            function ratio(a, b) { return (a + 0 > 0 && b + 0 > 0) ? sprintf("%.3gx", a / b) : "n/a (" a " vs " b ")" }
            $1 == "sluice" { q = $2; us = $8; p = $13 }
            $1 == ref      { rq = $2; rus = $8; rp = $13 }
            END {
                printf "sluice/%s: max q/s %s, CPU per query %s, p99 at %s q/s %s\n",
                    ref, ratio(q, rq), ratio(us, rus), rate, ratio(p, rp)
            }' "$tsv"
    done

    # Warnings that change how to read the table.
    tail -n +2 "$tsv" | while IFS=$'\t' read -r s _ _ _ _ scpu lcpu _ _ _ rlost _ _ _ _ bad; do
        ((bad == 0)) || echo "warning: $s answered $bad queries with an rcode other than NOERROR"
        if [[ $PIN == 1 ]] && ((scpu < 85)); then
            echo "warning: $s was not saturated in the max run (${scpu}% of its core; dnsperf ${lcpu}% of its" \
                "own): dnsperf, or other load on the machine, was the limit, so $s's max q/s is a lower" \
                "bound; compare CPU us/q instead"
        fi
        ((rlost == 0)) || echo "warning: $s lost $rlost queries at $RATE q/s (it may not sustain that rate);" \
            "the percentiles count lost queries as the slowest"
    done

    if [[ -n $RESULTS ]]; then
        cp "$tsv" "$RESULTS"
        echo "results: $RESULTS"
    fi
}

main() {
    check_prerequisites
    trap cleanup EXIT
    trap 'exit 130' INT TERM
    make_workdir
    start_control
    create_imports
    write_zone
    write_queries
    local s
    for s in $SERVERS; do
        case $s in
        sluice) start_sluice_dns sluice "$SLUICE" ;;
        before) start_sluice_dns before "$BEFORE" ;;
        knot) start_knot ;;
        nsd) start_nsd ;;
        esac
    done
    verify_answers
    LOADAVG=$(cut -d' ' -f1-3 /proc/loadavg)
    measure
    report
}

main "$@"
