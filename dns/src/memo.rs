//! Answers remembered per query key, valid for one generation of the model.
//!
//! The informers bump [`crate::state::DnsState::generation`] under the model's write lock
//! after every change, so an answer remembered at generation `g` was computed from the
//! model as it is while the generation still reads `g`; the first lookup at a newer
//! generation forgets everything. Each UDP task keeps its own memo: no lock on the hot path.
//! A client asking many distinct names fills it only to [`MAX_BYTES`], then it starts over.

use std::collections::HashMap;

/// Memory one memo may hold (keys and values); past it the memo is cleared.
pub const MAX_BYTES: usize = 16 << 20;

/// A remembered value and what it costs to hold.
pub trait Weigh {
    /// Bytes held, beyond the key.
    fn weight(&self) -> usize;
}

/// Values of type `V` by key bytes, for one model generation.
pub struct Memo<V> {
    generation: u64,
    entries: HashMap<Box<[u8]>, V>,
    bytes: usize,
    max_bytes: usize,
}

impl<V: Weigh> Default for Memo<V> {
    fn default() -> Self {
        Self::with_max_bytes(MAX_BYTES)
    }
}

impl<V: Weigh> Memo<V> {
    /// A memo holding at most `max_bytes`.
    pub fn with_max_bytes(max_bytes: usize) -> Self {
        Self {
            generation: 0,
            entries: HashMap::new(),
            bytes: 0,
            max_bytes,
        }
    }

    /// The value remembered for `key`, if it was remembered at `generation`.
    pub fn get(&mut self, generation: u64, key: &[u8]) -> Option<&V> {
        self.renew(generation);
        if generation != self.generation {
            return None;
        }
        self.entries.get(key)
    }

    /// Remember `value` for `key`, computed from the model at `generation` (read before
    /// the model was). A value remembered for an older generation is dropped.
    pub fn insert(&mut self, generation: u64, key: &[u8], value: V) {
        self.renew(generation);
        if generation != self.generation {
            return;
        }
        let size = key.len() + value.weight();
        if size > self.max_bytes {
            return;
        }
        if self.bytes + size > self.max_bytes {
            self.entries.clear();
            self.bytes = 0;
        }
        if let Some(old) = self.entries.insert(key.into(), value) {
            self.bytes -= key.len() + old.weight();
        }
        self.bytes += size;
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forget everything if the model has moved on past what was remembered.
    fn renew(&mut self, generation: u64) {
        if generation > self.generation {
            self.entries.clear();
            self.bytes = 0;
            self.generation = generation;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Weigh for u64 {
        fn weight(&self) -> usize {
            8
        }
    }

    #[test]
    fn a_new_generation_forgets_and_an_old_one_is_not_kept() {
        let mut m = Memo::<u64>::default();
        m.insert(1, b"a", 1);
        assert_eq!(m.get(1, b"a"), Some(&1));
        assert_eq!(m.get(2, b"a"), None);
        // Computed from generation 1 but arriving after 2 was seen: dropped.
        m.insert(1, b"a", 1);
        assert!(m.is_empty());
        // And an old generation never brings the old entries back.
        assert_eq!(m.get(1, b"a"), None);
    }

    #[test]
    fn the_bound_holds() {
        let mut m = Memo::<u64>::with_max_bytes(100);
        for i in 0u64..100 {
            m.insert(0, &i.to_be_bytes(), i);
            assert!(m.bytes <= 100);
        }
        assert!(m.len() <= 100 / 16);
        // Replacing a key does not count it twice.
        let mut m = Memo::<u64>::with_max_bytes(100);
        for _ in 0..100 {
            m.insert(0, b"k", 1);
        }
        assert_eq!((m.len(), m.bytes), (1, 9));
    }
}
