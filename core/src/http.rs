//! What an HTTP rate-limit middleware decides, once for every framework and language: the store
//! entries of a request, the response fields of a verdict, and the client's address.
//!
//! Every function here is pure (no I/O, no clock) and total: any input gives a value or a typed
//! [`HttpError`], never a panic. The Node, Python and Rust (`ratewindow-tower`) middleware only carry
//! strings and numbers to these functions and back; `tests/vectors/http/http.json` pins their answers
//! in every language.
//!
//! A request goes through three steps:
//!
//! 1. [`client_address`]: the key most limits are built from — the peer address, or, only when the
//!    application says how many proxies (or which) it trusts, the address they forwarded.
//! 2. [`request_entries`]: a named limiter's limits become the entries of **one** all-or-nothing
//!    batch (`consume_many` on any store): keys `throttle:{name}:{key}`, [`HttpLimit::Unlimited`]
//!    skipped, keys two limits share rewritten as the seed's `RateLimiter.limiter()` does.
//! 3. [`response_headers`]: the batch verdict becomes `Retry-After` (refusals, with status
//!    [`TOO_MANY_REQUESTS`]), the IETF `RateLimit-Policy` / `RateLimit` fields and, on request, the
//!    legacy `X-RateLimit-*`.
//!
//! ```
//! use ratewindow_core::http::{self, HeaderOptions, HttpLimit, Trust};
//! use ratewindow_core::{Limit, MemoryStore};
//!
//! let store = MemoryStore::new();
//! let trust = Trust::hops(1); // one reverse proxy in front: trust its X-Forwarded-For entry
//! let ip = http::client_address("10.0.0.2", Some("203.0.113.9, 198.51.100.7"), None, &trust)?;
//! assert_eq!(ip, "198.51.100.7");
//!
//! let limits = [HttpLimit::new(ip.as_str(), Limit::per_minute(2)?), HttpLimit::Unlimited];
//! let plan = http::request_entries("login", &limits)?;
//! assert_eq!(plan.entries[0].key, "throttle:login:198.51.100.7");
//!
//! let now = 1_700_000_000_000;
//! store.consume_many(&plan.entries, now);
//! store.consume_many(&plan.entries, now);
//! let verdict = store.consume_many(&plan.entries, now).verdict;
//! let headers = http::response_headers("login", &plan.limits(), &verdict, now, HeaderOptions::default());
//! assert!(!verdict.allowed); // answer with status http::TOO_MANY_REQUESTS and:
//! assert_eq!(headers, [
//!     ("Retry-After", "60".to_owned()),
//!     ("RateLimit-Policy", "\"login\";q=2;w=60".to_owned()),
//!     ("RateLimit", "\"login\";r=0;t=60".to_owned()),
//! ]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::{BatchVerdict, Entry, Limit};

/// The status of a refused request.
pub const TOO_MANY_REQUESTS: u16 = 429;

/// The longest store key a request may make, in bytes (`throttle:{name}:` included, after
/// escaping). A longer one is refused with [`HttpError::KeyTooLong`] rather than stored.
pub const MAX_KEY_BYTES: usize = 1024;

/// The longest limiter name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// Most forwarded entries a [`Trust::proxies`] walk reads before it stops (at the address reached).
pub const MAX_FORWARDED_HOPS: usize = 32;

/// The longest address a forwarded entry or the peer may spell, in bytes; a longer one is malformed.
const MAX_ADDRESS_BYTES: usize = 64;

/// Every store key of a request starts with it (then the limiter's name and `:`).
const PREFIX: &str = "throttle:";

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// A request the middleware cannot key, or a configuration it cannot hold. [`HttpError::kind`] is
/// the stable name bindings and vectors use; [`HttpError::status`] the status a middleware answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// A limiter name that is empty, longer than [`MAX_NAME_BYTES`], or holds a byte outside
    /// printable ASCII or a `:` (it would make keys of two limiters collide).
    #[error("invalid limiter name {name:?}: {reason}")]
    InvalidName {
        /// The name as given (at most its first 80 characters).
        name: String,
        /// Why, in words.
        reason: &'static str,
    },
    /// A store key longer than [`MAX_KEY_BYTES`] (a huge user id, header or IP string).
    #[error("rate-limit key of {bytes} bytes is longer than the {max} allowed")]
    KeyTooLong {
        /// The key's length after `throttle:{name}:` and escaping.
        bytes: usize,
        /// [`MAX_KEY_BYTES`].
        max: usize,
    },
    /// A request with no peer address (a server on a Unix socket, a closed connection, a Rust server
    /// served without connect info) from which no trusted proxy's forwarded address was believed:
    /// answered 500 rather than counting every such request as one client.
    #[error(
        "the request has no peer address (a Unix socket?) and no trusted proxy forwarded one: \
         trust the proxy in front (hops) so its forwarded address is the client"
    )]
    NoPeer,
    /// A trusted proxy that is not an address or `address/prefix`.
    #[error("trusted proxy {proxy:?} is not an IP address or CIDR block")]
    InvalidProxy {
        /// The value as given (at most its first 80 characters).
        proxy: String,
    },
    /// An IPv6 grouping prefix outside 1 to 128.
    #[error("IPv6 prefix {prefix} is not from 1 to 128")]
    InvalidPrefix {
        /// The prefix given.
        prefix: u32,
    },
}

impl HttpError {
    /// The error's stable name: `invalid_name`, `key_too_long`, `no_peer`, `invalid_proxy`,
    /// `invalid_prefix`.
    pub const fn kind(&self) -> &'static str {
        match self {
            HttpError::InvalidName { .. } => "invalid_name",
            HttpError::KeyTooLong { .. } => "key_too_long",
            HttpError::NoPeer => "no_peer",
            HttpError::InvalidProxy { .. } => "invalid_proxy",
            HttpError::InvalidPrefix { .. } => "invalid_prefix",
        }
    }

    /// The status a middleware answers the request with: 400 for a key too long (the request carried
    /// it), 500 for the rest (the application's configuration or its server).
    pub const fn status(&self) -> u16 {
        match self {
            HttpError::KeyTooLong { .. } => 400,
            _ => 500,
        }
    }
}

/// At most 80 characters of `s`, for an error message.
fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}

// ---------------------------------------------------------------------------------------------
// Request entries
// ---------------------------------------------------------------------------------------------

/// One limit of a named limiter, as the application's callback returned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HttpLimit<'a> {
    /// `limit` counted under `key` (`""`: one counter for every caller, the seed's `GlobalLimit`).
    Limited {
        /// The limit's key (`Limit.by(key)`): a user id, an IP address …; any text.
        key: &'a str,
        /// Its uses and window (`maxAttempts` per `decaySeconds`).
        limit: Limit,
    },
    /// The seed's `Limit.none()`: skipped, never counted.
    Unlimited,
}

impl<'a> HttpLimit<'a> {
    /// `limit` counted under `key`.
    pub const fn new(key: &'a str, limit: Limit) -> HttpLimit<'a> {
        HttpLimit::Limited { key, limit }
    }

    /// The limit's key; `""` for an unlimited one (the seed's `Unlimited` has no key).
    pub const fn key(&self) -> &'a str {
        match *self {
            HttpLimit::Limited { key, .. } => key,
            HttpLimit::Unlimited => "",
        }
    }
}

/// The batch a request makes: its entries (in the order of the limits they come from) and, for each,
/// the index of that limit among those given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestEntries {
    /// The store entries, for one `consume_many`. Empty when every limit is unlimited: then the
    /// request is not counted (no store call) and gets no rate-limit field.
    pub entries: Vec<Entry>,
    /// `sources[i]`: the index, among the limits given, of the limit `entries[i]` was made from (the
    /// one whose `response()` answers when the verdict's `blocked` is `i`, whose `after()` runs …).
    pub sources: Vec<usize>,
}

impl RequestEntries {
    /// The entries' limits, in order: what [`response_headers`] takes.
    pub fn limits(&self) -> Vec<Limit> {
        self.entries.iter().map(|e| e.limit).collect()
    }
}

/// The store entries of one request to the limiter `name` whose callback returned `limits`.
///
/// - Each limit's store key is `throttle:{name}:{key}` (the seed's `throttle()` prefix), its key
///   escaped: `%` and the control characters (U+0000 to U+001F, U+007F) become `%XX` (upper-case
///   hex), so any text is a safe key for every store (PostgreSQL refuses NUL) and two different keys
///   never meet. A key of any length is accepted; a **store key** longer than [`MAX_KEY_BYTES`] is
///   refused with [`HttpError::KeyTooLong`].
/// - Limits that share a key (including the unlimited ones, whose key is `""`, as the seed's
///   `RateLimiter.limiter()` counts them) are each rewritten to the seed's `fallbackKey()`:
///   `[key:]attempts:{uses}:decay:{seconds}`, `seconds` being the window in seconds as a decimal
///   without trailing zeros (`60`, `0.25`, `1.005`). Two limits with the same key, uses and window then
///   still share it, and the batch checks the key against both and records the call once (the core's
///   batch rule) — the same as one of them.
/// - [`HttpLimit::Unlimited`] limits are skipped.
///
/// `name` must be 1 to [`MAX_NAME_BYTES`] bytes of printable ASCII without `:`
/// ([`HttpError::InvalidName`]).
///
/// The entries go to the store as **one** `consume_many`: the request is counted against all its
/// limits or, when one refuses, against none.
pub fn request_entries(name: &str, limits: &[HttpLimit<'_>]) -> Result<RequestEntries, HttpError> {
    check_name(name)?;
    let mut out = RequestEntries {
        entries: Vec::with_capacity(limits.len()),
        sources: Vec::with_capacity(limits.len()),
    };
    for (i, l) in limits.iter().enumerate() {
        let HttpLimit::Limited { key, limit } = *l else {
            continue;
        };
        let shared = limits
            .iter()
            .enumerate()
            .any(|(j, other)| j != i && other.key() == key);
        let mut suffix = String::new();
        if shared {
            if !key.is_empty() {
                suffix.push(':');
            }
            suffix.push_str("attempts:");
            suffix.push_str(&limit.uses().to_string());
            suffix.push_str(":decay:");
            push_seconds(&mut suffix, limit.window_ms());
        }
        out.entries
            .push(Entry::new(store_key(name, key, &suffix)?, limit));
        out.sources.push(i);
    }
    Ok(out)
}

/// The store entry of a request to the limiter `name` whose callback returned the one limit `limit`
/// under `key`: the entry [`request_entries`] makes of `[HttpLimit::new(key, limit)]` (its `sources` are
/// `[0]`), without the two lists of one.
pub fn request_entry(name: &str, key: &str, limit: Limit) -> Result<Entry, HttpError> {
    request_entry_in(name, key, limit, String::new())
}

/// [`request_entry`] writing the store key in `buf` (cleared first; its allocation reused): a host
/// that takes the key back from the [`Entry`] once the store has answered (`entry.key`) counts a
/// request without allocating a key.
pub fn request_entry_in(
    name: &str,
    key: &str,
    limit: Limit,
    buf: String,
) -> Result<Entry, HttpError> {
    check_name(name)?;
    Ok(Entry::new(store_key_in(name, key, "", buf)?, limit))
}

/// `throttle:{name}:{key escaped}{suffix}`, or [`HttpError::KeyTooLong`].
fn store_key(name: &str, key: &str, suffix: &str) -> Result<String, HttpError> {
    store_key_in(name, key, suffix, String::new())
}

/// [`store_key`] written in `buf` (cleared first).
fn store_key_in(
    name: &str,
    key: &str,
    suffix: &str,
    mut store_key: String,
) -> Result<String, HttpError> {
    // Measured before anything is copied: a huge key costs one scan (a key without `%` or control
    // characters, the usual one, is measured by its length alone).
    let bytes = PREFIX.len() + name.len() + 1 + escaped_len(key) + suffix.len();
    if bytes > MAX_KEY_BYTES {
        return Err(HttpError::KeyTooLong {
            bytes,
            max: MAX_KEY_BYTES,
        });
    }
    store_key.clear();
    store_key.reserve(bytes);
    store_key.push_str(PREFIX);
    store_key.push_str(name);
    store_key.push(':');
    escape_into(&mut store_key, key);
    store_key.push_str(suffix);
    Ok(store_key)
}

fn check_name(name: &str) -> Result<(), HttpError> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.len() > MAX_NAME_BYTES {
        "it is longer than 64 bytes"
    } else if name.bytes().any(|b| b == b':') {
        "it holds a ':'"
    } else if name.bytes().any(|b| !(0x20..=0x7e).contains(&b)) {
        "it holds a character outside printable ASCII"
    } else {
        return Ok(());
    };
    Err(HttpError::InvalidName {
        name: clip(name),
        reason,
    })
}

/// Whether a key character is written as `%XX`.
const fn escaped(b: u8) -> bool {
    b == b'%' || b < 0x20 || b == 0x7f
}

/// The length of `key` once escaped.
fn escaped_len(key: &str) -> usize {
    key.len() + 2 * key.bytes().filter(|&b| escaped(b)).count()
}

/// Appends `key` with `%` and the control characters as `%XX`.
fn escape_into(out: &mut String, key: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut rest = key;
    while let Some(at) = rest.bytes().position(escaped) {
        out.push_str(&rest[..at]);
        let b = rest.as_bytes()[at];
        out.push('%');
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
        // `b` is ASCII, so `at + 1` is a character boundary.
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
}

/// `ms / 1000` as a decimal without trailing zeros.
fn push_seconds(out: &mut String, ms: u64) {
    out.push_str(&(ms / 1000).to_string());
    let frac = ms % 1000;
    if frac != 0 {
        let digits = format!("{frac:03}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
}

// ---------------------------------------------------------------------------------------------
// Response fields
// ---------------------------------------------------------------------------------------------

/// Which rate-limit fields [`response_headers`] writes besides `Retry-After`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeaderOptions {
    /// The IETF `RateLimit-Policy` and `RateLimit` fields (default: on).
    pub ietf: bool,
    /// The legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset` (default: off).
    pub legacy: bool,
}

impl Default for HeaderOptions {
    fn default() -> Self {
        HeaderOptions {
            ietf: true,
            legacy: false,
        }
    }
}

/// The policy identifier of the entry `index` of `count` of the limiter `name`: `name` when it has one
/// entry, else `name.index` (`api.0`, `api.1`). Keys never appear in it (they may be addresses or
/// emails).
pub fn policy_name(name: &str, index: usize, count: usize) -> String {
    if count == 1 {
        name.to_owned()
    } else {
        format!("{name}.{index}")
    }
}

/// The response fields of a request to the limiter `name` whose entries had `limits` (in order: see
/// [`RequestEntries::limits`]) and got `verdict` at `now_ms` (Unix ms, the host's clock).
///
/// In this order, as `(name, value)`:
/// - a refusal: `Retry-After`: the verdict's `retry_after_ms` in whole seconds, **rounded up**, at
///   least 1. The middleware answers it with status [`TOO_MANY_REQUESTS`] (or the limit's own
///   `response()`).
/// - `options.ietf` (draft-ietf-httpapi-ratelimit-headers-10, the latest the project could read):
///   `RateLimit-Policy`: every entry as a policy, `"{policy}";q={uses};w={window in seconds, rounded
///   up, at least 1}`, comma-separated; `RateLimit`: the tightest entry's state,
///   `"{policy}";r={remaining};t={reset_after_ms in seconds, rounded up}` — `t` is when its window is
///   empty again (the whole quota back; for a sliding window a use may come back sooner, and
///   `Retry-After` says when on a refusal). Policy identifiers are structured-field strings
///   ([`policy_name`]).
/// - `options.legacy`: `X-RateLimit-Limit` (the tightest entry's uses), `X-RateLimit-Remaining`,
///   `X-RateLimit-Reset`: when its window is empty, in Unix **seconds** (rounded up), as GitHub and
///   express-rate-limit send it.
///
/// The tightest entry is the verdict's `blocked` entry on a refusal; when allowed, the entry whose uses
/// are the verdict's `limit` (the core's [`Quota`](crate::Quota) rule: fewest remaining, then the
/// longer window), the longest window among several such. No entry (every limit unlimited): no field
/// but `Retry-After`. Never fails: a verdict that matches no entry gets `RateLimit-Policy` alone.
pub fn response_headers(
    name: &str,
    limits: &[Limit],
    verdict: &BatchVerdict,
    now_ms: u64,
    options: HeaderOptions,
) -> Vec<(&'static str, String)> {
    let mut out = Vec::with_capacity(5);
    write_response_headers(
        name,
        limits,
        verdict,
        now_ms,
        options,
        Vec::new(),
        |field, value| {
            // The core writes ASCII alone: never the empty default.
            out.push((field, String::from_utf8(value).unwrap_or_default()));
            Vec::new()
        },
    );
    out
}

/// Every field [`response_headers`] may send, in this order (a host that caches the names, or
/// numbers them, reads them here): `Retry-After`, the IETF pair, the legacy trio.
pub const FIELD_NAMES: [&str; 6] = [
    "Retry-After",
    "RateLimit-Policy",
    "RateLimit",
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
];

/// [`response_headers`] written one field at a time into a buffer: `emit(name, value)` receives each
/// field (in the same order, with the same values, as ASCII bytes) and returns the buffer to write the
/// next one in (the same one, cleared, to reuse its allocation; a new one to keep the value). Returns
/// the last buffer. A host that copies each value into its own type (a Rust server's `HeaderValue`,
/// from bytes) writes them all in one allocation and checks no UTF-8 this way.
pub fn write_response_headers(
    name: &str,
    limits: &[Limit],
    verdict: &BatchVerdict,
    now_ms: u64,
    options: HeaderOptions,
    buf: Vec<u8>,
    emit: impl FnMut(&'static str, Vec<u8>) -> Vec<u8>,
) -> Vec<u8> {
    write_fields(name, limits, verdict, now_ms, options, true, buf, emit)
}

/// [`write_response_headers`] without the `RateLimit-Policy` field, for a host that holds its value
/// already: it depends on the limiter's name and the limits alone (their uses and windows), never on
/// the verdict, so a route with fixed limits sends the same one on every request. The host writes it
/// once (from [`write_response_headers`]) and sets its own copy in the field's place (after
/// `Retry-After`, before `RateLimit`); the other fields are the same, in the same order.
pub fn write_response_headers_but_policy(
    name: &str,
    limits: &[Limit],
    verdict: &BatchVerdict,
    now_ms: u64,
    options: HeaderOptions,
    buf: Vec<u8>,
    emit: impl FnMut(&'static str, Vec<u8>) -> Vec<u8>,
) -> Vec<u8> {
    write_fields(name, limits, verdict, now_ms, options, false, buf, emit)
}

/// The fields of [`write_response_headers`], `RateLimit-Policy` only when `policy`.
#[allow(clippy::too_many_arguments)]
#[inline]
fn write_fields(
    name: &str,
    limits: &[Limit],
    verdict: &BatchVerdict,
    now_ms: u64,
    options: HeaderOptions,
    policy: bool,
    mut buf: Vec<u8>,
    mut emit: impl FnMut(&'static str, Vec<u8>) -> Vec<u8>,
) -> Vec<u8> {
    // A buffer given with bytes in it is reused, not appended to.
    buf.clear();
    let mut field = |buf: &mut Vec<u8>, name: &'static str| {
        *buf = emit(name, std::mem::take(buf));
        buf.clear();
    };
    if !verdict.allowed {
        push_u64(&mut buf, ceil_seconds(verdict.retry_after_ms).max(1));
        field(&mut buf, FIELD_NAMES[0]);
    }
    if limits.is_empty() {
        return buf;
    }
    let tightest = tightest(limits, verdict);
    let quota = verdict.quota;
    // Numbers written by hand into one buffer a field: this runs on every request.
    let count = limits.len();
    if options.ietf {
        if policy {
            buf.reserve(count * (name.len() + 24));
            for (i, limit) in limits.iter().enumerate() {
                if i > 0 {
                    buf.extend_from_slice(b", ");
                }
                push_policy_name(&mut buf, name, i, count);
                buf.extend_from_slice(b";q=");
                push_u64(&mut buf, u64::from(limit.uses()));
                buf.extend_from_slice(b";w=");
                push_u64(&mut buf, ceil_seconds(limit.window_ms()).max(1));
            }
            field(&mut buf, FIELD_NAMES[1]);
        }
        if let Some(i) = tightest {
            buf.reserve(name.len() + 32);
            push_policy_name(&mut buf, name, i, count);
            buf.extend_from_slice(b";r=");
            push_u64(&mut buf, u64::from(quota.remaining));
            buf.extend_from_slice(b";t=");
            push_u64(&mut buf, ceil_seconds(quota.reset_after_ms));
            field(&mut buf, FIELD_NAMES[2]);
        }
    }
    if options.legacy && tightest.is_some() {
        push_u64(&mut buf, u64::from(quota.limit));
        field(&mut buf, FIELD_NAMES[3]);
        push_u64(&mut buf, u64::from(quota.remaining));
        field(&mut buf, FIELD_NAMES[4]);
        push_u64(
            &mut buf,
            ceil_seconds(now_ms.saturating_add(quota.reset_after_ms)),
        );
        field(&mut buf, FIELD_NAMES[5]);
    }
    buf
}

/// The entry the verdict's quota describes (see [`response_headers`]).
fn tightest(limits: &[Limit], verdict: &BatchVerdict) -> Option<usize> {
    if let Some(blocked) = verdict.blocked {
        return (blocked < limits.len()).then_some(blocked);
    }
    let mut best: Option<usize> = None;
    for (i, limit) in limits.iter().enumerate() {
        if limit.uses() == verdict.quota.limit
            && best.is_none_or(|b| limit.window_ms() > limits[b].window_ms())
        {
            best = Some(i);
        }
    }
    best
}

/// Two decimal digits of every number below 100, `00` to `99`.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Appends `n` in decimal, as ASCII bytes (by hand: `write!` is most of this module's cost per
/// request; a `push` a char, or a UTF-8 check of each number, was 2-4% of the tower layer's profile),
/// two digits a division.
fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = n as usize * 2;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        at -= 1;
        digits[at] = b'0' + n as u8;
    }
    out.extend_from_slice(&digits[at..]);
}

/// `ms` in whole seconds, rounded up.
const fn ceil_seconds(ms: u64) -> u64 {
    ms / 1000 + (ms % 1000 != 0) as u64
}

/// [`policy_name`] as a structured-field string, appended.
fn push_policy_name(out: &mut Vec<u8>, name: &str, index: usize, count: usize) {
    push_sf_string(out, name, if count == 1 { None } else { Some(index) });
}

/// `s` (then `.index`) as a structured-field string (RFC 9651 §3.3.3): quoted, `"` and `\` escaped; a
/// character outside printable ASCII (which a checked name never holds) becomes `?`.
fn push_sf_string(out: &mut Vec<u8>, s: &str, index: Option<usize>) {
    out.push(b'"');
    if s.bytes()
        .all(|b| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\')
    {
        // A checked limiter name: copied as it is.
        out.extend_from_slice(s.as_bytes());
    } else {
        push_sf_escaped(out, s);
    }
    if let Some(i) = index {
        out.push(b'.');
        push_u64(out, i as u64);
    }
    out.push(b'"');
}

/// The inside of a structured-field string: `"` and `\` escaped, anything outside printable ASCII `?`.
fn push_sf_escaped(out: &mut Vec<u8>, s: &str) {
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push(b'\\');
                out.push(c as u8);
            }
            ' '..='~' => out.push(c as u8),
            _ => out.push(b'?'),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Client address
// ---------------------------------------------------------------------------------------------

/// The header a trusted proxy writes the client's address in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ProxyHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the default).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for="[2001:db8::1]:4711"` (its `for` parameters).
    Forwarded,
}

/// An address block: an IP address and a prefix length (`10.0.0.0/8`, `2001:db8::/32`, or one address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `address` or `address/prefix` (IPv4 prefix 0 to 32, IPv6 0 to 128; an IPv4-mapped IPv6
    /// address is its IPv4 address).
    pub fn parse(s: &str) -> Result<Cidr, HttpError> {
        let bad = || HttpError::InvalidProxy { proxy: clip(s) };
        let t = s.trim();
        let (addr, prefix) = match t.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (t, None),
        };
        let addr = parse_address(addr).ok_or_else(bad)?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) if !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse::<u8>().map_err(|_| bad())?
            }
            Some(_) => return Err(bad()),
        };
        if prefix > max {
            return Err(bad());
        }
        Ok(Cidr { addr, prefix })
    }

    /// Whether `ip` is in the block.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(a) & mask == u32::from(b) & mask
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(a) & mask == u128::from(b) & mask
            }
            _ => false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Proxies {
    None,
    Hops(u32),
    List(Vec<Cidr>),
}

/// Whom [`client_address`] believes: by default the peer alone (forwarded headers are ignored, as
/// any client can send them). Build with [`Trust::peer`], [`Trust::hops`] or [`Trust::proxies`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Trust {
    proxies: Proxies,
    header: ProxyHeader,
    ipv6_prefix: u8,
}

impl Default for Trust {
    fn default() -> Self {
        Trust::peer()
    }
}

impl Trust {
    /// The peer address is the client (no proxy in front; the default).
    pub const fn peer() -> Trust {
        Trust {
            proxies: Proxies::None,
            header: ProxyHeader::XForwardedFor,
            ipv6_prefix: 128,
        }
    }

    /// `hops` reverse proxies in front, each appending the address it received from: the client is
    /// the `hops`-th forwarded address counted from the right (from the peer). `hops(0)` is
    /// [`Trust::peer`].
    pub const fn hops(hops: u32) -> Trust {
        Trust {
            proxies: if hops == 0 {
                Proxies::None
            } else {
                Proxies::Hops(hops)
            },
            header: ProxyHeader::XForwardedFor,
            ipv6_prefix: 128,
        }
    }

    /// Trusts the proxies at these addresses or blocks (`"10.0.0.0/8"`, `"::1"`): starting from the
    /// peer, while the address reached is a trusted proxy, the next forwarded address (from the right)
    /// is believed; the client is the first untrusted one.
    pub fn proxies<S: AsRef<str>>(list: impl IntoIterator<Item = S>) -> Result<Trust, HttpError> {
        let list = list
            .into_iter()
            .map(|s| Cidr::parse(s.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Trust {
            proxies: Proxies::List(list),
            header: ProxyHeader::XForwardedFor,
            ipv6_prefix: 128,
        })
    }

    /// Reads the proxies' addresses from `header` instead of `X-Forwarded-For`.
    pub const fn with_header(mut self, header: ProxyHeader) -> Trust {
        self.header = header;
        self
    }

    /// Answers an IPv6 client by its `/prefix` block (`2001:db8:1:2::/64`: one household or server
    /// usually holds a whole /64), instead of the whole address (128, the default). 1 to 128.
    pub fn with_ipv6_prefix(mut self, prefix: u32) -> Result<Trust, HttpError> {
        if !(1..=128).contains(&prefix) {
            return Err(HttpError::InvalidPrefix { prefix });
        }
        self.ipv6_prefix = prefix as u8;
        Ok(self)
    }

    /// The header a middleware must read for this trust, `None` when it trusts the peer alone.
    pub fn header(&self) -> Option<ProxyHeader> {
        match self.proxies {
            Proxies::None => None,
            _ => Some(self.header),
        }
    }
}

/// A client address as [`client_ip_of`] writes it, held inline (no allocation): an IPv4 address, an
/// IPv6 address (RFC 5952) or an IPv6 block (`2001:db8:1:2::/64`), at most 43 bytes. Reads as a
/// `&str` ([`Address::as_str`], `Deref`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Address {
    len: u8,
    buf: [u8; Address::CAPACITY],
}

impl Address {
    /// Room for the longest address (39 bytes), a `/` and a prefix, with bytes to spare.
    const CAPACITY: usize = 47;

    /// The address as text.
    pub fn as_str(&self) -> &str {
        // Only ASCII is ever written (digits, hex, `.`, `:`, `/`); a write past the capacity is
        // dropped whole, never cut inside a character.
        std::str::from_utf8(&self.buf[..usize::from(self.len)]).unwrap_or_default()
    }

    fn new() -> Address {
        Address {
            len: 0,
            buf: [0; Address::CAPACITY],
        }
    }

    fn push(&mut self, bytes: &[u8]) -> std::fmt::Result {
        let at = usize::from(self.len);
        let end = at + bytes.len();
        let slot = self.buf.get_mut(at..end).ok_or(std::fmt::Error)?;
        slot.copy_from_slice(bytes);
        self.len = end as u8;
        Ok(())
    }
}

impl std::fmt::Write for Address {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.push(s.as_bytes())
    }
}

impl std::ops::Deref for Address {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Address {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl From<Address> for String {
    fn from(a: Address) -> String {
        a.as_str().to_owned()
    }
}

/// The client's address: the key a per-IP limit counts under.
///
/// `peer` is the connection's remote address (`1.2.3.4`, `::1`, `::ffff:1.2.3.4`, `[::1]:80`,
/// `1.2.3.4:80` are all read); `forwarded_for` / `forwarded` are the request's `X-Forwarded-For` /
/// `Forwarded` values (several lines of one header joined by `", "`), read only when `trust` says to
/// read that header:
///
/// - [`Trust::peer`]: the peer.
/// - [`Trust::hops`]`(n)`: from the peer, step left through the forwarded addresses `n` times.
/// - [`Trust::proxies`]: from the peer, step left while the address reached is a trusted proxy (at
///   most [`MAX_FORWARDED_HOPS`] steps).
///
/// A step that finds no address (the list is shorter), or an entry that is not an IP address
/// (malformed, `unknown`, an obfuscated `_name`, longer than 64 bytes, an empty entry) stops the walk
/// at the address already reached: a malformed header is never believed past the point it breaks, and
/// the entries left of the ones read are never parsed (a client can write anything there).
///
/// The answer is normalised: an IPv4-mapped IPv6 address is its IPv4 address, IPv6 is written as RFC
/// 5952 has it (lower case, shortest), and with [`Trust::with_ipv6_prefix`] an IPv6 client is its block
/// (`2001:db8:1:2::/64`).
///
/// **A peer that is not an IP address** never fails a request by itself. It is a server on a Unix
/// socket (whose peer has no address: pass `""`), a closed connection, or a server that already
/// rewrote the peer from a forwarded header (uvicorn's `--proxy-headers` copies an `X-Forwarded-For`
/// entry as it is, garbage included):
///
/// - [`Trust::hops`]`(n)` takes it as the first trusted proxy, as it takes any peer: the walk goes on
///   into the forwarded header (a Unix socket behind nginx or a load balancer).
/// - [`Trust::proxies`] lists address blocks, which a non-IP peer is in none of: it is the client.
/// - When the client is that peer itself (no trust, or a walk that believed no address): a peer with
///   text is the client as that text, spaces and tabs trimmed (`garbage`: the key the server gave the
///   request; never an IP address, so it cannot take the counter of a client that has one, and a long
///   one is refused as a store key, [`HttpError::KeyTooLong`]); an empty peer is
///   [`HttpError::NoPeer`] (500) — every request of that server would be one client, a limit for
///   everyone that looks like a per-client one.
pub fn client_address(
    peer: &str,
    forwarded_for: Option<&str>,
    forwarded: Option<&str>,
    trust: &Trust,
) -> Result<String, HttpError> {
    match walk(parse_address(peer), forwarded_for, forwarded, trust) {
        Some(ip) => Ok(render_address(ip, trust.ipv6_prefix).into()),
        None => match peer.trim_matches([' ', '\t']) {
            "" => Err(HttpError::NoPeer),
            text => Ok(text.to_owned()),
        },
    }
}

/// [`client_address`] for a peer the host already holds as an [`IpAddr`] (a Rust server's
/// `SocketAddr::ip()`): the same answer, without spelling the peer out and reading it back.
pub fn client_address_of(
    peer: IpAddr,
    forwarded_for: Option<&str>,
    forwarded: Option<&str>,
    trust: &Trust,
) -> String {
    client_ip_of(Some(peer), forwarded_for, forwarded, trust)
        .map(String::from)
        .unwrap_or_default()
}

/// [`client_address`] for a host that holds the peer as an [`IpAddr`] (a Rust server's
/// `SocketAddr::ip()`), or has none (`None`: a Unix socket, a server without connect info), answered
/// inline ([`Address`]: no allocation). The same answer as [`client_address`] of the peer spelled out
/// (`None` as `""`): an address, or [`HttpError::NoPeer`] when there is no peer and no forwarded
/// address is believed.
pub fn client_ip_of(
    peer: Option<IpAddr>,
    forwarded_for: Option<&str>,
    forwarded: Option<&str>,
    trust: &Trust,
) -> Result<Address, HttpError> {
    let peer = peer.map(|peer| match peer {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
        v4 => v4,
    });
    match walk(peer, forwarded_for, forwarded, trust) {
        Some(ip) => Ok(render_address(ip, trust.ipv6_prefix)),
        None => Err(HttpError::NoPeer),
    }
}

/// The walk of [`client_address`] from `start` (`None`: a peer that is not an IP address) through the
/// trusted header: the address reached, `None` while still at a non-IP peer.
fn walk(
    start: Option<IpAddr>,
    forwarded_for: Option<&str>,
    forwarded: Option<&str>,
    trust: &Trust,
) -> Option<IpAddr> {
    let mut current = start;
    let header = match trust.header {
        ProxyHeader::XForwardedFor => forwarded_for,
        ProxyHeader::Forwarded => forwarded,
    };
    let (Some(value), false) = (header, trust.proxies == Proxies::None) else {
        return current;
    };
    let mut steps: Box<dyn Iterator<Item = Option<IpAddr>> + '_> = match trust.header {
        ProxyHeader::XForwardedFor => Box::new(value.rsplit(',').map(parse_address)),
        ProxyHeader::Forwarded => Box::new(forwarded_fors(value).into_iter().rev()),
    };
    let mut walked = 0usize;
    loop {
        let go_on = match &trust.proxies {
            Proxies::None => false,
            Proxies::Hops(n) => walked < *n as usize,
            // A non-IP peer is in no block: it is the client.
            Proxies::List(list) => {
                walked < MAX_FORWARDED_HOPS
                    && current.is_some_and(|ip| list.iter().any(|c| c.contains(ip)))
            }
        };
        if !go_on {
            break;
        }
        match steps.next() {
            Some(Some(ip)) => current = Some(ip),
            _ => break,
        }
        walked += 1;
    }
    current
}

fn render_address(ip: IpAddr, ipv6_prefix: u8) -> Address {
    use std::fmt::Write as _;
    let mut out = Address::new();
    // The longest text is 43 bytes (39 and `/128`): every write fits, the results are `Ok`.
    match ip {
        IpAddr::V6(v6) if ipv6_prefix < 128 => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(ipv6_prefix))
                .unwrap_or(0);
            let _ = write!(
                out,
                "{}/{ipv6_prefix}",
                Ipv6Addr::from(u128::from(v6) & mask)
            );
        }
        IpAddr::V4(v4) => {
            // By hand: the standard formatter is most of a request's cost in the tower layer.
            let mut text = [0u8; 15];
            let mut len = 0;
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    text[len] = b'.';
                    len += 1;
                }
                let pair = usize::from(octet % 100) * 2;
                if octet >= 100 {
                    text[len] = b'0' + octet / 100;
                    len += 1;
                }
                if octet >= 10 {
                    text[len] = DIGIT_PAIRS[pair];
                    len += 1;
                }
                text[len] = DIGIT_PAIRS[pair + 1];
                len += 1;
            }
            let _ = out.push(&text[..len]);
        }
        ip => {
            let _ = write!(out, "{ip}");
        }
    }
    out
}

/// One address as a peer or a forwarded entry spells it: `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`,
/// `[2001:db8::1]`, `[2001:db8::1]:80`, `fe80::1%eth0` (the zone dropped), surrounding spaces and tabs
/// ignored. IPv4-mapped IPv6 is read as IPv4. Anything else: `None`.
fn parse_address(s: &str) -> Option<IpAddr> {
    let s = s.trim_matches([' ', '\t']);
    if s.is_empty() || s.len() > MAX_ADDRESS_BYTES {
        return None;
    }
    let ip = if let Some(rest) = s.strip_prefix('[') {
        let (inner, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        IpAddr::V6(parse_v6(inner)?)
    } else if let Ok(ip) = s.parse::<IpAddr>() {
        ip
    } else if let Some((host, _)) = s.split_once(':').filter(|(_, p)| is_port(p)) {
        match host.parse::<Ipv4Addr>() {
            Ok(v4) => IpAddr::V4(v4),
            // Not `host:port`: an IPv6 address with a zone, or nothing.
            Err(_) => IpAddr::V6(parse_v6(s)?),
        }
    } else {
        IpAddr::V6(parse_v6(s)?)
    };
    Some(match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    })
}

/// An IPv6 address, its zone (`%eth0`) dropped.
fn parse_v6(s: &str) -> Option<Ipv6Addr> {
    let addr = match s.split_once('%') {
        Some((a, zone)) if !zone.is_empty() => a,
        Some(_) => return None,
        None => s,
    };
    addr.parse().ok()
}

fn is_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

/// The `for` address of every element of a `Forwarded` value (RFC 7239 §4), in order; `None` for an
/// element without one, or whose `for` is not an address (`unknown`, `_hidden`, malformed). Commas and
/// semicolons inside quoted strings do not split; an element with an unterminated quote is `None`.
fn forwarded_fors(value: &str) -> Vec<Option<IpAddr>> {
    let mut out = Vec::new();
    let mut element_for: Option<Option<IpAddr>> = None;
    let mut pair_start = 0;
    let mut quoted = false;
    let mut escaped = false;
    let bytes = value.as_bytes();
    let mut i = 0;
    let finish_pair = |pair: &str, element_for: &mut Option<Option<IpAddr>>| {
        let Some((name, v)) = pair.split_once('=') else {
            if !pair.trim_matches([' ', '\t']).is_empty() {
                // A pair without `=`: the element is malformed.
                *element_for = Some(None);
            }
            return;
        };
        if name.trim_matches([' ', '\t']).eq_ignore_ascii_case("for") && element_for.is_none() {
            *element_for = Some(forwarded_node(v.trim_matches([' ', '\t'])));
        }
    };
    while i <= bytes.len() {
        let b = bytes.get(i).copied();
        if quoted {
            match b {
                None => {
                    // Unterminated quote: the last element is malformed.
                    out.push(None);
                    return out;
                }
                Some(_) if escaped => escaped = false,
                Some(b'\\') => escaped = true,
                Some(b'"') => quoted = false,
                Some(_) => {}
            }
            i += 1;
            continue;
        }
        match b {
            Some(b'"') => quoted = true,
            Some(b';') => {
                finish_pair(&value[pair_start..i], &mut element_for);
                pair_start = i + 1;
            }
            Some(b',') | None => {
                finish_pair(&value[pair_start..i], &mut element_for);
                out.push(element_for.take().flatten());
                pair_start = i + 1;
            }
            Some(_) => {}
        }
        i += 1;
    }
    out
}

/// A `Forwarded` node (`for=` value): a token or a quoted string holding an address (IPv6 in
/// brackets), with an optional port.
fn forwarded_node(v: &str) -> Option<IpAddr> {
    let inner = match v.strip_prefix('"') {
        Some(rest) => {
            let inner = rest.strip_suffix('"')?;
            if inner.contains('\\') || inner.contains('"') {
                return None;
            }
            inner
        }
        None => v,
    };
    // RFC 7239 wants IPv6 in brackets; an unbracketed one would be ambiguous with a port.
    if !inner.starts_with('[') && inner.contains(':') && inner.matches(':').count() > 1 {
        return None;
    }
    parse_address(inner)
}
