//! The real servers the integration tests talk to: PostgreSQL (`PGHOST`, `PGUSER`, `PGDATABASE`; the
//! unix socket, user `postgres`, database `test` by default) and Redis (`REDIS_URL`, 127.0.0.1:6379 by
//! default); a Redis reply as the core reads it, and a planned SQL statement run by each driver.
//! `scripts/test-core.sh` starts what is not running.

#![allow(dead_code)]

use postgres::types::ToSql;
use ratewindow_core::call::{Command, Fed};
use ratewindow_core::redis::Reply;
use ratewindow_core::sql::{SqlValue, Statement};

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

/// A planned statement's parameters as the PostgreSQL driver's.
pub fn pg_params(statement: &Statement) -> Vec<Box<dyn ToSql + Sync>> {
    statement
        .params
        .iter()
        .map(|p| -> Box<dyn ToSql + Sync> {
            match p {
                SqlValue::Int(i) => Box::new(*i),
                SqlValue::Text(s) => Box::new(s.clone()),
                SqlValue::Bool(b) => Box::new(*b),
                SqlValue::Ints(v) => Box::new(v.clone()),
                SqlValue::Texts(v) => Box::new(v.clone()),
                SqlValue::Null => Box::new(None::<i64>),
            }
        })
        .collect()
}

/// Runs one planned statement on PostgreSQL: the core's parameters as the driver's, the rows as the
/// core's values (`NULL` as [`SqlValue::Null`]).
pub fn pg_rows(
    client: &mut postgres::Client,
    statement: &Statement,
) -> Result<Vec<Vec<SqlValue>>, postgres::Error> {
    let params = pg_params(statement);
    let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|b| b.as_ref()).collect();
    let rows = client.query(statement.sql.as_str(), &refs)?;
    Ok(rows
        .iter()
        .map(|row| {
            (0..row.len())
                .map(|i| match row.columns()[i].type_().name() {
                    "bool" => row
                        .get::<_, Option<bool>>(i)
                        .map_or(SqlValue::Null, SqlValue::Bool),
                    "int4" => row
                        .get::<_, Option<i32>>(i)
                        .map_or(SqlValue::Null, |v| SqlValue::Int(v.into())),
                    "int8" => row
                        .get::<_, Option<i64>>(i)
                        .map_or(SqlValue::Null, SqlValue::Int),
                    "text" => row
                        .get::<_, Option<String>>(i)
                        .map_or(SqlValue::Null, SqlValue::Text),
                    other => panic!("unexpected column type {other}"),
                })
                .collect()
        })
        .collect())
}

/// Runs one planned statement on SQLite, as [`pg_rows`] does on PostgreSQL.
pub fn sqlite_rows(
    db: &rusqlite::Connection,
    statement: &Statement,
) -> rusqlite::Result<Vec<Vec<SqlValue>>> {
    use rusqlite::types::{Value, ValueRef};
    let mut st = db.prepare(&statement.sql)?;
    let params: Vec<Value> = statement
        .params
        .iter()
        .map(|p| match p {
            SqlValue::Int(i) => Value::Integer(*i),
            SqlValue::Text(s) => Value::Text(s.clone()),
            SqlValue::Null => Value::Null,
            other => panic!("SQLite takes no {other:?}"),
        })
        .collect();
    let columns = st.column_count();
    let rows = st.query_map(rusqlite::params_from_iter(params), |row| {
        (0..columns)
            .map(|i| {
                Ok(match row.get_ref(i)? {
                    ValueRef::Integer(v) => SqlValue::Int(v),
                    ValueRef::Text(t) => SqlValue::Text(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Null => SqlValue::Null,
                    other => panic!("unexpected column {other:?}"),
                })
            })
            .collect()
    })?;
    rows.collect()
}

/// Runs a SQL command's statements in order with `run`; the rows of the last, or the driver's message
/// on the first failure (what a binding feeds back as `fail`).
pub fn sql_answer<E: std::fmt::Display>(
    command: Command<'_>,
    mut run: impl FnMut(&Statement) -> Result<Vec<Vec<SqlValue>>, E>,
) -> Result<Fed, String> {
    let Command::Sql { statements } = command else {
        return Err("a SQL host runs no scripts".to_owned());
    };
    let mut rows = Vec::new();
    for statement in statements {
        rows = run(statement).map_err(|e| e.to_string())?;
    }
    Ok(Fed::Rows(rows))
}

/// [`sql_answer`] on PostgreSQL.
pub fn pg_answer(client: &mut postgres::Client, command: Command<'_>) -> Result<Fed, String> {
    sql_answer(command, |statement| pg_rows(client, statement))
}

/// [`sql_answer`] on SQLite.
pub fn sqlite_answer(db: &rusqlite::Connection, command: Command<'_>) -> Result<Fed, String> {
    sql_answer(command, |statement| sqlite_rows(db, statement))
}

/// Runs a machine's Redis command as a host does: a plain command as it is, a script by EVALSHA or
/// EVAL; the reply as the core reads it (`SET`'s `+OK` as the text the other clients give), the
/// server's error as its message.
pub fn redis_reply(
    con: &mut impl redis::ConnectionLike,
    command: Command<'_>,
) -> Result<Reply, String> {
    let cmd = match command {
        Command::Plain { args } => {
            let mut cmd = redis::cmd(&args[0]);
            cmd.arg(&args[1..]);
            cmd
        }
        Command::Script {
            script,
            keys,
            args,
            by_sha1,
        } => {
            let mut cmd = redis::cmd(if by_sha1 { "EVALSHA" } else { "EVAL" });
            cmd.arg(if by_sha1 { script.sha1 } else { script.source })
                .arg(keys.len())
                .arg(keys)
                .arg(args);
            cmd
        }
        _ => return Err("Redis runs no SQL".to_owned()),
    };
    cmd.query::<redis::Value>(con)
        .map(|v| match v {
            redis::Value::Okay => Reply::Text("OK".to_owned()),
            v => to_reply(v),
        })
        .map_err(|e| e.to_string())
}

/// [`redis_reply`] as what the host feeds back.
pub fn redis_answer(
    con: &mut impl redis::ConnectionLike,
    command: Command<'_>,
) -> Result<Fed, String> {
    redis_reply(con, command).map(Fed::Reply)
}
