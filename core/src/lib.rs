//! # ratewindow-core
//!
//! The engine behind ratewindow: sliding-window cooldowns and fixed-window rate limits with exact
//! semantics, identical in every language it is carried to. It does no I/O and reads no clock inside its
//! algorithms: times are arguments, in whole Unix milliseconds.
//!
//! - **Sliding window log** ([`MemoryStore::consume`], [`consume_many`](MemoryStore::consume_many),
//!   [`peek_many`](MemoryStore::peek_many), [`release`](MemoryStore::release)): a key allows `uses`
//!   calls within any `window_ms`; a call leaves the window at exactly `t + window_ms`.
//! - **Fixed window** ([`MemoryStore::hit`] and friends): a window opens at a key's first hit and lasts
//!   its decay; hits inside it do not move it.
//!
//! ```
//! use ratewindow_core::{Entry, Limit, ManualClock, Clock, MemoryStore, Window};
//!
//! let store = MemoryStore::new();
//! let clock = ManualClock::new(0);
//! let per_user = Limit::new(3, 10_000)?;     // 3 per 10 s for each user
//! let everyone = Limit::per_minute(100)?;    // 100 per minute in all
//! let call = [Entry::new("click:alice", per_user), Entry::new("click", everyone)];
//!
//! for _ in 0..3 {
//!     assert!(store.consume_many(&call, clock.now_ms()).verdict.allowed);
//!     clock.advance(1_000);
//! }
//! let refused = store.consume_many(&call, clock.now_ms()).verdict;
//! assert_eq!((refused.allowed, refused.blocked, refused.retry_after_ms), (false, Some(0), 7_000));
//!
//! // An allowed call can be given back.
//! clock.advance(7_000);
//! let consumed = store.consume_many(&call, clock.now_ms());
//! store.release(consumed.release.expect("allowed"), clock.now_ms());
//!
//! // Fixed window: counts until the window opened by the first hit ends.
//! let decay = Window::from_ms(60_000)?;
//! let opened = clock.now_ms();
//! assert_eq!(store.hit("login:alice", decay, 1, opened), 1);
//! assert_eq!(store.hit("login:alice", decay, 1, opened + 59_999), 2);
//! assert_eq!(store.available_in("login:alice", opened + 59_999), 1); // seconds, rounded up
//! assert_eq!(store.hit("login:alice", decay, 1, opened + 60_000), 1); // a new window
//! # Ok::<(), ratewindow_core::LimitError>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod call;
mod clock;
pub mod counter;
mod error;
pub mod fixed;
pub mod gcra;
pub mod guard;
pub mod http;
pub mod input;
mod limit;
#[cfg(feature = "lock")]
pub mod lock;
mod memory;
pub mod redis;
pub mod shard;
pub mod sliding;
pub mod sql;
mod verdict;

/// The README's Rust example runs as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{LimitError, LimitField, MAX_WINDOW_MS};
pub use fixed::FixedWindow;
pub use limit::{Limit, Window};
pub use memory::{Consumed, MemoryStore, RecordedCall, Release};
#[cfg(feature = "weights")]
pub use verdict::{check_cost, check_cost_f64};
pub use verdict::{BatchVerdict, Entry, MixedEntry, Quota, Rule, Verdict};
