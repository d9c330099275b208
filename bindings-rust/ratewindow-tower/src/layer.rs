//! The registry of named limiters ([`RateLimiter`]), its per-route [`Throttle`] layer and the service.

use std::cell::{Cell, OnceCell};
use std::collections::HashMap;
use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Extensions, HeaderMap, Method, Request, Response, StatusCode, Uri};
use ratewindow_core::http::{
    self as core_http, Address, HeaderOptions, HttpError, HttpLimit, Trust,
};
use ratewindow_core::{Entry, Limit};
use tower_layer::Layer;
use tower_service::Service;

use crate::limit::{Refusal, RouteLimit, RouteLimits};
use crate::store::{Consumed, Store};

/// What a named limiter's callback sees of a request.
pub struct RequestInfo<'a> {
    method: &'a Method,
    uri: &'a Uri,
    headers: &'a HeaderMap,
    extensions: &'a Extensions,
    trust: &'a Trust,
    ip: OnceCell<Result<Address, HttpError>>,
}

impl fmt::Debug for RequestInfo<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestInfo")
            .field("method", self.method)
            .field("uri", self.uri)
            .finish_non_exhaustive()
    }
}

impl<'a> RequestInfo<'a> {
    fn new<B>(req: &'a Request<B>, trust: &'a Trust) -> RequestInfo<'a> {
        RequestInfo {
            method: req.method(),
            uri: req.uri(),
            headers: req.headers(),
            extensions: req.extensions(),
            trust,
            ip: OnceCell::new(),
        }
    }

    /// The request's method.
    pub fn method(&self) -> &Method {
        self.method
    }

    /// The request's URI.
    pub fn uri(&self) -> &Uri {
        self.uri
    }

    /// The request's headers.
    pub fn headers(&self) -> &HeaderMap {
        self.headers
    }

    /// The request's extensions (an authenticated user put there by an earlier layer …).
    pub fn extensions(&self) -> &Extensions {
        self.extensions
    }

    /// The client's address ([`ratewindow_core::http::client_address`]): the peer — axum's
    /// `ConnectInfo<SocketAddr>` (serve with `into_make_service_with_connect_info::<SocketAddr>()`) or a
    /// `SocketAddr` extension — or, only when the limiter was given a [`Trust`] that says so, the
    /// address its trusted proxies forwarded.
    ///
    /// A request with neither extension (a server on a Unix socket, or one served without connect
    /// info) has no peer address: [`Trust::hops`] walks on from it into the forwarded header (a Unix
    /// socket behind a proxy); when no forwarded address is believed, [`HttpError::NoPeer`]
    /// (answered 500, never one shared key for every request).
    pub fn client_ip(&self) -> Result<&str, HttpError> {
        self.ip
            .get_or_init(|| {
                let peer = self
                    .extensions
                    .get::<ConnectInfo<SocketAddr>>()
                    .map(|c| c.0)
                    .or_else(|| self.extensions.get::<SocketAddr>().copied());
                let (mut xff, mut fwd) = (None, None);
                match self.trust.header() {
                    Some(core_http::ProxyHeader::XForwardedFor) => {
                        xff = joined(self.headers, "x-forwarded-for")
                    }
                    Some(core_http::ProxyHeader::Forwarded) => {
                        fwd = joined(self.headers, "forwarded")
                    }
                    _ => {}
                }
                core_http::client_ip_of(
                    peer.map(|p| p.ip()),
                    xff.as_deref(),
                    fwd.as_deref(),
                    self.trust,
                )
            })
            .as_ref()
            .map(Address::as_str)
            .map_err(Clone::clone)
    }
}

/// Every line of header `name` joined by `", "` (a line that is not visible ASCII is kept as an empty,
/// malformed entry); `None` without the header.
fn joined(headers: &HeaderMap, name: &str) -> Option<String> {
    let mut lines = headers.get_all(name).iter().peekable();
    lines.peek()?;
    Some(
        lines
            .map(|v| v.to_str().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

type LimiterFn = dyn Fn(&RequestInfo<'_>) -> Result<RouteLimits, HttpError> + Send + Sync;
type StoreErrorFn = dyn Fn(&(dyn StdError + Send + Sync + 'static)) -> Response<Body> + Send + Sync;

#[derive(Clone)]
struct Config {
    trust: Trust,
    headers: HeaderOptions,
    store_error: Arc<StoreErrorFn>,
}

/// Named limiters over one store (the seed's `RateLimiter.for(name, callback)` and `throttle(name)`).
///
/// ```
/// use ratewindow_core::Limit;
/// use ratewindow_tower::{Memory, RateLimiter, RouteLimit};
/// let five = Limit::per_minute(5)?;
/// let limiter = RateLimiter::new(Memory::new())
///     .limiter("login", move |req| Ok(vec![RouteLimit::new(five).by(req.client_ip()?)]));
/// let layer = limiter.throttle("login")?; // axum: .route_layer(layer)
/// # let _ = layer;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct RateLimiter<S> {
    store: Arc<S>,
    config: Config,
    limiters: HashMap<String, Arc<LimiterFn>>,
}

impl<S> fmt::Debug for RateLimiter<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("trust", &self.config.trust)
            .field("headers", &self.config.headers)
            .field("limiters", &self.limiters.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Why [`RateLimiter::throttle`] cannot make a layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThrottleError {
    /// No limiter of that name is registered.
    Unknown(String),
    /// The name cannot make keys ([`HttpError::InvalidName`]).
    Invalid(HttpError),
}

impl fmt::Display for ThrottleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ThrottleError::Unknown(name) => write!(f, "no limiter named {name:?} is registered"),
            ThrottleError::Invalid(e) => e.fmt(f),
        }
    }
}

impl StdError for ThrottleError {}

impl<S: Store> RateLimiter<S> {
    /// Named limiters counting in `store`, trusting the peer address alone, sending the IETF fields.
    pub fn new(store: S) -> RateLimiter<S> {
        RateLimiter {
            store: Arc::new(store),
            config: Config {
                trust: Trust::peer(),
                headers: HeaderOptions::default(),
                store_error: Arc::new(|_| {
                    plain(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error")
                }),
            },
            limiters: HashMap::new(),
        }
    }

    /// Whose forwarded address [`RequestInfo::client_ip`] believes (default: the peer's own).
    pub fn trust(mut self, trust: Trust) -> Self {
        self.config.trust = trust;
        self
    }

    /// Which rate-limit fields responses carry besides `Retry-After` (default: the IETF ones).
    pub fn headers(mut self, headers: HeaderOptions) -> Self {
        self.config.headers = headers;
        self
    }

    /// The response to a request whose store failed (default: an empty-handed 500). A failure policy
    /// (allow, deny, a fallback store) is a later issue; until then this is where a store error goes.
    pub fn on_store_error(
        mut self,
        f: impl Fn(&(dyn StdError + Send + Sync + 'static)) -> Response<Body> + Send + Sync + 'static,
    ) -> Self {
        self.config.store_error = Arc::new(f);
        self
    }

    /// Registers the limiter `name`: `callback` returns the request's limits — one [`RouteLimit`], or
    /// several (a `Vec`, an array: counted as one all-or-nothing batch); [`RouteLimit::none`] skips.
    /// An error it returns (a missing client address …) answers with [`HttpError::status`].
    pub fn limiter<L: Into<RouteLimits>>(
        mut self,
        name: impl Into<String>,
        callback: impl Fn(&RequestInfo<'_>) -> Result<L, HttpError> + Send + Sync + 'static,
    ) -> Self {
        self.limiters.insert(
            name.into(),
            Arc::new(move |req: &RequestInfo<'_>| callback(req).map(Into::into)),
        );
        self
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The layer that throttles a route with the limiter `name` (axum: `.route_layer(…)` or
    /// `.layer(…)`).
    pub fn throttle(&self, name: &str) -> Result<Throttle<S>, ThrottleError> {
        let callback = self
            .limiters
            .get(name)
            .ok_or_else(|| ThrottleError::Unknown(name.to_owned()))?;
        core_http::request_entries(name, &[]).map_err(ThrottleError::Invalid)?;
        Ok(Throttle {
            shared: Arc::new(Shared {
                name: name.into(),
                callback: Arc::clone(callback),
                store: Arc::clone(&self.store),
                config: self.config.clone(),
            }),
        })
    }
}

struct Shared<S> {
    name: Arc<str>,
    callback: Arc<LimiterFn>,
    store: Arc<S>,
    config: Config,
}

/// A [`Layer`] throttling every request of the service it wraps with one named limiter.
pub struct Throttle<S> {
    shared: Arc<Shared<S>>,
}

impl<S> Clone for Throttle<S> {
    fn clone(&self) -> Self {
        Throttle {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S> fmt::Debug for Throttle<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Throttle")
            .field("name", &self.shared.name)
            .finish()
    }
}

impl<S, I> Layer<I> for Throttle<S> {
    type Service = ThrottleService<S, I>;
    fn layer(&self, inner: I) -> Self::Service {
        ThrottleService {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service of a [`Throttle`] layer.
pub struct ThrottleService<S, I> {
    inner: I,
    shared: Arc<Shared<S>>,
}

impl<S, I: Clone> Clone for ThrottleService<S, I> {
    fn clone(&self) -> Self {
        ThrottleService {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S, I: fmt::Debug> fmt::Debug for ThrottleService<S, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleService")
            .field("name", &self.shared.name)
            .field("inner", &self.inner)
            .finish()
    }
}

/// A request's plan: its limits (with their hooks) and the core's entries.
struct Plan {
    limits: RouteLimits,
    /// The entry of a request with one limit (the usual one): then `many` is empty (no lists of one
    /// to allocate).
    one: Option<Entry>,
    many: core_http::RequestEntries,
}

impl Plan {
    /// The entries, for the store.
    fn entries(&self) -> &[Entry] {
        match &self.one {
            Some(entry) => std::slice::from_ref(entry),
            None => &self.many.entries,
        }
    }

    /// The index among `limits` of the limit entry `i` was made from.
    fn source(&self, i: usize) -> usize {
        match self.one {
            Some(_) => 0,
            None => self.many.sources[i],
        }
    }
}

impl<S: Store> Shared<S> {
    /// The request's entries, or the error of the callback or the core that ends it.
    fn plan<B>(&self, req: &Request<B>) -> Result<Plan, HttpError> {
        let info = RequestInfo::new(req, &self.config.trust);
        let limits = (self.callback)(&info)?;
        fn http(l: &RouteLimit) -> HttpLimit<'_> {
            match l.limit {
                Some(limit) => HttpLimit::new(&l.key, limit),
                None => HttpLimit::Unlimited,
            }
        }
        let none = core_http::RequestEntries {
            entries: Vec::new(),
            sources: Vec::new(),
        };
        let (one, many) = match limits.as_slice() {
            // The usual request, one limit: its entry alone, no lists of one to allocate, and its key
            // written in the thread's spare buffer (given back once the store has answered).
            [RouteLimit {
                limit: Some(limit),
                key,
                ..
            }] => (
                Some(core_http::request_entry_in(
                    &self.name,
                    key,
                    *limit,
                    KEY_BUF.with(Cell::take),
                )?),
                none,
            ),
            [_] => (None, core_http::request_entries(&self.name, &[])?),
            _ => {
                let http_limits: Vec<HttpLimit<'_>> = limits.as_slice().iter().map(http).collect();
                (None, core_http::request_entries(&self.name, &http_limits)?)
            }
        };
        Ok(Plan { limits, one, many })
    }
}

impl<S, I, B> Service<Request<B>> for ThrottleService<S, I>
where
    S: Store,
    I: Service<Request<B>, Response = Response<Body>> + Clone + Send + 'static,
    I::Future: Send + 'static,
    I::Error: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<Body>;
    type Error = I::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, I::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let shared = Arc::clone(&self.shared);
        // The inner service polled ready is the one called (tower's clone-and-swap).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        // The plan is made now: it reads the request and never waits.
        let mut plan = match shared.plan(&req) {
            Ok(plan) => plan,
            Err(e) => return Box::pin(std::future::ready(Ok(http_error(&e)))),
        };
        // The usual request: one limit and no `after()` hook. Its future holds the entry and the
        // limit's `response()` alone (not the plan, nor the hooks' give-back state): less to allocate
        // and copy into the box on every request.
        if plan.one.is_some() && plan.limits.as_slice()[0].after.is_none() {
            let entry = plan.one.take().unwrap_or_else(|| unreachable!());
            let custom = plan.limits.take(0).and_then(|l| l.response);
            return Box::pin(async move {
                let verdict = shared.store.consume(&entry).await;
                let limits = [entry.limit];
                // The key's buffer back to the thread, for the next request's key.
                KEY_BUF.with(|spare| spare.set(entry.key));
                let verdict = match verdict {
                    Ok(verdict) => verdict,
                    Err(e) => return Ok((shared.config.store_error)(&e)),
                };
                let (name, options) = (&shared.name, shared.config.headers);
                // Only X-RateLimit-Reset reads the clock: no second clock read without it.
                let now = if options.legacy {
                    shared.store.now_ms()
                } else {
                    0
                };
                if !verdict.allowed {
                    return Ok(refusal(&shared, &limits, &verdict, now, custom, |_| 0));
                }
                let mut response = inner.call(req).await?;
                write_fields(&mut response, name, &limits, &verdict, now, options);
                Ok(response)
            });
        }
        Box::pin(async move {
            let entries = plan.entries();
            if entries.is_empty() {
                return inner.call(req).await;
            }
            let hooks =
                (0..entries.len()).any(|i| plan.limits.as_slice()[plan.source(i)].after.is_some());
            // One entry and nothing to give back: the store's single call (no release handle).
            let consumed = if let ([entry], false) = (entries, hooks) {
                shared.store.consume(entry).await.map(|verdict| Consumed {
                    verdict,
                    release: None,
                })
            } else {
                shared.store.consume_many(entries).await
            };
            let consumed = match consumed {
                Ok(consumed) => consumed,
                Err(e) => return Ok((shared.config.store_error)(&e)),
            };
            let verdict = consumed.verdict;
            let (name, options) = (&shared.name, shared.config.headers);
            // Only X-RateLimit-Reset reads the clock: no second clock read without it.
            let now = if options.legacy {
                shared.store.now_ms()
            } else {
                0
            };
            // One limit (the usual request): no list of one to allocate.
            let (one, many);
            let limits: &[Limit] = if let [entry] = entries {
                one = [entry.limit];
                &one
            } else {
                many = plan.many.limits();
                &many
            };
            if !verdict.allowed {
                let source = verdict.blocked.map_or(0, |b| plan.source(b));
                let custom = plan
                    .limits
                    .as_slice()
                    .get(source)
                    .and_then(|l| l.response.clone());
                return Ok(refusal(&shared, limits, &verdict, now, custom, |b| {
                    plan.source(b)
                }));
            }
            let mut response = inner.call(req).await?;
            write_fields(&mut response, name, limits, &verdict, now, options);
            if hooks {
                let keep: Vec<Entry> = entries
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| {
                        let limit = &plan.limits.as_slice()[plan.source(i)];
                        limit.after.as_ref().is_none_or(|f| f(&response))
                    })
                    .map(|(_, e)| e.clone())
                    .collect();
                if keep.len() < entries.len() {
                    // Give the call back, then count it again against the limits that keep it. A
                    // store failure here changes no answer: the response is already decided.
                    if let Some(release) = consumed.release {
                        let _ = shared.store.release(release).await;
                    }
                    if !keep.is_empty() {
                        let _ = shared.store.consume_many(&keep).await;
                    }
                }
            }
            Ok(response)
        })
    }
}

/// The answer to a refused request: the limit's `response()` (`custom`) or a plain 429, with the
/// fields. `source(i)` is the index among the request's limits of entry `i`.
fn refusal<S>(
    shared: &Shared<S>,
    limits: &[Limit],
    verdict: &ratewindow_core::BatchVerdict,
    now: u64,
    custom: Option<Arc<crate::limit::ResponseFn>>,
    source: impl Fn(usize) -> usize,
) -> Response<Body> {
    let fields =
        core_http::response_headers(&shared.name, limits, verdict, now, shared.config.headers);
    let mut response = match custom {
        Some(custom) => custom(&Refusal {
            name: Arc::clone(&shared.name),
            limit: verdict.blocked.map_or(0, source),
            retry_after_ms: verdict.retry_after_ms,
            headers: fields.clone(),
        }),
        None => plain(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests"),
    };
    set_fields(&mut response, fields);
    response
}

// The names the core writes, parsed once (at compile time).
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// The header name of a field the core writes.
fn field_name(name: &'static str) -> Option<HeaderName> {
    Some(match name {
        "RateLimit-Policy" => RATELIMIT_POLICY,
        "RateLimit" => RATELIMIT,
        "Retry-After" => RETRY_AFTER,
        "X-RateLimit-Limit" => X_RATELIMIT_LIMIT,
        "X-RateLimit-Remaining" => X_RATELIMIT_REMAINING,
        "X-RateLimit-Reset" => X_RATELIMIT_RESET,
        other => HeaderName::from_bytes(other.as_bytes()).ok()?,
    })
}

/// Sets `value` as the field `name` unless the response already has it (one lookup: a field the
/// handler set is left alone).
fn set_field(headers: &mut HeaderMap, name: HeaderName, value: HeaderValue) {
    if let http::header::Entry::Vacant(slot) = headers.entry(name) {
        slot.insert(value);
    }
}

/// Sets the rate-limit fields on `response`, leaving alone those it already has.
fn set_fields(response: &mut Response<Body>, fields: Vec<(&'static str, String)>) {
    let headers = response.headers_mut();
    for (name, value) in fields {
        let Some(name) = field_name(name) else {
            continue;
        };
        // From the String itself: no copy.
        let Ok(value) = HeaderValue::try_from(value) else {
            continue;
        };
        set_field(headers, name, value);
    }
}

/// What [`write_fields`] keeps between the requests a thread serves: the buffer the core writes the
/// fields in, and the last `RateLimit-Policy` value with the name and limits it was written for (the
/// same on every request of a route with fixed limits: neither written again nor checked, its copy
/// costs a reference count).
#[derive(Default)]
struct Scratch {
    buf: Vec<u8>,
    policy: Option<Policy>,
}

/// A `RateLimit-Policy` value, and what it depends on (the core's
/// [`write_response_headers_but_policy`](core_http::write_response_headers_but_policy)).
struct Policy {
    name: Box<str>,
    limits: Vec<Limit>,
    value: HeaderValue,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
    /// A spare buffer for a one-limit request's store key: taken when the key is written, given back
    /// when the store has answered (no allocation a request once the thread has served one).
    static KEY_BUF: Cell<String> = const { Cell::new(String::new()) };
}

/// The core's response fields of an allowed request, written straight onto `response` (through the
/// thread's one buffer: no `String` a field, no list of them; the policy the thread's cached one when
/// the name and limits are those it was written for).
fn write_fields(
    response: &mut Response<Body>,
    name: &str,
    limits: &[Limit],
    verdict: &ratewindow_core::BatchVerdict,
    now: u64,
    options: HeaderOptions,
) {
    let headers = response.headers_mut();
    let mut write = |scratch: &mut Scratch| {
        let buf = std::mem::take(&mut scratch.buf);
        let cached = match &scratch.policy {
            Some(p) if options.ietf && &*p.name == name && p.limits == limits => {
                Some(p.value.clone())
            }
            _ => None,
        };
        if let Some(policy) = &cached {
            set_field(headers, RATELIMIT_POLICY, policy.clone());
        }
        // `keep`: a copy of the value is wanted back (the policy, to keep: a clone of a value made
        // from bytes allocates its shared header, so the other fields are set without one).
        let mut set = |field: &'static str, value: &[u8], keep: bool| {
            let header = field_name(field)?;
            let v = HeaderValue::from_bytes(value).ok()?;
            if !keep {
                set_field(headers, header, v);
                return None;
            }
            set_field(headers, header, v.clone());
            Some(v)
        };
        scratch.buf = match cached {
            Some(_) => core_http::write_response_headers_but_policy(
                name,
                limits,
                verdict,
                now,
                options,
                buf,
                |field, value| {
                    set(field, &value, false);
                    value
                },
            ),
            None => {
                let policy = &mut scratch.policy;
                core_http::write_response_headers(
                    name,
                    limits,
                    verdict,
                    now,
                    options,
                    buf,
                    |field, value| {
                        let policy_field = field == "RateLimit-Policy";
                        let made = set(field, &value, policy_field);
                        if let (Some(v), true) = (made, policy_field) {
                            *policy = Some(Policy {
                                name: name.into(),
                                limits: limits.to_vec(),
                                value: v,
                            });
                        }
                        value
                    },
                )
            }
        };
    };
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => write(&mut scratch),
        Err(_) => write(&mut Scratch::default()),
    });
}

fn plain(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The answer to a request the core could not key: 400 for a key too long, 500 for the rest.
fn http_error(e: &HttpError) -> Response<Body> {
    match e.status() {
        400 => plain(
            StatusCode::BAD_REQUEST,
            "Bad Request: rate-limit key too long",
        ),
        _ => plain(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error"),
    }
}
