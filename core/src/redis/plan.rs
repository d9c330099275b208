//! Plans (script, keys, args) and the decoders of their replies.

use crate::redis::reply::{ints, Reply, ReplyError};
use crate::{BatchVerdict, Entry, Limit, Window};

/// A consume planned without a call id: the id is what keeps calls apart, so it cannot be empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a call id must not be empty: pass a fresh random id for every call")]
pub struct EmptyCallId;

/// A Lua script and its SHA1, for `EVALSHA` first and `EVAL` only on `NOSCRIPT`.
#[derive(Debug)]
pub struct Script {
    /// What the script is for.
    pub name: &'static str,
    /// The Lua source.
    pub source: &'static str,
    /// The SHA1 of the source, lowercase hex, as `SCRIPT LOAD` answers it. A constant (a test checks
    /// it against the source), so no SHA1 code ships in the engine.
    pub sha1: &'static str,
}

/// The sliding-log script: consume, peek and release, every key of a call in one step.
pub static SLIDING: Script = Script {
    name: "sliding",
    source: SLIDING_SOURCE,
    sha1: "d6454ec4fe59ad5dc901c41e7f67d11089e9d889",
};
// The scripts ship without their comment lines (as the SQL schemas do): 4.8 KB of sliding.lua, 0.9 KB
// of fixed.lua; the SHA1s are of the stripped text, which is what `SCRIPT LOAD` and `EVAL` see.
crate::sql::schema_text!(SLIDING_SOURCE = include_str!("sliding.lua"));
crate::sql::schema_text!(FIXED_SOURCE = include_str!("fixed.lua"));
/// The fixed-window script: hit, get, reset and clear of one key.
pub static FIXED: Script = Script {
    name: "fixed",
    source: FIXED_SOURCE,
    sha1: "b879fb6f032421afb7574172d67acfae4b0249ea",
};

#[cfg(test)]
mod tests {
    #[test]
    fn each_sha1_is_the_sha1_of_its_source() {
        for script in [&super::SLIDING, &super::FIXED] {
            let computed = sha1_smol::Sha1::from(script.source).digest().to_string();
            assert_eq!(
                script.sha1, computed,
                "update the {} script's sha1 constant",
                script.name
            );
        }
    }

    /// The one-text replies' byte scans read exactly what `split(' ')` and `str::parse` read.
    #[test]
    fn pieces_and_digits_read_as_split_and_parse() {
        let texts = [
            "",
            " ",
            "  ",
            "1",
            "1 2",
            "1 2 3",
            "1 2 3 4",
            "1 2 3 4 5",
            " 1 2 3",
            "1 2 3 ",
            "1  2 3",
            "a b c",
            "0000000000001234 99 0",
            "é 1 2",
            "1\t2 3 4",
        ];
        for text in texts {
            let split: Vec<&str> = text.split(' ').collect();
            assert_eq!(
                super::pieces::<3>(text).map(Vec::from),
                (split.len() == 3).then(|| split.clone()),
                "{text:?}"
            );
            assert_eq!(
                super::pieces::<4>(text).map(Vec::from),
                (split.len() == 4).then(|| split.clone()),
                "{text:?}"
            );
        }
        for s in [
            "",
            "0",
            "7",
            "42",
            "0123",
            "9999999999999999",
            "10000000000000000",
            "-1",
            "+1",
            "1a",
            " 1",
            "1.0",
            "١",
        ] {
            let parsed = (!s.is_empty() && s.len() <= 16 && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<i64>().ok())
                .flatten();
            assert_eq!(super::digits(s), parsed, "{s:?}");
        }
    }

    use crate::{Entry, Limit};

    /// The plan as the scan (the small-batch path) writes it, for any size: the reference.
    fn scanned(entries: &[Entry], options: &super::RedisOptions) -> (Vec<String>, Vec<String>) {
        let (mut keys, mut args) = (Vec::<String>::new(), vec!["c".to_owned(), "id".to_owned()]);
        for e in entries {
            let key = options.log_key(&e.key);
            let i = keys.iter().position(|k| *k == key).unwrap_or_else(|| {
                keys.push(key);
                keys.len() - 1
            });
            args.extend([(i + 1).to_string(), e.limit.uses().to_string()]);
            args.push(e.limit.window_ms().to_string());
        }
        (keys, args)
    }

    #[test]
    fn one_entry_is_planned_in_the_short_form_and_more_in_the_general_one() {
        let o = super::RedisOptions::default();
        let e = |k: &str| Entry::new(k, Limit::new(5, 600_000).unwrap());
        let args = |mode, entries: &[Entry], id| super::sliding_plan(mode, entries, &o, id).args;
        assert_eq!(args("c", &[e("a")], "id"), ["5:600000", "id"]);
        assert_eq!(args("p", &[e("a")], "-"), ["5:600000"]);
        let both = ["c", "id", "1", "5", "600000", "1", "5", "600000"];
        assert_eq!(args("c", &[e("a"), e("a")], "id"), both);
    }

    #[test]
    fn a_large_batch_is_planned_by_hashing_exactly_as_a_scan_would() {
        let options = super::RedisOptions::default()
            .with_hash_tag_before(":")
            .unwrap();
        // Repeats far apart and near, in a batch well above the scanning size.
        let entries: Vec<Entry> = (0..500u64)
            .map(|i| {
                let key = format!("k{}:{}", (i * 7919) % 173, i % 3);
                Entry::new(key, Limit::new(1 + i % 5, 1_000 + i).unwrap())
            })
            .collect();
        let plan = super::sliding_plan("c", &entries, &options, "id");
        let (keys, args) = scanned(&entries, &options);
        assert_eq!((plan.keys, plan.args), (keys, args));
    }

    #[test]
    fn a_batch_of_100_000_distinct_keys_has_each_key_once_in_order() {
        // Structural, not timed: every key is looked up once (a scan would make this test take
        // minutes); a Criterion bench times it.
        let n = 100_000;
        let entries: Vec<Entry> = (0..n)
            .map(|i| Entry::new(format!("u{i}"), Limit::new(5, 10_000).unwrap()))
            .collect();
        let plan = super::sliding_plan("c", &entries, &super::RedisOptions::default(), "id");
        assert_eq!(plan.keys.len(), n);
        assert_eq!(plan.args.len(), 2 + 3 * n);
        assert_eq!(plan.keys[n - 1], format!("ratewindow:log:u{}", n - 1));
        assert_eq!(plan.args[2 + 3 * (n - 1)], n.to_string());
    }
}

/// What to run: a script, its keys and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a plan does nothing until the host runs it"]
pub struct Plan {
    /// The script to run.
    pub script: &'static Script,
    /// `KEYS`.
    pub keys: Vec<String>,
    /// `ARGV`.
    pub args: Vec<String>,
}

impl Plan {
    /// Whether every key of the plan is in one Redis Cluster slot, so one script can run it there. A
    /// host on a cluster can count a call key by key at once when this is false, rather than waiting
    /// for the server's `CROSSSLOT`.
    pub fn single_slot(&self) -> bool {
        let mut slots = self.keys.iter().map(|k| super::key_slot(k));
        let first = slots.next();
        slots.all(|s| Some(s) == first)
    }
}

impl PartialEq for Script {
    fn eq(&self, other: &Script) -> bool {
        self.sha1 == other.sha1
    }
}
impl Eq for Script {}

/// How keys are put into Redis Cluster slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashTag {
    /// The part of a key before the first `separator` is its hash tag (the whole key if it has none),
    /// so `click:alice` and `click` share the slot of `{click}`: a handler's stacked cooldowns are one
    /// step again on a cluster. Every call to that handler then lands on that slot.
    Before(String),
}

/// Where a store's keys live: the prefix, and the hash tag for Redis Cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisOptions {
    prefix: String,
    hash_tag: Option<HashTag>,
}

impl Default for RedisOptions {
    /// Keys start with `ratewindow:`; no hash tag.
    fn default() -> Self {
        RedisOptions {
            prefix: "ratewindow:".to_owned(),
            hash_tag: None,
        }
    }
}

impl RedisOptions {
    /// Keys start with `prefix` (e.g. `mybot:` to keep two bots on one server apart).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> RedisOptions {
        self.prefix = prefix.into();
        self
    }

    /// Tags each key with the part before `separator`, so a call's keys share a Cluster slot when they
    /// share that part. An empty separator is refused.
    pub fn with_hash_tag_before(
        mut self,
        separator: impl Into<String>,
    ) -> Result<RedisOptions, String> {
        let separator = separator.into();
        if separator.is_empty() {
            return Err("the hash tag separator must not be empty".to_owned());
        }
        self.hash_tag = Some(HashTag::Before(separator));
        Ok(self)
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The hash tag rule, if any.
    pub fn hash_tag(&self) -> Option<&HashTag> {
        self.hash_tag.as_ref()
    }

    /// The Redis key of a user's key in a namespace (`log:` or `win:`).
    fn key(&self, namespace: &str, key: &str) -> String {
        let mut out = String::with_capacity(self.prefix.len() + namespace.len() + key.len() + 2);
        out.push_str(&self.prefix);
        out.push_str(namespace);
        match &self.hash_tag {
            None => out.push_str(key),
            Some(HashTag::Before(separator)) => {
                // A plain byte search (the separator is short): the tag ends where it first starts.
                let (bytes, sep) = (key.as_bytes(), separator.as_bytes());
                let end = (0..bytes.len())
                    .find(|&i| bytes[i..].starts_with(sep))
                    .unwrap_or(bytes.len());
                let (tag, rest) = key.split_at(end);
                out.push('{');
                out.push_str(tag);
                out.push('}');
                out.push_str(rest);
            }
        }
        out
    }

    /// The Redis key holding `key`'s sliding log.
    pub fn log_key(&self, key: &str) -> String {
        self.key("log:", key)
    }

    /// The Redis key holding `key`'s fixed window.
    pub fn window_key(&self, key: &str) -> String {
        self.key("win:", key)
    }

    /// The Redis key holding the lock `key` (see [`crate::lock`]).
    pub fn lock_key(&self, key: &str) -> String {
        self.key("lck:", key)
    }

    /// The Redis key holding `key`'s GCRA bucket (its TAT).
    pub fn gcra_key(&self, key: &str) -> String {
        self.key("gcr:", key)
    }

    /// The Redis key holding `key`'s sliding-window counter.
    pub fn counter_key(&self, key: &str) -> String {
        self.key("ctr:", key)
    }
}

/// What an allowed consume needs to give its call back: the keys it recorded under and its id.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RedisRelease {
    /// The Redis keys the call was recorded under.
    pub keys: Vec<String>,
    /// The call's id, its member in each key.
    pub call_id: String,
}

/// The most entries one Redis call carries (see [`crate::call::Redis`]): a call of `n` entries sends
/// `n` keys and `3n + 2` arguments in one command, and the clients' own limits come first —
/// node-redis failed at 30,000 entries, ioredis' `evalsha(sha, n, ...keys, ...args)` overflowed the
/// stack at 100,000 — so 10,000 (40,002 arguments at most) leaves every client room. Split a larger
/// batch, or count it in several calls.
pub const MAX_BATCH: usize = 10_000;

/// Up to this many entries a batch finds its repeated keys by scanning; above it, by hashing.
const SCAN: usize = 8;

pub(crate) fn sliding_plan(
    mode: &str,
    entries: &[Entry],
    options: &RedisOptions,
    call_id: &str,
) -> Plan {
    if let [entry] = entries {
        return Plan {
            script: &SLIDING,
            keys: vec![options.log_key(&entry.key)],
            args: one_entry_args(mode, call_id, entry.limit),
        };
    }
    let mut args = Vec::with_capacity(2 + 3 * entries.len());
    args.push(mode.to_owned());
    args.push(call_id.to_owned());
    let mut push = |index: usize, entry: &Entry| {
        args.push((index + 1).to_string());
        args.push(entry.limit.uses().to_string());
        args.push(entry.limit.window_ms().to_string());
    };
    let keys = if entries.len() <= SCAN {
        let mut keys: Vec<String> = Vec::with_capacity(entries.len());
        for entry in entries {
            let key = options.log_key(&entry.key);
            let index = match keys.iter().position(|k| *k == key) {
                Some(i) => i,
                None => {
                    keys.push(key);
                    keys.len() - 1
                }
            };
            push(index, entry);
        }
        keys
    } else {
        // Linear in the batch: each Redis key is looked up in a hash map, never scanned for.
        let mut all: Vec<String> = entries.iter().map(|e| options.log_key(&e.key)).collect();
        // The entry each distinct key first appears at, in order.
        let mut firsts: Vec<usize> = Vec::new();
        {
            // foldhash, as the memory store: no SipHash in the wasm builds, still seeded per process.
            let mut index_of: std::collections::HashMap<&str, usize, foldhash::fast::RandomState> =
                std::collections::HashMap::with_capacity_and_hasher(all.len(), Default::default());
            for (i, (entry, key)) in entries.iter().zip(&all).enumerate() {
                let next = firsts.len();
                let index = *index_of.entry(key.as_str()).or_insert(next);
                if index == next {
                    firsts.push(i);
                }
                push(index, entry);
            }
        }
        firsts
            .into_iter()
            .map(|i| std::mem::take(&mut all[i]))
            .collect()
    };
    Plan {
        script: &SLIDING,
        keys,
        args,
    }
}

/// The sliding script's arguments for one entry (its short form, the fewest arguments for the common
/// call): `'uses:window_ms'`, then the call id for a consume (`mode` `"c"`); a peek sends the limit
/// alone. Each argument costs the server ~1.3k instructions and the client a bulk string.
pub(crate) fn one_entry_args(mode: &str, call_id: &str, limit: Limit) -> Vec<String> {
    let limit = format!("{}:{}", limit.uses(), limit.window_ms());
    if mode == "c" {
        vec![limit, call_id.to_owned()]
    } else {
        vec![limit]
    }
}

/// Counts one call against every entry, all or nothing, in one script. `call_id` must be unique to
/// this call (e.g. 16 random bytes in hex): it is the call's member in every key, which keeps calls in
/// the same millisecond apart and lets [`plan_release`] remove exactly this call.
pub fn plan_consume_many(
    entries: &[Entry],
    options: &RedisOptions,
    call_id: &str,
) -> Result<(Plan, RedisRelease), EmptyCallId> {
    if call_id.is_empty() {
        return Err(EmptyCallId);
    }
    let plan = sliding_plan("c", entries, options, call_id);
    let release = RedisRelease {
        keys: plan.keys.clone(),
        call_id: call_id.to_owned(),
    };
    Ok((plan, release))
}

/// The verdict [`plan_consume_many`] would give, writing nothing: no key, no expiry changed.
pub fn plan_peek_many(entries: &[Entry], options: &RedisOptions) -> Plan {
    sliding_plan("p", entries, options, "-")
}

/// Gives back exactly the call `release` recorded (its member in each key). A call that has left its
/// window was trimmed already, or leaves nothing a count can see.
pub fn plan_release(release: &RedisRelease) -> Plan {
    Plan {
        script: &SLIDING,
        keys: release.keys.clone(),
        args: vec!["r".to_owned(), release.call_id.clone()],
    }
}

/// How far past its window a reply's times may reach: a server clock that stepped back records at
/// its newest call (as the memory store does), so a wait can exceed the window by the step. Up to a
/// minute is believed; a reply implying more is not (it would name a wait no call can have).
pub const CLOCK_STEP_MS: u64 = 60_000;

/// The latest server time a reply may carry (2^53 ms, the range every host's numbers hold exactly).
const MAX_NOW: i64 = 1 << 53;

/// Decodes a consume or peek reply of a call whose entries have `limits` (in entry order): the
/// verdict, and the index of its tightest entry (see [`Quota`](crate::Quota)). A reply is believed
/// only when it is consistent with itself and with the call: its indexes name an entry of the call;
/// its count is within that entry's limit; the wait is the timestamp minus the server time; no time
/// reaches further past the entry's window than [`CLOCK_STEP_MS`]; the window is empty exactly when
/// no use is taken. Anything else is a [`ReplyError`].
pub fn decode_batch(reply: &Reply, limits: &[Limit]) -> Result<(BatchVerdict, usize), ReplyError> {
    decode(reply, limits, false)
}

/// [`decode_batch`] for a consume, which also holds that an allowed call took one use of every
/// entry: fewer than `uses` left, and a window that is not empty.
pub fn decode_consume(
    reply: &Reply,
    limits: &[Limit],
) -> Result<(BatchVerdict, usize), ReplyError> {
    decode(reply, limits, true)
}

fn decode(
    reply: &Reply,
    limits: &[Limit],
    consume: bool,
) -> Result<(BatchVerdict, usize), ReplyError> {
    const EXPECTED: &str = "[allowed 0|1, retry_after_ms, retry_timestamp, blocked, server time, \
         tightest entry, remaining, refill_after_ms, reset_after_ms] (one entry: [1, remaining, \
         refill_after_ms, reset_after_ms, server time] or 'count oldest newest now' when allowed, \
         [0, retry_after_ms, server time, reset_after_ms] or its refusal marker as 'marker seconds \
         microseconds' when refused), consistent with the call";
    let err = || ReplyError::new("sliding", EXPECTED, reply);
    let [allowed, retry_after, retry_ts, blocked, now, tight, remaining, refill, reset] =
        match ints::<9>(reply) {
            Some(all) => all,
            // A call of one entry is answered in five numbers when allowed, four when refused; the
            // rest is implied (the script's header). Checked below as the nine they stand for.
            None if limits.len() == 1 => match (ints::<5>(reply), ints::<4>(reply)) {
                (Some([1, remaining, refill, reset, now]), _) => {
                    [1, 0, -1, -1, now, 0, remaining, refill, reset]
                }
                (_, Some([0, wait, now, reset])) => {
                    [0, wait, now.saturating_add(wait), 0, now, 0, 0, wait, reset]
                }
                // The allowed text first: a marker refusal's text is read only when it is not one.
                _ => match allowed_text(reply) {
                    Some([count, oldest, newest, now]) => {
                        let (uses, window) =
                            (limits[0].uses() as i64, limits[0].window_ms() as i64);
                        [
                            1,
                            0,
                            -1,
                            -1,
                            now,
                            0,
                            uses - count,
                            oldest + window - now,
                            newest + window - now,
                        ]
                    }
                    None => match marker_refusal(reply, limits[0]) {
                        Some([until, now, end]) => {
                            let wait = until - now;
                            [0, wait, until, 0, now, 0, 0, wait, end - now]
                        }
                        None => return Err(err()),
                    },
                },
            },
            None => return Err(err()),
        };
    let entry = |i: i64| usize::try_from(i).ok().filter(|&i| i < limits.len());
    let tight_index = entry(tight).ok_or_else(err)?;
    let (uses, window) = (
        limits[tight_index].uses() as i64,
        limits[tight_index].window_ms() as i64,
    );
    // Every time a reply names is at most a window (and a clock step) away.
    let reach = window + CLOCK_STEP_MS as i64;
    let counts_ok = (0..=MAX_NOW).contains(&now)
        && (0..=uses).contains(&remaining)
        && (0..=reach).contains(&refill)
        && (refill..=reach).contains(&reset);
    let quota = crate::Quota {
        limit: uses as u32,
        remaining: remaining as u32,
        refill_after_ms: refill as u64,
        reset_after_ms: reset as u64,
    };
    match allowed {
        1 if counts_ok
            && retry_after == 0
            && retry_ts == -1
            && blocked == -1
            // The window is empty exactly when none of the tightest entry's uses is taken.
            && (remaining == uses) == (refill == 0)
            && (refill == 0) == (reset == 0)
            && (!consume || remaining < uses) =>
        {
            Ok((BatchVerdict::ALLOWED.with_quota(quota), tight_index))
        }
        0 if counts_ok
            && retry_after >= 1
            && retry_after <= reach
            && retry_ts.checked_sub(now) == Some(retry_after)
            && blocked == tight
            && remaining == 0
            && refill == retry_after =>
        {
            Ok((
                BatchVerdict {
                    allowed: false,
                    retry_after_ms: retry_after as u64,
                    retry_timestamp: Some(retry_ts as u64),
                    blocked: Some(tight_index),
                    quota,
                },
                tight_index,
            ))
        }
        _ => Err(err()),
    }
}

/// Up to 16 ASCII digits (every time and count a reply carries is below 2^53), as a number: one
/// pass over the bytes, no `str::parse` (this runs on every one-text reply; 16 digits never overflow).
fn digits(s: &str) -> Option<i64> {
    let bytes = s.as_bytes();
    if bytes.is_empty() || bytes.len() > 16 {
        return None;
    }
    let mut n = 0i64;
    for &b in bytes {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        n = n * 10 + i64::from(d);
    }
    Some(n)
}

/// `text` cut at each space into exactly `N` pieces (as `text.split(' ')` would give them, empty
/// pieces included), or `None` for another count: a byte scan, no `char` searcher.
fn pieces<const N: usize>(text: &str) -> Option<[&str; N]> {
    let mut out = [""; N];
    let mut rest = text;
    for (i, piece) in out.iter_mut().enumerate() {
        match rest.bytes().position(|b| b == b' ') {
            Some(at) if i + 1 < N => {
                *piece = &rest[..at];
                rest = &rest[at + 1..];
            }
            None if i + 1 == N => *piece = rest,
            _ => return None,
        }
    }
    Some(out)
}

/// A one-entry consume allowed, as the script sends it: one text, `'<count> <oldest> <newest> <now>'`
/// (the calls in the window after the call, the times of its oldest and newest call, the server
/// time; all in ms). Gives them as numbers, or `None` for any other text; [`decode`] checks them as
/// the nine numbers they stand for.
fn allowed_text(reply: &Reply) -> Option<[i64; 4]> {
    let Reply::Text(text) = reply else {
        return None;
    };
    let [count, oldest, newest, now] = pieces::<4>(text)?;
    Some([
        digits(count)?,
        digits(oldest)?,
        digits(newest)?,
        digits(now)?,
    ])
}

/// A one-entry refusal answered by the log's refusal marker, as the script sends it: one text,
/// `'<until><end><uses>:<window> <seconds> <microseconds>'` (until and end in 16 digits each, then the
/// limit the marker was written for; TIME's two fields). Gives `[until, server time, end]` in ms, or
/// `None` for any other text, or a marker of another limit than `limit`.
fn marker_refusal(reply: &Reply, limit: Limit) -> Option<[i64; 3]> {
    let Reply::Text(text) = reply else {
        return None;
    };
    let [marker, secs, micros] = pieces::<3>(text)?;
    let (until, end, named) = (marker.get(..16)?, marker.get(16..32)?, marker.get(32..)?);
    let colon = named.bytes().position(|b| b == b':')?;
    let (uses, window) = (&named[..colon], &named[colon + 1..]);
    if digits(uses)? != limit.uses() as i64 || digits(window)? != limit.window_ms() as i64 {
        return None;
    }
    let micros = digits(micros).filter(|&us| us < 1_000_000)?;
    let now = digits(secs)?
        .checked_mul(1000)?
        .checked_add(micros / 1000)?;
    Some([digits(until)?, now, digits(end)?])
}

/// Decodes a release reply: how many of the call's members were removed (at most one a key).
pub fn decode_release(reply: &Reply) -> Result<u64, ReplyError> {
    match ints::<1>(reply) {
        Some([removed]) if removed >= 0 => Ok(removed as u64),
        _ => Err(ReplyError::new("sliding", "[members removed >= 0]", reply)),
    }
}

/// [`decode_release`] of a release of `keys` keys: never more members removed than keys.
pub fn decode_release_of(reply: &Reply, keys: usize) -> Result<u64, ReplyError> {
    match decode_release(reply) {
        Ok(removed) if removed <= keys as u64 => Ok(removed),
        _ => Err(ReplyError::new(
            "sliding",
            "[members removed, at most one a key]",
            reply,
        )),
    }
}

pub(crate) fn fixed_plan(key: &str, options: &RedisOptions, args: Vec<String>) -> Plan {
    Plan {
        script: &FIXED,
        keys: vec![options.window_key(key)],
        args,
    }
}

/// Adds `amount` hits to `key`'s fixed window (opening one of `decay` if none runs).
pub fn plan_hit(key: &str, decay: Window, amount: i64, options: &RedisOptions) -> Plan {
    fixed_plan(
        key,
        options,
        vec![
            "hit".to_owned(),
            decay.as_ms().to_string(),
            amount.to_string(),
        ],
    )
}

/// Reads `key`'s fixed window.
pub fn plan_get_window(key: &str, options: &RedisOptions) -> Plan {
    fixed_plan(key, options, vec!["get".to_owned()])
}

/// Sets `key`'s count to zero, keeping its window running.
pub fn plan_reset_attempts(key: &str, options: &RedisOptions) -> Plan {
    fixed_plan(key, options, vec!["reset".to_owned()])
}

/// Removes `key`'s count and window.
pub fn plan_clear(key: &str, options: &RedisOptions) -> Plan {
    fixed_plan(key, options, vec!["clear".to_owned()])
}

/// A fixed window as the server holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WindowState {
    /// Hits in the window.
    pub count: i64,
    /// Milliseconds until the window ends.
    pub ms_left: u64,
}

impl WindowState {
    /// Whole seconds until the window ends, rounded up.
    pub fn available_in_secs(&self) -> u64 {
        self.ms_left.div_ceil(1000)
    }
}

/// Decodes any fixed-window reply: the window, or `None` when the key has none.
pub fn decode_window(reply: &Reply) -> Result<Option<WindowState>, ReplyError> {
    match ints::<2>(reply) {
        Some([_, 0]) => Ok(None),
        Some([count, ms_left]) if ms_left > 0 => Ok(Some(WindowState {
            count,
            ms_left: ms_left as u64,
        })),
        _ => Err(ReplyError::new(
            "fixed",
            "[count, ms until the window ends >= 0]",
            reply,
        )),
    }
}

/// Counts one hit on `key`'s fixed window only if it holds fewer than `max` (opening a window of
/// `decay` if none runs), atomically.
pub fn plan_attempt(key: &str, decay: Window, max: i64, options: &RedisOptions) -> Plan {
    fixed_plan(
        key,
        options,
        vec![
            "attempt".to_owned(),
            decay.as_ms().to_string(),
            max.to_string(),
        ],
    )
}

/// Decodes an attempt reply: whether the hit was counted, and the window after the call.
pub fn decode_attempt(reply: &Reply) -> Result<(bool, Option<WindowState>), ReplyError> {
    let err = || {
        ReplyError::new(
            "fixed",
            "[counted 0|1, count, ms until the window ends >= 0]",
            reply,
        )
    };
    match ints::<3>(reply).ok_or_else(err)? {
        [0, 0, 0] => Ok((false, None)),
        [counted @ (0 | 1), count, ms_left] if ms_left > 0 && (counted == 0 || count >= 1) => Ok((
            counted == 1,
            Some(WindowState {
                count,
                ms_left: ms_left as u64,
            }),
        )),
        _ => Err(err()),
    }
}

/// [`decode_attempt`] of an attempt under `max`: a counted hit leaves at most `max` in the window, a
/// refused one found at least `max` there (or no window at all, when `max` is below 1).
pub fn decode_attempt_max(
    reply: &Reply,
    max: i64,
) -> Result<(bool, Option<WindowState>), ReplyError> {
    let decoded = decode_attempt(reply)?;
    let consistent = match decoded {
        (false, None) => max < 1,
        (true, Some(w)) => w.count <= max,
        (false, Some(w)) => w.count >= max,
        (true, None) => false,
    };
    if consistent {
        Ok(decoded)
    } else {
        Err(ReplyError::new(
            "fixed",
            "[counted 0|1, count, ms until the window ends], a count within the maximum when counted",
            reply,
        ))
    }
}
