//! Derived Services: how a cluster whose Services kube-proxy serves gets a ClusterSetIP.
//!
//! A real cluster has no Sluice dataplane listening on clusterset VIPs, so, as the MCS
//! reference controller and Cilium do, the importing cluster gets a selector-less ClusterIP
//! Service per ClusterSetIP import. Its API server allocates the ClusterIP, which becomes
//! the import's `spec.ips`; the MCS EndpointSlices in that cluster also carry
//! `kubernetes.io/service-name: <derived name>`, so kube-proxy balances the ClusterIP over
//! every source cluster's endpoints. The import names its derived Service in the annotation
//! `multicluster.kubernetes.io/derived-service`.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sluice_api::mcs::{LABEL_MANAGED_BY, LABEL_SERVICE_NAME, MANAGED_BY, ServiceImport};

use crate::model::ServiceKey;

/// ServiceImport annotation naming the import's derived Service (the reference
/// controller's name for it).
pub const ANNOTATION_DERIVED_SERVICE: &str = "multicluster.kubernetes.io/derived-service";

/// The derived Service's name: `derived-` and the first 10 characters of the lowercase
/// base32hex of SHA-256(`namespace/name`), as the reference controller names it, so the
/// name is stable, short, and the same whichever controller made it.
pub fn derived_name(key: &ServiceKey) -> String {
    const ALPHABET: &[u8; 32] = b"0123456789abcdefghijklmnopqrstuv";
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{}/{}", key.namespace, key.name).as_bytes(),
    );
    // 10 base32 characters are the first 50 bits of the digest.
    let bits = digest
        .as_ref()
        .iter()
        .take(8)
        .fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
    let mut name = String::with_capacity(18);
    name.push_str("derived-");
    for i in 0..10 {
        let index = (bits >> (64 - 5 * (i + 1))) & 0x1f;
        name.push(char::from(ALPHABET[index as usize]));
    }
    name
}

/// The key of `key`'s derived Service (same namespace).
pub fn derived_key(key: &ServiceKey) -> ServiceKey {
    ServiceKey::new(key.namespace.clone(), derived_name(key))
}

/// The derived Service of a ClusterSetIP import: the import's ports and session affinity,
/// no selector (the MCS EndpointSlices are its endpoints), labelled as Sluice's so it is
/// never exported and is deleted with the import.
pub fn service(key: &ServiceKey, import: &ServiceImport) -> Service {
    let ports = import
        .spec
        .ports
        .iter()
        .map(|p| ServicePort {
            name: p.name.clone(),
            protocol: p.protocol.clone(),
            app_protocol: p.app_protocol.clone(),
            port: p.port,
            target_port: Some(IntOrString::Int(p.port)),
            ..Default::default()
        })
        .collect();
    Service {
        metadata: ObjectMeta {
            name: Some(derived_name(key)),
            namespace: Some(key.namespace.clone()),
            labels: Some(
                [
                    (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
                    (LABEL_SERVICE_NAME.to_string(), key.name.clone()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            ports: Some(ports),
            session_affinity: import.spec.session_affinity.clone(),
            session_affinity_config: import.spec.session_affinity_config.clone(),
            ..Default::default()
        }),
        status: None,
    }
}

/// The addresses and families the cluster's API server gave an observed derived Service;
/// empty until it has a ClusterIP.
pub fn allocated(observed: &Service) -> (Vec<String>, Vec<String>) {
    let Some(spec) = observed.spec.as_ref() else {
        return (Vec::new(), Vec::new());
    };
    let mut ips: Vec<String> = spec.cluster_ips.clone().unwrap_or_default();
    if ips.is_empty() {
        ips.extend(spec.cluster_ip.clone());
    }
    ips.retain(|ip| ip.parse::<std::net::IpAddr>().is_ok());
    let families = if ips.is_empty() {
        Vec::new()
    } else {
        spec.ip_families.clone().unwrap_or_else(|| {
            ips.iter()
                .map(|ip| if ip.contains(':') { "IPv6" } else { "IPv4" }.to_string())
                .collect()
        })
    };
    (ips, families)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_reference_controller() {
        let name = derived_name(&ServiceKey::new("shop", "web"));
        // Python: base64.b32hexencode(hashlib.sha256(b"shop/web").digest()).lower()[:10]
        assert_eq!(name, "derived-isrlchlhrq");
        assert!(name.starts_with("derived-"));
        assert!(
            name[8..]
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'v').contains(&c))
        );
        assert_eq!(name, derived_name(&ServiceKey::new("shop", "web")));
        assert_ne!(name, derived_name(&ServiceKey::new("shop", "api")));
        assert_ne!(name, derived_name(&ServiceKey::new("shopw", "eb")));
    }

    #[test]
    fn allocated_addresses() {
        let mut svc = Service::default();
        assert_eq!(allocated(&svc), (vec![], vec![]));
        svc.spec = Some(ServiceSpec {
            cluster_ip: Some("127.41.0.7".into()),
            ..Default::default()
        });
        assert_eq!(
            allocated(&svc),
            (vec!["127.41.0.7".to_string()], vec!["IPv4".to_string()])
        );
        svc.spec = Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            ..Default::default()
        });
        assert_eq!(allocated(&svc), (vec![], vec![]));
    }
}
