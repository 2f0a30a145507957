# shellcheck shell=bash
# haproxy_http_cfg LISTEN UPSTREAM [SERVER_OPTS [GLOBAL_OPT]]: the HTTP configuration the
# side-by-side scripts give HAProxy — one thread, limits out of the way, connections to
# the upstream reused — listening on LISTEN and forwarding to UPSTREAM (SERVER_OPTS such
# as `proto h2` for the server line, GLOBAL_OPT such as `busy-polling`). Sourced by
# busy-poll.sh and haproxy_as_proxy.sh.
haproxy_http_cfg() {
    cat <<CFG
global
    nbthread 1
    maxconn 4096
${4:+    $4
}
defaults
    mode http
    maxconn 4096
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    http-reuse always

frontend bench
    bind $1
    default_backend backend

backend backend
    server s1 $2${3:+ $3}
CFG
}
