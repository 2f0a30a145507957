#!/usr/bin/env bash
# Placement and syncer figures on the local clusterset (`sluice dev up`), with the real
# kubectl against the logical clusters only:
#
#   apply     apply-to-Available: `kubectl apply` of a namespace (pinned to east) with a
#             Deployment of 2 sluice/echo replicas and a Service, until `kubectl rollout
#             status` upstream returns (ROUNDS times: min/median/max).
#   move      a move's duration: relabel the namespace to west, until east has no copy
#             left and west's Deployment is available (ROUNDS times, east <-> west).
#   scale     WORKSPACES logical clusters with PER_WS ConfigMaps each placed on east: the
#             time from the first apply until east holds them all, the syncer's RSS after,
#             its CPU over QUIET seconds when nothing changes, and the writes it made in
#             that time (its /metrics), then the latency of SAMPLES single ConfigMap
#             creations (upstream create -> present downstream, polled every 10 ms with
#             the syncer's own client-free check: `kubectl get` on the physical cluster).
#
#   e2e/bench/placement.sh                        # needs target/release/sluice
#   WORKSPACES=100 PER_WS=100 e2e/bench/placement.sh scale    # 10,000 objects
#
# Karmada's published distribution latency (100 clusters) is the peer figure: p99 1.30 s
# (push) and 0.99 s (pull).
set -euo pipefail
cd "$(dirname "$0")/../.."
SLUICE=${SLUICE:-target/release/sluice}
KUBECTL=${KUBECTL:-kubectl}
ROUNDS=${ROUNDS:-5}
WORKSPACES=${WORKSPACES:-100}
PER_WS=${PER_WS:-10}
QUIET=${QUIET:-30}
SAMPLES=${SAMPLES:-20}
PHASES=${1:-"apply move scale"}

work=$(mktemp -d)
dev_pid=""
cleanup() {
  [ -n "$dev_pid" ] && kill -TERM "$dev_pid" 2>/dev/null && wait "$dev_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f\n", b - a }'; }
stats() { sort -n | awk '{ v[NR] = $1 } END { printf "min %.3f  median %.3f  max %.3f  (n=%d)\n", v[1], v[int((NR + 1) / 2)], v[NR], NR }'; }
pct() { sort -n | awk -v p="$1" '{ v[NR] = $1 } END { i = int(NR * p / 100 + 0.999); if (i < 1) i = 1; printf "%.3f", v[i] }'; }

SLUICE_LOG=warn "$SLUICE" dev up --state "$work/dev" --clusters east,west > "$work/devup.out" 2> "$work/devup.err" &
dev_pid=$!
for _ in $(seq 600); do grep -qx ready "$work/devup.out" 2>/dev/null && break; sleep 0.1; done
grep -qx ready "$work/devup.out" || { cat "$work/devup.err"; exit 1; }
CONTROL="$work/dev/control.kubeconfig"
EAST="$work/dev/clusters/east.kubeconfig"
WEST="$work/dev/clusters/west.kubeconfig"
up() { "$KUBECTL" --kubeconfig "$CONTROL" --cache-dir "$work/cache-c" "$@"; }
east() { "$KUBECTL" --kubeconfig "$EAST" --cache-dir "$work/cache-e" "$@"; }
west() { "$KUBECTL" --kubeconfig "$WEST" --cache-dir "$work/cache-w" "$@"; }

app() { # namespace $1, Deployment and Service ${2:-web}
  local d=${2:-web}
  cat <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: $1, labels: {sluice.dev/cluster: east}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: $d, namespace: $1}
spec:
  replicas: 2
  selector: {matchLabels: {app: $d}}
  template:
    metadata: {labels: {app: $d}}
    spec:
      containers:
      - name: echo
        image: sluice/echo
        readinessProbe: {httpGet: {port: 8080, path: /ready}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: $d, namespace: $1}
spec:
  selector: {app: $d}
  ports: [{port: 80, targetPort: 8080}]
EOF
}

if [[ " $PHASES " == *" apply "* ]]; then
  : > "$work/apply"
  for i in $(seq "$ROUNDS"); do
    t0=$(now)
    app "a$i" | up apply -f - > /dev/null
    up -n "a$i" rollout status deployment/web --timeout=300s > /dev/null
    secs "$t0" "$(now)" >> "$work/apply"
  done
  echo "apply-to-Available (2 replicas, rollout status upstream): $(stats < "$work/apply")"
fi

if [[ " $PHASES " == *" move "* ]]; then
  app m mover | up apply -f - > /dev/null
  up -n m rollout status deployment/mover --timeout=300s > /dev/null
  : > "$work/move"
  from=east; to=west
  for i in $(seq "$ROUNDS"); do
    t0=$(now)
    up label namespace m sluice.dev/cluster=$to --overwrite > /dev/null
    for _ in $(seq 3000); do
      gone=$($from get deployments -A -o name 2>/dev/null | grep -c deployment.apps/mover || true)
      avail=$($to get deployments -A -o jsonpath='{range .items[?(@.metadata.name=="mover")]}{.status.availableReplicas}{end}' 2>/dev/null || true)
      [ "$gone" = 0 ] && [ "$avail" = 2 ] && break
      sleep 0.05
    done
    secs "$t0" "$(now)" >> "$work/move"
    tmp=$from; from=$to; to=$tmp
  done
  echo "move (label change -> A removed, B available): $(stats < "$work/move")"
fi

if [[ " $PHASES " == *" scale "* ]]; then
  total=$((WORKSPACES * PER_WS))
  syncer_pid=$(pgrep -f -- "syncer --control $CONTROL --cluster east" | head -1)
  admin=$(ss -ltnp 2>/dev/null | awk -v p="pid=$syncer_pid," '$0 ~ p { print $4 }' | while read -r a; do
    curl -fs "http://$a/readyz" > /dev/null 2>&1 && echo "$a" && break; done)
  writes() { curl -fs "http://$admin/metrics" | awk '/^sluice_syncer_writes_total/ { s += $2 } END { print s + 0 }'; }
  for w in $(seq "$WORKSPACES"); do
    echo "{\"apiVersion\":\"sluice.dev/v1alpha1\",\"kind\":\"Workspace\",\"metadata\":{\"name\":\"w$w\"}}"
  done | up apply -f - > /dev/null
  for w in $(seq "$WORKSPACES"); do
    "$SLUICE" kubeconfig --data-dir "$work/dev/control" --workspace "root:w$w" > "$work/w$w.kubeconfig"
    {
      echo '{"apiVersion":"v1","kind":"List","items":['
      echo '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"load","labels":{"sluice.dev/cluster":"east"}}}'
      for c in $(seq "$PER_WS"); do
        echo ",{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c$c\",\"namespace\":\"load\"},\"data\":{\"k\":\"v$c\"}}"
      done
      echo ']}'
    } > "$work/w$w.json"
  done
  rss_before=$(awk '/VmRSS/ { print $2 }' "/proc/$syncer_pid/status")
  t0=$(now)
  seq "$WORKSPACES" | xargs -P 4 -I{} sh -c "until \"$KUBECTL\" --kubeconfig \"$work/w{}.kubeconfig\" --cache-dir \"$work/cache-{}\" apply -f \"$work/w{}.json\" > /dev/null 2>&1; do sleep 0.2; done"
  applied=$(now)
  for _ in $(seq 6000); do
    n=$(east get cm -A -l sluice.dev/synced=true --no-headers 2>/dev/null | wc -l)
    [ "$n" -ge "$total" ] && break
    sleep 0.1
  done
  done_at=$(now)
  rss=$(awk '/VmRSS/ { print $2 }' "/proc/$syncer_pid/status")
  echo "sync $total ConfigMaps in $WORKSPACES logical clusters: applied in $(secs "$t0" "$applied") s, all downstream after $(secs "$t0" "$done_at") s ($n seen); syncer RSS $((rss_before / 1024)) -> $((rss / 1024)) MiB"
  sleep 5
  ticks() { awk '{ print $14 + $15 }' "/proc/$syncer_pid/stat"; }
  w0=$(writes); c0=$(ticks)
  sleep "$QUIET"
  w1=$(writes); c1=$(ticks)
  hz=$(getconf CLK_TCK)
  echo "steady state over ${QUIET} s: syncer CPU $(awk -v t=$((c1 - c0)) -v hz="$hz" -v q="$QUIET" 'BEGIN { printf "%.2f%%", 100 * t / hz / q }'), writes $((w1 - w0))"
  : > "$work/lat"
  for s in $(seq "$SAMPLES"); do
    w=$(( (s % WORKSPACES) + 1 ))
    dns=$("$KUBECTL" --kubeconfig "$EAST" get ns -l sluice.dev/synced=true -o json | \
      python3 -c "import json,sys; d=json.load(sys.stdin); print([n['metadata']['name'] for n in d['items'] if n['metadata']['annotations'].get('sluice.dev/logical-cluster')=='root:w$w'][0])")
    t0=$(now)
    "$KUBECTL" --kubeconfig "$work/w$w.kubeconfig" --cache-dir "$work/cache-$w" -n load create configmap "probe$s" --from-literal=k=v > /dev/null
    for _ in $(seq 3000); do
      east -n "$dns" get cm "probe$s" > /dev/null 2>&1 && break
      sleep 0.01
    done
    secs "$t0" "$(now)" >> "$work/lat"
  done
  echo "apply-to-downstream at $total objects (includes two kubectl process starts, ~0.1 s): p50 $(pct 50 < "$work/lat") s  p99 $(pct 99 < "$work/lat") s  (n=$SAMPLES; Karmada published p99: 1.30 s push, 0.99 s pull)"
fi
