//! The layer as users run it: a real axum server on loopback, a real HTTP client (hyper-util).

use std::future::{ready, Future};
use std::net::SocketAddr;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::routing::get;
use axum::Router;
use http_body_util::BodyExt;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use ratewindow_core::{http::HeaderOptions, Clock, Entry, Limit, ManualClock, SystemClock};
use ratewindow_tower::{
    Consumed, HttpError, Memory, RateLimiter, RouteLimit, Store, ThrottleError, Trust,
};

type Http = Client<HttpConnector, Body>;

/// Serves `app` on a free loopback port, with the peer address in `ConnectInfo`.
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap()
    });
    addr
}

fn client() -> Http {
    Client::builder(TokioExecutor::new()).build_http()
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

async fn send(client: &Http, addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut req = Request::get(format!("http://{addr}{path}"));
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let res = client
        .request(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

fn now() -> u64 {
    SystemClock.now_ms()
}

fn limit(uses: u64, window_ms: u64) -> Limit {
    Limit::new(uses, window_ms).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_requests_against_ten_get_ten_answers_and_ninety_429s() {
    let ten = limit(10, 60_000);
    let limiter = RateLimiter::new(Memory::new())
        .headers(HeaderOptions {
            ietf: true,
            legacy: true,
        })
        .limiter("burst", move |req| {
            Ok(vec![RouteLimit::new(ten).by(req.client_ip()?)])
        });
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route_layer(limiter.throttle("burst").unwrap());
    let addr = serve(app).await;
    let client = client();
    let start = now();
    let answers: Vec<Answer> = {
        let tasks: Vec<_> = (0..100)
            .map(|_| {
                let client = client.clone();
                tokio::spawn(async move { send(&client, addr, "/", &[]).await })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    };
    let ok: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.status == StatusCode::OK)
        .collect();
    let refused: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.status == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert_eq!((ok.len(), refused.len()), (10, 90));
    // The seconds left of the window the burst opened: 60 less each second begun since `start` (a
    // loaded machine may take more than one over the burst), and up to 61 when a request that read the
    // clock a millisecond earlier was recorded after a later one (two worker threads): time that steps
    // back records `max(now, newest)`, so that window ends just over 60 s after this request's `now`.
    let left = (60 - (now() - start).div_ceil(1000))..=61;
    // Each allowed answer saw a different count: remaining 9 down to 0, once each.
    let mut remaining: Vec<u32> = ok
        .iter()
        .map(|a| a.header("x-ratelimit-remaining").unwrap().parse().unwrap())
        .collect();
    remaining.sort_unstable();
    assert_eq!(remaining, (0..10).collect::<Vec<_>>());
    for a in &ok {
        assert_eq!(a.body, "ok");
        assert_eq!(a.header("ratelimit-policy"), Some("\"burst\";q=10;w=60"));
        let r = a.header("x-ratelimit-remaining").unwrap();
        let field = a.header("ratelimit").unwrap();
        assert!(
            left.clone()
                .any(|t| field == format!("\"burst\";r={r};t={t}")),
            "{field}, t in {left:?}"
        );
        assert_eq!(a.header("retry-after"), None);
    }
    for a in &refused {
        let wait: u64 = a.header("retry-after").unwrap().parse().unwrap();
        assert!(left.contains(&wait), "Retry-After {wait}, not in {left:?}");
        assert_eq!(a.header("ratelimit-policy"), Some("\"burst\";q=10;w=60"));
        let field = a.header("ratelimit").unwrap();
        assert!(
            left.clone()
                .any(|t| field == format!("\"burst\";r=0;t={t}")),
            "{field}, t in {left:?}"
        );
        assert_eq!(a.header("x-ratelimit-limit"), Some("10"));
        assert_eq!(a.header("x-ratelimit-remaining"), Some("0"));
        assert_eq!(a.body, "Too Many Requests");
    }
}

#[tokio::test]
async fn forwarded_addresses_count_apart_only_behind_a_trusted_proxy() {
    let one = limit(1, 60_000);
    let by_ip = move |req: &ratewindow_tower::RequestInfo<'_>| {
        Ok(vec![RouteLimit::new(one).by(req.client_ip()?)])
    };
    let trusting = RateLimiter::new(Memory::new())
        .trust(Trust::hops(1))
        .limiter("ip", by_ip);
    let plain = RateLimiter::new(Memory::new()).limiter("ip", by_ip);
    let app = Router::new()
        .route("/trusting", get(|| async { "ok" }))
        .route_layer(trusting.throttle("ip").unwrap())
        .merge(
            Router::new()
                .route("/plain", get(|| async { "ok" }))
                .route_layer(plain.throttle("ip").unwrap()),
        );
    let addr = serve(app).await;
    let c = client();
    let xff = |v: &'static str| [("x-forwarded-for", v)];

    // Behind the trusted proxy, two clients are two counters.
    assert_eq!(
        send(&c, addr, "/trusting", &xff("203.0.113.1"))
            .await
            .status,
        200
    );
    assert_eq!(
        send(&c, addr, "/trusting", &xff("203.0.113.2"))
            .await
            .status,
        200
    );
    assert_eq!(
        send(&c, addr, "/trusting", &xff("203.0.113.1"))
            .await
            .status,
        429
    );
    // The client can prepend what it likes: only the proxy's (rightmost) entry is read.
    assert_eq!(
        send(&c, addr, "/trusting", &xff("1.1.1.1, 203.0.113.2"))
            .await
            .status,
        429
    );
    // A malformed header is not believed: the peer (127.0.0.1) is the key — first use allowed, then not.
    assert_eq!(
        send(&c, addr, "/trusting", &xff("<script>")).await.status,
        200
    );
    assert_eq!(
        send(&c, addr, "/trusting", &xff("999.1.1.1")).await.status,
        429
    );
    assert_eq!(send(&c, addr, "/trusting", &[]).await.status, 429);

    // Without trust, the header changes nothing: every request is the peer's.
    assert_eq!(
        send(&c, addr, "/plain", &xff("198.51.100.1")).await.status,
        200
    );
    assert_eq!(
        send(&c, addr, "/plain", &xff("198.51.100.2")).await.status,
        429
    );
    let store = plain.store().store();
    assert_eq!(store.len(), 1);
    assert_eq!(
        store
            .peek("throttle:ip:127.0.0.1", one, now())
            .quota
            .remaining,
        0
    );
}

#[tokio::test]
async fn a_huge_key_answers_400_and_is_not_stored() {
    let many = limit(100, 60_000);
    let limiter = RateLimiter::new(Memory::new()).limiter("api", move |req| {
        let key = req
            .headers()
            .get("x-api-key")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        Ok(vec![RouteLimit::new(many).by(key)])
    });
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route_layer(limiter.throttle("api").unwrap());
    let addr = serve(app).await;
    let c = client();
    let huge = "k".repeat(10_000);
    let a = send(&c, addr, "/", &[("x-api-key", &huge)]).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.header("ratelimit"), None);
    assert_eq!(
        send(&c, addr, "/", &[("x-api-key", "small")]).await.status,
        200
    );
    let store = limiter.store().store();
    assert_eq!(store.len(), 1);
    assert_eq!(
        store
            .peek("throttle:api:small", many, now())
            .quota
            .remaining,
        99
    );
}

#[tokio::test]
async fn stacked_limits_are_one_batch_and_a_refusal_uses_the_limits_response() {
    let clock = ManualClock::new(1_000_000);
    let memory = Memory::with_clock(clock);
    let (short, long) = (limit(2, 1_000), limit(3, 60_000));
    let limiter = RateLimiter::new(memory.clone()).limiter("stack", move |_| {
        Ok(vec![
            RouteLimit::none(),
            RouteLimit::new(short).by("u"),
            RouteLimit::new(long).by("u").response(|refusal| {
                let mut r = axum::http::Response::new(Body::from(format!(
                    "slow down, limit {} of {}",
                    refusal.limit, refusal.name
                )));
                *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                r
            }),
        ])
    });
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route_layer(limiter.throttle("stack").unwrap());
    let addr = serve(app).await;
    let c = client();
    assert_eq!(send(&c, addr, "/", &[]).await.status, 200);
    let second = send(&c, addr, "/", &[]).await;
    assert_eq!(second.status, 200);
    assert_eq!(
        second.header("ratelimit-policy"),
        Some("\"stack.0\";q=2;w=1, \"stack.1\";q=3;w=60")
    );
    assert_eq!(second.header("ratelimit"), Some("\"stack.0\";r=0;t=1"));
    // The short limit refuses: the default 429; nothing is recorded against the long one.
    let third = send(&c, addr, "/", &[]).await;
    assert_eq!(
        (third.status, third.header("retry-after")),
        (StatusCode::TOO_MANY_REQUESTS, Some("1"))
    );
    memory.clock().advance(1_000);
    assert_eq!(send(&c, addr, "/", &[]).await.status, 200);
    // The long limit (3 a minute) is now full: its own response, with the fields added.
    memory.clock().advance(1_000);
    let refused = send(&c, addr, "/", &[]).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.body, "slow down, limit 2 of stack");
    assert_eq!(refused.header("retry-after"), Some("58"));
    assert_eq!(refused.header("ratelimit"), Some("\"stack.1\";r=0;t=59"));
}

#[tokio::test]
async fn a_single_limits_refusal_uses_its_response_with_the_fields() {
    let memory = Memory::with_clock(ManualClock::new(1_000_000));
    let one = limit(1, 60_000);
    let limiter = RateLimiter::new(memory.clone()).limiter("one", move |_| {
        Ok(vec![RouteLimit::new(one).by("u").response(|refusal| {
            let mut r = axum::http::Response::new(Body::from(format!(
                "limit {} of {} refused for {} ms",
                refusal.limit, refusal.name, refusal.retry_after_ms
            )));
            *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            r
        })])
    });
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route_layer(limiter.throttle("one").unwrap());
    let addr = serve(app).await;
    let c = client();
    let first = send(&c, addr, "/", &[]).await;
    assert_eq!((first.status, first.body.as_str()), (StatusCode::OK, "ok"));
    assert_eq!(first.header("ratelimit-policy"), Some("\"one\";q=1;w=60"));
    assert_eq!(first.header("ratelimit"), Some("\"one\";r=0;t=60"));
    memory.clock().advance(500);
    let refused = send(&c, addr, "/", &[]).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.body, "limit 0 of one refused for 59500 ms");
    assert_eq!(refused.header("retry-after"), Some("60"));
    assert_eq!(refused.header("ratelimit"), Some("\"one\";r=0;t=60"));
}

#[tokio::test]
async fn after_gives_back_what_it_does_not_keep() {
    let (failures, all) = (limit(2, 60_000), limit(3, 60_000));
    let limiter = RateLimiter::new(Memory::new()).limiter("login", move |req| {
        let who = req.uri().query().unwrap_or("").to_owned();
        Ok(vec![
            // Only failed logins count against the user …
            RouteLimit::new(failures)
                .by(who)
                .after(|res| res.status() == StatusCode::UNAUTHORIZED),
            // … every attempt counts against everyone.
            RouteLimit::new(all),
        ])
    });
    let app = Router::new()
        .route(
            "/login",
            get(|q: axum::extract::RawQuery| async move {
                match q.0.as_deref() {
                    Some("good") => (StatusCode::OK, "welcome"),
                    _ => (StatusCode::UNAUTHORIZED, "no"),
                }
            }),
        )
        .route_layer(limiter.throttle("login").unwrap());
    let addr = serve(app).await;
    let c = client();
    // Two good logins cost the user nothing, but count in all.
    assert_eq!(send(&c, addr, "/login?good", &[]).await.status, 200);
    assert_eq!(send(&c, addr, "/login?good", &[]).await.status, 200);
    let store = limiter.store().store();
    let peek = |key: &str, l: Limit| store.peek(key, l, now()).quota.remaining;
    assert_eq!(peek("throttle:login:good", failures), 2);
    assert_eq!(peek("throttle:login:", all), 1);
    // A failed one counts against both; the fourth attempt is refused by "all".
    assert_eq!(send(&c, addr, "/login?bad", &[]).await.status, 401);
    assert_eq!(peek("throttle:login:bad", failures), 1);
    assert_eq!(send(&c, addr, "/login?bad", &[]).await.status, 429);
}

/// A store that always fails, standing for a lost connection.
struct Broken;

#[derive(Debug)]
struct Lost;

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection lost")
    }
}
impl std::error::Error for Lost {}

impl Store for Broken {
    type Release = ();
    type Error = Lost;
    fn consume_many(&self, _: &[Entry]) -> impl Future<Output = Result<Consumed<()>, Lost>> + Send {
        ready(Err::<Consumed<()>, _>(Lost))
    }
    fn release(&self, _: ()) -> impl Future<Output = Result<(), Lost>> + Send {
        ready(Ok(()))
    }
}

#[tokio::test]
async fn a_store_error_goes_to_on_store_error() {
    let one = limit(1, 1_000);
    let limiter = RateLimiter::new(Broken)
        .on_store_error(|e| {
            let mut r = axum::http::Response::new(Body::from(format!("store: {e}")));
            *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            r
        })
        .limiter("x", move |_| Ok(vec![RouteLimit::new(one)]));
    let open = RateLimiter::new(Broken).limiter("x", |_| Ok(vec![RouteLimit::none()]));
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route_layer(limiter.throttle("x").unwrap())
        .merge(
            Router::new()
                .route("/open", get(|| async { "ok" }))
                .route_layer(open.throttle("x").unwrap()),
        );
    let addr = serve(app).await;
    let c = client();
    let a = send(&c, addr, "/", &[]).await;
    assert_eq!(
        (a.status, a.body.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "store: connection lost")
    );
    // Unlimited: the store is never asked.
    assert_eq!(send(&c, addr, "/open", &[]).await.status, 200);
}

#[tokio::test]
async fn no_peer_address_is_a_500_not_a_shared_key() {
    let one = limit(1, 1_000);
    let limiter = RateLimiter::new(Memory::new()).limiter("ip", move |req| {
        Ok(vec![RouteLimit::new(one).by(req.client_ip()?)])
    });
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route_layer(limiter.throttle("ip").unwrap());
    // Served without ConnectInfo: the peer is unknown.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let a = send(&client(), addr, "/", &[]).await;
    assert_eq!(a.status, StatusCode::INTERNAL_SERVER_ERROR);
}

#[tokio::test]
async fn no_peer_address_behind_a_trusted_hop_is_keyed_by_the_forwarded_address() {
    // A Unix socket behind a proxy has no peer address: with one trusted hop, the proxy's
    // X-Forwarded-For entry is the client; without one, the request is still a 500.
    let one = limit(1, 60_000);
    let limiter = RateLimiter::new(Memory::new())
        .trust(Trust::hops(1))
        .limiter("ip", move |req| {
            Ok(vec![RouteLimit::new(one).by(req.client_ip()?)])
        });
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route_layer(limiter.throttle("ip").unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let c = client();
    let xff = |v: &'static str| [("x-forwarded-for", v)];
    assert_eq!(
        send(&c, addr, "/", &xff("198.51.100.1")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(&c, addr, "/", &xff("198.51.100.2")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(&c, addr, "/", &xff("203.0.113.5, 198.51.100.1"))
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        send(&c, addr, "/", &xff("not-an-ip")).await.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(
        send(&c, addr, "/", &[]).await.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
}

#[test]
fn throttle_refuses_unknown_and_invalid_names() {
    let limiter = RateLimiter::new(Memory::new()).limiter("a:b", |_| Ok(vec![]));
    assert_eq!(
        limiter.throttle("nope").unwrap_err(),
        ThrottleError::Unknown("nope".into())
    );
    assert!(matches!(
        limiter.throttle("a:b").unwrap_err(),
        ThrottleError::Invalid(HttpError::InvalidName { .. })
    ));
}

/// The layer reuses a thread's last `RateLimit-Policy` value while the limiter's name and limits are
/// the ones it was written for: routes with other limits, and a callback whose limit changes from one
/// request to the next, each get their own policy (a current-thread runtime: one thread serves all).
#[tokio::test]
async fn the_policy_follows_the_name_and_limits_of_each_request() {
    let memory = Memory::with_clock(ManualClock::new(1_000_000));
    let limiter = RateLimiter::new(memory.clone())
        // One RouteLimit (no Vec), its uses read from the request.
        .limiter("vary", |req| {
            let uses = req
                .headers()
                .get("x-uses")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(5);
            Ok(RouteLimit::new(limit(uses, 60_000)).by(req.client_ip()?))
        })
        .limiter("fixed", |req| {
            Ok([RouteLimit::new(limit(9, 2_000)).by(String::from(req.client_ip()?))])
        });
    let app = Router::new()
        .route("/vary", get(|| async { "ok" }))
        .route_layer(limiter.throttle("vary").unwrap())
        .merge(
            Router::new()
                .route("/fixed", get(|| async { "ok" }))
                .route_layer(limiter.throttle("fixed").unwrap()),
        );
    let addr = serve(app).await;
    let c = client();
    let mut vary_calls = [0u64; 2];
    for round in 0..3 {
        for (i, uses) in ["5", "7"].into_iter().enumerate() {
            let a = send(&c, addr, "/vary", &[("x-uses", uses)]).await;
            assert_eq!(a.status, StatusCode::OK, "round {round}");
            let want = format!("\"vary\";q={uses};w=60");
            assert_eq!(a.header("ratelimit-policy"), Some(want.as_str()));
            // Both limits count the one key: 5 a minute and 7 a minute see every call to it.
            vary_calls[i] += 1;
            let calls = vary_calls.iter().sum::<u64>();
            let left = uses.parse::<u64>().unwrap().saturating_sub(calls);
            let want = format!("\"vary\";r={left};t=60");
            assert_eq!(a.header("ratelimit"), Some(want.as_str()), "round {round}");
            let f = send(&c, addr, "/fixed", &[]).await;
            assert_eq!(f.header("ratelimit-policy"), Some("\"fixed\";q=9;w=2"));
        }
    }
    assert_eq!(
        memory
            .store()
            .peek("throttle:fixed:127.0.0.1", limit(9, 2_000), 1_000_000)
            .quota
            .remaining,
        3
    );
}
