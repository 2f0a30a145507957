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
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SLUICE = os.environ.get("SLUICE", os.path.join(ROOT, "target", "release", "sluice"))
KUBECTL = os.environ.get("KUBECTL", "kubectl")
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


def kubectl(kubeconfig, *args, stdin=None):
    return subprocess.run(
        [KUBECTL, "--kubeconfig", kubeconfig, *args],
        input=stdin, capture_output=True, text=True, check=True,
    ).stdout


def wait(what, check, deadline=90):
    end = time.time() + deadline
    while time.time() < end:
        try:
            value = check()
            if value:
                return value
        except subprocess.CalledProcessError:
            pass
        time.sleep(0.5)
    sys.exit(f"portforward-bench: {what} did not happen within {deadline} s")


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
    if not os.access(SLUICE, os.X_OK):
        sys.exit(f"portforward-bench: {SLUICE} not found: cargo build --release -p sluice")
    forwards = []
    with tempfile.TemporaryDirectory() as tmp:
        state = os.path.join(tmp, "state")
        dev = subprocess.Popen(
            [SLUICE, "dev", "up", "--state", state],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        try:
            if dev.stdout.readline().strip() != "ready":
                sys.exit("portforward-bench: dev up did not become ready")
            control = os.path.join(state, "control.kubeconfig")
            east = os.path.join(state, "clusters", "east.kubeconfig")
            kubectl(control, "create", "namespace", "bench")
            kubectl(control, "label", "namespace", "bench", "sluice.dev/cluster=east")
            kubectl(control, "apply", "-f", "-", stdin=APP)

            def running():
                out = kubectl(
                    east, "get", "pods", "-A", "-l", "app=bench", "-o",
                    "jsonpath={range .items[*]}{.metadata.namespace} {.metadata.name} {.status.podIP} {.status.phase}{\"\\n\"}{end}",
                )
                rows = [line.split() for line in out.splitlines() if line.strip()]
                return rows[0][:3] if len(rows) == 1 and rows[0][3] == "Running" else None

            downstream_ns, pod, ip = wait("the pod running on east", running)
            wait("the pod's mirror in the logical cluster", lambda: kubectl(
                control, "-n", "bench", "get", "pod", pod, "-o", "jsonpath={.status.phase}") == "Running")
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
            dev.terminate()
            dev.wait()


if __name__ == "__main__":
    main()
