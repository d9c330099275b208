//! The layers alone, in process: ns per request through `Service::call` on an inner service that
//! answers at once, interleaved rounds. No HTTP, so it isolates what each layer adds.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Instant;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use ratewindow_core::http::HeaderOptions;
use ratewindow_core::Limit;
use ratewindow_tower::{Memory, RateLimiter, RouteLimit};
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

/// Calls a round (`LAYER_CALLS`, default 200,000) and rounds (`LAYER_ROUNDS`, default 7): fewer
/// under callgrind.
fn env_or(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn run<S>(svc: &mut S, calls: u32) -> f64
where
    S: Service<Request<Body>, Response = Response<Body>>,
    S::Error: std::fmt::Debug,
{
    let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
    let start = Instant::now();
    for _ in 0..calls {
        let mut req = Request::new(Body::empty());
        req.extensions_mut().insert(ConnectInfo(peer));
        let res = svc.ready().await.unwrap().call(req).await.unwrap();
        assert!(res.status().is_success());
    }
    start.elapsed().as_nanos() as f64 / calls as f64
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let inner = service_fn(|_req: Request<Body>| async {
        Ok::<_, Infallible>(Response::new(Body::empty()))
    });
    // LAYER_BARE=1: no rate-limit fields on either side (governor's default), the counting alone.
    let fields = std::env::var("LAYER_BARE").map_or(true, |v| v != "1");
    let limit = Limit::new(u32::MAX as u64, 1_000).unwrap();
    let limiter = RateLimiter::new(Memory::new())
        .headers(HeaderOptions {
            ietf: fields,
            legacy: false,
        })
        .limiter("bench", move |req| {
            Ok(RouteLimit::new(limit).by(req.client_ip()?))
        });
    let ours = limiter.throttle("bench").unwrap().layer(inner);
    let mut builder = GovernorConfigBuilder::default();
    builder.per_nanosecond(1).burst_size(u32::MAX);
    // `use_headers()` changes the layer's type: one branch each.
    if fields {
        let config = builder.use_headers().finish().unwrap();
        compare(ours, GovernorLayer::new(config).layer(inner)).await;
    } else {
        let config = builder.finish().unwrap();
        compare(ours, GovernorLayer::new(config).layer(inner)).await;
    }
}

/// The interleaved rounds of each side, and the median ratio.
async fn compare<A, G>(mut ours: A, mut theirs: G)
where
    A: Service<Request<Body>, Response = Response<Body>>,
    A::Error: std::fmt::Debug,
    G: Service<Request<Body>, Response = Response<Body>>,
    G::Error: std::fmt::Debug,
{
    let (calls, rounds) = (env_or("LAYER_CALLS", 200_000), env_or("LAYER_ROUNDS", 7));
    // LAYER_ONLY=ratewindow or governor: one side alone (a profile of it).
    let only = std::env::var("LAYER_ONLY").unwrap_or_default();
    let mut ratios = Vec::new();
    for round in 0..rounds {
        let a = if only == "governor" {
            1.0
        } else {
            run(&mut ours, calls).await
        };
        let b = if only == "ratewindow" {
            1.0
        } else {
            run(&mut theirs, calls).await
        };
        ratios.push(a / b);
        println!(
            "round {round}: ratewindow-tower {a:.0} ns/request, tower-governor {b:.0} ns/request"
        );
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "median time ratio ratewindow/governor: {:.2}",
        ratios[ratios.len() / 2]
    );
}
