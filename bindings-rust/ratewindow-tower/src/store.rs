//! The store contract of the layer, and its implementation for the core's memory store.

use std::convert::Infallible;
use std::future::{ready, Future};
use std::sync::Arc;

use ratewindow_core::{BatchVerdict, Clock, Entry, MemoryStore, SystemClock};

/// What a store answers to one request's batch.
#[derive(Debug)]
pub struct Consumed<R> {
    /// The verdict of the whole batch (all or nothing).
    pub verdict: BatchVerdict,
    /// `Some` exactly when allowed: gives the call back (for a limit's `after()` hook).
    pub release: Option<R>,
}

/// A store the layer counts in: one all-or-nothing batch per request, and the give-back of an allowed
/// batch. Two methods, so a networked store (Redis, through the core's call machines) fits behind it.
///
/// The store reads its own clock (the memory store: the host's; Redis: the server's).
pub trait Store: Send + Sync + 'static {
    /// Gives an allowed batch back.
    type Release: Send + 'static;
    /// A failure of the store (a lost connection …); the memory store has none.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Counts one call against every entry, or against none when one refuses (`consume_many`).
    fn consume_many(
        &self,
        entries: &[Entry],
    ) -> impl Future<Output = Result<Consumed<Self::Release>, Self::Error>> + Send;

    /// Counts one call against one entry, when nothing will be given back: the verdict of
    /// [`consume_many`](Store::consume_many) of that one entry (which it is by default), for a store
    /// with a cheaper single call (the memory store's `consume`: no batch, no release handle).
    fn consume(
        &self,
        entry: &Entry,
    ) -> impl Future<Output = Result<BatchVerdict, Self::Error>> + Send {
        let consumed = self.consume_many(std::slice::from_ref(entry));
        async move { consumed.await.map(|c| c.verdict) }
    }

    /// Gives back the call an allowed batch recorded (idempotent; a call that has left its window is
    /// left alone).
    fn release(
        &self,
        release: Self::Release,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// The host's time in Unix ms, for the legacy `X-RateLimit-Reset` (default: the system clock).
    fn now_ms(&self) -> u64 {
        SystemClock.now_ms()
    }
}

/// The core's [`MemoryStore`] behind the [`Store`] contract, with a clock (the system's by default).
/// Cheap to clone: clones share the store.
#[derive(Debug)]
pub struct Memory<C = SystemClock> {
    store: Arc<MemoryStore>,
    clock: Arc<C>,
}

impl<C> Clone for Memory<C> {
    fn clone(&self) -> Self {
        Memory {
            store: Arc::clone(&self.store),
            clock: Arc::clone(&self.clock),
        }
    }
}

impl Memory {
    /// A new, empty memory store on the system clock.
    pub fn new() -> Memory {
        Memory::with_clock(SystemClock)
    }
}

impl Default for Memory {
    fn default() -> Self {
        Memory::new()
    }
}

impl<C: Clock + 'static> Memory<C> {
    /// A new, empty memory store reading `clock` (a `ManualClock` in tests).
    pub fn with_clock(clock: C) -> Memory<C> {
        Memory {
            store: Arc::new(MemoryStore::new()),
            clock: Arc::new(clock),
        }
    }

    /// The memory store itself (to read or reset keys outside requests).
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<C: Clock + 'static> Store for Memory<C> {
    type Release = ratewindow_core::Release;
    type Error = Infallible;

    fn consume_many(
        &self,
        entries: &[Entry],
    ) -> impl Future<Output = Result<Consumed<Self::Release>, Infallible>> + Send {
        let consumed = self.store.consume_many(entries, self.clock.now_ms());
        ready(Ok(Consumed {
            verdict: consumed.verdict,
            release: consumed.release,
        }))
    }

    fn consume(
        &self,
        entry: &Entry,
    ) -> impl Future<Output = Result<BatchVerdict, Infallible>> + Send {
        let v = self
            .store
            .consume(&entry.key, entry.limit, self.clock.now_ms());
        ready(Ok(BatchVerdict {
            allowed: v.allowed,
            retry_after_ms: v.retry_after_ms,
            retry_timestamp: v.retry_timestamp,
            blocked: (!v.allowed).then_some(0),
            quota: v.quota,
        }))
    }

    fn release(
        &self,
        release: Self::Release,
    ) -> impl Future<Output = Result<(), Infallible>> + Send {
        self.store.release(release, self.clock.now_ms());
        ready(Ok(()))
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }
}
