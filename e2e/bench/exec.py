#!/usr/bin/env python3
"""`kubectl exec -- true` round trips through the logical cluster and straight to the
physical cluster the pod runs on, side by side (issue 37, Done-when 2, first half).

    cargo build --release -p sluice && e2e/bench/exec.py
    N=100 ROUNDS=6 KUBECTL=.venv/bin/kubectl e2e/bench/exec.py

Starts `sluice dev up` (east, west) in a temporary directory, runs one busybox pod on east
through the logical cluster, then times N execs per round each way, ROUNDS rounds, the two
ways interleaved (odd rounds logical first, even rounds direct first). Each figure is one
whole `kubectl exec` process, start to exit: what a user waits for, kubectl's own start
included (the same on both sides). Prints p50 and p99 of each way over all rounds and the
ratio logical / direct; every exec must exit 0.
"""

import os
import sys
import time

from devup import KUBECTL, app_on_east, dev_up, kubectl

N = int(os.environ.get("N", "50"))
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
      - {name: main, image: busybox, command: ["sleep", "3600"]}
"""


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main():
    with dev_up("exec-bench") as state:
        control, east, downstream_ns, pod, _ = app_on_east("exec-bench", state, APP)
        ways = {
            "logical cluster": [control, "-n", "bench", "exec", pod, "--", "true"],
            "physical cluster": [east, "-n", downstream_ns, "exec", pod, "--", "true"],
        }
        times = {w: [] for w in ways}
        print(f"exec-bench: pod {pod}, {ROUNDS} rounds x {N} execs each way ({KUBECTL})",
              file=sys.stderr)
        for r in range(ROUNDS):
            order = list(ways) if r % 2 == 0 else list(reversed(ways))
            for way in order:
                kubeconfig, *args = ways[way]
                for _ in range(N):
                    t = time.perf_counter()
                    kubectl(kubeconfig, *args)
                    times[way].append((time.perf_counter() - t) * 1000)
            print(f"exec-bench: round {r + 1}/{ROUNDS} done", file=sys.stderr)
        print(f"{'kubectl exec -- true':<28} {'p50 ms':>8} {'p99 ms':>8} {'n':>5}")
        for way, xs in times.items():
            print(f"{way:<28} {percentile(xs, 50):8.1f} {percentile(xs, 99):8.1f} {len(xs):5}")
        lg, ph = times["logical cluster"], times["physical cluster"]
        print(f"{'ratio logical / physical':<28} {percentile(lg, 50) / percentile(ph, 50):8.2f}x"
              f" {percentile(lg, 99) / percentile(ph, 99):7.2f}x")


if __name__ == "__main__":
    main()
