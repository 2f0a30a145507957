# Shared by the side-by-side scripts (proxy_limits.sh, tunnel_ab.sh); source it after
# `set -euo pipefail`. Gives a work directory `$work` removed on exit, `pids` (processes
# killed on exit), and:
#   port                   a free loopback TCP port
#   wait_line FILE REGEX   wait up to 30 s for a line of FILE to match REGEX, else exit 1
#   cpu_us PID...          the CPU time (user + system) of the processes, in microseconds
#   rss_kib PID            resident memory of a process (VmRSS), in KiB
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_line() { # FILE REGEX
  for _ in $(seq 300); do
    grep -qE "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "no line matching $2 in $1:"; cat "$1"; exit 1
}

cpu_us() {
  local t=0 p
  for p in "$@"; do
    t=$((t + $(awk -v hz="$(getconf CLK_TCK)" '{ printf "%d\n", ($14 + $15) * 1000000 / hz }' "/proc/$p/stat")))
  done
  echo "$t"
}

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
