#!/usr/bin/env python3
"""Port-forward throughput through the logical cluster, straight to the physical cluster's
API, and straight to the pod, side by side (issue 37, Done-when 2, second half).

    cargo build --release -p sluice && e2e/bench/portforward.py
    MB=256 ROUNDS=6 KUBECTL=.venv/bin/kubectl e2e/bench/portforward.py

Starts `sluice dev up` (east, west) in a temporary directory, runs one echo pod on east
through the logical cluster, and keeps one `kubectl port-forward` per way open:
- "logical, tunnel": through the control plane's logical cluster (kubectl's default:
  SPDY tunneled in a WebSocket), on to the syncer of east, east's API server, its node;
- "logical, SPDY": the same with KUBECTL_PORT_FORWARD_WEBSOCKETS=false;
- "physical, tunnel": kubectl against east's own API server;
- "straight to the pod": a TCP connection to the pod's address, no port-forward at all.
Each round sends MB MiB through each way to the pod's TCP echo (port 9000) on one
connection, reading the echo back as it comes, the ways in a rotated order per round. A
figure is MiB sent / seconds until the last byte came back. Prints the median and range of
each way over the rounds and the ratio of each to the logical tunnel; every byte must
come back unchanged.
"""

import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time

from devup import KUBECTL, app_on_east, dev_up

MB = int(os.environ.get("MB", "128"))
ROUNDS = int(os.environ.get("ROUNDS", "4"))

APP = """apiVersion: apps/v1
kind: Deployment
metadata: {name: bench, namespace: bench}
spec:
  replicas: 1
  selector: {matchLabels: {app: bench}}
  template:
    metadata: {labels: {app: bench}}
    spec:
      containers:
      - {name: main, image: sluice/echo}
"""


def port_forward(kubeconfig, namespace, pod, websocket):
    """A `kubectl port-forward` to the pod's 9000, and the local port it listens on."""
    env = dict(os.environ, KUBECTL_PORT_FORWARD_WEBSOCKETS="true" if websocket else "false")
    proc = subprocess.Popen(
        [KUBECTL, "--kubeconfig", kubeconfig, "-n", namespace, "port-forward",
         "--address=127.0.0.1", f"pod/{pod}", ":9000"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    line = proc.stdout.readline()
    m = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) ->", line)
    if not m:
        proc.kill()
        sys.exit(f"portforward-bench: kubectl port-forward said {line!r}")
    threading.Thread(target=lambda: proc.stdout.read(), daemon=True).start()
    return proc, ("127.0.0.1", int(m.group(1)))


def echo_through(address, size):
    """Seconds to send `size` bytes to the echo at `address` and read them all back."""
    chunk = bytes(i % 251 for i in range(64 * 1024))
    s = socket.create_connection(address, timeout=60)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    start = time.perf_counter()

    def send():
        left = size
        while left > 0:
            n = min(left, len(chunk))
            s.sendall(chunk[:n])
            left -= n
        s.shutdown(socket.SHUT_WR)

    writer = threading.Thread(target=send)
    writer.start()
    got, offset, buf = 0, 0, bytearray(256 * 1024)
    while got < size:
        n = s.recv_into(buf)
        if n == 0:
            break
        # Spot-check the content: the echo is the pattern, in order.
        if buf[0] != chunk[offset % len(chunk)]:
            sys.exit("portforward-bench: the echo came back changed")
        got += n
        offset += n
    took = time.perf_counter() - start
    writer.join()
    s.close()
    if got != size:
        sys.exit(f"portforward-bench: {got} of {size} bytes came back")
    return took


def main():
    forwards = []
    with dev_up("portforward-bench") as state:
        control, east, downstream_ns, pod, ip = app_on_east("portforward-bench", state, APP)
        try:
            ways = {}
            for name, kubeconfig, ns, websocket in [
                ("logical, tunnel", control, "bench", True),
                ("logical, SPDY", control, "bench", False),
                ("physical, tunnel", east, downstream_ns, True),
            ]:
                proc, address = port_forward(kubeconfig, ns, pod, websocket)
                forwards.append(proc)
                ways[name] = address
            ways["straight to the pod"] = (ip, 9000)
            size = MB * 1024 * 1024
            for address in ways.values():
                echo_through(address, 1024 * 1024)  # warm up each way
            rates = {w: [] for w in ways}
            print(f"portforward-bench: pod {pod} at {ip}, {ROUNDS} rounds x {MB} MiB each way "
                  f"({KUBECTL})", file=sys.stderr)
            names = list(ways)
            for r in range(ROUNDS):
                order = names[r % len(names):] + names[:r % len(names)]
                for way in order:
                    rates[way].append(MB / echo_through(ways[way], size))
                print(f"portforward-bench: round {r + 1}/{ROUNDS} done", file=sys.stderr)
            print(f"{'MiB/s through the echo':<24} {'median':>8} {'min':>8} {'max':>8}  ratio to logical tunnel")
            base = statistics.median(rates["logical, tunnel"])
            for way, xs in rates.items():
                med = statistics.median(xs)
                print(f"{way:<24} {med:8.1f} {min(xs):8.1f} {max(xs):8.1f}  {med / base:6.2f}x")
        finally:
            for p in forwards:
                p.kill()
                p.wait()


if __name__ == "__main__":
    main()
