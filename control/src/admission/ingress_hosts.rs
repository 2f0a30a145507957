//! Ingress hosts are owned, as OpenShift's route admission owns them: a logical cluster may
//! name only hosts under the domains its workspace is delegated
//! (`spec.policy.ingressDomains`, the root's are unlimited), a catch-all (a rule without a
//! host, a `defaultBackend`) only where every host is allowed, and the first namespace to
//! claim a host owns it across the clusterset. The hosts an Ingress was admitted for are
//! stamped on it ([`INGRESS_HOSTS_ANNOTATION`]); the syncers copy only those rules down and
//! the clusterset DNS answers only those hosts, so a tenant's `*.com` reaches nothing.
//!
//! A write that names a host it may not is refused (403, kube's wording). An Ingress that
//! loses a host later — its workspace's domains narrowed — keeps its other hosts, stops
//! being served for that one and gets a Warning Event `HostNotAdmitted`.

use std::collections::BTreeSet;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};
use sluice_api::LogicalClusterPath;
use sluice_api::sync::INGRESS_HOSTS_ANNOTATION;
use sluice_api::tenancy::{EffectivePolicy, normalize_domain};

use crate::errors::{ApiError, ApiResult};
use crate::pipeline::hooks::{Hook, HookCx};
use crate::pipeline::reserved::is_system;
use crate::resources::Subresource;
use crate::state::ApiState;
use crate::storage::{Expect, Op, ResourcePrefix, StorageError, Store};

/// The hosts every rule and the default backend of `obj` name, normalized; `""` for a
/// catch-all.
pub fn requested(obj: &Value) -> BTreeSet<String> {
    let spec = &obj["spec"];
    let mut hosts: BTreeSet<String> = spec["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| normalize_domain(r["host"].as_str().unwrap_or("")))
        .collect();
    if !spec["defaultBackend"].is_null() {
        hosts.insert(String::new());
    }
    hosts
}

/// The hosts `obj` was admitted for (none when it carries no record).
fn admitted(obj: &Value) -> BTreeSet<String> {
    obj["metadata"]["annotations"][INGRESS_HOSTS_ANNOTATION]
        .as_str()
        .and_then(sluice_api::sync::parse_ingress_hosts)
        .map(|h| h.into_iter().collect())
        .unwrap_or_default()
}

/// Why a host is not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Refusal {
    CatchAll,
    NotDelegated(String),
    Claimed(String),
}

impl Refusal {
    fn message(&self, cluster: &LogicalClusterPath) -> String {
        match self {
            Refusal::CatchAll => format!(
                "an Ingress of logical cluster {cluster} must name its hosts: a rule without a \
                 host or a defaultBackend would take every host of the shared ingresses"
            ),
            Refusal::NotDelegated(h) => format!(
                "host \"{h}\" is not under a domain delegated to logical cluster {cluster} \
                 (its workspace's spec.policy.ingressDomains)"
            ),
            Refusal::Claimed(h) => {
                format!("host \"{h}\" is already claimed by an Ingress in another namespace")
            }
        }
    }
}

/// Only what an ownership check reads of another Ingress.
#[derive(Deserialize)]
struct Claim {
    metadata: ClaimMeta,
}

#[derive(Deserialize)]
struct ClaimMeta {
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

fn ingresses() -> ResourcePrefix {
    ResourcePrefix::new("networking.k8s.io", "ingresses")
}

/// Whether an Ingress outside `cluster`/`namespace` was admitted for `host`.
fn claimed_elsewhere(
    store: &Store,
    cluster: &LogicalClusterPath,
    namespace: &str,
    host: &str,
) -> bool {
    let prefix = ingresses();
    let mut found = false;
    store.scan(prefix.as_str(), None, |key, entry| {
        let Ok(claim) = serde_json::from_slice::<Claim>(&entry.value) else {
            return true;
        };
        let same = key.cluster() == Some(cluster.as_str()) && claim.metadata.namespace == namespace;
        found = !same
            && claim
                .metadata
                .annotations
                .get(INGRESS_HOSTS_ANNOTATION)
                .and_then(|v| sluice_api::sync::parse_ingress_hosts(v))
                .is_some_and(|hosts| hosts.iter().any(|h| h == host));
        !found
    });
    found
}

/// Whether `policy` delegates `host` (`""`: a catch-all, only where every host is).
fn delegated(policy: &EffectivePolicy, host: &str) -> Result<(), Refusal> {
    if host.is_empty() {
        return match policy.ingress_domains {
            None => Ok(()),
            Some(_) => Err(Refusal::CatchAll),
        };
    }
    if !policy.may_claim_host(host) {
        return Err(Refusal::NotDelegated(host.to_string()));
    }
    Ok(())
}

/// Whether `host` may be newly admitted for an Ingress of `cluster`/`namespace`.
fn check(
    store: &Store,
    policy: &EffectivePolicy,
    cluster: &LogicalClusterPath,
    namespace: &str,
    host: &str,
) -> Result<(), Refusal> {
    delegated(policy, host)?;
    if !host.is_empty() && claimed_elsewhere(store, cluster, namespace, host) {
        return Err(Refusal::Claimed(host.to_string()));
    }
    Ok(())
}

/// Record `hosts` as what `obj` was admitted for.
fn stamp(obj: &mut Value, hosts: &BTreeSet<String>) {
    let m = crate::object::meta_mut(obj);
    let annotations = m.entry("annotations").or_insert_with(|| json!({}));
    if !annotations.is_object() {
        *annotations = json!({});
    }
    annotations[INGRESS_HOSTS_ANNOTATION] = json!(sluice_api::sync::format_ingress_hosts(
        hosts.iter().map(String::as_str)
    ));
}

pub struct IngressHosts;

impl IngressHosts {
    /// Admit `new` (replacing `old`): hosts it kept stay while they are delegated; a host
    /// it adds must pass [`check`]. A client's write is refused on the first host that does
    /// not; the writes of the system's own parts (a syncer's finalizer, the server's own)
    /// drop such hosts, with a warning.
    fn admit(cx: &HookCx<'_>, old: Option<&Value>, new: &mut Value) -> ApiResult<()> {
        let namespace = new["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let policy = crate::tenancy::effective(&cx.state.store, cx.cluster);
        let had = old.map(admitted).unwrap_or_default();
        let mut hosts = BTreeSet::new();
        for host in requested(new) {
            let verdict = if had.contains(&host) {
                // Already its own: only the delegation is checked again.
                delegated(&policy, &host)
            } else {
                check(&cx.state.store, &policy, cx.cluster, &namespace, &host)
            };
            match verdict {
                Ok(()) => {
                    hosts.insert(host);
                }
                Err(refusal) if cx.user.is_some_and(|u| !is_system(u)) => {
                    return Err(ApiError::RbacForbidden {
                        gr: cx.t.gr.clone(),
                        name: crate::object::name(new).unwrap_or_default().to_string(),
                        message: refusal.message(cx.cluster),
                    });
                }
                Err(refusal) => {
                    cx.warn(refusal.message(cx.cluster));
                }
            }
        }
        stamp(new, &hosts);
        Ok(())
    }
}

impl Hook for IngressHosts {
    fn admit_create(&self, cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        Self::admit(cx, None, obj)
    }

    fn admit_update(
        &self,
        cx: &HookCx<'_>,
        old: &Value,
        new: &mut Value,
        sub: Option<Subresource>,
    ) -> ApiResult<()> {
        if sub.is_some() {
            // A status write changes no host: the record stays as it was.
            let hosts = admitted(old);
            stamp(new, &hosts);
            return Ok(());
        }
        Self::admit(cx, Some(old), new)
    }
}

/// Re-admit the Ingresses of `cluster` and the logical clusters below it, oldest first (so
/// the first claim wins, for Ingresses written before hosts were owned too): after a
/// workspace's policy changed, and at startup. A host an Ingress loses gets it a Warning
/// Event `HostNotAdmitted`.
pub async fn restamp_ingresses(
    state: &ApiState,
    cluster: &LogicalClusterPath,
) -> Result<(), StorageError> {
    if state.annotation_for(cluster).is_none() {
        return Ok(());
    }
    let prefix = ingresses();
    let scope = format!("{}{}", prefix.as_str(), cluster);
    let mut found = Vec::new();
    state.store.scan(&scope, None, |key, entry| {
        if key.as_str()[scope.len()..].starts_with(['/', ':']) {
            found.push((key.clone(), entry.revision, entry.value.clone()));
        }
        true
    });
    let mut objects: Vec<_> = found
        .into_iter()
        .filter_map(|(key, revision, value)| {
            let obj = serde_json::from_slice::<Value>(&value).ok()?;
            let path = key.cluster()?.parse::<LogicalClusterPath>().ok()?;
            Some((key, revision, path, obj))
        })
        .collect();
    // Oldest first; RFC 3339 timestamps of one format sort as strings.
    objects.sort_by(|a, b| {
        let created = |o: &Value| {
            o["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or("")
                .to_string()
        };
        created(&a.3)
            .cmp(&created(&b.3))
            .then_with(|| a.0.cmp(&b.0))
    });
    for (key, revision, path, mut obj) in objects {
        let namespace = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let policy = crate::tenancy::effective(&state.store, &path);
        let had = obj["metadata"]["annotations"][INGRESS_HOSTS_ANNOTATION]
            .as_str()
            .map(|_| admitted(&obj));
        let mut hosts = BTreeSet::new();
        let mut lost = Vec::new();
        for host in requested(&obj) {
            let kept = had.as_ref().is_some_and(|h| h.contains(&host));
            let verdict = if kept {
                delegated(&policy, &host)
            } else {
                check(&state.store, &policy, &path, &namespace, &host)
            };
            match verdict {
                Ok(()) => {
                    hosts.insert(host);
                }
                // Lost now, or never admitted and never told (written before hosts were
                // owned): say so once.
                Err(r) if kept || had.is_none() => lost.push(r.message(&path)),
                Err(_) => {}
            }
        }
        if had.as_ref() == Some(&hosts) {
            continue;
        }
        stamp(&mut obj, &hosts);
        let bytes = Bytes::from(
            serde_json::to_vec(&obj).map_err(|e| StorageError::Backend(e.to_string()))?,
        );
        match state
            .store
            .write(Op::Put {
                key,
                value: bytes,
                expect: Expect::At(revision),
            })
            .await
        {
            Ok(_) => {}
            // Written meanwhile: that write was admitted with the policy of its time.
            Err(StorageError::Conflict { .. } | StorageError::NotFound(_)) => continue,
            Err(e) => return Err(e),
        }
        for message in lost {
            crate::events::record(
                &state.store,
                &path,
                &obj,
                crate::events::Warning("HostNotAdmitted"),
                &message,
            )
            .await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_and_the_default_backend_request_a_host() {
        let obj = json!({"spec": {
            "defaultBackend": {"service": {"name": "web"}},
            "rules": [{"host": "Shop.Example."}, {"http": {}}, {"host": "*.shop.example"}]}});
        let got: Vec<_> = requested(&obj).into_iter().collect();
        assert_eq!(got, ["", "*.shop.example", "shop.example"]);
    }

    #[test]
    fn refusals_name_the_host_and_never_another_tenant() {
        let path: LogicalClusterPath = "root:b".parse().unwrap();
        let m = Refusal::Claimed("shop.example".into()).message(&path);
        assert_eq!(
            m,
            "host \"shop.example\" is already claimed by an Ingress in another namespace"
        );
        assert!(
            Refusal::NotDelegated("x.com".into())
                .message(&path)
                .contains("not under a domain delegated to logical cluster root:b")
        );
    }
}
