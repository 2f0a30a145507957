#!/usr/bin/env bash
# Placement and syncer figures on the local clusterset (`sluice dev up`), with the real
# kubectl against the logical clusters only:
#
#   apply     apply-to-Available: `kubectl apply` of a namespace (pinned to east) with a
#             Deployment of 2 sluice/echo replicas and a Service, until `kubectl rollout
#             status` upstream returns (ROUNDS times: min/median/max).
#   move      a move's duration: relabel the namespace to west, until east has no copy
#             left and west's Deployment is available (ROUNDS times, east <-> west).
#
#   e2e/bench/placement.sh            # needs target/release/sluice
#
# The syncer at 1,000 and 10,000 objects (and its latency against Karmada's) is measured by
# `cargo bench -p sluice-e2e --bench sync_scale`.
set -euo pipefail
cd "$(dirname "$0")/../.."
SLUICE=${SLUICE:-target/release/sluice}
KUBECTL=${KUBECTL:-kubectl}
ROUNDS=${ROUNDS:-5}
PHASES=${1:-"apply move"}

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
