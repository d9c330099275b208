//! The same axum app ("/" answers "ok") guarded by ratewindow-tower or by tower-governor, keyed by the
//! peer address, with their rate-limit headers on.
//!
//! `ratewindow-bench-rust-http <ratewindow|governor> <allowed|allowed-bare|refused> <port>`
//! - `allowed`: a limit never reached (the cost of counting an allowed request), fields on;
//! - `allowed-bare`: the same with no rate-limit fields on either side (ratewindow's `headers` off,
//!   governor without `use_headers()`, its default): the counting alone;
//! - `refused`: 10 a minute (after the first ten, the cost of a refusal).

use std::net::SocketAddr;

use axum::{routing::get, Router};
use ratewindow_core::http::HeaderOptions;
use ratewindow_core::Limit;
use ratewindow_tower::{Memory, RateLimiter, RouteLimit};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

fn app(guard: &str, scenario: &str) -> Router {
    let router = Router::new().route("/", get(|| async { "ok" }));
    let allowed = scenario.starts_with("allowed");
    let fields = scenario != "allowed-bare";
    match guard {
        "ratewindow" => {
            // Allowed: 4e9 a second is never reached. Refused: 10 a minute.
            let limit = if allowed {
                Limit::new(u32::MAX as u64, 1_000).unwrap()
            } else {
                Limit::per_minute(10).unwrap()
            };
            let limiter = RateLimiter::new(Memory::new())
                .headers(HeaderOptions {
                    ietf: fields,
                    legacy: false,
                })
                .limiter("bench", move |req| {
                    Ok(RouteLimit::new(limit).by(req.client_ip()?))
                });
            router.layer(limiter.throttle("bench").unwrap())
        }
        "governor" => {
            // `use_headers()` changes the layer's type: its own branch.
            if !fields {
                // Governor's default: no fields.
                let config = GovernorConfigBuilder::default()
                    .per_nanosecond(1)
                    .burst_size(u32::MAX)
                    .finish()
                    .unwrap();
                return router.layer(GovernorLayer::new(config));
            }
            let config = if allowed {
                // One cell a nanosecond, a burst of 4e9: never reached.
                GovernorConfigBuilder::default()
                    .per_nanosecond(1)
                    .burst_size(u32::MAX)
                    .use_headers()
                    .finish()
            } else {
                // A burst of 10, one back every 6 s: 10 a minute.
                GovernorConfigBuilder::default()
                    .per_second(6)
                    .burst_size(10)
                    .use_headers()
                    .finish()
            }
            .unwrap();
            router.layer(GovernorLayer::new(config))
        }
        other => panic!("unknown guard {other}"),
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, guard, scenario, port] = &args[..] else {
        eprintln!(
            "usage: ratewindow-bench-rust-http <ratewindow|governor> <allowed|allowed-bare|refused> <port>"
        );
        std::process::exit(2);
    };
    let app = app(guard, scenario);
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}"))
        .await
        .unwrap();
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
    .unwrap();
}
