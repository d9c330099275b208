//! # ratewindow-tower
//!
//! Rate-limits routes of a [tower](https://docs.rs/tower) service — an [axum](https://docs.rs/axum)
//! router first of all — with [ratewindow](https://docs.rs/ratewindow-core): named limiters, several
//! limits per request counted as **one** all-or-nothing batch, keys by user or client address (proxy
//! headers trusted only when configured), a custom refusal and an `after()` hook per limit, and
//! `429 Too Many Requests` with `Retry-After` and the IETF `RateLimit-Policy` / `RateLimit` fields
//! (plus the legacy `X-RateLimit-*` on request).
//!
//! Everything that is not plumbing — the store keys (`throttle:{name}:{key}`), the header values, the
//! client address — is decided by [`ratewindow_core::http`], the same functions the Node and Python
//! middleware call.
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use axum::{routing::post, Router};
//! use ratewindow_core::{http::Trust, Limit};
//! use ratewindow_tower::{Memory, RateLimiter, RouteLimit};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let (per_address, in_all) = (Limit::per_minute(5)?, Limit::per_day(1_000)?);
//! let limiter = RateLimiter::new(Memory::new())
//!     .trust(Trust::hops(1)) // one reverse proxy in front of the app
//!     .limiter("login", move |req| {
//!         Ok(vec![
//!             RouteLimit::new(per_address).by(req.client_ip()?), // 5 a minute per address …
//!             RouteLimit::new(in_all),                            // … and 1000 a day in all
//!         ])
//!     });
//! let app = Router::new()
//!     .route("/login", post(|| async { "welcome" }))
//!     .route_layer(limiter.throttle("login")?);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(()) }
//! ```
//!
//! ## Behaviour
//! - A request runs its limiter's callback, gets its entries from
//!   [`request_entries`](ratewindow_core::http::request_entries), and makes one `consume_many` on the
//!   [`Store`]. No entry (every limit [`RouteLimit::none`]): the request passes uncounted, without
//!   fields.
//! - Refused: the refusing limit's [`response`](RouteLimit::response), or a plain 429; the fields of
//!   [`response_headers`](ratewindow_core::http::response_headers) are added (unless the response
//!   sets them). Allowed: the handler runs, and its response gets the fields.
//! - [`after`](RouteLimit::after): when a limit's hook says `false` of the handler's response, the
//!   call is given back and counted again against the other limits alone.
//! - A callback or key error answers [`HttpError::status`](ratewindow_core::http::HttpError::status)
//!   (400 for a key too long, 500 else); a store error answers
//!   [`on_store_error`](RateLimiter::on_store_error)'s response (500 by default).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod layer;
mod limit;
mod store;

pub use layer::{RateLimiter, RequestInfo, Throttle, ThrottleError, ThrottleService};
pub use limit::{Refusal, RouteKey, RouteLimit, RouteLimits};
pub use ratewindow_core::http::{Address, HeaderOptions, HttpError, ProxyHeader, Trust};
pub use store::{Consumed, Memory, Store};

/// The README's example compiles as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
