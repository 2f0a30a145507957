//! Logical cluster paths: `root`, `root:shop`, `root:shop:team`.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Why a string is not a logical cluster path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("logical cluster path is empty")]
    Empty,
    #[error("logical cluster path {0:?} must start with \"root\"")]
    NotRooted(String),
    #[error("segment {segment:?} of logical cluster path {path:?} is not a DNS label")]
    BadSegment { path: String, segment: String },
}

/// A colon-separated logical cluster path rooted at `root`.
///
/// Cheap to clone: shared string, compared and hashed by value.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LogicalClusterPath(Arc<str>);

impl LogicalClusterPath {
    /// The root logical cluster.
    pub fn root() -> Self {
        Self(Arc::from("root"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_root(&self) -> bool {
        &*self.0 == "root"
    }

    /// The parent path and this cluster's name within it; `None` for `root`.
    pub fn parent(&self) -> Option<(LogicalClusterPath, &str)> {
        let (parent, name) = self.0.rsplit_once(':')?;
        Some((Self(Arc::from(parent)), name))
    }

    /// The child logical cluster `<self>:<name>`.
    pub fn child(&self, name: &str) -> Result<Self, PathError> {
        format!("{}:{}", self.0, name).parse()
    }

    /// True when `other` is this cluster or lies below it.
    pub fn contains(&self, other: &LogicalClusterPath) -> bool {
        other.0.len() >= self.0.len()
            && other.0.starts_with(&*self.0)
            && (other.0.len() == self.0.len() || other.0.as_bytes()[self.0.len()] == b':')
    }
}

/// A DNS-1123 label: `[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?`.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

impl FromStr for LogicalClusterPath {
    type Err = PathError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err(PathError::Empty);
        }
        let mut segments = s.split(':');
        if segments.next() != Some("root") {
            return Err(PathError::NotRooted(s.to_string()));
        }
        for segment in segments {
            if !is_dns_label(segment) {
                return Err(PathError::BadSegment {
                    path: s.to_string(),
                    segment: segment.to_string(),
                });
            }
        }
        Ok(Self(Arc::from(s)))
    }
}

impl fmt::Display for LogicalClusterPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for LogicalClusterPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        assert!("root".parse::<LogicalClusterPath>().is_ok());
        assert!("root:shop:team-1".parse::<LogicalClusterPath>().is_ok());
        assert_eq!("".parse::<LogicalClusterPath>(), Err(PathError::Empty));
        assert!(matches!(
            "shop".parse::<LogicalClusterPath>(),
            Err(PathError::NotRooted(_))
        ));
        assert!(matches!(
            "root:Shop".parse::<LogicalClusterPath>(),
            Err(PathError::BadSegment { .. })
        ));
        assert!(matches!(
            "root::a".parse::<LogicalClusterPath>(),
            Err(PathError::BadSegment { .. })
        ));
        assert!(matches!(
            "root:-a".parse::<LogicalClusterPath>(),
            Err(PathError::BadSegment { .. })
        ));
    }

    #[test]
    fn parent_child_contains() {
        let p: LogicalClusterPath = "root:a:b".parse().unwrap();
        let (parent, name) = p.parent().unwrap();
        assert_eq!(parent.as_str(), "root:a");
        assert_eq!(name, "b");
        assert!(LogicalClusterPath::root().parent().is_none());
        assert!(parent.contains(&p));
        assert!(!p.contains(&parent));
        let ab: LogicalClusterPath = "root:ab".parse().unwrap();
        assert!(
            !"root:a"
                .parse::<LogicalClusterPath>()
                .unwrap()
                .contains(&ab)
        );
        assert_eq!(parent.child("b").unwrap(), p);
    }
}
