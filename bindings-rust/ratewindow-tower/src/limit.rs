//! [`RouteLimit`]: one limit a named limiter returns for a request, with its hooks.

use std::fmt;
use std::sync::Arc;

use axum::body::Body;
use http::Response;
use ratewindow_core::Limit;

/// What a limit's [`RouteLimit::response`] callback gets: why the request was refused.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The limiter's name.
    pub name: Arc<str>,
    /// Index of the refusing limit among those the limiter's callback returned.
    pub limit: usize,
    /// Milliseconds until the request would be allowed.
    pub retry_after_ms: u64,
    /// The rate-limit fields of the refusal (`Retry-After` first); added to the response the callback
    /// builds unless it sets them itself.
    pub headers: Vec<(&'static str, String)>,
}

pub(crate) type ResponseFn = dyn Fn(&Refusal) -> Response<Body> + Send + Sync;
type AfterFn = dyn Fn(&Response<Body>) -> bool + Send + Sync;

/// One limit of a named limiter (the seed's `Limit`): `uses` per window, counted under a key set with
/// [`by`](RouteLimit::by) (none: one counter for every caller), with an optional custom refusal
/// ([`response`](RouteLimit::response)) and an [`after`](RouteLimit::after) hook.
/// [`RouteLimit::none`] is the seed's `Limit.none()`: skipped.
#[derive(Clone)]
pub struct RouteLimit {
    pub(crate) key: RouteKey,
    pub(crate) limit: Option<Limit>,
    pub(crate) response: Option<Arc<ResponseFn>>,
    pub(crate) after: Option<Arc<AfterFn>>,
}

impl fmt::Debug for RouteLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouteLimit")
            .field("key", &self.key)
            .field("limit", &self.limit)
            .field("response", &self.response.is_some())
            .field("after", &self.after.is_some())
            .finish()
    }
}

impl From<Limit> for RouteLimit {
    fn from(limit: Limit) -> Self {
        RouteLimit::new(limit)
    }
}

impl RouteLimit {
    /// `limit`, one counter for every caller until [`by`](RouteLimit::by) sets a key.
    pub fn new(limit: Limit) -> RouteLimit {
        RouteLimit {
            key: RouteKey::default(),
            limit: Some(limit),
            response: None,
            after: None,
        }
    }

    /// No limit: the request is not counted against it (the seed's `Limit.none()`).
    pub fn none() -> RouteLimit {
        RouteLimit {
            key: RouteKey::default(),
            limit: None,
            response: None,
            after: None,
        }
    }

    /// Counts under `key` (a user id, an address, `email|ip` …). Any text: the core escapes it; a
    /// store key past [`MAX_KEY_BYTES`](ratewindow_core::http::MAX_KEY_BYTES) answers 400.
    ///
    /// A key of up to 62 bytes (an address, a user id) is held inline: no allocation per request.
    pub fn by(mut self, key: impl Into<RouteKey>) -> RouteLimit {
        self.key = key.into();
        self
    }

    /// Answers a refusal by this limit with `f`'s response instead of the default 429. The rate-limit
    /// fields are added to it unless it sets them.
    pub fn response(
        mut self,
        f: impl Fn(&Refusal) -> Response<Body> + Send + Sync + 'static,
    ) -> RouteLimit {
        self.response = Some(Arc::new(f));
        self
    }

    /// Keeps the request counted only when `f` says so of the handler's response (the seed's
    /// `after()`: "count failed logins only"). When a limit's `f` answers `false`, the request's call
    /// is given back and counted again against the request's other limits alone.
    pub fn after(
        mut self,
        f: impl Fn(&Response<Body>) -> bool + Send + Sync + 'static,
    ) -> RouteLimit {
        self.after = Some(Arc::new(f));
        self
    }

    /// The limit (`None`: unlimited).
    pub fn limit(&self) -> Option<Limit> {
        self.limit
    }

    /// The key (`""` when unset).
    pub fn key(&self) -> &str {
        self.key.as_str()
    }
}

/// The key of a [`RouteLimit`] ([`RouteLimit::by`] takes anything that converts: `&str`, `String`,
/// `Cow<str>` …): a short one (up to 62 bytes: an address, a user id) is held inline, a longer one
/// in a `String` — a request's key costs no allocation in the usual case.
#[derive(Clone)]
pub struct RouteKey(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, buf: [u8; INLINE] },
    Heap(String),
}

/// The longest key held inline.
const INLINE: usize = 62;

impl RouteKey {
    /// The key as text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Copied whole from a `&str` (a character boundary at both ends).
            Repr::Inline { len, buf } => {
                std::str::from_utf8(&buf[..usize::from(*len)]).unwrap_or_default()
            }
            Repr::Heap(s) => s,
        }
    }
}

impl Default for RouteKey {
    fn default() -> Self {
        RouteKey(Repr::Inline {
            len: 0,
            buf: [0; INLINE],
        })
    }
}

impl fmt::Debug for RouteKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::ops::Deref for RouteKey {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for RouteKey {
    fn from(s: &str) -> Self {
        if s.len() <= INLINE {
            let mut buf = [0; INLINE];
            buf[..s.len()].copy_from_slice(s.as_bytes());
            RouteKey(Repr::Inline {
                len: s.len() as u8,
                buf,
            })
        } else {
            RouteKey(Repr::Heap(s.to_owned()))
        }
    }
}

impl From<String> for RouteKey {
    fn from(s: String) -> Self {
        RouteKey(Repr::Heap(s))
    }
}

impl From<&String> for RouteKey {
    fn from(s: &String) -> Self {
        RouteKey::from(s.as_str())
    }
}

impl From<&mut str> for RouteKey {
    fn from(s: &mut str) -> Self {
        RouteKey::from(&*s)
    }
}

impl From<Box<str>> for RouteKey {
    fn from(s: Box<str>) -> Self {
        RouteKey(Repr::Heap(s.into()))
    }
}

impl From<std::borrow::Cow<'_, str>> for RouteKey {
    fn from(s: std::borrow::Cow<'_, str>) -> Self {
        match s {
            std::borrow::Cow::Borrowed(s) => RouteKey::from(s),
            std::borrow::Cow::Owned(s) => RouteKey::from(s),
        }
    }
}

impl From<char> for RouteKey {
    fn from(c: char) -> Self {
        RouteKey::from(c.encode_utf8(&mut [0; 4]) as &str)
    }
}

impl From<ratewindow_core::http::Address> for RouteKey {
    fn from(a: ratewindow_core::http::Address) -> Self {
        RouteKey::from(a.as_str())
    }
}

/// What a limiter's callback returns: one [`RouteLimit`] (no list to allocate: the usual route) or
/// several (`Vec`, an array), counted as one all-or-nothing batch.
#[derive(Clone, Debug)]
pub struct RouteLimits(Limits);

#[derive(Clone, Debug)]
enum Limits {
    One(RouteLimit),
    Many(Vec<RouteLimit>),
}

impl RouteLimits {
    /// The limits, in the order the callback gave them.
    pub fn as_slice(&self) -> &[RouteLimit] {
        match &self.0 {
            Limits::One(l) => std::slice::from_ref(l),
            Limits::Many(v) => v,
        }
    }

    /// The limit at `i`, taken out (the others dropped).
    pub(crate) fn take(self, i: usize) -> Option<RouteLimit> {
        match self.0 {
            Limits::One(l) => (i == 0).then_some(l),
            Limits::Many(mut v) => (i < v.len()).then(|| v.swap_remove(i)),
        }
    }
}

impl From<RouteLimit> for RouteLimits {
    fn from(l: RouteLimit) -> Self {
        RouteLimits(Limits::One(l))
    }
}

impl From<Vec<RouteLimit>> for RouteLimits {
    fn from(v: Vec<RouteLimit>) -> Self {
        RouteLimits(Limits::Many(v))
    }
}

impl<const N: usize> From<[RouteLimit; N]> for RouteLimits {
    fn from(a: [RouteLimit; N]) -> Self {
        match a.len() {
            1 => match a.into_iter().next() {
                Some(l) => RouteLimits(Limits::One(l)),
                None => RouteLimits(Limits::Many(Vec::new())),
            },
            _ => RouteLimits(Limits::Many(a.into())),
        }
    }
}

impl From<Option<RouteLimit>> for RouteLimits {
    fn from(l: Option<RouteLimit>) -> Self {
        match l {
            Some(l) => RouteLimits(Limits::One(l)),
            None => RouteLimits(Limits::Many(Vec::new())),
        }
    }
}
