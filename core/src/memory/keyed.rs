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

/// Whether two keys are the same text. Keys of 4 to 24 bytes (user ids, IP addresses, most API
/// keys' prefixes) are compared by two or three overlapping word loads each, without a call to
/// `memcmp`.
#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if (17..=24).contains(&n) {
        let word = |s: &[u8], at: usize| u64::from_ne_bytes(s[at..at + 8].try_into().unwrap());
        (word(a, 0) ^ word(b, 0)) | (word(a, 8) ^ word(b, 8)) | (word(a, n - 8) ^ word(b, n - 8))
            == 0
    } else if (8..=16).contains(&n) {
        let word = |s: &[u8], at: usize| u64::from_ne_bytes(s[at..at + 8].try_into().unwrap());
        (word(a, 0) ^ word(b, 0)) | (word(a, n - 8) ^ word(b, n - 8)) == 0
    } else if (4..8).contains(&n) {
        let word = |s: &[u8], at: usize| u32::from_ne_bytes(s[at..at + 4].try_into().unwrap());
        (word(a, 0) ^ word(b, 0)) | (word(a, n - 4) ^ word(b, n - 4)) == 0
    } else {
        a == b
    }
}

/// The longest key kept inside its table entry.
const INLINE: usize = 22;

/// A key's text: up to [`INLINE`] bytes inside the table's entry (user ids, IPv4 and most IPv6
/// addresses, short API keys), so finding the key reads no other memory and adding it allocates
/// nothing; a longer key on the heap. 24 bytes either way.
#[derive(Debug)]
enum KeyText {
    Inline(u8, [u8; INLINE]),
    Heap(Box<str>),
}

const _: () = assert!(std::mem::size_of::<KeyText>() == 24);

impl KeyText {
    #[inline]
    fn new(text: &str) -> KeyText {
        let n = text.len();
        if n <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..n].copy_from_slice(text.as_bytes());
            KeyText::Inline(n as u8, bytes)
        } else {
            KeyText::Heap(text.into())
        }
    }

    /// Whether this is `text`.
    #[inline(always)]
    fn is(&self, text: &str) -> bool {
        match self {
            KeyText::Inline(n, bytes) => {
                *n as usize == text.len() && same(&bytes[..*n as usize], text.as_bytes())
            }
            KeyText::Heap(key) => same(key.as_bytes(), text.as_bytes()),
        }
    }

    /// The text (to hash it again when the table grows or shrinks).
    fn as_str(&self) -> &str {
        match self {
            // The bytes of a whole `&str`: always UTF-8.
            KeyText::Inline(n, bytes) => std::str::from_utf8(&bytes[..*n as usize]).unwrap_or(""),
            KeyText::Heap(key) => key,
        }
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

/// Keys and their states (40 to 48 bytes an entry: the key's [`KeyText`] and a 16- to 24-byte
/// state).
#[derive(Debug)]
pub(super) struct Table<V> {
    map: HashTable<(KeyText, V)>,
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
            .find_mut(key.hash, |(k, _)| k.is(key.text))
            .map(|(_, v)| v)
    }

    /// `key`'s state if it is live at `horizon`.
    #[inline]
    pub(super) fn live(&self, key: Key<'_>, horizon: u64) -> Option<V> {
        self.map
            .find(key.hash, |(k, _)| k.is(key.text))
            .map(|&(_, v)| v)
            .filter(|v| v.alive(horizon))
    }

    /// Adds `key`, known to be absent, with `state`.
    #[inline]
    pub(super) fn insert_new(&mut self, key: Key<'_>, state: V) {
        let hasher = &self.hasher;
        self.map
            .insert_unique(key.hash, (KeyText::new(key.text), state), |(k, _)| {
                hasher.hash_one(k.as_str())
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
        if let Ok(entry) = self.map.find_entry(key.hash, |(k, _)| k.is(key.text)) {
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
            self.map.shrink_to_fit(|(k, _)| hasher.hash_one(k.as_str()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_every_length_are_found_and_told_apart() {
        let hasher = Hasher::default();
        let mut table: Table<Tat> = Table::new(&hasher);
        let texts: Vec<String> = (0..48)
            .flat_map(|n| {
                [
                    "a".repeat(n),
                    format!("{}b", "a".repeat(n)),
                    format!("é{}", "z".repeat(n)),
                ]
            })
            .collect();
        fn key<'a>(hasher: &Hasher, text: &'a str) -> Key<'a> {
            Key {
                text,
                hash: hasher.hash_one(text),
            }
        }
        for (i, text) in texts.iter().enumerate() {
            let tat = Tat {
                ms: i as u64 + 10,
                rem: 0,
                per: 1,
            };
            assert!(
                table.get_mut(key(&hasher, text)).is_none(),
                "{text:?} before"
            );
            table.insert_new(key(&hasher, text), tat);
        }
        assert_eq!(table.len(), texts.len());
        for (i, text) in texts.iter().enumerate() {
            assert_eq!(
                table.live(key(&hasher, text), 0).map(|t| t.ms),
                Some(i as u64 + 10),
                "{text:?}"
            );
        }
        // Growth and shrinking hash the texts again, inline and on the heap alike.
        for text in &texts[..texts.len() - 4] {
            table.remove(key(&hasher, text));
        }
        table.purge(0);
        for text in &texts[texts.len() - 4..] {
            assert!(
                table.live(key(&hasher, text), 0).is_some(),
                "{text:?} after shrinking"
            );
        }
    }
}
