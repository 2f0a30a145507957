#!/usr/bin/env python3
"""A claim's data on a move (docs/stateful.md), for claims of 10 MB, 100 MB and 1 GB: a
writer on east fills its claim with a blob of that size and appends a timestamped record
every 20 ms; the namespace moves to west by one label. Per size: the total move time
(label → Placed on west), the write pause (east's last record → west's first, from the
records themselves), and the bulk pass's throughput through the clusterset's tunnel (the
pull mover's own figures, from the claim's condition). Side by side on the same machine:
the same bytes copied by `cp` and by the mover over loopback without the tunnel, with the
ratios.

    e2e/bench/stateful.py            # needs target/release/sluice; SIZES="10 100 1000" (MB)
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from devup import SLUICE, dev_up, kubectl, wait  # noqa: E402

BENCH = "stateful"
SIZES = [int(s) for s in os.environ.get("SIZES", "10 100 1000").split()]

APP = """apiVersion: v1
kind: Namespace
metadata: {{name: {ns}, labels: {{sluice.dev/cluster: east}}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data, namespace: {ns}}}
spec:
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: {claim}Mi}}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: writer, namespace: {ns}}}
spec:
  replicas: 1
  strategy: {{type: Recreate}}
  selector: {{matchLabels: {{app: writer}}}}
  template:
    metadata: {{labels: {{app: writer}}}}
    spec:
      containers:
      - name: main
        image: busybox
        command:
        - sh
        - -c
        - |
          cd /data
          [ -f blob ] || {{ head -c {bytes} /dev/urandom > blob.tmp && mv blob.tmp blob; }}
          i=$(cat log 2>/dev/null | wc -l)
          trap 'i=$((i+1)); echo "$i $SLUICE_CLUSTER stopped $(date +%s%N)" >> log; exit 0' TERM
          while :; do i=$((i+1)); echo "$i $SLUICE_CLUSTER $(date +%s%N)" >> log; sleep 0.02; done
        volumeMounts: [{{name: data, mountPath: /data}}]
      volumes: [{{name: data, persistentVolumeClaim: {{claimName: data}}}}]
"""


def pod_on(kc, ns, cluster):
    out = kubectl(kc, "-n", ns, "get", "pod", "-l", f"app=writer,sluice.dev/cluster={cluster}",
                  "--field-selector=status.phase=Running", "-o", "jsonpath={.items[0].metadata.name}")
    return out.strip() or None


def move(kc, size):
    ns = f"s{size}"
    kubectl(kc, "apply", "-f", "-", stdin=APP.format(ns=ns, claim=size * 2 + 50, bytes=size * 1000 * 1000))
    east = wait(BENCH, f"{ns}'s writer on east", lambda: pod_on(kc, ns, "east"), deadline=180)
    wait(BENCH, f"{ns}'s blob", lambda: "blob" in kubectl(kc, "-n", ns, "exec", east, "--", "ls", "/data").split(),
         deadline=300)
    start = time.time()
    kubectl(kc, "label", "namespace", ns, "sluice.dev/cluster=west", "--overwrite")
    bulk = None
    while time.time() - start < 900:
        cond = kubectl(kc, "-n", ns, "get", "pvc", "data", "-o",
                       "jsonpath={.status.conditions[?(@.type==\"sluice.dev/Copied\")].message}")
        if bulk is None and "bulk copy" in cond:
            bulk = cond
        placed = kubectl(kc, "get", "ns", ns, "-o",
                         "jsonpath={.status.conditions[?(@.type==\"Placed\")].reason} {.metadata.labels}")
        if placed.startswith("Placed ") and "state.sluice.dev/east" not in placed:
            break
        time.sleep(0.3)
    else:
        sys.exit(f"{BENCH}: {ns} did not move within 900 s")
    total = time.time() - start
    west = wait(BENCH, f"{ns}'s writer on west", lambda: pod_on(kc, ns, "west"))
    time.sleep(1)
    lines = [l.split() for l in kubectl(kc, "-n", ns, "exec", west, "--", "cat", "/data/log").splitlines()]
    stop = next(i for i, l in enumerate(lines) if l[1] == "east" and l[2] == "stopped")
    pause = (int(lines[stop + 1][-1]) - int(lines[stop][-1])) / 1e9
    gaps = sum(1 for i, l in enumerate(lines) if l[0] != str(i + 1))
    m = re.search(r"\(([\d.]+) MiB\) fetched in ([\d.]+) s \(([\d.]+) MiB/s\)", bulk or "")
    mibps = float(m.group(3)) if m else float("nan")
    kubectl(kc, "delete", "namespace", ns, "--wait=false")
    return total, pause, mibps, gaps


def local_copies(size):
    """MiB/s of `cp` and of the mover over loopback (no tunnel), for one file of `size` MB."""
    with tempfile.TemporaryDirectory() as tmp:
        src, dst1, dst2 = (os.path.join(tmp, d) for d in ("src", "cp", "mover"))
        for d in (src, dst2):
            os.makedirs(d)
        with open(os.path.join(src, "blob"), "wb") as f:
            f.write(os.urandom(size * 1000 * 1000))
        mib = size * 1000 * 1000 / (1 << 20)
        t = time.time()
        # Both sides to the page cache, as the mover writes (neither syncs).
        shutil.copytree(src, dst1)
        cp = mib / (time.time() - t)
        serve = subprocess.Popen([SLUICE, "mover", "serve", "--dir", src, "--listen", "127.0.0.1:18089"],
                                 stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            out = subprocess.run([SLUICE, "mover", "pull", "--dir", dst2, "--from", "127.0.0.1:18089",
                                  "--pass", "bulk"], capture_output=True, text=True, check=True).stdout
            import json
            r = json.loads(out.strip().splitlines()[-1])
            direct = mib / r["seconds"]
        finally:
            serve.terminate()
            serve.wait()
        return cp, direct


def main():
    rows = []
    with dev_up(BENCH) as state:
        kc = os.path.join(state, "control.kubeconfig")
        for size in SIZES:
            total, pause, tunnel, gaps = move(kc, size)
            cp, direct = local_copies(size)
            rows.append((size, total, pause, tunnel, direct, cp, gaps))
            print(f"{size} MB: move {total:.1f} s, write pause {pause:.2f} s, bulk over the tunnel "
                  f"{tunnel:.0f} MiB/s, mover over loopback {direct:.0f} MiB/s, cp {cp:.0f} MiB/s, "
                  f"records lost {gaps}", flush=True)
    print()
    print("| claim | move (s) | write pause (s) | tunnel MiB/s | loopback mover MiB/s | cp MiB/s | tunnel/cp | records lost |")
    print("|---|---|---|---|---|---|---|---|")
    for size, total, pause, tunnel, direct, cp, gaps in rows:
        print(f"| {size} MB | {total:.1f} | {pause:.2f} | {tunnel:.0f} | {direct:.0f} | {cp:.0f} | "
              f"{tunnel / cp:.2f}× | {gaps} |")


if __name__ == "__main__":
    main()
