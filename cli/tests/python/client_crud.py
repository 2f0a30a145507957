"""The Kubernetes Python client against a Sluice logical cluster: CRUD, list, watch.

Usage: client_crud.py KUBECONFIG
Exits non-zero with a message on the first failed expectation.
"""
import sys
import threading

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

config.load_kube_config(config_file=sys.argv[1])
core = client.CoreV1Api()
apps = client.AppsV1Api()


def expect(cond, what):
    if not cond:
        print("FAILED: " + what, file=sys.stderr)
        sys.exit(1)


core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="py")))
cm = core.create_namespaced_config_map(
    "py", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cfg", labels={"app": "py"}), data={"k": "v"})
)
expect(cm.metadata.uid, "create returns a uid")
got = core.read_namespaced_config_map("cfg", "py")
expect(got.data == {"k": "v"}, "read returns the data")

got.data["k"] = "v2"
replaced = core.replace_namespaced_config_map("cfg", "py", got)
expect(int(replaced.metadata.resource_version) > int(cm.metadata.resource_version), "replace bumps resourceVersion")
patched = core.patch_namespaced_config_map("cfg", "py", {"data": {"extra": "x"}})
expect(patched.data == {"k": "v2", "extra": "x"}, "patch merges")

try:
    core.replace_namespaced_config_map("cfg", "py", got)
    expect(False, "a stale replace must fail")
except ApiException as e:
    expect(e.status == 409, "stale replace is 409, got %s" % e.status)

dep = apps.create_namespaced_deployment("py", {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
             "template": {"metadata": {"labels": {"app": "web"}},
                          "spec": {"containers": [{"name": "web", "image": "sluice/echo"}]}}},
})
expect(dep.spec.replicas == 2, "deployment created")
scale = apps.read_namespaced_deployment_scale("web", "py")
expect(scale.spec.replicas == 2, "scale subresource")

listed = core.list_namespaced_config_map("py", label_selector="app=py")
expect([c.metadata.name for c in listed.items] == ["cfg"], "list with a label selector")

events = []
w = watch.Watch()


def watcher():
    for ev in w.stream(core.list_namespaced_config_map, "py", resource_version=listed.metadata.resource_version, timeout_seconds=10):
        events.append((ev["type"], ev["object"].metadata.name))
        if ev["type"] == "DELETED":
            w.stop()


t = threading.Thread(target=watcher)
t.start()
import time
time.sleep(0.5)
core.create_namespaced_config_map("py", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="second")))
core.patch_namespaced_config_map("second", "py", {"data": {"a": "b"}})
core.delete_namespaced_config_map("second", "py")
t.join(15)
expect(events == [("ADDED", "second"), ("MODIFIED", "second"), ("DELETED", "second")], "watch events: %s" % events)

try:
    core.read_namespaced_config_map("second", "py")
    expect(False, "deleted object must be gone")
except ApiException as e:
    expect(e.status == 404, "read of a deleted object is 404")

core.delete_namespace("py")
print("python client: ok")
