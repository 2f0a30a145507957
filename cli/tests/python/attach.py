"""Attach with the Kubernetes Python client's `stream` (WebSocket channels), through a
logical cluster: a line to the container's stdin, its answer from the container's output.

usage: attach.py KUBECONFIG NAMESPACE POD CONTAINER
"""
import sys
import time

from kubernetes import client, config
from kubernetes.stream import stream

kubeconfig, namespace, pod, container = sys.argv[1:5]
config.load_kube_config(config_file=kubeconfig)
v1 = client.CoreV1Api()
session = stream(
    v1.connect_get_namespaced_pod_attach,
    pod,
    namespace,
    container=container,
    stdin=True,
    stdout=True,
    stderr=False,
    tty=False,
    _preload_content=False,
)
session.write_stdin("from python\n")
heard = ""
deadline = time.time() + 30
while "heard: from python" not in heard and session.is_open() and time.time() < deadline:
    session.update(timeout=1)
    heard += session.read_stdout() if session.peek_stdout() else ""
session.close()
assert "heard: from python\n" in heard, repr(heard)
print("python attach: ok")
