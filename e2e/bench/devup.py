"""What the Python benchmarks share: kubectl against a kubeconfig, polling until a check
holds, and `sluice dev up` in a temporary directory for the length of a `with`."""

import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SLUICE = os.environ.get("SLUICE", os.path.join(ROOT, "target", "release", "sluice"))
KUBECTL = os.environ.get("KUBECTL", "kubectl")


def kubectl(kubeconfig, *args, stdin=None):
    """kubectl's stdout; a failure raises CalledProcessError."""
    return subprocess.run(
        [KUBECTL, "--kubeconfig", kubeconfig, *args],
        input=stdin, capture_output=True, text=True, check=True,
    ).stdout


def wait(bench, what, check, deadline=90):
    """The first truthy value of `check()` within `deadline` seconds, else exit saying so."""
    end = time.time() + deadline
    while time.time() < end:
        try:
            value = check()
            if value:
                return value
        except subprocess.CalledProcessError:
            pass
        time.sleep(0.5)
    sys.exit(f"{bench}: {what} did not happen within {deadline} s")


@contextmanager
def dev_up(bench):
    """`sluice dev up` (east, west) until the block ends: its state directory."""
    if not os.access(SLUICE, os.X_OK):
        sys.exit(f"{bench}: {SLUICE} not found: cargo build --release -p sluice")
    with tempfile.TemporaryDirectory() as tmp:
        state = os.path.join(tmp, "state")
        dev = subprocess.Popen(
            [SLUICE, "dev", "up", "--state", state],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        try:
            if dev.stdout.readline().strip() != "ready":
                sys.exit(f"{bench}: dev up did not become ready")
            yield state
        finally:
            dev.terminate()
            dev.wait(timeout=60)


def app_on_east(bench, state, manifest):
    """Namespace `bench` placed on east with `manifest` (one pod labelled `app=bench`)
    applied through the logical cluster, once that pod runs on east and its mirror is
    Running: the control plane's and east's kubeconfigs, the pod's namespace on east, its
    name and its address."""
    control = os.path.join(state, "control.kubeconfig")
    east = os.path.join(state, "clusters", "east.kubeconfig")
    kubectl(control, "create", "namespace", "bench")
    kubectl(control, "label", "namespace", "bench", "sluice.dev/cluster=east")
    kubectl(control, "apply", "-f", "-", stdin=manifest)

    def running():
        out = kubectl(
            east, "get", "pods", "-A", "-l", "app=bench", "-o",
            "jsonpath={range .items[*]}{.metadata.namespace} {.metadata.name} {.status.podIP} {.status.phase}{\"\\n\"}{end}",
        )
        rows = [line.split() for line in out.splitlines() if line.strip()]
        return rows[0][:3] if len(rows) == 1 and rows[0][3] == "Running" else None

    downstream_ns, pod, ip = wait(bench, "the pod running on east", running)
    wait(bench, "the pod's mirror in the logical cluster", lambda: kubectl(
        control, "-n", "bench", "get", "pod", pod, "-o", "jsonpath={.status.phase}") == "Running")
    return control, east, downstream_ns, pod, ip
