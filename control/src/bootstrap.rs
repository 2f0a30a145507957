//! What every cluster has from the start, as kube-apiserver's bootstrap controllers make it:
//! the system namespaces (`default`, `kube-system`, `kube-public`, `kube-node-lease`) in
//! every logical cluster — the root at startup, a workspace's child cluster as it is created
//! (kcp creates `default` in every workspace) — so clients' default-namespace calls work in
//! a new cluster; and, in single-cluster mode, the `default/kubernetes` Service and each
//! namespace's `default` ServiceAccount.

use bytes::Bytes;
use serde_json::{Value, json};
use sluice_api::LogicalClusterPath;

use crate::catalog::Catalog;
use crate::downstream_names::DownstreamNames;
use crate::pipeline::commit::{Writer, commit};
use crate::resources::ResourceType;
use crate::storage::{Expect, Key, Op, ResourcePrefix, StorageError, Store};

/// The namespaces every cluster has.
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Namespaces kube-apiserver refuses to delete (in single-cluster mode; in a logical cluster
/// they go with their workspace).
pub const PROTECTED_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

fn core_type(resource: &str) -> Option<std::sync::Arc<ResourceType>> {
    Catalog::builtin().lookup("", "v1", resource).cloned()
}

/// Store `obj` under `key` unless something is there already.
async fn ensure(store: &Store, key: Key, obj: &Value) -> Result<(), StorageError> {
    if store.get(&key).is_some() {
        return Ok(());
    }
    let bytes =
        Bytes::from(serde_json::to_vec(obj).map_err(|e| StorageError::Backend(e.to_string()))?);
    match commit(
        store,
        Writer::Bootstrap,
        Op::Put {
            key,
            value: bytes,
            expect: Expect::Absent,
        },
    )
    .await
    {
        Ok(_) | Err(StorageError::AlreadyExists(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Create the system namespaces of `cluster` that are missing. `names`: in a server of
/// logical clusters, stamp the logical-cluster annotation and the downstream name (`None`
/// in single-cluster mode).
pub async fn ensure_namespaces(
    store: &Store,
    cluster: &LogicalClusterPath,
    names: Option<&DownstreamNames>,
) -> Result<(), StorageError> {
    let Some(ns_type) = core_type("namespaces") else {
        return Ok(());
    };
    for ns in SYSTEM_NAMESPACES {
        let mut obj = json!({"metadata": {"name": ns}});
        crate::defaults::apply(&ns_type.kind, &mut obj);
        crate::object::prepare_create(&mut obj, &ns_type, names.map(|_| cluster), None);
        if let Some(names) = names {
            crate::object::set_annotation(
                &mut obj,
                sluice_api::sync::ANNOTATION_DOWNSTREAM_NAMESPACE,
                &names.name(cluster, ns),
            );
        }
        ensure(store, ns_type.prefix.key(cluster, None, ns), &obj).await?;
    }
    Ok(())
}

/// The ClusterRoleBinding that makes a workspace's creator `cluster-admin` of the
/// workspace's own logical cluster (and nowhere else), as kcp makes its creator admin.
pub const OWNER_BINDING: &str = "sluice:workspace-owner";

/// Bind `user` to `cluster-admin` in `cluster`, once.
pub async fn ensure_owner(
    store: &Store,
    cluster: &LogicalClusterPath,
    user: &str,
) -> Result<(), StorageError> {
    let Some(t) = Catalog::builtin()
        .lookup(crate::rbac::policy::GROUP, "v1", "clusterrolebindings")
        .cloned()
    else {
        return Ok(());
    };
    let mut obj = json!({
        "metadata": {"name": OWNER_BINDING},
        "subjects": [{"kind": "User", "apiGroup": crate::rbac::policy::GROUP, "name": user}],
        "roleRef": {"kind": "ClusterRole", "apiGroup": crate::rbac::policy::GROUP, "name": "cluster-admin"},
    });
    crate::object::prepare_create(&mut obj, &t, Some(cluster), None);
    ensure(store, t.prefix.key(cluster, None, OWNER_BINDING), &obj).await
}

/// The logical clusters that workspaces stored in `store` make (`root:<ws>`, nested too).
pub fn workspace_clusters(store: &Store) -> Vec<LogicalClusterPath> {
    let prefix = ResourcePrefix::new(sluice_api::sluice::GROUP, "workspaces");
    let mut out = Vec::new();
    store.scan(prefix.as_str(), None, |key, _| {
        if let Some(parts) = key.parts()
            && let Ok(parent) = parts.cluster.parse::<LogicalClusterPath>()
            && let Ok(child) = parent.child(parts.name)
        {
            out.push(child);
        }
        true
    });
    out
}

/// Logical-cluster mode at startup: the root's system namespaces and those of every
/// workspace (clusters created before these namespaces existed get them now).
pub async fn logical_clusters(store: &Store, names: &DownstreamNames) -> Result<(), StorageError> {
    ensure_namespaces(store, &LogicalClusterPath::root(), Some(names)).await?;
    for cluster in workspace_clusters(store) {
        ensure_namespaces(store, &cluster, Some(names)).await?;
    }
    Ok(())
}

/// The `default` ServiceAccount of namespace `ns`, which a physical cluster gives every
/// namespace (kube-controller-manager's ServiceAccount controller) and Pods run as unless
/// they name another.
pub async fn ensure_default_service_account(
    store: &Store,
    cluster: &LogicalClusterPath,
    ns: &str,
) -> Result<(), StorageError> {
    let Some(t) = core_type("serviceaccounts") else {
        return Ok(());
    };
    let mut obj = json!({"metadata": {"name": "default"}});
    crate::object::prepare_create(&mut obj, &t, None, Some(ns));
    ensure(store, t.prefix.key(cluster, Some(ns), "default"), &obj).await
}

/// Single-cluster mode at startup: the system namespaces and the `kubernetes` Service at
/// the first address of the Service CIDR.
pub async fn single_cluster(
    store: &Store,
    kubernetes_ip: std::net::Ipv4Addr,
    api_port: u16,
) -> Result<(), StorageError> {
    let root = LogicalClusterPath::root();
    ensure_namespaces(store, &root, None).await?;
    // Every namespace, the ones made before this existed too.
    let mut namespaces = Vec::new();
    if let Some(t) = core_type("namespaces") {
        store.scan(&t.prefix.scope(Some(&root), None), None, |k, _| {
            if let Some(p) = k.parts() {
                namespaces.push(p.name.to_string());
            }
            true
        });
    }
    for ns in &namespaces {
        ensure_default_service_account(store, &root, ns).await?;
    }
    let Some(svc_type) = core_type("services") else {
        return Ok(());
    };
    let ip = kubernetes_ip.to_string();
    let mut svc = json!({
        "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip],
                 "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "sessionAffinity": "None",
                 "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": api_port}]},
    });
    crate::object::prepare_create(&mut svc, &svc_type, None, Some("default"));
    ensure(
        store,
        svc_type.prefix.key(&root, Some("default"), "kubernetes"),
        &svc,
    )
    .await
}
