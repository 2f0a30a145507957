#!/usr/bin/env bash
# HAProxy dressed as `sluice proxy` for the side-by-side scripts that start a BEFORE
# binary with `proxy --listen ADDR --upstream ADDR ...` (e2e/bench/proxy_limits.sh): one
# thread, the same settings as e2e/bench/proxy.sh's HAProxy, HTTP/2 to the upstream
# (the gRPC load; HTTP/1.1 clients are then sent on over HTTP/2 too). Other options are
# ignored. It execs HAProxy, so the pid the script measures is HAProxy's.
#
#   LOADS=grpc BEFORE=e2e/bench/haproxy_as_proxy.sh e2e/bench/proxy_limits.sh
set -euo pipefail
listen= upstream=
while (($#)); do
  case $1 in
  --listen) listen=$2; shift ;;
  --upstream) upstream=$2; shift ;;
  esac
  shift
done
[[ -n $listen && -n $upstream ]] || { echo "usage: $0 proxy --listen ADDR --upstream ADDR" >&2; exit 2; }
cfg=$(mktemp --suffix=.cfg)
cat >"$cfg" <<CFG
global
    nbthread 1
    maxconn 4096

defaults
    mode http
    maxconn 4096
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    http-reuse always

frontend bench
    bind $listen
    default_backend backend

backend backend
    server s1 $upstream proto h2
CFG
haproxy -c -q -f "$cfg"
echo "proxy: listening on $listen"
exec haproxy -db -f "$cfg"
