//! The API server's own admission hooks (see [`crate::pipeline::hooks`]): what
//! kube-apiserver's registry strategies and admission plugins do for particular resources.

mod cluster_ip;
mod crd;
mod namespace;
mod placement;
mod pod;
mod rbac;
mod sluice_kinds;
mod workspace;

use std::sync::Arc;

use crate::pipeline::hooks::Hooks;
use crate::single_cluster::IpAllocator;

/// The built-in hooks; `ips` in single-cluster mode (Service ClusterIP allocation, and the
/// namespaces kube-apiserver refuses to delete); in logical-cluster mode, the state labels
/// of the kinds that travel.
pub fn builtin(ips: Option<Arc<IpAllocator>>) -> Hooks {
    let mut hooks = Hooks::default();
    hooks.register(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        Arc::new(crd::CrdHook),
    );
    hooks.register(
        sluice_api::sluice::GROUP,
        "workspaces",
        Arc::new(workspace::WorkspaceHook),
    );
    hooks.register("", "namespaces", Arc::new(namespace::NamespaceLifecycle));
    hooks.register("", "pods", Arc::new(pod::GracefulPods));
    let rbac = Arc::new(rbac::RbacHook);
    for resource in [
        "roles",
        "clusterroles",
        "rolebindings",
        "clusterrolebindings",
    ] {
        hooks.register(crate::rbac::policy::GROUP, resource, rbac.clone());
    }
    match ips {
        Some(ips) => {
            hooks.register("", "services", Arc::new(cluster_ip::ClusterIpHook(ips)));
            hooks.register("", "namespaces", Arc::new(namespace::ProtectedNamespaces));
            hooks.register("", "namespaces", Arc::new(namespace::DefaultServiceAccount));
        }
        None => {
            hooks.register(
                sluice_api::sluice::GROUP,
                "placements",
                Arc::new(sluice_kinds::PlacementFields),
            );
            hooks.register(
                sluice_api::sluice::GROUP,
                "clusters",
                Arc::new(sluice_kinds::ClusterFields),
            );
            hooks.register("", "pods", Arc::new(pod::MirroredPods));
            let labels = Arc::new(placement::StateLabels);
            for k in sluice_api::synced_kinds::BUILTIN {
                hooks.register(k.group, k.plural, labels.clone());
            }
        }
    }
    hooks
}
