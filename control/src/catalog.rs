//! The set of resource types a logical cluster serves: the built-ins, the MCS and About
//! types served as if their CRDs were installed, and the CRDs a tenant added, with
//! lookups by URL segment and discovery order.

use std::sync::{Arc, OnceLock};

use crate::resources::{ResourceType, builtins};

/// Kubernetes' version order, most preferred first: GA, then beta, then alpha (higher
/// numbers first within each), then names that are not Kubernetes-like, alphabetically.
fn version_priority(v: &str) -> (u8, std::cmp::Reverse<u64>, std::cmp::Reverse<u64>, String) {
    use std::cmp::Reverse;
    let parsed = v.strip_prefix('v').and_then(|rest| {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let major: u64 = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        let (stage, num) = if tail.is_empty() {
            (0, "0")
        } else if let Some(n) = tail.strip_prefix("beta") {
            (1, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (2, n)
        } else {
            return None;
        };
        let minor: u64 = num.parse().ok()?;
        Some((stage, major, minor))
    });
    match parsed {
        Some((stage, major, minor)) => (stage, Reverse(major), Reverse(minor), String::new()),
        None => (3, Reverse(0), Reverse(0), v.to_string()),
    }
}

/// A set of resource types with lookups by URL segment and by kind.
pub struct Catalog {
    types: Vec<Arc<ResourceType>>,
    /// Changes whenever the set of types changes (OpenAPI documents are cached by it).
    pub generation: u64,
}

impl Catalog {
    fn new(types: Vec<ResourceType>) -> Self {
        Self {
            types: types.into_iter().map(Arc::new).collect(),
            generation: 0,
        }
    }

    /// The built-ins plus `custom` types.
    pub fn with_custom(custom: Vec<Arc<ResourceType>>, generation: u64) -> Self {
        let mut types = Self::builtin_arc().types.clone();
        types.extend(custom);
        Self { types, generation }
    }

    /// The built-in types, the same in every logical cluster.
    pub fn builtin() -> &'static Catalog {
        Self::builtin_arc()
    }

    pub fn builtin_arc() -> &'static Arc<Catalog> {
        static CATALOG: OnceLock<Arc<Catalog>> = OnceLock::new();
        CATALOG.get_or_init(|| {
            let mut catalog = Catalog::new(builtins());
            // The MCS and About API types are served as if their CRDs were installed in
            // every logical cluster: two versions, one storage version, structural schemas.
            for crd in sluice_api::mcs::crds() {
                catalog.types.extend(crate::crd::types_from_crd(&crd));
            }
            Arc::new(catalog)
        })
    }

    pub fn lookup(&self, group: &str, version: &str, resource: &str) -> Option<&Arc<ResourceType>> {
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.resource == resource)
    }

    pub fn types(&self) -> &[Arc<ResourceType>] {
        &self.types
    }

    /// Groups in discovery order, each with its versions.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for t in &self.types {
            match out.iter_mut().find(|(g, _)| *g == t.group) {
                Some((_, versions)) if !versions.contains(&t.version) => {
                    versions.push(t.version.clone())
                }
                Some(_) => {}
                None => out.push((t.group.clone(), vec![t.version.clone()])),
            }
        }
        for (_, versions) in &mut out {
            versions.sort_by_key(|v| version_priority(v));
        }
        out
    }

    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a Arc<ResourceType>> + 'a {
        self.types
            .iter()
            .filter(move |t| t.group == group && t.version == version)
    }

    /// Every namespaced type, for namespace deletion.
    pub fn namespaced(&self) -> impl Iterator<Item = &Arc<ResourceType>> {
        self.types.iter().filter(|t| t.namespaced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_like_kubernetes() {
        let mut v = vec![
            "v1alpha1", "foo", "v1beta1", "v2beta1", "v1", "v2", "v1beta2",
        ];
        v.sort_by_key(|v| version_priority(v));
        assert_eq!(
            v,
            [
                "v2", "v1", "v2beta1", "v1beta2", "v1beta1", "v1alpha1", "foo"
            ]
        );
    }

    #[test]
    fn mcs_types_prefer_their_storage_version() {
        let groups = Catalog::builtin().groups();
        let (_, versions) = groups
            .iter()
            .find(|(g, _)| g == "multicluster.x-k8s.io")
            .unwrap();
        assert_eq!(versions, &["v1beta1", "v1alpha1"]);
    }
}
