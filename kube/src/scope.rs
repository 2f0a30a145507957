//! Which keys a controller's round covers: the ones whose objects changed, or everything
//! (after a re-list, a membership change, anything that touches every key). A round's
//! cost then follows the size of the change, not of the cluster.

use std::collections::BTreeSet;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope<K: Ord> {
    All,
    Keys(BTreeSet<K>),
}

impl<K: Ord> Default for Scope<K> {
    /// Nothing: the scope changes accumulate into.
    fn default() -> Self {
        Self::Keys(BTreeSet::new())
    }
}

impl<K: Ord> Scope<K> {
    pub fn contains(&self, key: &K) -> bool {
        match self {
            Self::All => true,
            Self::Keys(keys) => keys.contains(key),
        }
    }

    /// Whether the scope covers nothing at all.
    pub fn is_empty(&self) -> bool {
        matches!(self, Self::Keys(keys) if keys.is_empty())
    }

    pub fn is_all(&self) -> bool {
        matches!(self, Self::All)
    }

    pub fn insert(&mut self, key: K) {
        if let Self::Keys(keys) = self {
            keys.insert(key);
        }
    }

    /// Widen this scope by `other`.
    pub fn extend(&mut self, other: Self) {
        match other {
            Self::All => *self = Self::All,
            Self::Keys(more) => {
                if let Self::Keys(keys) = self {
                    keys.extend(more);
                }
            }
        }
    }

    /// How many keys the scope names; `None` for all.
    pub fn len(&self) -> Option<usize> {
        match self {
            Self::All => None,
            Self::Keys(keys) => Some(keys.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widens_and_never_narrows() {
        let mut s = Scope::default();
        assert!(s.is_empty());
        s.insert(1);
        s.extend(Scope::Keys([2].into()));
        assert_eq!(s, Scope::Keys([1, 2].into()));
        assert_eq!(s.len(), Some(2));
        s.extend(Scope::All);
        assert!(s.is_all() && s.contains(&7) && s.len().is_none());
        s.insert(3);
        s.extend(Scope::Keys([4].into()));
        assert!(s.is_all(), "all stays all");
    }
}
