//! The real servers the integration tests talk to: PostgreSQL (`PGHOST`, `PGUSER`, `PGDATABASE`; the
//! unix socket, user `postgres`, database `test` by default) and Redis (`REDIS_URL`, 127.0.0.1:6379 by
//! default), and a Redis reply as the core reads it. `scripts/test-core.sh` starts what is not running.

#![allow(dead_code)]

use ratewindow_core::redis::Reply;

/// A connection to the test PostgreSQL.
pub fn pg_connect() -> postgres::Client {
    let host = std::env::var("PGHOST").unwrap_or_else(|_| "/var/run/postgresql".to_owned());
    let user = std::env::var("PGUSER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "postgres".to_owned());
    let db = std::env::var("PGDATABASE").unwrap_or_else(|_| "test".to_owned());
    postgres::Client::connect(
        &format!("host={host} user={user} dbname={db}"),
        postgres::NoTls,
    )
    .expect("a PostgreSQL server (scripts/test-core.sh starts one)")
}

/// A connection to the test Redis.
pub fn redis_connection() -> redis::Connection {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned());
    redis::Client::open(url)
        .expect("redis url")
        .get_connection()
        .expect("a Redis server (scripts/test-core.sh starts one)")
}

/// A reply of the `redis` crate as the core's [`Reply`].
pub fn to_reply(value: redis::Value) -> Reply {
    match value {
        redis::Value::Nil => Reply::Nil,
        redis::Value::Int(i) => Reply::Int(i),
        redis::Value::BulkString(b) => Reply::Text(String::from_utf8_lossy(&b).into_owned()),
        redis::Value::SimpleString(s) => Reply::Text(s),
        redis::Value::Array(items) => Reply::Array(items.into_iter().map(to_reply).collect()),
        other => panic!("unexpected reply {other:?}"),
    }
}
