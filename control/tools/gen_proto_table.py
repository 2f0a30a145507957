#!/usr/bin/env python3
"""Derive the Kubernetes protobuf field table from facts: field tags and wire types from
the prost attributes of the k8s-pb crate's sources, JSON field names from the Kubernetes
OpenAPI document (a prost field name is the snake_case of the JSON name, which loses
acronym case: `pod_ip` is `podIP`).

Usage:
  gen_proto_table.py K8S_PB_SRC OPENAPI_JSON > control/src/codec/proto_table.rs

Only messages reachable from the definitions named in ROOTS are emitted.
"""
import json
import os
import re
import sys

src, openapi = sys.argv[1], sys.argv[2]
defs = json.load(open(openapi))["definitions"]

ROOTS = [
    "io.k8s.api.core.v1.Namespace", "io.k8s.api.core.v1.Pod", "io.k8s.api.core.v1.Service",
    "io.k8s.api.core.v1.Endpoints", "io.k8s.api.core.v1.ConfigMap", "io.k8s.api.core.v1.Secret",
    "io.k8s.api.core.v1.ServiceAccount", "io.k8s.api.core.v1.Event", "io.k8s.api.core.v1.Node",
    "io.k8s.api.core.v1.PersistentVolumeClaim", "io.k8s.api.apps.v1.Deployment",
    "io.k8s.api.apps.v1.ReplicaSet", "io.k8s.api.apps.v1.StatefulSet", "io.k8s.api.apps.v1.DaemonSet",
    "io.k8s.api.discovery.v1.EndpointSlice", "io.k8s.api.networking.v1.Ingress",
    "io.k8s.api.coordination.v1.Lease", "io.k8s.api.autoscaling.v1.Scale",
    "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions", "io.k8s.api.core.v1.Binding",
    "io.k8s.api.batch.v1.Job", "io.k8s.api.batch.v1.CronJob",
    "io.k8s.api.autoscaling.v2.HorizontalPodAutoscaler", "io.k8s.api.policy.v1.PodDisruptionBudget",
    "io.k8s.api.core.v1.ReplicationController", "io.k8s.api.core.v1.PersistentVolume",
    "io.k8s.api.storage.v1.StorageClass", "io.k8s.api.networking.v1.NetworkPolicy",
    "io.k8s.api.networking.v1.IngressClass", "io.k8s.api.core.v1.LimitRange",
    "io.k8s.api.core.v1.ResourceQuota", "io.k8s.api.scheduling.v1.PriorityClass",
    "io.k8s.api.core.v1.PodTemplate",
    "io.k8s.api.rbac.v1.Role", "io.k8s.api.rbac.v1.ClusterRole", "io.k8s.api.rbac.v1.RoleBinding",
    "io.k8s.api.rbac.v1.ClusterRoleBinding", "io.k8s.api.authorization.v1.SelfSubjectAccessReview",
    "io.k8s.api.authorization.v1.SelfSubjectRulesReview",
    "io.k8s.api.authorization.v1.SubjectAccessReview",
    "io.k8s.api.authorization.v1.LocalSubjectAccessReview",
    "io.k8s.api.authentication.v1.SelfSubjectReview", "io.k8s.api.authentication.v1.TokenRequest",
]

ATTR = re.compile(r'#\[prost\((.*)\)\]')
FIELD = re.compile(r'pub (r#)?(\w+): (.*),\s*$')
STRUCT = re.compile(r'pub struct (\w+) \{')

def module_of(path):
    rel = os.path.relpath(os.path.dirname(path), src)
    return rel.split(os.sep)

def def_name(module, name):
    return "io.k8s." + ".".join(module) + "." + name

messages = {}
for root, _, files in os.walk(src):
    for f in files:
        if f != "mod.rs":
            continue
        path = os.path.join(root, f)
        module = module_of(path)
        current = None
        attr = None
        pending = ""
        for line in open(path):
            s = line.strip()
            if pending:
                pending += " " + s
                if pending.count("<") > pending.count(">") or not pending.endswith(","):
                    continue
                s, pending = pending, ""
            elif attr and s.startswith("pub ") and (s.count("<") > s.count(">") or not s.endswith(",")):
                pending = s
                continue
            m = STRUCT.match(s)
            if m and line.startswith("pub struct"):
                current = def_name(module, m.group(1))
                messages[current] = []
                continue
            if current is None:
                continue
            if line.startswith("}"):
                current = None
                continue
            m = ATTR.search(s)
            if m:
                attr = m.group(1)
                continue
            m = FIELD.match(s)
            if m and attr:
                rust_name, rust_type = m.group(2), m.group(3).replace(" ", "")
                tag = int(re.search(r'tag = "(\d+)"', attr).group(1))
                kind = attr.split(",")[0].strip()
                repeated = "repeated" in attr
                target = ""
                if kind.startswith("btree_map") or kind.startswith("map"):
                    value = re.search(r'map = "string, (\w+)"', attr).group(1)
                    kind = "map_" + value
                    if value == "message":
                        inner = re.findall(r'([\w:]+),?>\s*$', rust_type)
                        target = inner[0] if inner else ""
                elif kind == "message":
                    inner = re.findall(r'<([\w:]+)>+$', rust_type)
                    target = inner[0] if inner else ""
                elif kind.startswith("bytes"):
                    kind = "bytes"
                if target:
                    parts = target.split("::")
                    mod = list(module)
                    while parts and parts[0] == "super":
                        mod.pop()
                        parts.pop(0)
                    if parts and parts[0] == "crate":
                        mod = []
                        parts.pop(0)
                    target = def_name(mod + parts[:-1], parts[-1])
                messages[current].append([tag, rust_name, kind, repeated, target])
                attr = None

def json_name(definition, rust_name):
    props = (defs.get(definition) or {}).get("properties") or {}
    want = rust_name.replace("_", "").lower()
    for p in props:
        if p.replace("_", "").replace("-", "").lower() == want:
            return p
    parts = rust_name.split("_")
    return parts[0] + "".join(x[:1].upper() + x[1:] for x in parts[1:])

reachable = []
seen = set()
stack = list(ROOTS)
while stack:
    d = stack.pop()
    if d in seen or d not in messages:
        continue
    seen.add(d)
    reachable.append(d)
    for f in messages[d]:
        if f[4]:
            stack.append(f[4])

KIND = {"string": "Str", "int32": "I32", "int64": "I64", "bool": "Bool", "bytes": "Bytes",
        "double": "F64", "float": "F32", "message": "Msg", "map_string": "MapStr",
        "map_bytes": "MapBytes", "map_message": "MapMsg"}

print("// @generated by control/tools/gen_proto_table.py from the k8s-pb sources (field tags)")
print("// and the Kubernetes v1.35 OpenAPI document (JSON names). Do not edit by hand.")
print()
print("use super::protobuf::{Field, Kind::*};")
print()
print("/// `(definition, fields)` for every message reachable from the served types.")
print("pub(crate) const MESSAGES: &[(&str, &[Field])] = &[")
for d in sorted(reachable):
    print("    (%s, &[" % json.dumps(d))
    for tag, rust_name, kind, repeated, target in messages[d]:
        print("        Field { tag: %d, json: %s, kind: %s, repeated: %s, message: %s }," % (
            tag, json.dumps(json_name(d, rust_name)), KIND[kind], "true" if repeated else "false", json.dumps(target)))
    print("    ]),")
print("];")
