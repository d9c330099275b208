//! The embedded store: both algorithms over many keys in one process.
//!
//! Keys live in shards, each behind its own mutex, so threads counting different keys rarely meet. A
//! batch locks the shards it touches in index order, so it is one step (all or nothing) and cannot
//! deadlock with another batch. Expiry needs no background thread: every operation sweeps a few keys of
//! the shard it touched from a rotating cursor, and keeps going while it finds dead ones, so a store
//! that once held a million keys shrinks back as it is used (amortised O(1): every removal is paid for
//! by the insert that made the key). GCRA and counter keys (`memory/keyed.rs`) are swept by the
//! operations that insert a key and by every 64th operation on their table: an update in place adds
//! nothing to sweep for. [`MemoryStore::purge`] sweeps everything at once.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use indexmap::map::raw_entry_v1::{RawEntryApiV1, RawEntryMut};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

#[cfg(feature = "rates")]
use crate::counter::{Counter, CounterState};
use crate::fixed::{self, FixedWindow};
#[cfg(any(feature = "rates", feature = "weights"))]
use crate::gcra::RateError;
#[cfg(all(feature = "rates", not(feature = "weights")))]
use crate::gcra::RateField;
#[cfg(feature = "rates")]
use crate::gcra::{Gcra, GiveBack, Tat};
use crate::sliding::{self, CallLog};
use crate::{BatchVerdict, Entry, Limit, Quota, Verdict, Window};
#[cfg(feature = "rates")]
use crate::{MixedEntry, Rule};

#[cfg(feature = "rates")]
mod keyed;
#[cfg(feature = "rates")]
use keyed::{State, Table};

type Hasher = foldhash::fast::RandomState;
type Map<V> = IndexMap<Box<str>, V, Hasher>;

/// Keys examined per operation by the incremental sweep when it finds only live ones.
const SWEEP_LOOK: usize = 2;
/// Most dead keys one operation removes from its own shard, bounding its latency.
const SWEEP_REMOVE: usize = 64;
/// Every this many operations on a shard, one other shard (in rotation) is swept too, so shards no
/// longer used still shrink.
const FOREIGN_EVERY: u32 = 8;
/// Most dead keys a sweep of another shard removes.
const FOREIGN_REMOVE: usize = 128;
/// Default shard count (a power of two).
const DEFAULT_SHARDS: usize = 16;
/// A log's first allocation holds at most this many calls (it grows past it on demand).
const INITIAL_LOG_CAPACITY: usize = 16;

static NEXT_STORE_ID: AtomicU64 = AtomicU64::new(1);

/// When an operation runs: its `now`, and the store's horizon (the latest `now` recorded so far).
#[derive(Debug, Clone, Copy)]
struct Moment {
    now: u64,
    horizon: u64,
}

/// A key and its hash, computed once per call: the hash picks the shard and finds the key in it.
#[derive(Debug, Clone, Copy)]
struct Key<'a> {
    text: &'a str,
    hash: u64,
}

/// One key's sliding log. The expiry sits beside the map entry, not behind the log's pointer, so the
/// sweep reads no other memory.
#[derive(Debug)]
struct KeyLog {
    /// When every call has left its window and the key may be removed.
    expires_at: u64,
    log: CallLog,
}

impl std::ops::Deref for KeyLog {
    type Target = CallLog;
    fn deref(&self) -> &CallLog {
        &self.log
    }
}

impl std::ops::DerefMut for KeyLog {
    fn deref_mut(&mut self) -> &mut CallLog {
        &mut self.log
    }
}

/// Whether a key still holds a call inside its window at `horizon`. An expiry that saturated at
/// `u64::MAX` is past the end of time: never.
#[inline]
fn alive(log: &KeyLog, horizon: u64) -> bool {
    log.expires_at > horizon || log.expires_at == u64::MAX
}

#[derive(Debug)]
struct Shard {
    logs: Map<KeyLog>,
    windows: Map<FixedWindow>,
    /// GCRA keys: each one TAT (16 bytes), removable once it is behind the horizon.
    #[cfg(feature = "rates")]
    gcra: Table<Tat>,
    /// Sliding-window counter keys (24 bytes each).
    #[cfg(feature = "rates")]
    counters: Table<CounterState>,
    log_cursor: usize,
    window_cursor: usize,
    next_instance: u64,
    /// Operations since this shard last swept another one.
    ops: u32,
}

impl Shard {
    fn new(hasher: &Hasher) -> Shard {
        Shard {
            logs: IndexMap::with_hasher(hasher.clone()),
            windows: IndexMap::with_hasher(hasher.clone()),
            #[cfg(feature = "rates")]
            gcra: Table::new(hasher),
            #[cfg(feature = "rates")]
            counters: Table::new(hasher),
            log_cursor: 0,
            window_cursor: 0,
            next_instance: 1,
            ops: 0,
        }
    }

    /// The index of `key`'s live log, trimmed at `now` to `trim_ms`. A log that expired by `horizon`
    /// or that trimming emptied is removed. Always inlined: with weights it has two callers (a consume
    /// costing 1 and `consume_cost`) and LLVM left it out of line on wasm32, a call more on the hot path.
    #[inline(always)]
    fn live_log(&mut self, key: Key<'_>, now: u64, horizon: u64, trim_ms: u64) -> Option<usize> {
        let index = self.log_index(key)?;
        let log = &mut self.logs[index];
        if alive(log, horizon) {
            log.trim(now, trim_ms);
        } else {
            log.clear();
        }
        if log.is_empty() {
            self.logs.swap_remove_index(index);
            return None;
        }
        Some(index)
    }

    /// The live log of `key`, untouched (for peeks).
    fn peek_log(&self, key: Key<'_>, horizon: u64) -> Option<&KeyLog> {
        let (_, log) = self
            .logs
            .raw_entry_v1()
            .from_hash(key.hash, |k| &**k == key.text)?;
        Some(log).filter(|log| alive(log, horizon))
    }

    #[inline]
    fn log_index(&self, key: Key<'_>) -> Option<usize> {
        self.logs
            .raw_entry_v1()
            .index_from_hash(key.hash, |k| &**k == key.text)
    }

    /// Records a call to `key` (whose log is at `index`, if known) at `now`, or at its newest call if
    /// the clock stepped back; returns the log's life and the recorded time. The key lives until the
    /// call leaves its window, counted from the horizon if the clock is behind it, so a call recorded
    /// while the clock lags is not dead on arrival. Also returns the log's index.
    #[cfg_attr(feature = "weights", inline)]
    fn record(
        &mut self,
        key: Key<'_>,
        index: Option<usize>,
        limit: Limit,
        window_ms: u64,
        cost: u32,
        at: Moment,
    ) -> (u64, u64, usize) {
        let Moment { now, horizon } = at;
        let index = match index {
            Some(i) => i,
            // One probe: it finds the key's log or the slot for a new one.
            None => match self
                .logs
                .raw_entry_mut_v1()
                .from_hash(key.hash, |k| &**k == key.text)
            {
                RawEntryMut::Occupied(entry) => entry.index(),
                RawEntryMut::Vacant(entry) => {
                    let index = entry.index();
                    let log = new_log(&mut self.next_instance, limit);
                    entry.insert_hashed_nocheck(key.hash, key.text.into(), log);
                    index
                }
            },
        };
        let log = &mut self.logs[index];
        let at = log.record_cost(now, cost);
        log.expires_at = log
            .expires_at
            .max(at.max(horizon).saturating_add(window_ms));
        (log.instance(), at, index)
    }

    /// [`record`](Self::record) for batches, kept out of line: inlined into a batch's loop it made
    /// the loop's collect an out-of-line call (+8 % instructions a two-entry batch, callgrind).
    #[cfg(feature = "weights")]
    #[inline(never)]
    fn record_in_batch(
        &mut self,
        key: Key<'_>,
        index: Option<usize>,
        limit: Limit,
        window_ms: u64,
        cost: u32,
        at: Moment,
    ) -> (u64, u64, usize) {
        self.record(key, index, limit, window_ms, cost, at)
    }

    /// The index of `key`'s log trimmed at `now` to `trim_ms` (cleared if it expired by `horizon`), for
    /// a batch: unlike [`live_log`](Self::live_log) it removes nothing, so the indices a batch holds stay
    /// valid. A log left empty stands for no log; the batch renews it ([`renew`](Self::renew)) or
    /// removes it ([`remove_empty`](Self::remove_empty)) before it unlocks the shard.
    fn trimmed_log(&mut self, key: Key<'_>, now: u64, horizon: u64, trim_ms: u64) -> Option<usize> {
        let index = self.log_index(key)?;
        let log = &mut self.logs[index];
        if alive(log, horizon) {
            log.trim(now, trim_ms);
        } else {
            log.clear();
        }
        Some(index)
    }

    /// The index of `key`'s live log, untouched (for peeks).
    fn peek_index(&self, key: Key<'_>, horizon: u64) -> Option<usize> {
        self.log_index(key)
            .filter(|&index| alive(&self.logs[index], horizon))
    }

    /// Replaces the empty log at `index` with a new life of it: what removing it and recording into a
    /// new log would give.
    fn renew(&mut self, index: usize, limit: Limit) {
        self.logs[index] = new_log(&mut self.next_instance, limit);
    }

    /// Removes `key`'s log if it is empty (left so by [`trimmed_log`](Self::trimmed_log)).
    fn remove_empty(&mut self, key: Key<'_>) {
        if let Some(index) = self.log_index(key) {
            if self.logs[index].is_empty() {
                self.logs.swap_remove_index(index);
            }
        }
    }

    fn live_window(&mut self, key: Key<'_>, horizon: u64) -> Option<&mut FixedWindow> {
        let index = self
            .windows
            .raw_entry_v1()
            .index_from_hash(key.hash, |k| &**k == key.text)?;
        if self.windows[index].is_live(horizon) {
            Some(&mut self.windows[index])
        } else {
            self.windows.swap_remove_index(index);
            None
        }
    }

    /// Sweeps this shard a little after an operation on it; returns whether it is time to sweep
    /// another shard too.
    fn sweep(&mut self, horizon: u64) -> bool {
        self.sweep_up_to(horizon, SWEEP_REMOVE);
        self.ops += 1;
        if self.ops >= FOREIGN_EVERY {
            self.ops = 0;
            true
        } else {
            false
        }
    }

    fn sweep_up_to(&mut self, horizon: u64, remove: usize) {
        sweep(&mut self.logs, &mut self.log_cursor, remove, |log| {
            !alive(log, horizon)
        });
        sweep(&mut self.windows, &mut self.window_cursor, remove, |w| {
            !w.is_live(horizon)
        });
        #[cfg(feature = "rates")]
        {
            self.gcra.sweep(horizon, SWEEP_LOOK, remove);
            self.counters.sweep(horizon, SWEEP_LOOK, remove);
        }
    }
}

#[cfg(feature = "rates")]
/// A GCRA state recorded while the clock lags the horizon lasts at least `cost` uses past the
/// horizon, so it is not dead on arrival (the sliding log's rule: the call counts from the horizon).
#[inline]
fn gcra_from_horizon(gcra: Gcra, tat: Tat, cost: u32, now: u64, horizon: u64) -> Tat {
    if now >= horizon {
        return tat;
    }
    let floor = gcra
        .decide(None, cost, horizon, true)
        .store
        .expect("a cost within the burst fits an empty bucket");
    if (floor.ms, floor.rem) > (tat.ms, tat.rem) {
        floor
    } else {
        tat
    }
}

/// The log at `index` of `shard`, unless it is empty (a batch's trimming emptied it: no log).
#[inline]
fn log_at(shard: &Shard, index: Option<usize>) -> Option<&KeyLog> {
    index
        .map(|index| &shard.logs[index])
        .filter(|log| !log.is_empty())
}

/// A new, empty log for a key counted under `limit`, in the shard's next life.
fn new_log(next_instance: &mut u64, limit: Limit) -> KeyLog {
    let instance = *next_instance;
    *next_instance += 1;
    let cap = (limit.uses() as usize).min(INITIAL_LOG_CAPACITY);
    KeyLog {
        expires_at: 0,
        log: CallLog::new(cap, instance),
    }
}

/// Looks at a few keys from the cursor, removing dead ones; continues while it finds them.
fn sweep<V>(map: &mut Map<V>, cursor: &mut usize, remove: usize, dead: impl Fn(&V) -> bool) {
    let (mut looked, mut removed) = (0, 0);
    while looked < SWEEP_LOOK && removed < remove && !map.is_empty() {
        if *cursor >= map.len() {
            *cursor = 0;
        }
        if dead(&map[*cursor]) {
            map.swap_remove_index(*cursor);
            removed += 1;
        } else {
            *cursor += 1;
            looked += 1;
        }
    }
    if removed > 0 && map.capacity() > 64 && map.len() * 4 < map.capacity() {
        map.shrink_to_fit();
    }
}

/// For each entry, the index of the first entry naming its key; and for each such first entry, the
/// longest window among the entries naming its key (0 for the others). Linear in the batch: keys are
/// found by the hashes already computed for the shards.
fn first_of_each_key(
    entries: &[Entry],
    located: &[(usize, Key<'_>)],
) -> (SmallVec<[usize; 8]>, SmallVec<[u64; 8]>) {
    let mut first: SmallVec<[usize; 8]> = SmallVec::with_capacity(entries.len());
    let mut longest: SmallVec<[u64; 8]> = SmallVec::from_elem(0, entries.len());
    if entries.len() <= 8 {
        // A handful of stacked limits: a scan beats building a map.
        for i in 0..entries.len() {
            let f = (0..i)
                .find(|&j| entries[j].key == entries[i].key)
                .unwrap_or(i);
            first.push(f);
        }
    } else {
        // Entry indices, found by the key's hash and compared by the key.
        let mut seen: IndexMap<usize, (), Hasher> =
            IndexMap::with_capacity_and_hasher(entries.len(), Hasher::default());
        for (i, &(_, key)) in located.iter().enumerate() {
            let f = match seen
                .raw_entry_mut_v1()
                .from_hash(key.hash, |&j| entries[j].key == entries[i].key)
            {
                RawEntryMut::Occupied(e) => *e.key(),
                RawEntryMut::Vacant(e) => {
                    e.insert_hashed_nocheck(key.hash, i, ());
                    i
                }
            };
            first.push(f);
        }
    }
    for (i, entry) in entries.iter().enumerate() {
        let slot = &mut longest[first[i]];
        *slot = (*slot).max(entry.limit.window_ms());
    }
    (first, longest)
}

/// A call recorded by an allowed consume: enough to give exactly that call back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedCall {
    /// The key counted.
    pub key: String,
    /// The life of the key's log the call was recorded in.
    pub instance: u64,
    /// When it was recorded (ms, store clock).
    pub at: u64,
    /// The longest window the call was counted under: past `at + window_ms` it has left, and a release
    /// leaves the key alone.
    pub window_ms: u64,
    /// The uses the call took (that many times recorded at `at`); a release gives back as many.
    #[serde(default = "one_use")]
    pub cost: u32,
}

fn one_use() -> u32 {
    1
}

/// The right to give back the calls one allowed consume recorded.
///
/// Not `Clone`: [`MemoryStore::release`] takes it by value, so a release happens at most once. A binding
/// that must expose an idempotent `release()` holds it in an `Option` and takes it.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
#[must_use = "dropping a Release keeps the call counted, which is fine; use `let _ =` to say so"]
pub struct Release {
    store: u64,
    calls: Vec<RecordedCall>,
    /// GCRA and counter uses taken (one per key).
    #[cfg(feature = "rates")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    taken: Vec<Taken>,
}

/// What an allowed call took from one GCRA or counter key: enough to give exactly that back.
#[cfg(feature = "rates")]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "algorithm", rename_all = "snake_case")]
enum Taken {
    /// The TAT the call stored, after `cost` uses.
    Gcra {
        key: String,
        gcra: Gcra,
        cost: u32,
        after: Tat,
    },
    /// The fixed window (its start) the call's `cost` uses were counted in.
    Counter {
        key: String,
        counter: Counter,
        cost: u32,
        start: u64,
    },
}

impl Release {
    #[cfg(feature = "rates")]
    fn taken(store: u64, taken: Taken) -> Release {
        Release {
            store,
            calls: Vec::new(),
            taken: vec![taken],
        }
    }
}

impl Release {
    /// The calls this release gives back.
    pub fn calls(&self) -> &[RecordedCall] {
        &self.calls
    }
}

/// The result of a consume: the verdict, and on an allowed one the way to give the call back.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub struct Consumed {
    /// The verdict.
    pub verdict: BatchVerdict,
    /// `Some` exactly when the verdict is allowed.
    pub release: Option<Release>,
}

/// Both algorithms over many keys in this process. `Send + Sync`: share it behind an `Arc`.
///
/// Times are arguments (`now`, Unix ms): read a [`Clock`](crate::Clock) and pass its reading. The
/// store takes any `u64`, but a reading far in the future moves its horizon there and expires every
/// key: a host that may be handed a wrapped or hostile time checks it first with
/// [`input::check_now`](crate::input::check_now) (0 to 2^53 − 1), as every binding does.
///
/// **Expiry.** A key expires once every call it holds has left its window (a fixed window, once it
/// ends). The store keeps a *horizon*: the latest `now` any recording operation has passed. A key is
/// dead once the horizon reaches its expiry, and dead keys are swept away as the store is used — so a
/// clock that later steps back does not bring an expired key's calls back, whether or not the sweep has
/// reached it yet. A call recorded while the clock lags the horizon keeps its key alive for its window
/// counted from the horizon (and a fixed window opened then ends a decay after the horizon). Peeks and
/// reads never move the horizon.
///
/// ```
/// use ratewindow_core::{Limit, MemoryStore};
/// let store = MemoryStore::new();
/// let limit = Limit::new(2, 1_000).unwrap();
/// assert!(store.consume("user:1", limit, 0).allowed);
/// assert!(store.consume("user:1", limit, 10).allowed);
/// let refused = store.consume("user:1", limit, 20);
/// assert_eq!((refused.allowed, refused.retry_after_ms, refused.retry_timestamp), (false, 980, Some(1_000)));
/// assert!(store.consume("user:1", limit, 1_000).allowed); // the first call left at exactly 0 + 1000
/// ```
#[derive(Debug)]
pub struct MemoryStore {
    id: u64,
    horizon: AtomicU64,
    foreign_cursor: AtomicUsize,
    hasher: Hasher,
    shards: Box<[Mutex<Shard>]>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty store with the default number of shards.
    pub fn new() -> MemoryStore {
        MemoryStore::with_shards(DEFAULT_SHARDS)
    }

    /// An empty store with `shards` shards (rounded up to a power of two, at least 1).
    pub fn with_shards(shards: usize) -> MemoryStore {
        let n = shards.max(1).next_power_of_two();
        let hasher = Hasher::default();
        MemoryStore {
            id: NEXT_STORE_ID.fetch_add(1, Ordering::Relaxed),
            horizon: AtomicU64::new(0),
            foreign_cursor: AtomicUsize::new(0),
            hasher: hasher.clone(),
            shards: (0..n).map(|_| Mutex::new(Shard::new(&hasher))).collect(),
        }
    }

    #[inline]
    fn key<'a>(&self, text: &'a str) -> (usize, Key<'a>) {
        let hash = self.hasher.hash_one(text);
        // The maps find buckets by the low bits and tag them by the top 7: the shard takes bits from
        // the middle, so keys of one shard still spread over their map.
        let shard = (hash >> 32) as usize & (self.shards.len() - 1);
        (shard, Key { text, hash })
    }

    #[inline]
    fn lock(&self, index: usize) -> MutexGuard<'_, Shard> {
        // Every mutation of a shard is one step that cannot panic half-way, so a lock poisoned by a
        // panic elsewhere guards consistent data and is safe to take.
        self.shards[index].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sweeps the next shard in rotation, unless another thread holds it (it will sweep it itself).
    #[cold]
    fn sweep_foreign(&self, horizon: u64) {
        let index = self.foreign_cursor.fetch_add(1, Ordering::Relaxed) & (self.shards.len() - 1);
        if let Ok(mut shard) = self.shards[index].try_lock() {
            shard.sweep_up_to(horizon, FOREIGN_REMOVE);
        }
    }

    /// The horizon for a read at `now`.
    #[inline]
    fn horizon_at(&self, now: u64) -> u64 {
        self.horizon.load(Ordering::Relaxed).max(now)
    }

    /// Moves the horizon to `now` if it is later; returns the horizon.
    #[inline]
    fn advance(&self, now: u64) -> u64 {
        let horizon = self.horizon.load(Ordering::Relaxed);
        if now > horizon {
            // Written at most once a millisecond per thread, so the line stays mostly shared.
            self.horizon.fetch_max(now, Ordering::Relaxed).max(now)
        } else {
            horizon
        }
    }

    /// Counts one call to `key` under `limit` at `now`: allowed and recorded, or refused with the wait.
    /// The verdict's [`Quota`] is the key's after the call.
    pub fn consume(&self, key: &str, limit: Limit, now: u64) -> Verdict {
        self.consume_uses(key, limit, 1, now)
    }

    /// Counts a call costing `cost` uses to `key` under `limit` at `now`: allowed only if `cost` more
    /// fit in the window, then recorded as `cost` uses at one moment; refused with the wait until they
    /// fit. The quota counts uses. A cost outside `1..=uses` is an error naming `cost` and changes
    /// nothing.
    ///
    /// ```
    /// use ratewindow_core::{Limit, MemoryStore};
    /// let store = MemoryStore::new();
    /// let limit = Limit::new(5, 1_000).unwrap();
    /// assert_eq!(store.consume_cost("k", limit, 3, 0).unwrap().quota.remaining, 2);
    /// let heavy = store.consume_cost("k", limit, 3, 10).unwrap(); // 3 more do not fit
    /// assert_eq!((heavy.allowed, heavy.retry_timestamp, heavy.quota.remaining), (false, Some(1_000), 2));
    /// assert!(store.consume_cost("k", limit, 2, 10).unwrap().allowed); // 2 do
    /// assert!(store.consume_cost("k", limit, 6, 10).is_err());
    /// ```
    #[cfg(feature = "weights")]
    pub fn consume_cost(
        &self,
        key: &str,
        limit: Limit,
        cost: u64,
        now: u64,
    ) -> Result<Verdict, RateError> {
        let cost = crate::verdict::check_cost(cost, limit)?;
        Ok(self.consume_uses(key, limit, cost, now))
    }

    /// The verdict [`consume_cost`](Self::consume_cost) would give, recording nothing.
    #[cfg(feature = "weights")]
    pub fn peek_cost(
        &self,
        key: &str,
        limit: Limit,
        cost: u64,
        now: u64,
    ) -> Result<Verdict, RateError> {
        let cost = crate::verdict::check_cost(cost, limit)?;
        Ok(self.peek_uses(key, limit, cost, now))
    }

    // Always inlined: `consume` / `peek` get a copy for a cost of 1, the code before weights (and
    // without the weights feature, the only caller).
    #[inline(always)]
    fn consume_uses(&self, key: &str, limit: Limit, cost: u32, now: u64) -> Verdict {
        let horizon = self.advance(now);
        let (shard, key) = self.key(key);
        let mut shard = self.lock(shard);
        let index = shard.live_log(key, now, horizon, limit.window_ms());
        // A match, not a closure over `cost`: a closure LLVM leaves out of line (the wasm32 build did)
        // takes `cost` through memory, so a call costing 1 ran the weighted checks.
        let wait = match index {
            Some(i) => shard.logs[i]
                .wait_until_cost(limit, cost, now)
                .map(|until| (i, until)),
            None => None,
        };
        let verdict = match wait {
            Some((i, until)) => {
                let refused = Verdict::refused(now, until);
                let quota =
                    shard.logs[i].refused_quota_cost(limit, cost, now, refused.retry_after_ms);
                refused.with_quota(quota)
            }
            None => {
                let (_, _, i) = shard.record(
                    key,
                    index,
                    limit,
                    limit.window_ms(),
                    cost,
                    Moment { now, horizon },
                );
                // Trimmed to this window and then recorded: every call in the log is inside it.
                Verdict::ALLOWED.with_quota(shard.logs[i].quota_from(0, limit, now))
            }
        };
        if shard.sweep(horizon) {
            drop(shard);
            self.sweep_foreign(horizon);
        }
        verdict
    }

    /// The verdict [`consume`](Self::consume) would give at `now`, recording, trimming and creating
    /// nothing. Its [`Quota`] is the key's as it stands (a peek uses nothing).
    pub fn peek(&self, key: &str, limit: Limit, now: u64) -> Verdict {
        self.peek_uses(key, limit, 1, now)
    }

    // Always inlined: `consume` / `peek` get a copy for a cost of 1, the code before weights (and
    // without the weights feature, the only caller).
    #[inline(always)]
    fn peek_uses(&self, key: &str, limit: Limit, cost: u32, now: u64) -> Verdict {
        let horizon = self.horizon_at(now);
        let (shard, key) = self.key(key);
        let shard = self.lock(shard);
        let Some(log) = shard.peek_log(key, horizon) else {
            return Verdict::ALLOWED.with_quota(Quota::unused(limit));
        };
        match log.wait_until_cost(limit, cost, now) {
            Some(until) => {
                let refused = Verdict::refused(now, until);
                refused.with_quota(log.refused_quota_cost(limit, cost, now, refused.retry_after_ms))
            }
            None => Verdict::ALLOWED.with_quota(log.quota(limit, now)),
        }
    }

    /// Counts one call against every entry at once: recorded against all of them only if none refuses.
    ///
    /// A key named by several entries is checked against each of their limits and records the call
    /// once. Each key is first trimmed by the longest window its entries give. An empty batch is
    /// allowed and records nothing.
    ///
    /// The verdict's [`Quota`] is the tightest entry's after the call (the blocked one on a refusal);
    /// entries naming one key each see the one call recorded.
    pub fn consume_many(&self, entries: &[Entry], now: u64) -> Consumed {
        self.batch(entries, now, true)
    }

    /// The verdict [`consume_many`](Self::consume_many) would give at `now`, recording, trimming and
    /// creating nothing.
    pub fn peek_many(&self, entries: &[Entry], now: u64) -> BatchVerdict {
        self.batch(entries, now, false).verdict
    }

    fn batch(&self, entries: &[Entry], now: u64, record: bool) -> Consumed {
        let horizon = if record {
            self.advance(now)
        } else {
            self.horizon_at(now)
        };
        // Small batches (the usual: a handful of stacked limits) stay on the stack.
        let located: SmallVec<[(usize, Key<'_>); 8]> =
            entries.iter().map(|e| self.key(&e.key)).collect();
        let shard_ids: SmallVec<[usize; 8]> = located.iter().map(|&(shard, _)| shard).collect();
        let key = |entry: usize| located[entry].1;
        let mut order = shard_ids.clone();
        order.sort_unstable();
        order.dedup();
        // Locks in ascending index order: two batches can never wait on each other.
        let mut guards: SmallVec<[MutexGuard<'_, Shard>; 4]> =
            order.iter().map(|&i| self.lock(i)).collect();
        let slot = |entry: usize| {
            order
                .binary_search(&shard_ids[entry])
                .expect("locked above")
        };
        // The first entry naming each key stands for the key, and its longest window is the key's:
        // one pass with a hash map (a scan per entry made a batch of 40,000 keys take seconds).
        let (first, longest_of) = first_of_each_key(entries, &located);
        let longest = |i: usize| longest_of[i];
        // Entries naming one key are one call: it costs the largest cost they give (each entry is
        // checked with it, within its own uses).
        let weighted = cfg!(feature = "weights") && entries.iter().any(|e| e.cost > 1);
        let mut cost_of: SmallVec<[u32; 8]> = SmallVec::new();
        if weighted {
            cost_of.resize(entries.len(), 1);
            for (i, entry) in entries.iter().enumerate() {
                cost_of[first[i]] = cost_of[first[i]].max(entry.cost());
            }
        }
        let key_cost = |i: usize| if weighted { cost_of[first[i]] } else { 1 };
        let keys = || (0..entries.len()).filter(|&i| first[i] == i);

        // Each key's log is found once, by its first entry: its index in its shard. The indices hold
        // for the whole batch, because nothing is removed until the end and recording only appends.
        // A consume trims each log to the key's longest window (clearing a dead one); a log it
        // empties stays, empty, and counts as no log.
        // (Indices as `usize`, `usize::MAX` for none: the SmallVec type the batch already uses, which
        // keeps the component small.)
        let mut found_at: SmallVec<[usize; 8]> = SmallVec::new();
        found_at.resize(entries.len(), usize::MAX);
        for i in keys() {
            let shard = &mut guards[slot(i)];
            let index = if record {
                shard.trimmed_log(key(i), now, horizon, longest(i))
            } else {
                shard.peek_index(key(i), horizon)
            };
            found_at[i] = index.unwrap_or(usize::MAX);
        }
        let found = |i: usize| Some(found_at[i]).filter(|&index| index != usize::MAX);

        let mut blocked: Option<(usize, u64)> = None;
        for (i, entry) in entries.iter().enumerate() {
            let wait = log_at(&guards[slot(i)], found(first[i]))
                .and_then(|log| log.wait_until_cost(entry.limit, key_cost(i), now));
            if let Some(until) = wait {
                if blocked.is_none_or(|(_, longest)| until > longest) {
                    blocked = Some((i, until));
                }
            }
        }
        let verdict = BatchVerdict::at(now, blocked);
        // Where each key's log sits after recording.
        let mut recorded: SmallVec<[usize; 8]> = SmallVec::new();
        let release = (record && verdict.allowed).then(|| {
            recorded.resize(entries.len(), usize::MAX);
            let calls = keys()
                .map(|i| {
                    let window_ms = longest(i);
                    let moment = Moment { now, horizon };
                    let shard = &mut guards[slot(i)];
                    if let Some(index) = found(i) {
                        if shard.logs[index].is_empty() {
                            shard.renew(index, entries[i].limit);
                        }
                    }
                    let cost = key_cost(i);
                    #[cfg(not(feature = "weights"))]
                    let (instance, at, index) =
                        shard.record(key(i), found(i), entries[i].limit, window_ms, cost, moment);
                    #[cfg(feature = "weights")]
                    let (instance, at, index) = shard.record_in_batch(
                        key(i),
                        found(i),
                        entries[i].limit,
                        window_ms,
                        cost,
                        moment,
                    );
                    recorded[i] = index;
                    RecordedCall {
                        key: entries[i].key.clone(),
                        instance,
                        at,
                        window_ms,
                        cost,
                    }
                })
                .collect();
            Release {
                store: self.id,
                calls,
                #[cfg(feature = "rates")]
                taken: Vec::new(),
            }
        });
        let quota = match verdict.blocked {
            Some(b) => log_at(&guards[slot(b)], found(first[b])).map_or(Quota::NONE, |log| {
                log.refused_quota_cost(entries[b].limit, key_cost(b), now, verdict.retry_after_ms)
            }),
            None => Quota::tightest(entries.iter().enumerate().map(|(i, entry)| {
                let quota = match recorded.get(first[i]) {
                    Some(&index) => guards[slot(i)].logs[index].quota(entry.limit, now),
                    None => log_at(&guards[slot(i)], found(first[i]))
                        .map_or(Quota::unused(entry.limit), |log| {
                            log.quota(entry.limit, now)
                        }),
                };
                (quota, entry.limit.window_ms())
            })),
        };
        // A refused consume removes the logs its trimming emptied (an allowed one renewed them all):
        // found again by key, since each removal moves another log (no sort: the component's size).
        if record && !verdict.allowed {
            let emptied: SmallVec<[usize; 8]> = keys()
                .filter(|&i| found(i).is_some_and(|index| guards[slot(i)].logs[index].is_empty()))
                .collect();
            for i in emptied {
                guards[slot(i)].remove_empty(key(i));
            }
        }
        let verdict = verdict.with_quota(quota);
        if record {
            let foreign = guards
                .iter_mut()
                .fold(false, |due, guard| guard.sweep(horizon) | due);
            drop(guards);
            if foreign {
                self.sweep_foreign(horizon);
            }
        }
        Consumed { verdict, release }
    }

    /// Gives back exactly the calls `release` recorded, at `now`. A call that has left its window, or
    /// whose key has expired or restarted since, is left alone; a release from another store does
    /// nothing. GCRA and counter uses come back by
    /// [`Gcra::give_back`](crate::gcra::Gcra::give_back) and
    /// [`Counter::give_back`](crate::counter::Counter::give_back) (never below the key's state before
    /// the call, never more than the call still holds).
    pub fn release(&self, release: Release, now: u64) {
        if release.store != self.id {
            return;
        }
        let horizon = self.advance(now);
        for call in &release.calls {
            if !sliding::in_window(call.at, now, call.window_ms) {
                continue;
            }
            let (shard, key) = self.key(&call.key);
            let mut shard = self.lock(shard);
            let Some(i) = shard.log_index(key) else {
                continue;
            };
            let log = &mut shard.logs[i];
            let gave_back = log.instance() == call.instance
                && alive(log, horizon)
                && log.remove(
                    call.at,
                    if cfg!(feature = "weights") {
                        call.cost
                    } else {
                        1
                    },
                ) > 0;
            if gave_back && log.is_empty() {
                shard.logs.swap_remove_index(i);
            }
        }
        #[cfg(feature = "rates")]
        for taken in &release.taken {
            self.give_back(taken, horizon);
        }
    }

    /// Adds `amount` hits to `key`'s fixed window at `now` (a negative amount gives hits back) and returns
    /// the count. The first hit opens a window of `decay`; hits inside it do not move it; after it ends
    /// the count starts from zero. Counts saturate at the `i64` bounds.
    pub fn hit(&self, key: &str, decay: Window, amount: i64, now: u64) -> i64 {
        // Its own body, not `hit_window(..).0`: the measured numeric fast path.
        let horizon = self.advance(now);
        let (shard, key) = self.key(key);
        let mut shard = self.lock(shard);
        let count = match shard.live_window(key, horizon) {
            Some(window) => {
                window.count = window.count.saturating_add(amount);
                window.count
            }
            None => {
                // Opened at the horizon when the clock lags it, so it is not dead on arrival.
                let mut window = FixedWindow::open(now.max(horizon), decay);
                window.count = amount;
                shard.windows.insert(key.text.into(), window);
                amount
            }
        };
        if shard.sweep(horizon) {
            drop(shard);
            self.sweep_foreign(horizon);
        }
        count
    }

    /// [`hit`](Self::hit), returning the count and the milliseconds until the window ends together
    /// (counted from `now`: more than `decay` when the clock lags a window opened at the horizon).
    pub fn hit_window(&self, key: &str, decay: Window, amount: i64, now: u64) -> (i64, u64) {
        let horizon = self.advance(now);
        let (shard, key) = self.key(key);
        let mut shard = self.lock(shard);
        let window = match shard.live_window(key, horizon) {
            Some(window) => {
                window.count = window.count.saturating_add(amount);
                *window
            }
            None => {
                // Opened at the horizon when the clock lags it, so it is not dead on arrival.
                let mut window = FixedWindow::open(now.max(horizon), decay);
                window.count = amount;
                shard.windows.insert(key.text.into(), window);
                window
            }
        };
        if shard.sweep(horizon) {
            drop(shard);
            self.sweep_foreign(horizon);
        }
        (window.count, window.available_in_ms(now))
    }

    /// Counts one hit on `key`'s fixed window at `now` only if it holds fewer than `max` hits, in one
    /// step under the key's lock: however many threads attempt at once, at most `max` are counted in
    /// a window. A key without a running window opens one of `decay` for the hit (if `max >= 1`).
    ///
    /// Returns whether the hit was counted, the count after the call, and the milliseconds until the
    /// window ends (0 when none runs).
    pub fn attempt(&self, key: &str, max: i64, decay: Window, now: u64) -> (bool, i64, u64) {
        let horizon = self.advance(now);
        let (shard, key) = self.key(key);
        let mut shard = self.lock(shard);
        let answer = match shard.live_window(key, horizon) {
            Some(window) => {
                let counted = window.count < max;
                if counted {
                    window.count += 1; // below max <= i64::MAX: cannot overflow
                }
                (counted, window.count, window.available_in_ms(now))
            }
            None if max >= 1 => {
                let mut window = FixedWindow::open(now.max(horizon), decay);
                window.count = 1;
                shard.windows.insert(key.text.into(), window);
                (true, 1, window.available_in_ms(now))
            }
            None => (false, 0, 0),
        };
        if shard.sweep(horizon) {
            drop(shard);
            self.sweep_foreign(horizon);
        }
        answer
    }

    /// [`attempt`](Self::attempt) costing `cost` hits (cargo feature `weights`): counted only when the
    /// window's count plus `cost` is at most `max` (a window opens with `cost` hits when `cost <=
    /// max`), else nothing: `(counted, count after, ms until the window ends)`. A cost of 0 is an
    /// error naming `cost` and changes nothing.
    #[cfg(feature = "weights")]
    pub fn attempt_cost(
        &self,
        key: &str,
        max: i64,
        cost: u32,
        decay: Window,
        now: u64,
    ) -> Result<(bool, i64, u64), crate::gcra::RateError> {
        if cost == 0 {
            return Err(crate::gcra::RateError::new(crate::gcra::RateField::Cost, 0));
        }
        let cost = i64::from(cost);
        let horizon = self.advance(now);
        let (shard, key) = self.key(key);
        let mut shard = self.lock(shard);
        let answer = match shard.live_window(key, horizon) {
            Some(window) => {
                let counted = window.count <= max.saturating_sub(cost);
                if counted {
                    window.count += cost; // at most max after: cannot overflow
                }
                (counted, window.count, window.available_in_ms(now))
            }
            None if cost <= max => {
                let mut window = FixedWindow::open(now.max(horizon), decay);
                window.count = cost;
                shard.windows.insert(key.text.into(), window);
                (true, cost, window.available_in_ms(now))
            }
            None => (false, 0, 0),
        };
        if shard.sweep(horizon) {
            drop(shard);
            self.sweep_foreign(horizon);
        }
        Ok(answer)
    }

    /// `key`'s live window at `now`, if any.
    pub fn window(&self, key: &str, now: u64) -> Option<FixedWindow> {
        let horizon = self.horizon_at(now);
        let (shard, key) = self.key(key);
        let shard = self.lock(shard);
        shard
            .windows
            .raw_entry_v1()
            .from_hash(key.hash, |k| &**k == key.text)
            .map(|(_, w)| w)
            .filter(|w| w.is_live(horizon))
            .copied()
    }

    /// Hits counted in `key`'s current window; 0 when it has none.
    pub fn attempts(&self, key: &str, now: u64) -> i64 {
        self.window(key, now).map_or(0, |w| w.count)
    }

    /// Whether `key` has `max` or more hits in a window that still runs.
    pub fn too_many_attempts(&self, key: &str, max: i64, now: u64) -> bool {
        self.window(key, now).is_some_and(|w| w.count >= max)
    }

    /// `max` minus the hits in `key`'s current window, floored at 0.
    pub fn remaining(&self, key: &str, max: i64, now: u64) -> i64 {
        fixed::remaining(self.attempts(key, now), max)
    }

    /// Whole seconds until `key`'s window ends, rounded up; 0 when it has none.
    pub fn available_in(&self, key: &str, now: u64) -> u64 {
        self.window(key, now)
            .map_or(0, |w| w.available_in_secs(now))
    }

    /// Milliseconds until `key`'s window ends; 0 when it has none.
    pub fn available_in_ms(&self, key: &str, now: u64) -> u64 {
        self.window(key, now).map_or(0, |w| w.available_in_ms(now))
    }

    /// Sets `key`'s count to zero, keeping its window running.
    pub fn reset_attempts(&self, key: &str, now: u64) {
        let horizon = self.advance(now);
        let (shard, key) = self.key(key);
        let mut shard = self.lock(shard);
        if let Some(window) = shard.live_window(key, horizon) {
            window.count = 0;
        }
    }

    /// Removes `key`'s count and window; its next hit opens a new window.
    pub fn clear(&self, key: &str) {
        let (shard, key) = self.key(key);
        self.lock(shard).windows.swap_remove(key.text);
    }

    /// Removes every key expired at `now` at once, in O(keys), and gives back the memory. Never needed
    /// for correctness: use it to shrink a store after a burst of keys without waiting for the sweep.
    pub fn purge(&self, now: u64) {
        let horizon = self.advance(now);
        for index in 0..self.shards.len() {
            let mut shard = self.lock(index);
            shard.logs.retain(|_, log| alive(log, horizon));
            shard.windows.retain(|_, w| w.is_live(horizon));
            shard.logs.shrink_to_fit();
            shard.windows.shrink_to_fit();
            shard.log_cursor = 0;
            shard.window_cursor = 0;
            #[cfg(feature = "rates")]
            {
                shard.gcra.purge(horizon);
                shard.counters.purge(horizon);
            }
        }
    }

    /// How many keys the store holds (sliding logs, fixed windows, GCRA and counter keys), dead ones
    /// the sweep has not reached yet included.
    pub fn len(&self) -> usize {
        (0..self.shards.len())
            .map(|i| {
                let shard = self.lock(i);
                #[cfg(feature = "rates")]
                let rates = shard.gcra.len() + shard.counters.len();
                #[cfg(not(feature = "rates"))]
                let rates = 0;
                shard.logs.len() + shard.windows.len() + rates
            })
            .sum()
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// GCRA and the sliding-window counter on the memory store, and batches mixing them with the sliding
/// log (cargo feature `rates`, default on).
#[cfg(feature = "rates")]
impl MemoryStore {
    /// Counts a call costing `cost` uses on `key`'s GCRA bucket at `now`: allowed and recorded, or
    /// refused with the wait until `cost` uses are there (see [`gcra`](crate::gcra) for every field).
    /// A cost outside `1..=burst` is an error and changes nothing.
    pub fn gcra_consume(
        &self,
        key: &str,
        gcra: Gcra,
        cost: u64,
        now: u64,
    ) -> Result<Verdict, RateError> {
        let cost = gcra.check_cost(cost)?;
        Ok(self.gcra_record(key, gcra, cost, now).0)
    }

    /// [`gcra_consume`](Self::gcra_consume), and on an allowed call the [`Release`] that gives its
    /// `cost` uses back ([`MemoryStore::release`]; the rule is [`Gcra::give_back`]).
    pub fn gcra_consume_with_release(
        &self,
        key: &str,
        gcra: Gcra,
        cost: u64,
        now: u64,
    ) -> Result<(Verdict, Option<Release>), RateError> {
        let cost = gcra.check_cost(cost)?;
        let (verdict, after) = self.gcra_record(key, gcra, cost, now);
        let release = after.map(|after| {
            Release::taken(
                self.id,
                Taken::Gcra {
                    key: key.to_owned(),
                    gcra,
                    cost,
                    after,
                },
            )
        });
        Ok((verdict, release))
    }

    /// The verdict of a GCRA consume, and the TAT it stored when allowed.
    #[inline(always)]
    fn gcra_record(&self, key: &str, gcra: Gcra, cost: u32, now: u64) -> (Verdict, Option<Tat>) {
        let horizon = self.advance(now);
        let (shard, key) = self.key(key);
        let mut shard = self.lock(shard);
        let (verdict, stored, inserted) = match shard.gcra.get_mut(key) {
            Some(state) => {
                let tat = *state;
                let decision = gcra.decide(tat.alive(horizon).then_some(tat), cost, now, true);
                let stored = decision
                    .store
                    .map(|tat| gcra_from_horizon(gcra, tat, cost, now, horizon));
                if let Some(tat) = stored {
                    *state = tat;
                }
                (decision.verdict, stored, false)
            }
            None => {
                let decision = gcra.decide(None, cost, now, true);
                let stored = decision
                    .store
                    .map(|tat| gcra_from_horizon(gcra, tat, cost, now, horizon));
                if let Some(tat) = stored {
                    shard.gcra.insert_new(key, tat);
                }
                (decision.verdict, stored, true)
            }
        };
        if shard.gcra.after_op(horizon, inserted) {
            drop(shard);
            self.sweep_foreign(horizon);
        }
        (verdict, stored)
    }

    /// Gives back what `taken` took, at `horizon` (see [`MemoryStore::release`]).
    fn give_back(&self, taken: &Taken, horizon: u64) {
        match taken {
            Taken::Gcra {
                key,
                gcra,
                cost,
                after,
            } => {
                let (shard, key) = self.key(key);
                let mut shard = self.lock(shard);
                let current = shard.gcra.live(key, horizon);
                match gcra.give_back(current, *after, *cost, horizon) {
                    GiveBack::Leave => {}
                    GiveBack::Store(tat) => shard.gcra.put(key, tat),
                    GiveBack::Remove => shard.gcra.remove(key),
                }
            }
            Taken::Counter {
                key,
                counter,
                cost,
                start,
            } => {
                let (shard, key) = self.key(key);
                let mut shard = self.lock(shard);
                let current = shard.counters.live(key, horizon);
                match counter.give_back(current, *start, *cost, horizon) {
                    GiveBack::Leave => {}
                    GiveBack::Store(state) => shard.counters.put(key, state),
                    GiveBack::Remove => shard.counters.remove(key),
                }
            }
        }
    }

    /// The verdict [`gcra_consume`](Self::gcra_consume) would give, recording and creating nothing;
    /// its quota is the bucket as it stands.
    pub fn gcra_peek(
        &self,
        key: &str,
        gcra: Gcra,
        cost: u64,
        now: u64,
    ) -> Result<Verdict, RateError> {
        let cost = gcra.check_cost(cost)?;
        let horizon = self.horizon_at(now);
        let (shard, key) = self.key(key);
        let shard = self.lock(shard);
        Ok(gcra
            .decide(shard.gcra.live(key, horizon), cost, now, false)
            .verdict)
    }

    /// Empties `key`'s GCRA bucket of every use taken: its next call finds it full.
    pub fn gcra_reset(&self, key: &str) {
        let (shard, key) = self.key(key);
        self.lock(shard).gcra.remove(key);
    }

    /// Counts a call costing `cost` uses on `key`'s sliding-window counter at `now` (see
    /// [`counter`](crate::counter)). A cost outside `1..=uses` is an error and changes nothing.
    pub fn counter_consume(
        &self,
        key: &str,
        counter: Counter,
        cost: u64,
        now: u64,
    ) -> Result<Verdict, RateError> {
        let cost = counter.check_cost(cost)?;
        Ok(self.counter_record(key, counter, cost, now).0)
    }

    /// [`counter_consume`](Self::counter_consume), and on an allowed call the [`Release`] that
    /// gives its `cost` uses back ([`MemoryStore::release`]; the rule is [`Counter::give_back`]).
    pub fn counter_consume_with_release(
        &self,
        key: &str,
        counter: Counter,
        cost: u64,
        now: u64,
    ) -> Result<(Verdict, Option<Release>), RateError> {
        let cost = counter.check_cost(cost)?;
        let (verdict, stored) = self.counter_record(key, counter, cost, now);
        let release = stored.map(|state| {
            Release::taken(
                self.id,
                Taken::Counter {
                    key: key.to_owned(),
                    counter,
                    cost,
                    start: state.start,
                },
            )
        });
        Ok((verdict, release))
    }

    /// The verdict of a counter consume, and the state it stored when allowed.
    #[inline(always)]
    fn counter_record(
        &self,
        key: &str,
        counter: Counter,
        cost: u32,
        now: u64,
    ) -> (Verdict, Option<CounterState>) {
        let horizon = self.advance(now);
        let (shard, key) = self.key(key);
        let mut shard = self.lock(shard);
        let (decision, inserted) = match shard.counters.get_mut(key) {
            Some(state) => {
                let decision =
                    counter.decide(state.alive(horizon).then_some(*state), cost, now, true);
                if let Some(new) = decision.store {
                    *state = new;
                }
                (decision, false)
            }
            None => {
                let decision = counter.decide(None, cost, now, true);
                if let Some(new) = decision.store {
                    shard.counters.insert_new(key, new);
                }
                (decision, decision.store.is_some())
            }
        };
        if shard.counters.after_op(horizon, inserted) {
            drop(shard);
            self.sweep_foreign(horizon);
        }
        (decision.verdict, decision.store)
    }

    /// The verdict [`counter_consume`](Self::counter_consume) would give, recording and creating
    /// nothing.
    pub fn counter_peek(
        &self,
        key: &str,
        counter: Counter,
        cost: u64,
        now: u64,
    ) -> Result<Verdict, RateError> {
        let cost = counter.check_cost(cost)?;
        let horizon = self.horizon_at(now);
        let (shard, key) = self.key(key);
        let shard = self.lock(shard);
        Ok(counter
            .decide(shard.counters.live(key, horizon), cost, now, false)
            .verdict)
    }

    /// Forgets `key`'s counter.
    pub fn counter_reset(&self, key: &str) {
        let (shard, key) = self.key(key);
        self.lock(shard).counters.remove(key);
    }

    /// Counts one call against entries of any algorithm at once, all or nothing: recorded against
    /// every entry only if none refuses. A refusal names the entry with the longest wait (ties keep
    /// the first), as [`consume_many`](Self::consume_many) does.
    ///
    /// - Sliding-log entries behave as in `consume_many` (a key named twice is checked against each
    ///   limit and records the call once, under the longest window, costing the largest `cost` they
    ///   give).
    /// - GCRA and counter entries naming the same key are counted one after another within the call:
    ///   each sees the uses of the entries before it.
    /// - The [`Release`] gives back every entry: the sliding-log calls, and each GCRA and counter
    ///   key's uses (the entries naming one key together, when they share one limit; under
    ///   different limits that key's uses are not given back), by [`Gcra::give_back`] and
    ///   [`Counter::give_back`].
    ///
    /// A cost out of range is an error naming the entry's field, and changes nothing.
    pub fn consume_mixed(&self, entries: &[MixedEntry], now: u64) -> Result<Consumed, RateError> {
        self.mixed(entries, now, true)
    }

    /// The verdict [`consume_mixed`](Self::consume_mixed) would give, recording and creating nothing.
    pub fn peek_mixed(&self, entries: &[MixedEntry], now: u64) -> Result<BatchVerdict, RateError> {
        Ok(self.mixed(entries, now, false)?.verdict)
    }

    fn mixed(&self, entries: &[MixedEntry], now: u64, record: bool) -> Result<Consumed, RateError> {
        let costs: Vec<u32> = entries
            .iter()
            .map(|e| match e.rule {
                #[cfg(feature = "weights")]
                Rule::Sliding(limit) => crate::verdict::check_cost(e.cost, limit),
                #[cfg(not(feature = "weights"))]
                Rule::Sliding(_) if e.cost == 1 => Ok(1),
                #[cfg(not(feature = "weights"))]
                Rule::Sliding(_) => Err(RateError::new(RateField::Cost, e.cost)),
                Rule::Gcra(g) => g.check_cost(e.cost),
                Rule::Counter(c) => c.check_cost(e.cost),
            })
            .collect::<Result<_, _>>()?;
        let horizon = if record {
            self.advance(now)
        } else {
            self.horizon_at(now)
        };
        let located: Vec<(usize, Key<'_>)> = entries.iter().map(|e| self.key(&e.key)).collect();
        let mut order: Vec<usize> = located.iter().map(|&(s, _)| s).collect();
        order.sort_unstable();
        order.dedup();
        // Locks in ascending index order, as `batch` does: no two batches wait on each other.
        let mut guards: Vec<MutexGuard<'_, Shard>> = order.iter().map(|&i| self.lock(i)).collect();
        let slot = |i: usize| order.binary_search(&located[i].0).expect("locked above");
        let same_key = |i: usize, j: usize| {
            entries[i].key == entries[j].key
                && std::mem::discriminant(&entries[i].rule)
                    == std::mem::discriminant(&entries[j].rule)
        };

        // A sliding key named by several entries is one call costing the largest cost they give.
        let sliding_cost = |i: usize| {
            (0..entries.len())
                .filter(|&j| j == i || same_key(i, j))
                .map(|j| costs[j])
                .max()
                .unwrap_or(1)
        };
        // Check every entry; GCRA and counter states as the earlier entries of the call left them.
        let mut gcra_after: Vec<Option<Tat>> = vec![None; entries.len()];
        let mut counter_after: Vec<Option<CounterState>> = vec![None; entries.len()];
        let mut quotas: Vec<Quota> = vec![Quota::NONE; entries.len()];
        let mut blocked: Option<(usize, u64)> = None;
        for (i, entry) in entries.iter().enumerate() {
            let shard = &guards[slot(i)];
            let key = located[i].1;
            let earlier = (0..i).rev().find(|&j| same_key(i, j));
            let verdict = match entry.rule {
                Rule::Sliding(limit) => match shard.peek_log(key, horizon) {
                    None => Verdict::ALLOWED.with_quota(Quota::unused(limit)),
                    Some(log) => match log.wait_until_cost(limit, sliding_cost(i), now) {
                        Some(until) => {
                            let refused = Verdict::refused(now, until);
                            refused.with_quota(log.refused_quota_cost(
                                limit,
                                sliding_cost(i),
                                now,
                                refused.retry_after_ms,
                            ))
                        }
                        None => Verdict::ALLOWED.with_quota(log.quota(limit, now)),
                    },
                },
                Rule::Gcra(g) => {
                    let state = match earlier {
                        Some(j) => gcra_after[j],
                        None => shard.gcra.live(key, horizon),
                    };
                    let d = g.decide(state, costs[i], now, true);
                    gcra_after[i] = d.store.or(state);
                    d.verdict
                }
                Rule::Counter(c) => {
                    let state = match earlier {
                        Some(j) => counter_after[j],
                        None => shard.counters.live(key, horizon),
                    };
                    let d = c.decide(state, costs[i], now, true);
                    counter_after[i] = d.store.or(state);
                    d.verdict
                }
            };
            quotas[i] = verdict.quota;
            if let Some(until) = verdict.retry_timestamp {
                if blocked.is_none_or(|(_, longest)| until > longest) {
                    blocked = Some((i, until));
                }
            }
        }
        let verdict = BatchVerdict::at(now, blocked);
        if let Some((b, _)) = blocked {
            return Ok(Consumed {
                verdict: verdict.with_quota(quotas[b]),
                release: None,
            });
        }
        let window_of = |i: usize| match entries[i].rule {
            Rule::Sliding(l) => l.window_ms(),
            Rule::Gcra(g) => g.window_ms(),
            Rule::Counter(c) => c.limit().window_ms(),
        };
        if !record {
            // A peek's quota is each key as it stands.
            for (i, entry) in entries.iter().enumerate() {
                let shard = &guards[slot(i)];
                let key = located[i].1;
                quotas[i] = match entry.rule {
                    Rule::Sliding(_) => quotas[i],
                    Rule::Gcra(g) => {
                        g.decide(shard.gcra.live(key, horizon), costs[i], now, false)
                            .verdict
                            .quota
                    }
                    Rule::Counter(c) => {
                        c.decide(shard.counters.live(key, horizon), costs[i], now, false)
                            .verdict
                            .quota
                    }
                };
            }
            let quota = Quota::tightest((0..entries.len()).map(|i| (quotas[i], window_of(i))));
            return Ok(Consumed {
                verdict: verdict.with_quota(quota),
                release: None,
            });
        }

        // Allowed: record. Each key's last entry holds its final GCRA / counter state; each sliding
        // key records the call once, under the longest window its entries give.
        let moment = Moment { now, horizon };
        let mut calls = Vec::new();
        let mut taken = Vec::new();
        // A key's uses, given back as one: the entries naming it (through `i`) share one limit and
        // their costs add up; under different limits nothing of it is given back.
        let group_cost = |i: usize| -> Option<u32> {
            let group = (0..=i).filter(|&j| j == i || same_key(i, j));
            if group.clone().any(|j| entries[j].rule != entries[i].rule) {
                return None;
            }
            Some(group.map(|j| costs[j]).sum())
        };
        for (i, entry) in entries.iter().enumerate() {
            let later = (i + 1..entries.len()).any(|j| same_key(i, j));
            let first = !(0..i).any(|j| same_key(i, j));
            let key = located[i].1;
            let shard = &mut guards[slot(i)];
            match entry.rule {
                Rule::Sliding(limit) if first => {
                    let window_ms = (i..entries.len())
                        .filter(|&j| j == i || same_key(i, j))
                        .map(window_of)
                        .max()
                        .unwrap_or(limit.window_ms());
                    let index = shard.trimmed_log(key, now, horizon, window_ms);
                    if let Some(index) = index {
                        if shard.logs[index].is_empty() {
                            shard.renew(index, limit);
                        }
                    }
                    let cost = sliding_cost(i);
                    let (instance, at, _) =
                        shard.record(key, index, limit, window_ms, cost, moment);
                    calls.push(RecordedCall {
                        key: entry.key.clone(),
                        instance,
                        at,
                        window_ms,
                        cost,
                    });
                }
                Rule::Sliding(_) => {}
                Rule::Gcra(g) if !later => {
                    let tat = gcra_after[i].expect("an allowed entry has a state");
                    let after = gcra_from_horizon(g, tat, costs[i], now, horizon);
                    shard.gcra.put(key, after);
                    if let Some(cost) = group_cost(i) {
                        taken.push(Taken::Gcra {
                            key: entry.key.clone(),
                            gcra: g,
                            cost,
                            after,
                        });
                    }
                }
                Rule::Counter(c) if !later => {
                    let state = counter_after[i].expect("an allowed entry has a state");
                    shard.counters.put(key, state);
                    if let Some(cost) = group_cost(i) {
                        taken.push(Taken::Counter {
                            key: entry.key.clone(),
                            counter: c,
                            cost,
                            start: state.start,
                        });
                    }
                }
                Rule::Gcra(_) | Rule::Counter(_) => {}
            }
        }
        // Sliding quotas after the call: each sliding entry sees the one call recorded.
        for (i, entry) in entries.iter().enumerate() {
            if let Rule::Sliding(limit) = entry.rule {
                let shard = &guards[slot(i)];
                quotas[i] = shard
                    .peek_log(located[i].1, horizon)
                    .map_or(Quota::unused(limit), |log| log.quota(limit, now));
            }
        }
        let quota = Quota::tightest((0..entries.len()).map(|i| (quotas[i], window_of(i))));
        let foreign = guards
            .iter_mut()
            .fold(false, |due, guard| guard.sweep(horizon) | due);
        drop(guards);
        if foreign {
            self.sweep_foreign(horizon);
        }
        Ok(Consumed {
            verdict: verdict.with_quota(quota),
            release: Some(Release {
                store: self.id,
                calls,
                taken,
            }),
        })
    }
}

/// A scratch store holding the state a networked store read, so a mixed batch on SQLite (and the
/// other stores' checks of their replies) is decided by [`consume_mixed`](MemoryStore::consume_mixed)'s
/// own rules: `core/src/call/mixed.rs`.
#[cfg(feature = "mixed")]
impl MemoryStore {
    /// Puts `times` (ascending) into `key`'s sliding log, which lives until `expires_at` (the latest
    /// expiry of the calls it held, trimmed ones included).
    pub(crate) fn seed_log(&self, key: &str, times: &[u64], limit: Limit, expires_at: u64) {
        let (shard, key) = self.key(key);
        let mut shard = self.lock(shard);
        let mut index = None;
        for &t in times {
            let at = Moment { now: t, horizon: 0 };
            index = Some(shard.record(key, index, limit, 0, 1, at).2);
        }
        if let Some(index) = index {
            shard.logs[index].expires_at = expires_at;
        }
    }

    /// When `key`'s sliding log expires (its calls and those trimmed from it in this life).
    pub(crate) fn log_expiry(&self, key: &str) -> Option<u64> {
        let (shard, key) = self.key(key);
        let shard = self.lock(shard);
        shard.log_index(key).map(|i| shard.logs[i].expires_at)
    }

    /// Puts `key`'s GCRA TAT.
    pub(crate) fn seed_gcra(&self, key: &str, tat: Tat) {
        let (shard, key) = self.key(key);
        self.lock(shard).gcra.put(key, tat);
    }

    /// Puts `key`'s counter state.
    pub(crate) fn seed_counter(&self, key: &str, state: CounterState) {
        let (shard, key) = self.key(key);
        self.lock(shard).counters.put(key, state);
    }

    /// `key`'s GCRA TAT, live or not.
    pub(crate) fn gcra_state(&self, key: &str) -> Option<Tat> {
        let (shard, key) = self.key(key);
        self.lock(shard).gcra.get_mut(key).copied()
    }

    /// `key`'s counter state, live or not.
    pub(crate) fn counter_state(&self, key: &str) -> Option<CounterState> {
        let (shard, key) = self.key(key);
        self.lock(shard).counters.get_mut(key).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, uses: u64, window_ms: u64) -> Entry {
        Entry::new(key, Limit::new(uses, window_ms).unwrap())
    }

    /// A batch finds each key's log once and removes nothing until it ends: a log its trimming empties
    /// is renewed by an allowed consume and removed by a refused one, as if removed on the spot.
    #[test]
    fn a_batch_renews_or_removes_the_logs_its_trimming_empties() {
        let store = MemoryStore::with_shards(1);
        let _ = store.consume_many(&[entry("a", 1, 10_000)], 0);
        let _ = store.consume_many(&[entry("b", 1, 60_000)], 0);
        assert_eq!(store.len(), 2);
        // At 2,000 a 1,000 ms window empties `a`'s log; `b` refuses, so `a`'s log goes.
        let refused = store.consume_many(&[entry("a", 1, 1_000), entry("b", 1, 60_000)], 2_000);
        assert!(!refused.verdict.allowed);
        assert_eq!(refused.verdict.blocked, Some(1));
        assert_eq!(store.len(), 1);
        assert!(
            store
                .peek("a", Limit::new(1, 10_000).unwrap(), 2_000)
                .allowed
        );

        // Emptied and allowed: a new life of the log holding only the new call.
        let _ = store.consume_many(&[entry("c", 2, 10_000)], 3_000);
        let _ = store.consume_many(&[entry("c", 2, 10_000)], 3_001);
        let first = store
            .consume_many(&[entry("c", 9, 10_000)], 3_002)
            .release
            .unwrap();
        let renewed = store
            .consume_many(&[entry("c", 1, 1_000), entry("b", 5, 60_000)], 5_000)
            .release
            .unwrap();
        let (old, new) = (first.calls()[0].instance, renewed.calls()[0].instance);
        assert_ne!(old, new);
        assert_eq!(renewed.calls()[0].at, 5_000);
        // The old life's call is still inside its window, but its log is gone: nothing to give back.
        store.release(first, 5_100);
        assert!(
            !store
                .peek("c", Limit::new(1, 1_000).unwrap(), 5_100)
                .allowed
        );
        assert!(
            store
                .peek("c", Limit::new(2, 10_000).unwrap(), 5_100)
                .allowed
        );
        store.release(renewed, 5_200);
        assert!(
            store
                .peek("c", Limit::new(1, 1_000).unwrap(), 5_200)
                .allowed
        );
    }

    /// Keys of a batch in many shards, some new, some live, some emptied, some repeated: each answer
    /// matches one-key consumes of a second store fed the same history.
    #[test]
    fn large_batches_match_the_single_key_path() {
        let batch_store = MemoryStore::with_shards(4);
        let single = MemoryStore::with_shards(4);
        let limit = Limit::new(2, 1_000).unwrap();
        for round in 0..6u64 {
            let now = round * 700;
            // Keys 0..40 in rounds, each at most once: distinct keys, so one batch = one consume each.
            let keys: Vec<String> = (0..40)
                .filter(|k| (k + round) % 3 != 0)
                .map(|k| format!("k{k}"))
                .collect();
            let entries: Vec<Entry> = keys.iter().map(|k| Entry::new(k.clone(), limit)).collect();
            let peeked = batch_store.peek_many(&entries, now);
            let expect_allowed = keys.iter().all(|k| single.peek(k, limit, now).allowed);
            assert_eq!(peeked.allowed, expect_allowed, "round {round}");
            let consumed = batch_store.consume_many(&entries, now);
            assert_eq!(consumed.verdict.allowed, expect_allowed, "round {round}");
            if expect_allowed {
                for k in &keys {
                    assert!(single.consume(k, limit, now).allowed);
                }
                assert_eq!(consumed.release.unwrap().calls().len(), keys.len());
            }
            for k in (0..40).map(|k| format!("k{k}")) {
                assert_eq!(
                    batch_store.peek(&k, limit, now),
                    single.peek(&k, limit, now),
                    "{k} at {now}"
                );
            }
        }
    }
}
