//! Storage keys: `<group>/<resource>/<logical cluster>/<namespace>/<name>`.
//!
//! The logical cluster is part of the key (as in kcp), so one logical cluster costs nothing
//! beyond its objects, and a wildcard list is a prefix scan of `<group>/<resource>/`.

use std::fmt;
use std::sync::Arc;

use sluice_api::LogicalClusterPath;

/// A full object key. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(Arc<str>);

/// `<group>/<resource>/`: the part of a key that names one resource type.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct ResourcePrefix(Arc<str>);

impl ResourcePrefix {
    pub fn new(group: &str, resource: &str) -> Self {
        let group = if group.is_empty() { "core" } else { group };
        Self(Arc::from(format!("{group}/{resource}/")))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Prefix of every object of this resource in one logical cluster (and namespace).
    pub fn scope(&self, cluster: Option<&LogicalClusterPath>, namespace: Option<&str>) -> String {
        match (cluster, namespace) {
            (None, _) => self.0.to_string(),
            (Some(c), None) => format!("{}{}/", self.0, c),
            (Some(c), Some(ns)) => format!("{}{}/{}/", self.0, c, ns),
        }
    }

    pub fn key(&self, cluster: &LogicalClusterPath, namespace: Option<&str>, name: &str) -> Key {
        Key(Arc::from(format!(
            "{}{}/{}/{}",
            self.0,
            cluster,
            namespace.unwrap_or(""),
            name
        )))
    }
}

/// The parts of a key.
#[derive(Debug, PartialEq, Eq)]
pub struct KeyParts<'a> {
    pub resource: &'a str,
    pub cluster: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

impl Key {
    pub fn from_raw(s: &str) -> Self {
        Self(Arc::from(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Split into `(resource prefix, cluster, namespace, name)`.
    pub fn parts(&self) -> Option<KeyParts<'_>> {
        let s = &*self.0;
        let mut it = s.splitn(5, '/');
        let group = it.next()?;
        let resource = it.next()?;
        let cluster = it.next()?;
        let namespace = it.next()?;
        let name = it.next()?;
        Some(KeyParts {
            resource: &s[..group.len() + resource.len() + 2],
            cluster,
            namespace,
            name,
        })
    }

    pub fn cluster(&self) -> Option<&str> {
        self.parts().map(|p| p.cluster)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_round_trip() {
        let p = ResourcePrefix::new("", "pods");
        let c: LogicalClusterPath = "root:a".parse().unwrap();
        let k = p.key(&c, Some("default"), "web");
        assert_eq!(k.as_str(), "core/pods/root:a/default/web");
        let parts = k.parts().unwrap();
        assert_eq!(parts.resource, "core/pods/");
        assert_eq!(parts.cluster, "root:a");
        assert_eq!(parts.namespace, "default");
        assert_eq!(parts.name, "web");
        let ns = ResourcePrefix::new("", "namespaces").key(&c, None, "x");
        assert_eq!(ns.parts().unwrap().namespace, "");
        assert!(k.as_str().starts_with(&p.scope(Some(&c), Some("default"))));
        assert!(
            !k.as_str()
                .starts_with(&p.scope(Some(&"root".parse().unwrap()), None))
        );
    }
}
