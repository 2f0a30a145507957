#!/usr/bin/env bash
# What an idle fleet costs the control plane, and a move within it, for one or more builds
# side by side (issue 36). For each build, on its own `sluice dev up` (east, west):
#
#   idle-empty   the control plane's CPU (% of one core, from /proc utime+stime) over IDLE
#                seconds with nothing placed but one app
#   move-empty   a move's duration (label change -> A has no copy left, B available) with
#                no other namespaces (ROUNDS moves, east <-> west)
#   fleet        LOGICAL workspaces with PER namespaces each (pinned east or west), created
#                with the real kubectl; waits until every one exists on its cluster
#   idle-fleet   the control plane's CPU with the fleet placed and nothing changing
#   move-fleet   the same move among the fleet
#   passes       the placement passes and quiet wakes the idle window saw (from /metrics,
#                where the build has them)
#   requeue      a Cluster label change among the fleet: from the `kubectl label cluster`
#                that takes a Placement's locationSelector off the namespace's cluster
#                (started before the call: kubectl's own ~0.1 s is in it) to the namespace
#                being given the other cluster (ROUNDS changes; the namespace runs
#                nothing, so this is placement's reaction, not a move)
#
#   BUILDS="before=/tmp/sluice-old after=target/release/sluice" e2e/bench/fleet.sh
#   LOGICAL=100 PER=100 IDLE=30 ROUNDS=3 (defaults: the issue's 10,000 namespaces)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILDS=${BUILDS:-"current=target/release/sluice"}
KUBECTL=${KUBECTL:-kubectl}
LOGICAL=${LOGICAL:-100}
PER=${PER:-100}
IDLE=${IDLE:-30}
ROUNDS=${ROUNDS:-3}
HZ=$(getconf CLK_TCK)

work=$(mktemp -d)
dev_pid=""
stop_dev() {
  if [ -n "$dev_pid" ]; then
    kill -TERM "$dev_pid" 2>/dev/null || true
    wait "$dev_pid" 2>/dev/null || true
    dev_pid=""
  fi
}
cleanup() { stop_dev; rm -rf "$work"; }
trap cleanup EXIT

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f\n", b - a }'; }
median() { sort -n | awk '{ v[NR] = $1 } END { printf "%.3f", v[int((NR + 1) / 2)] }'; }
spread() { sort -n | awk '{ v[NR] = $1 } END { printf "%.3f-%.3f", v[1], v[NR] }'; }
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# The control plane's CPU over IDLE seconds, as % of one core.
idle_cpu() {
  local pid=$1 t0 c0 t1 c1
  t0=$(now); c0=$(ticks "$pid")
  sleep "$IDLE"
  t1=$(now); c1=$(ticks "$pid")
  awk -v c="$((c1 - c0))" -v hz="$HZ" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", 100 * c / hz / (b - a) }'
}

metric() { # metric name summed over its series, from the control plane's /metrics
  "$KUBECTL" --kubeconfig "$CONTROL" get --raw /metrics 2>/dev/null |
    awk -v m="$1" '$1 ~ "^"m"({|$)" { s += $2 } END { printf "%d", s }'
}

app() { # namespace $1 pinned to $2 with a Deployment of 2 echo replicas
  cat <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: $1, labels: {sluice.dev/cluster: $2}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: mover, namespace: $1}
spec:
  replicas: 2
  selector: {matchLabels: {app: mover}}
  template:
    metadata: {labels: {app: mover}}
    spec:
      containers:
      - name: echo
        image: sluice/echo
        readinessProbe: {httpGet: {port: 8080, path: /ready}, periodSeconds: 1}
EOF
}

at=east # where namespace m runs
moves() { # ROUNDS moves of namespace m, one duration per line (to the file $1)
  local from=$at to t0
  to=west; [ "$from" = west ] && to=east
  : > "$1"
  for _ in $(seq "$ROUNDS"); do
    t0=$(now)
    up label namespace m sluice.dev/cluster=$to --overwrite > /dev/null
    for _ in $(seq 6000); do
      gone=$(on $from get deployments -A -o name 2>/dev/null | grep -c deployment.apps/mover || true)
      avail=$(on $to get deployments -A -o jsonpath='{range .items[?(@.metadata.name=="mover")]}{.status.availableReplicas}{end}' 2>/dev/null || true)
      [ "$gone" = 0 ] && [ "$avail" = 2 ] && break
      sleep 0.05
    done
    secs "$t0" "$(now)" >> "$1"
    tmp=$from; from=$to; to=$tmp
  done
  at=$from
}

# ROUNDS Cluster label changes, one reaction time per line (to the file $1): a Placement
# in workspace w1 puts namespace r on the cluster labelled zone=pick; moving the label
# from one cluster to the other must give r the other cluster's state label.
requeues() {
  local w1=("$KUBECTL" --kubeconfig "$CONTROL" --cache-dir "$work/cache-w" --server "$base/clusters/root:w1")
  local from=east to=west t0 t1 tmp watcher
  up label cluster east zone=pick --overwrite > /dev/null
  up label cluster west zone- > /dev/null 2>&1 || true
  cat <<EOF | "${w1[@]}" apply -f - > /dev/null
apiVersion: sluice.dev/v1alpha1
kind: Placement
metadata: {name: zone}
spec:
  locationSelector: {matchLabels: {zone: pick}}
  namespaceSelector: {matchLabels: {tier: r}}
  trafficShift: {durationSeconds: 0}
---
apiVersion: v1
kind: Namespace
metadata: {name: r, labels: {tier: r}}
EOF
  for _ in $(seq 600); do
    "${w1[@]}" get namespace r -o jsonpath='{.metadata.labels}' 2>/dev/null | grep -q "state.sluice.dev/east" && break
    sleep 0.1
  done
  : > "$1"
  for _ in $(seq "$ROUNDS"); do
    # Every change of r, time-stamped as kubectl's watch prints it.
    ( "${w1[@]}" get namespace r --watch -o jsonpath='{.metadata.labels}{"\n"}' 2>/dev/null |
        while IFS= read -r line; do printf '%s %s\n' "$(now)" "$line"; done > "$work/watch-r" ) &
    watcher=$!
    # Both clusters match for a moment (r stays where it is: it is established there);
    # the change that requeues r is the old cluster losing the label.
    up label cluster $to zone=pick --overwrite > /dev/null
    sleep 2
    t0=$(now)
    up label cluster $from zone- > /dev/null
    for _ in $(seq 1200); do
      grep -q "state.sluice.dev/$to" "$work/watch-r" 2>/dev/null && break
      sleep 0.05
    done
    t1=$(grep -m1 "state.sluice.dev/$to" "$work/watch-r" | cut -d' ' -f1 || true)
    pkill -P "$watcher" 2>/dev/null || true
    kill "$watcher" 2>/dev/null || true
    wait "$watcher" 2>/dev/null || true
    if [ -n "$t1" ]; then secs "$t0" "$t1" >> "$1"; fi
    # Until r has left the old cluster, so the next round starts from one cluster.
    for _ in $(seq 1200); do
      "${w1[@]}" get namespace r -o jsonpath='{.metadata.labels}' 2>/dev/null | grep -q "state.sluice.dev/$from" || break
      sleep 0.1
    done
    tmp=$from; from=$to; to=$tmp
  done
}

results=()
for build in $BUILDS; do
  name=${build%%=*}; bin=${build#*=}
  state="$work/$name"
  echo "== $name ($bin): dev up" >&2
  SLUICE_LOG=warn "$bin" dev up --state "$state" --clusters east,west > "$work/$name.out" 2> "$work/$name.err" &
  dev_pid=$!
  for _ in $(seq 600); do grep -qx ready "$work/$name.out" 2>/dev/null && break; sleep 0.1; done
  grep -qx ready "$work/$name.out" || { cat "$work/$name.err"; exit 1; }
  CONTROL="$state/control.kubeconfig"
  up() { "$KUBECTL" --kubeconfig "$CONTROL" --cache-dir "$work/cache-c" "$@"; }
  on() { local c=$1; shift; "$KUBECTL" --kubeconfig "$state/clusters/$c.kubeconfig" --cache-dir "$work/cache-$c" "$@"; }
  server=$("$KUBECTL" --kubeconfig "$CONTROL" config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  base=${server%/clusters/*}
  control_pid=$(pgrep -f " control --data-dir $state/control " | head -1)
  [ -n "$control_pid" ] || { echo "no control plane process for $state" >&2; exit 1; }

  at=east
  app m east | up apply -f - > /dev/null
  up -n m rollout status deployment/mover --timeout=300s > /dev/null
  sleep 3
  echo "== $name: idle, nothing else placed (${IDLE}s)" >&2
  idle_empty=$(idle_cpu "$control_pid")
  echo "== $name: $ROUNDS moves, nothing else placed" >&2
  moves "$work/move-empty"; move_empty=$(cat "$work/move-empty")

  echo "== $name: $LOGICAL workspaces x $PER namespaces" >&2
  downstream() { echo $(( $(on east get namespaces --no-headers 2>/dev/null | wc -l) + $(on west get namespaces --no-headers 2>/dev/null | wc -l) )); }
  before=$(downstream)
  t0=$(now)
  for l in $(seq "$LOGICAL"); do
    printf 'apiVersion: sluice.dev/v1alpha1\nkind: Workspace\nmetadata: {name: w%s}\n---\n' "$l"
  done | up apply -f - > /dev/null
  for l in $(seq "$LOGICAL"); do
    for _ in $(seq 100); do
      "$KUBECTL" --kubeconfig "$CONTROL" --cache-dir "$work/cache-w" --server "$base/clusters/root:w$l" \
        get namespaces > /dev/null 2>&1 && break
      sleep 0.1
    done
    for n in $(seq "$PER"); do
      c=east; [ $((n % 2)) = 0 ] && c=west
      printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: n%s, labels: {sluice.dev/cluster: %s}}\n---\n' "$n" "$c"
    done | "$KUBECTL" --kubeconfig "$CONTROL" --cache-dir "$work/cache-w" --server "$base/clusters/root:w$l" apply -f - > /dev/null
    [ $((l % 10)) = 0 ] && echo "   $l of $LOGICAL workspaces" >&2
  done
  # Every placed namespace exists in every cluster (MCS namespace sameness: a cluster
  # imports a Service only where its namespace exists), so both clusters gain each one.
  want=$((before + 2 * LOGICAL * PER))
  for _ in $(seq 3000); do
    placed=$(downstream)
    [ "$placed" -ge "$want" ] && break
    sleep 1
  done
  fleet_s=$(secs "$t0" "$(now)")
  echo "   $((placed - before)) downstream namespaces in the two clusters (want $((2 * LOGICAL * PER))) in ${fleet_s}s" >&2
  sleep 10
  # Builds before the controller runtime count passes; after it, reconciles of one key.
  passes0=$(( $(metric sluice_apiserver_placement_passes_total) + $(metric sluice_apiserver_placement_reconciles_total) ))
  quiet0=$(metric sluice_apiserver_placement_quiet_wakes_total)
  echo "== $name: idle with the fleet (${IDLE}s)" >&2
  idle_fleet=$(idle_cpu "$control_pid")
  passes=$(( $(metric sluice_apiserver_placement_passes_total) + $(metric sluice_apiserver_placement_reconciles_total) - passes0 ))
  quiet=$(( $(metric sluice_apiserver_placement_quiet_wakes_total) - quiet0 ))
  echo "== $name: $ROUNDS moves among the fleet" >&2
  moves "$work/move-fleet"; move_fleet=$(cat "$work/move-fleet")
  echo "== $name: $ROUNDS Cluster label changes among the fleet" >&2
  requeues "$work/requeue"; requeue=$(cat "$work/requeue")
  rss=$(awk '/VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$control_pid/status")
  stop_dev

  results+=("$name|$idle_empty|$idle_fleet|$(echo "$move_empty" | median) ($(echo "$move_empty" | spread))|$(echo "$move_fleet" | median) ($(echo "$move_fleet" | spread))|$(awk -v a="$(echo "$move_fleet" | median)" -v b="$(echo "$move_empty" | median)" 'BEGIN { printf "%.2f", a / b }')|$(echo "$requeue" | median) ($(echo "$requeue" | spread))|$passes / $quiet|$rss|$fleet_s")
done

echo
echo "fleet: $LOGICAL logical clusters x $PER namespaces; idle windows ${IDLE}s; moves: median (min-max) of $ROUNDS"
printf '| build | CPU idle, one app | CPU idle, fleet | move, alone (s) | move, in fleet (s) | in fleet / alone | Cluster label to namespace requeued (s) | idle passes or reconciles / quiet wakes | RSS (MiB) | fleet placed in (s) |\n'
printf '|---|---|---|---|---|---|---|---|---|---|\n'
for r in "${results[@]}"; do
  IFS='|' read -r n a b c d e f g h i <<< "$r"
  printf '| %s | %s%% | %s%% | %s | %s | %s | %s | %s | %s | %s |\n' "$n" "$a" "$b" "$c" "$d" "$e" "$f" "$g" "$h" "$i"
done
