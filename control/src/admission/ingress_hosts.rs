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

use std::collections::{BTreeSet, HashMap};

use serde::Deserialize;
use serde_json::Value;
use sluice_api::LogicalClusterPath;
use sluice_api::sync::INGRESS_HOSTS_ANNOTATION;
use sluice_api::tenancy::{EffectivePolicy, normalize_domain};

use crate::admission::restamp::Stored;
use crate::errors::{ApiError, ApiResult};
use crate::pipeline::hooks::{Hook, HookCx};
use crate::pipeline::reserved::is_system;
use crate::resources::Subresource;
use crate::state::write_state::WriteState;
use crate::storage::{ResourcePrefix, StorageError, Store};

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

/// Only what an ownership check reads of an Ingress.
#[derive(Deserialize)]
struct Claim {
    metadata: ClaimMeta,
}

#[derive(Deserialize)]
struct ClaimMeta {
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    annotations: HashMap<String, String>,
}

fn ingresses() -> ResourcePrefix {
    ResourcePrefix::new("networking.k8s.io", "ingresses")
}

/// A namespace of a logical cluster: who owns a host.
type Owner = (String, String);

/// Who holds each admitted host across the clusterset: how many Ingresses of each
/// namespace were admitted for it. Built from the store once per admission or restamp
/// pass, not once per host.
#[derive(Default)]
struct Claims(HashMap<String, HashMap<Owner, usize>>);

impl Claims {
    fn of_store(store: &Store) -> Self {
        let mut claims = Self::default();
        store.scan(ingresses().as_str(), None, |key, entry| {
            if let (Some(cluster), Ok(c)) =
                (key.cluster(), serde_json::from_slice::<Claim>(&entry.value))
                && let Some(hosts) = c
                    .metadata
                    .annotations
                    .get(INGRESS_HOSTS_ANNOTATION)
                    .and_then(|v| sluice_api::sync::parse_ingress_hosts(v))
            {
                let owner = (cluster.to_string(), c.metadata.namespace);
                claims.add(&owner, &hosts.into_iter().collect());
            }
            true
        });
        claims
    }

    fn add(&mut self, owner: &Owner, hosts: &BTreeSet<String>) {
        for h in hosts {
            *self
                .0
                .entry(h.clone())
                .or_default()
                .entry(owner.clone())
                .or_default() += 1;
        }
    }

    fn remove(&mut self, owner: &Owner, hosts: &BTreeSet<String>) {
        for h in hosts {
            if let Some(owners) = self.0.get_mut(h)
                && let Some(n) = owners.get_mut(owner)
            {
                *n -= 1;
                if *n == 0 {
                    owners.remove(owner);
                }
            }
        }
    }

    /// Whether a namespace other than `owner` holds `host`.
    fn elsewhere(&self, owner: &Owner, host: &str) -> bool {
        self.0
            .get(host)
            .is_some_and(|owners| owners.keys().any(|o| o != owner))
    }
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

/// Whether `host` may be newly admitted for an Ingress of namespace `owner`.
fn check(
    claims: &Claims,
    policy: &EffectivePolicy,
    owner: &Owner,
    host: &str,
) -> Result<(), Refusal> {
    delegated(policy, host)?;
    if !host.is_empty() && claims.elsewhere(owner, host) {
        return Err(Refusal::Claimed(host.to_string()));
    }
    Ok(())
}

/// Record `hosts` as what `obj` was admitted for.
fn stamp(obj: &mut Value, hosts: &BTreeSet<String>) {
    let value = sluice_api::sync::format_ingress_hosts(hosts.iter().map(String::as_str));
    crate::object::set_annotation(obj, INGRESS_HOSTS_ANNOTATION, &value);
}

/// The namespace `obj` of logical cluster `cluster` is in.
fn owner_of(cluster: &LogicalClusterPath, obj: &Value) -> Owner {
    let namespace = obj["metadata"]["namespace"].as_str().unwrap_or("");
    (cluster.to_string(), namespace.to_string())
}

pub struct IngressHosts;

impl IngressHosts {
    /// Admit `new` (replacing `old`): hosts it kept stay while they are delegated; a host
    /// it adds must pass [`check`]. A client's write is refused on the first host that does
    /// not; the writes of the system's own parts (a syncer's finalizer, the server's own)
    /// drop such hosts, with a warning.
    fn admit(cx: &HookCx<'_>, old: Option<&Value>, new: &mut Value) -> ApiResult<()> {
        let owner = owner_of(cx.cluster, new);
        let policy = crate::tenancy::effective(&cx.state.store, cx.cluster);
        let had = old.map(admitted).unwrap_or_default();
        let wanted = requested(new);
        // Read who holds what only when a host is new to this Ingress.
        let claims = if wanted.iter().any(|h| !h.is_empty() && !had.contains(h)) {
            Claims::of_store(&cx.state.store)
        } else {
            Claims::default()
        };
        let mut hosts = BTreeSet::new();
        for host in wanted {
            let verdict = if had.contains(&host) {
                // Already its own: only the delegation is checked again.
                delegated(&policy, &host)
            } else {
                check(&claims, &policy, &owner, &host)
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
    state: &WriteState,
    cluster: &LogicalClusterPath,
) -> Result<(), StorageError> {
    if state.annotation_for(cluster).is_none() {
        return Ok(());
    }
    let mut objects = crate::admission::restamp::subtree(&state.store, &ingresses(), cluster);
    // Oldest first; RFC 3339 timestamps of one format sort as strings.
    let created = |s: &Stored| {
        s.obj["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    objects.sort_by(|a, b| created(a).cmp(&created(b)).then_with(|| a.key.cmp(&b.key)));
    let mut claims = Claims::of_store(&state.store);
    for mut ing in objects {
        let owner = owner_of(&ing.path, &ing.obj);
        let policy = crate::tenancy::effective(&state.store, &ing.path);
        let had = ing.obj["metadata"]["annotations"][INGRESS_HOSTS_ANNOTATION]
            .as_str()
            .map(|_| admitted(&ing.obj));
        let mut hosts = BTreeSet::new();
        let mut lost = Vec::new();
        for host in requested(&ing.obj) {
            let kept = had.as_ref().is_some_and(|h| h.contains(&host));
            let verdict = if kept {
                delegated(&policy, &host)
            } else {
                check(&claims, &policy, &owner, &host)
            };
            match verdict {
                Ok(()) => {
                    hosts.insert(host);
                }
                // Lost now, or never admitted and never told (written before hosts were
                // owned): say so once.
                Err(r) if kept || had.is_none() => lost.push(r.message(&ing.path)),
                Err(_) => {}
            }
        }
        if had.as_ref() == Some(&hosts) {
            continue;
        }
        stamp(&mut ing.obj, &hosts);
        if !crate::admission::restamp::write_back(&state.store, &ing).await? {
            // Written meanwhile: that write was admitted with the policy of its time.
            continue;
        }
        claims.remove(&owner, &had.unwrap_or_default());
        claims.add(&owner, &hosts);
        for message in lost {
            crate::events::record(
                &state.store,
                &ing.path,
                &ing.obj,
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
    use serde_json::json;

    use super::*;

    #[test]
    fn a_host_is_held_while_any_ingress_of_its_namespace_holds_it() {
        let a: Owner = ("root:a".into(), "shop".into());
        let b: Owner = ("root:b".into(), "shop".into());
        let shop: BTreeSet<String> = ["shop.example".to_string()].into();
        let mut claims = Claims::default();
        claims.add(&a, &shop);
        claims.add(&a, &shop);
        assert!(claims.elsewhere(&b, "shop.example"));
        assert!(
            !claims.elsewhere(&a, "shop.example"),
            "its own namespace shares it"
        );
        claims.remove(&a, &shop);
        assert!(
            claims.elsewhere(&b, "shop.example"),
            "one Ingress still holds it"
        );
        claims.remove(&a, &shop);
        assert!(!claims.elsewhere(&b, "shop.example"), "free once none does");
    }

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
