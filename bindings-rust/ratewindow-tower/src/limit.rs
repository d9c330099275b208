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
    pub(crate) key: String,
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
            key: String::new(),
            limit: Some(limit),
            response: None,
            after: None,
        }
    }

    /// No limit: the request is not counted against it (the seed's `Limit.none()`).
    pub fn none() -> RouteLimit {
        RouteLimit {
            key: String::new(),
            limit: None,
            response: None,
            after: None,
        }
    }

    /// Counts under `key` (a user id, an address, `email|ip` …). Any text: the core escapes it; a
    /// store key past [`MAX_KEY_BYTES`](ratewindow_core::http::MAX_KEY_BYTES) answers 400.
    pub fn by(mut self, key: impl Into<String>) -> RouteLimit {
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
        &self.key
    }
}
