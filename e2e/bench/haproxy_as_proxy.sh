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
# shellcheck source=e2e/bench/haproxy_cfg.sh
source "$(dirname "$0")/haproxy_cfg.sh"
cfg=$(mktemp --suffix=.cfg)
haproxy_http_cfg "$listen" "$upstream" "proto h2" >"$cfg"
haproxy -c -q -f "$cfg"
echo "proxy: listening on $listen"
exec haproxy -db -f "$cfg"
