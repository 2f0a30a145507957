//! Answers remembered per query key, valid for one generation of the model.
//!
//! The informers bump [`crate::state::DnsState::generation`] under the model's write lock
//! after every change, so an answer remembered at generation `g` was computed from the
//! model as it is while the generation still reads `g`; the first lookup at a newer
//! generation forgets everything. Each UDP task keeps its own memo: no lock on the hot path.
//! A client asking many distinct names fills the memos only to [`MAX_BYTES`] in all (each
//! task's memo gets its share), then each starts over. What an entry costs counts the
//! hash table's slot for it (twice over: the table may be half empty after it grows) as
//! well as the entry's own bytes.
//!
//! Entries are found by a hash of their key (seeded per memo, so a client cannot aim
//! collisions) and hold the key themselves, next to the bytes a hit needs: one memory
//! access to find and check an entry rather than one for the key and one for the value.
//! Two keys with the same hash share a slot; the later one wins.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault};

use nohash_hasher::NoHashHasher;

/// Memory the memos of one server may hold together (entries and their table slots); a
/// UDP task's memo gets its share.
pub const MAX_BYTES: usize = 16 << 20;

/// A remembered value: the key it answers and what it costs to hold.
pub trait Remember {
    /// The key this value was remembered for.
    fn key(&self) -> &[u8];
    /// Bytes the value holds outside the memo's table, key included.
    fn weight(&self) -> usize;
}

/// Values of type `V` by key bytes, for one model generation.
pub struct Memo<V> {
    generation: u64,
    hasher: foldhash::quality::RandomState,
    entries: HashMap<u64, V, BuildHasherDefault<NoHashHasher<u64>>>,
    bytes: usize,
    max_bytes: usize,
}

impl<V: Remember> Default for Memo<V> {
    fn default() -> Self {
        Self::with_max_bytes(MAX_BYTES)
    }
}

impl<V: Remember> Memo<V> {
    /// What a table slot costs beyond the value's own bytes: the hash and the value
    /// inline, a control byte, all twice (the table doubles when it grows).
    const SLOT: usize = 2 * (std::mem::size_of::<(u64, V)>() + 1);

    /// A memo holding at most `max_bytes`.
    pub fn with_max_bytes(max_bytes: usize) -> Self {
        Self {
            generation: 0,
            hasher: foldhash::quality::RandomState::default(),
            entries: HashMap::default(),
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
        self.entries
            .get(&self.hasher.hash_one(key))
            .filter(|v| v.key() == key)
    }

    /// Remember `value` (for its key), computed from the model at `generation` (read
    /// before the model was). A value computed at an older generation is dropped.
    pub fn insert(&mut self, generation: u64, value: V) {
        self.renew(generation);
        if generation != self.generation {
            return;
        }
        let size = value.weight() + Self::SLOT;
        if size > self.max_bytes {
            return;
        }
        if self.bytes + size > self.max_bytes {
            self.entries.clear();
            self.bytes = 0;
        }
        let hash = self.hasher.hash_one(value.key());
        if let Some(old) = self.entries.insert(hash, value) {
            self.bytes -= old.weight() + Self::SLOT;
        }
        self.bytes += size;
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is remembered.
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

    /// A key and a number.
    struct Kv(Vec<u8>, u64);

    impl Remember for Kv {
        fn key(&self) -> &[u8] {
            &self.0
        }
        fn weight(&self) -> usize {
            self.0.len() + 8
        }
    }

    fn kv(key: &[u8], v: u64) -> Kv {
        Kv(key.to_vec(), v)
    }

    fn value(m: &mut Memo<Kv>, generation: u64, key: &[u8]) -> Option<u64> {
        m.get(generation, key).map(|v| v.1)
    }

    #[test]
    fn a_new_generation_forgets_and_an_old_one_is_not_kept() {
        let mut m = Memo::<Kv>::default();
        m.insert(1, kv(b"a", 1));
        assert_eq!(value(&mut m, 1, b"a"), Some(1));
        assert_eq!(value(&mut m, 1, b"b"), None);
        assert_eq!(value(&mut m, 2, b"a"), None);
        // Computed from generation 1 but arriving after 2 was seen: dropped.
        m.insert(1, kv(b"a", 1));
        assert!(m.is_empty());
        // And an old generation never brings the old entries back.
        assert_eq!(value(&mut m, 1, b"a"), None);
    }

    #[test]
    fn the_bound_holds() {
        let slot = Memo::<Kv>::SLOT;
        let max = 10 * (16 + slot);
        let mut m = Memo::<Kv>::with_max_bytes(max);
        for i in 0u64..100 {
            m.insert(0, kv(&i.to_be_bytes(), i));
            assert!(m.bytes <= max);
            assert_eq!(value(&mut m, 0, &i.to_be_bytes()), Some(i));
        }
        assert!(m.len() <= 10);
        // Replacing a key does not count it twice.
        let mut m = Memo::<Kv>::with_max_bytes(max);
        for _ in 0..100 {
            m.insert(0, kv(b"k", 1));
        }
        assert_eq!((m.len(), m.bytes), (1, 9 + slot));
    }
}
