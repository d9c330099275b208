//! The memory store's GCRA and counter keys: a hash table holding each key and its small `Copy`
//! state inline (a GCRA TAT, a counter's counts), so a call finds its state in one probe with no
//! index table between the hash and the entry, and swept from a rotating bucket cursor.
//!
//! One type serves both algorithms through [`State`]: what differs is only when a state is empty
//! again (the key is then the same as no key, and the sweep removes it).

use hashbrown::HashTable;

use super::{Hasher, Key, SWEEP_LOOK, SWEEP_REMOVE};
use crate::counter::CounterState;
use crate::gcra::Tat;
use std::hash::BuildHasher;

/// Whether two keys are the same text. Keys of 4 to 16 bytes (user ids, IPv4 addresses, most API
/// keys' prefixes) are compared by two overlapping word loads each, without a call to `memcmp`.
#[inline(always)]
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if (8..=16).contains(&n) {
        let word = |s: &[u8], at: usize| u64::from_ne_bytes(s[at..at + 8].try_into().unwrap());
        (word(a, 0) ^ word(b, 0)) | (word(a, n - 8) ^ word(b, n - 8)) == 0
    } else if (4..8).contains(&n) {
        let word = |s: &[u8], at: usize| u32::from_ne_bytes(s[at..at + 4].try_into().unwrap());
        (word(a, 0) ^ word(b, 0)) | (word(a, n - 4) ^ word(b, n - 4)) == 0
    } else {
        a == b
    }
}

/// A key's state in a [`Table`].
pub(super) trait State: Copy {
    /// The first ms at which the state is empty again (`u64::MAX`: past the end of time).
    fn expires_at(&self) -> u64;

    /// Whether the state still holds something at `horizon`.
    #[inline]
    fn alive(&self, horizon: u64) -> bool {
        let at = self.expires_at();
        at > horizon || at == u64::MAX
    }
}

impl State for Tat {
    #[inline]
    fn expires_at(&self) -> u64 {
        Tat::expires_at(*self)
    }
}

impl State for CounterState {
    #[inline]
    fn expires_at(&self) -> u64 {
        CounterState::expires_at(*self)
    }
}

/// Every this many operations on a table, it is swept [`DUE_LOOK`] buckets on, and another shard
/// in rotation: an update in place adds no key, so this is only how keys that died among keys
/// still in use go when no new key comes.
const DUE_EVERY: u32 = 64;
/// Buckets looked at by the sweep due every [`DUE_EVERY`] operations.
const DUE_LOOK: usize = 16;

/// Keys and their states (16 to 24 bytes each, beside a `Box<str>` of the key).
#[derive(Debug)]
pub(super) struct Table<V> {
    map: HashTable<(Box<str>, V)>,
    /// The next bucket the sweep looks at.
    cursor: usize,
    /// Operations since the last sweep due by count.
    ops: u32,
    hasher: Hasher,
}

impl<V: State> Table<V> {
    pub(super) fn new(hasher: &Hasher) -> Table<V> {
        Table {
            map: HashTable::new(),
            cursor: 0,
            ops: 0,
            hasher: hasher.clone(),
        }
    }

    #[inline]
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// `key`'s state, live or not.
    #[inline]
    pub(super) fn get_mut(&mut self, key: Key<'_>) -> Option<&mut V> {
        self.map
            .find_mut(key.hash, |(k, _)| same(k, key.text))
            .map(|(_, v)| v)
    }

    /// `key`'s state if it is live at `horizon`.
    #[inline]
    pub(super) fn live(&self, key: Key<'_>, horizon: u64) -> Option<V> {
        self.map
            .find(key.hash, |(k, _)| same(k, key.text))
            .map(|&(_, v)| v)
            .filter(|v| v.alive(horizon))
    }

    /// Adds `key`, known to be absent, with `state`.
    #[inline]
    pub(super) fn insert_new(&mut self, key: Key<'_>, state: V) {
        let hasher = &self.hasher;
        self.map
            .insert_unique(key.hash, (key.text.into(), state), |(k, _)| {
                hasher.hash_one(&**k)
            });
    }

    /// Stores `key`'s state (replacing it, or adding the key).
    #[inline]
    pub(super) fn put(&mut self, key: Key<'_>, state: V) {
        match self.get_mut(key) {
            Some(v) => *v = state,
            None => self.insert_new(key, state),
        }
    }

    /// Forgets `key`.
    pub(super) fn remove(&mut self, key: Key<'_>) {
        if let Ok(entry) = self.map.find_entry(key.hash, |(k, _)| same(k, key.text)) {
            entry.remove();
        }
    }

    /// Sweeps after a recording operation on this table, which added a key (`inserted`) or not.
    /// Returns whether it is time to sweep another shard too.
    ///
    /// Only an insert adds a key, so an insert pays for a step of the sweep ([`SWEEP_LOOK`]
    /// buckets, on while it finds dead keys: every removal is paid for by the insert that made the
    /// key). An update in place, the hot path of a keyed limiter, only counts: every [`DUE_EVERY`]
    /// operations the table is swept [`DUE_LOOK`] buckets on, and another shard in rotation, so a
    /// table whose keys died while a few others stay in use still shrinks.
    #[inline]
    pub(super) fn after_op(&mut self, horizon: u64, inserted: bool) -> bool {
        if inserted {
            self.sweep(horizon, SWEEP_LOOK, SWEEP_REMOVE);
        }
        self.ops += 1;
        if self.ops >= DUE_EVERY {
            self.sweep_due(horizon);
            true
        } else {
            false
        }
    }

    #[cold]
    fn sweep_due(&mut self, horizon: u64) {
        self.ops = 0;
        self.sweep(horizon, DUE_LOOK, SWEEP_REMOVE);
    }

    /// Looks at `look` buckets from the cursor (empty ones count), removing the dead keys it finds
    /// on the way; continues while it finds them (at most `remove`). Removal leaves every other key
    /// in its bucket, so the cursor stays valid; a resize only reorders what is left to look at.
    pub(super) fn sweep(&mut self, horizon: u64, look: usize, remove: usize) {
        if self.map.is_empty() {
            return;
        }
        let buckets = self.map.num_buckets();
        let (mut looked, mut removed) = (0, 0);
        while looked < look && removed < remove {
            if self.cursor >= buckets {
                self.cursor = 0;
            }
            match self.map.get_bucket_entry(self.cursor) {
                Ok(entry) if !entry.get().1.alive(horizon) => {
                    entry.remove();
                    removed += 1;
                }
                _ => looked += 1,
            }
            self.cursor += 1;
        }
        if removed > 0 {
            self.shrink();
        }
    }

    /// Removes every key dead at `horizon`.
    pub(super) fn purge(&mut self, horizon: u64) {
        self.map.retain(|(_, v)| v.alive(horizon));
        self.shrink();
    }

    #[cold]
    fn shrink(&mut self) {
        if self.map.capacity() > 64 && self.map.len() * 4 < self.map.capacity() {
            let hasher = &self.hasher;
            self.map.shrink_to_fit(|(k, _)| hasher.hash_one(&**k));
        }
    }
}
