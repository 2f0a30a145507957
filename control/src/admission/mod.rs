//! The API server's own admission hooks (see [`crate::pipeline::hooks`]): what
//! kube-apiserver's registry strategies and admission plugins do for particular resources.

mod admission_policies;
mod claim_storage;
mod cluster_ip;
mod crd;
pub mod downstream_names;
pub mod ephemeral_containers;
mod external_ips;
pub mod ingress_hosts;
mod namespace;
pub mod placement;
mod pod;
pub mod pod_security;
mod rbac;
pub mod restamp;
pub mod sluice_kinds;
pub mod storage_class;
mod webhook_configs;
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
    let webhooks = Arc::new(webhook_configs::WebhookConfigurations);
    for resource in [
        "validatingwebhookconfigurations",
        "mutatingwebhookconfigurations",
    ] {
        hooks.register("admissionregistration.k8s.io", resource, webhooks.clone());
    }
    let policies = Arc::new(admission_policies::AdmissionPolicies);
    for resource in [
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
    ] {
        hooks.register("admissionregistration.k8s.io", resource, policies.clone());
    }
    hooks.register("", "pods", Arc::new(pod::GracefulPods));
    hooks.register(
        "",
        "pods",
        Arc::new(ephemeral_containers::EphemeralContainers),
    );
    // Pod security: a logical cluster's pods run on shared clusters, so every kind that
    // makes pods is held to its level; a physical cluster's server does what kube's does.
    let mode = if ips.is_some() {
        pod_security::Mode::PodsOnly
    } else {
        pod_security::Mode::EveryTemplate
    };
    let pss = Arc::new(pod_security::PodSecurity(mode));
    for (group, resource) in pod_security::POD_KINDS {
        hooks.register(group, resource, pss.clone());
    }
    hooks.register(
        "",
        "namespaces",
        Arc::new(pod_security::PodSecurityNamespaces {
            stamp: ips.is_none(),
        }),
    );
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
            hooks.register(
                "",
                "persistentvolumeclaims",
                Arc::new(storage_class::DefaultStorageClass),
            );
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
            for resource in sluice_api::synced_kinds::MIRRORED_RESOURCES {
                hooks.register("", resource, Arc::new(pod::MirroredPods));
            }
            hooks.register("", "services", Arc::new(external_ips::ExternalIps));
            hooks.register(
                "",
                "persistentvolumeclaims",
                Arc::new(claim_storage::ClaimStorage),
            );
            hooks.register(
                "networking.k8s.io",
                "ingresses",
                Arc::new(ingress_hosts::IngressHosts),
            );
            hooks.register("", "namespaces", Arc::new(namespace::AllowedCluster));
            hooks.register(
                "",
                "namespaces",
                Arc::new(downstream_names::StampNamespaces),
            );
            let labels = Arc::new(placement::StateLabels);
            for k in sluice_api::synced_kinds::BUILTIN {
                hooks.register(k.group, k.plural, labels.clone());
            }
            hooks.register_syncable_custom(labels);
            hooks.register("", "namespaces", Arc::new(placement::FollowingObjects));
        }
    }
    hooks
}
