//! Redis (and Valkey, KeyDB): Lua scripts, the plans that run them, and the decoders of their replies.
//! Still no I/O: the host runs a [`Plan`] with its own client and hands the reply back.
//!
//! Each call is **one script, one round trip**, however many entries it carries: the sliding-log script
//! trims, counts and records every key of the call together, all or nothing, timed by the server's
//! `TIME`, so hosts with skewed clocks agree. Calls in the same millisecond stay distinct (each call's
//! member is its own id). Every key written gets a `PEXPIRE` no longer than the longest window it was
//! counted under; a peek writes nothing.
//!
//! Hosts do not sequence these themselves: [`crate::call::Redis`] starts a call machine that plans,
//! resends on `NOSCRIPT`, counts key by key on `CROSSSLOT` and decodes, so every binding behaves alike.
//! The plans and decoders below are its parts, public for tools and tests:
//! [`plan_consume_many`] (with a call id, e.g. from [`CallIds`](crate::call::CallIds)) → a [`Plan`]
//! and a [`RedisRelease`]; the host runs `EVALSHA plan.script.sha1` (or `EVAL plan.script.source`)
//! with `plan.keys` and `plan.args`; [`decode_batch`] (or [`decode_consume`]) reads the reply into a
//! [`BatchVerdict`](crate::BatchVerdict) and the index of its tightest entry, believing only a reply
//! consistent with itself and the call. A call carries at most [`MAX_BATCH`] entries.
//!
//! ```
//! use ratewindow_core::{Entry, Limit};
//! use ratewindow_core::redis::{self, RedisOptions, Reply};
//!
//! let options = RedisOptions::default();
//! let entries = [Entry::new("click:alice", Limit::new(3, 10_000)?)];
//! let (plan, release) = redis::plan_consume_many(&entries, &options, "f3a9c2")?;
//! assert_eq!(plan.keys, ["ratewindow:log:click:alice"]);
//! // ... the host runs the plan; the server answers:
//! let reply = Reply::Array([0, 700, 1_700_000_010_000, 0, 1_700_000_009_300, 0, 0, 700, 9_000].map(Reply::Int).to_vec());
//! let (verdict, _) = redis::decode_batch(&reply, &[entries[0].limit])?;
//! assert_eq!((verdict.allowed, verdict.retry_after_ms, verdict.blocked), (false, 700, Some(0)));
//! # let _ = release;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod plan;
mod reply;
mod slot;
#[cfg(feature = "weights")]
pub mod weighted;

pub use plan::{
    decode_attempt, decode_attempt_max, decode_batch, decode_consume, decode_release,
    decode_release_of, decode_window, plan_attempt, plan_clear, plan_consume_many, plan_get_window,
    plan_hit, plan_peek_many, plan_release, plan_reset_attempts, EmptyCallId, HashTag, Plan,
    RedisOptions, RedisRelease, Script, WindowState, CLOCK_STEP_MS, FIXED, MAX_BATCH, SLIDING,
};
pub(crate) use plan::{one_entry_args, sliding_plan};
pub use reply::{Reply, ReplyError};
pub use slot::key_slot;
