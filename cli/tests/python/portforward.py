"""Port-forward with the Kubernetes Python client's `stream.portforward` (WebSocket
channels), through a logical cluster: HTTP on one port, a TCP echo on another, and a port
nobody listens on, whose error is said on its own channel while the others carry on.

usage: portforward.py KUBECONFIG NAMESPACE POD CLUSTER
"""
import json
import sys
import time

from kubernetes import client, config
from kubernetes.stream import portforward

kubeconfig, namespace, pod, cluster = sys.argv[1:5]
config.load_kube_config(config_file=kubeconfig)
v1 = client.CoreV1Api()
pf = portforward(
    v1.connect_get_namespaced_pod_portforward, pod, namespace, ports="8080,9000,9999"
)

echo = pf.socket(9000)
echo.setblocking(True)
echo.sendall(b"echo me")
got = b""
while len(got) < 7:
    got += echo.recv(100)
assert got == b"echo me", got

http = pf.socket(8080)
http.setblocking(True)
http.sendall(b"GET /from-python HTTP/1.1\r\nHost: pf\r\n\r\n")
data = b""
while b"\r\n\r\n" not in data:
    data += http.recv(4096)
head, body = data.split(b"\r\n\r\n", 1)
length = next(
    int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
)
while len(body) < length:
    body += http.recv(4096)
answer = json.loads(body)
assert head.startswith(b"HTTP/1.1 200"), head
assert answer["cluster"] == cluster and answer["path"] == "/from-python", answer

deadline = time.time() + 30
while pf.error(9999) is None and time.time() < deadline:
    time.sleep(0.1)
error = pf.error(9999) or ""
assert "error forwarding port 9999" in error, error

echo.sendall(b"still here")
got = b""
while len(got) < 10:
    got += echo.recv(100)
assert got == b"still here", got
pf.close()
print("python port-forward: ok")
