//! What the platform admin allows a workspace's tenants on the shared clusters, and how a
//! workspace's policy combines with its parents': a child is never looser than its parent.
//!
//! `root` belongs to the platform admin and is unrestricted. Every workspace below it gets
//! its `Workspace.spec.policy` (set only by identities that may `update` the
//! `workspaces/policy` subresource in the parent), with defaults for what is unset, and is
//! then bounded by its parent's effective policy. Pure: the API server reads the chain from
//! its store, the placement controllers from their cache.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::sluice::ClusterCapacity;

/// The annotation on a logical cluster's Namespace, written by the API server only, that
/// says which Pod Security Standards level is enforced there (the stricter of the
/// workspace's ceiling and the namespace's own label); syncers label the downstream
/// namespace with it.
pub const POD_SECURITY_ANNOTATION: &str = "sluice.dev/pod-security";

/// A Pod Security Standards level, ordered from the loosest to the strictest.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PodSecurityLevel {
    Privileged,
    /// The default of a workspace: no known privilege escalation (no host namespaces,
    /// privileged containers, hostPath volumes, added capabilities beyond the defaults...).
    #[default]
    Baseline,
    Restricted,
}

impl PodSecurityLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Privileged => "privileged",
            Self::Baseline => "baseline",
            Self::Restricted => "restricted",
        }
    }

    /// Exactly `privileged`, `baseline` or `restricted`, as kube's labels take them.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "privileged" => Some(Self::Privileged),
            "baseline" => Some(Self::Baseline),
            "restricted" => Some(Self::Restricted),
            _ => None,
        }
    }
}

impl std::fmt::Display for PodSecurityLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a workspace's tenants may do on the shared clusters (`Workspace.spec.policy`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "dev.sluice.v1alpha1.WorkspacePolicy")]
pub struct WorkspacePolicy {
    /// The Pod Security Standards level enforced on every Pod and pod template of the
    /// workspace, before anything is synced (default `baseline`). Namespaces may tighten it
    /// with `pod-security.kubernetes.io/enforce`, never loosen it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security: Option<PodSecurityLevel>,
    /// Whether Services may set `spec.externalIPs` (default false: a Service's external IPs
    /// intercept traffic to those addresses on every node, CVE-2020-8554).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "allowExternalIPs"
    )]
    pub allow_external_ips: Option<bool>,
    /// The physical clusters the workspace may use, by their labels (unset: every cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// How much of each physical cluster the workspace may use: pods, and the CPU and
    /// memory their containers request (unset fields: unbounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_quota: Option<ClusterCapacity>,
    /// The DNS domains whose hosts the workspace's Ingresses may claim (each domain and its
    /// subdomains; default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_domains: Option<Vec<String>>,
}

/// A logical cluster's policy once its workspace's and every parent's are combined.
#[derive(Clone, Debug, PartialEq)]
pub struct EffectivePolicy {
    pub pod_security: PodSecurityLevel,
    pub allow_external_ips: bool,
    /// Every selector a cluster must match (one per level of the chain that sets one).
    pub cluster_selectors: Vec<LabelSelector>,
    /// Every quota that bounds the logical cluster on each physical cluster, with the
    /// workspace that set it: each bounds what that workspace and every workspace below it
    /// use together (siblings cannot each take their parent's whole quota).
    pub cluster_quotas: Vec<(crate::LogicalClusterPath, ClusterCapacity)>,
    /// The domains Ingress hosts may be under; `None`: any host (the root).
    pub ingress_domains: Option<Vec<String>>,
}

impl EffectivePolicy {
    /// The root's: the platform admin's own logical cluster.
    pub fn unrestricted() -> Self {
        Self {
            pod_security: PodSecurityLevel::Privileged,
            allow_external_ips: true,
            cluster_selectors: Vec::new(),
            cluster_quotas: Vec::new(),
            ingress_domains: None,
        }
    }

    /// The policy of the child workspace at `path` whose own policy is `own` (defaults for
    /// what it leaves unset), bounded by this one.
    pub fn child(&self, path: &crate::LogicalClusterPath, own: Option<&WorkspacePolicy>) -> Self {
        let own = own.cloned().unwrap_or_default();
        let mut selectors = self.cluster_selectors.clone();
        selectors.extend(own.cluster_selector);
        let mut quotas = self.cluster_quotas.clone();
        quotas.extend(own.cluster_quota.map(|q| (path.clone(), q)));
        let own_domains: Vec<String> = own
            .ingress_domains
            .unwrap_or_default()
            .iter()
            .map(|d| normalize_domain(d))
            .collect();
        let domains = match &self.ingress_domains {
            None => own_domains,
            Some(parent) => own_domains
                .into_iter()
                .filter(|d| parent.iter().any(|p| host_within(d, p)))
                .collect(),
        };
        Self {
            pod_security: own.pod_security.unwrap_or_default().max(self.pod_security),
            allow_external_ips: own.allow_external_ips.unwrap_or(false) && self.allow_external_ips,
            cluster_selectors: selectors,
            cluster_quotas: quotas,
            ingress_domains: Some(domains),
        }
    }

    /// Whether an Ingress host (`shop.example.com`, `*.shop.example.com`) is under a
    /// domain this policy delegates. A wildcard is within `d` only if what it covers is:
    /// `*.example.com` needs `example.com` itself delegated, so a wildcard never reaches
    /// above a delegated domain.
    pub fn may_claim_host(&self, host: &str) -> bool {
        let host = normalize_domain(host);
        let Some(domains) = &self.ingress_domains else {
            return true;
        };
        let covered = host.strip_prefix("*.").unwrap_or(&host);
        domains.iter().any(|d| host_within(covered, d))
    }
}

/// Lowercase, without a trailing dot.
pub fn normalize_domain(d: &str) -> String {
    d.trim_end_matches('.').to_ascii_lowercase()
}

/// `host` is `domain` or a subdomain of it (both normalized).
pub fn host_within(host: &str, domain: &str) -> bool {
    host == domain
        || host
            .strip_suffix(domain)
            .is_some_and(|rest| rest.ends_with('.') && rest.len() > 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(json: serde_json::Value) -> WorkspacePolicy {
        serde_json::from_value(json).unwrap()
    }

    fn path(p: &str) -> crate::LogicalClusterPath {
        p.parse().unwrap()
    }

    #[test]
    fn a_workspace_defaults_to_baseline_no_external_ips_and_no_hosts() {
        let p = EffectivePolicy::unrestricted().child(&path("root:a"), None);
        assert_eq!(p.pod_security, PodSecurityLevel::Baseline);
        assert!(!p.allow_external_ips);
        assert_eq!(p.ingress_domains, Some(vec![]));
        assert!(!p.may_claim_host("shop.example.com"));
        assert!(EffectivePolicy::unrestricted().may_claim_host("anything.com"));
    }

    #[test]
    fn a_child_is_never_looser_than_its_parent() {
        let a = EffectivePolicy::unrestricted().child(
            &path("root:a"),
            Some(&policy(serde_json::json!({
                "podSecurity": "restricted",
                "allowExternalIPs": true,
                "ingressDomains": ["Shop.Example.com."],
                "clusterQuota": {"pods": 10}
            }))),
        );
        let b = a.child(
            &path("root:a:b"),
            Some(&policy(serde_json::json!({
                "podSecurity": "privileged",
                "allowExternalIPs": true,
                "ingressDomains": ["api.shop.example.com", "bank.com"],
                "clusterQuota": {"pods": 20}
            }))),
        );
        // Each quota stays with the workspace that set it.
        let quotas: Vec<(String, Option<i64>)> = b
            .cluster_quotas
            .iter()
            .map(|(p, q)| (p.to_string(), q.pods))
            .collect();
        assert_eq!(
            quotas,
            [("root:a".into(), Some(10)), ("root:a:b".into(), Some(20))]
        );
        assert_eq!(b.pod_security, PodSecurityLevel::Restricted);
        assert!(b.allow_external_ips);
        assert_eq!(b.ingress_domains, Some(vec!["api.shop.example.com".into()]));
        // Unset in the child: the child's defaults, bounded by the parent.
        let c = a.child(&path("root:a:c"), None);
        assert!(!c.allow_external_ips);
    }

    #[test]
    fn hosts_stay_under_their_domains() {
        let p = EffectivePolicy::unrestricted().child(
            &path("root:a"),
            Some(&policy(serde_json::json!({
                "ingressDomains": ["shop.example.com"]
            }))),
        );
        assert!(p.may_claim_host("shop.example.com"));
        assert!(p.may_claim_host("WWW.shop.example.com."));
        assert!(p.may_claim_host("*.shop.example.com"));
        assert!(!p.may_claim_host("*.example.com"));
        assert!(!p.may_claim_host("*.com"));
        assert!(!p.may_claim_host("evilshop.example.com"));
        assert!(!p.may_claim_host("example.com"));
        assert!(!p.may_claim_host("*"));
        assert!(!p.may_claim_host(""));
    }
}
