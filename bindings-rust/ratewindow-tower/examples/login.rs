//! A tiny axum app guarded by ratewindow-tower.
//!
//! `cargo run -p ratewindow-tower --example login`, then:
//! - `curl -i -X POST 'localhost:3000/login?password=nope'` six times: the sixth is a 429 with
//!   `Retry-After`; a right password (`?password=hunter2`) is not counted against you;
//! - `curl -i localhost:3000/api` sixty-one times a minute, or with `-H 'x-plan: enterprise'` without
//!   limit.
//!
//! `PORT` picks the port (default 3000).

use std::net::SocketAddr;

use axum::extract::RawQuery;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use ratewindow_core::Limit;
use ratewindow_tower::{HeaderOptions, Memory, RateLimiter, RouteLimit};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (failed_logins, per_minute, per_day) = (
        Limit::per_minute(5)?,
        Limit::per_minute(60)?,
        Limit::per_day(10_000)?,
    );
    let limiter = RateLimiter::new(Memory::new())
        .headers(HeaderOptions {
            ietf: true,
            legacy: true,
        })
        // Five failed logins a minute per address; a successful one is given back.
        .limiter("login", move |req| {
            Ok(vec![RouteLimit::new(failed_logins)
                .by(req.client_ip()?)
                .after(|res| res.status() == StatusCode::UNAUTHORIZED)])
        })
        // 60 a minute and 10,000 a day per address, one batch; the enterprise plan is not limited.
        .limiter("api", move |req| {
            if req
                .headers()
                .get("x-plan")
                .is_some_and(|v| v == "enterprise")
            {
                return Ok(vec![RouteLimit::none()]);
            }
            let ip = req.client_ip()?.to_owned();
            Ok(vec![
                RouteLimit::new(per_minute).by(ip.clone()),
                RouteLimit::new(per_day).by(ip).response(|refusal| {
                    let mut res = axum::http::Response::new(
                        format!(
                            "daily quota used up: come back in {} s\n",
                            refusal.retry_after_ms.div_ceil(1000)
                        )
                        .into(),
                    );
                    *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                    res
                }),
            ])
        });

    let app = Router::new()
        .route(
            "/login",
            post(|RawQuery(q): RawQuery| async move {
                if q.as_deref() == Some("password=hunter2") {
                    (StatusCode::OK, "welcome\n")
                } else {
                    (StatusCode::UNAUTHORIZED, "wrong password\n")
                }
            }),
        )
        .route_layer(limiter.throttle("login")?)
        .merge(
            Router::new()
                .route("/api", get(|| async { "data\n" }))
                .route_layer(limiter.throttle("api")?),
        );

    let port = std::env::var("PORT").unwrap_or_else(|_| "3000".into());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
