//! PostgreSQL through the core's plans, on the real server (`PGHOST`/`PGUSER`/`PGDATABASE`, default
//! the unix socket, user `postgres`, database `test`): the schema, every operation, one statement a
//! call, exactly-once under contention, no deadlock between batches in opposite orders, and purge.
//! Each test installs its own objects under a prefix of its own and drops them after.

use std::time::{SystemTime, UNIX_EPOCH};

use postgres::types::ToSql;
use ratewindow_core::sql::{Postgres, SqlNames, SqlValue, Statement};
use ratewindow_core::{BatchVerdict, Entry, Limit, Window};

fn connect() -> postgres::Client {
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

/// Objects of this test's own, dropped when it ends.
struct Schema {
    plans: Postgres,
}

impl Schema {
    fn install(test: &str) -> Schema {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 1_000_000_000;
        let plans = Postgres::new(
            SqlNames::new(&format!("rwt_{test}_{}_{nanos}", std::process::id())).unwrap(),
        );
        connect().batch_execute(&plans.schema()).unwrap();
        Schema { plans }
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let p = self.plans.names().prefix();
        let _ = connect().batch_execute(&format!(
            "DROP FUNCTION IF EXISTS {p}_consume; DROP FUNCTION IF EXISTS {p}_window; \
             DROP TABLE IF EXISTS {p}_calls; DROP TABLE IF EXISTS {p}_windows;"
        ));
    }
}

fn to_sql(statement: &Statement) -> Vec<Box<dyn ToSql + Sync>> {
    statement
        .params
        .iter()
        .map(|p| -> Box<dyn ToSql + Sync> {
            match p {
                SqlValue::Int(i) => Box::new(*i),
                SqlValue::Text(s) => Box::new(s.clone()),
                SqlValue::Ints(v) => Box::new(v.clone()),
                SqlValue::Texts(v) => Box::new(v.clone()),
                SqlValue::Bool(b) => Box::new(*b),
                other => panic!("unexpected parameter {other:?}"),
            }
        })
        .collect()
}

fn run(client: &mut postgres::Client, statement: &Statement) -> Vec<Vec<SqlValue>> {
    let params = to_sql(statement);
    let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|b| b.as_ref()).collect();
    let rows = client.query(statement.sql.as_str(), &refs).unwrap();
    rows.iter()
        .map(|row| {
            (0..row.len())
                .map(|i| match row.columns()[i].type_().name() {
                    "bool" => SqlValue::Bool(row.get(i)),
                    "int4" => SqlValue::Int(row.get::<_, i32>(i) as i64),
                    "int8" => SqlValue::Int(row.get(i)),
                    other => panic!("unexpected column type {other}"),
                })
                .collect()
        })
        .collect()
}

static ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn consume(
    client: &mut postgres::Client,
    plans: &Postgres,
    entries: &[Entry],
) -> (BatchVerdict, ratewindow_core::sql::SqlRelease) {
    let id = format!(
        "{}-{}",
        std::process::id(),
        ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let (statement, release) = plans.plan_consume_many(entries, &id).unwrap();
    (
        Postgres::decode_batch(&run(client, &statement), entries.len()).unwrap(),
        release,
    )
}

fn limit(uses: u64, window_ms: u64) -> Limit {
    Limit::new(uses, window_ms).unwrap()
}

#[test]
fn the_schema_installs_twice_and_from_two_connections_at_once() {
    let schema = Schema::install("schema");
    let text = schema.plans.schema();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let text = text.clone();
            std::thread::spawn(move || connect().batch_execute(&text).unwrap())
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn consume_peek_release_on_the_server_clock() {
    let schema = Schema::install("consume");
    let (plans, mut client) = (&schema.plans, connect());
    let entries = [
        Entry::new("k", limit(2, 60_000)),
        Entry::new("j", limit(5, 120_000)),
    ];
    assert!(consume(&mut client, plans, &entries).0.allowed);
    let (second, release) = consume(&mut client, plans, &entries);
    assert!(second.allowed, "calls in the same millisecond count apart");
    let refused = consume(&mut client, plans, &entries).0;
    assert_eq!(refused.blocked, Some(0));
    assert!(
        refused.retry_after_ms > 59_000 && refused.retry_after_ms <= 60_000,
        "{refused:?}"
    );
    let peeked =
        Postgres::decode_batch(&run(&mut client, &plans.plan_peek_many(&entries)), 2).unwrap();
    assert_eq!(
        peeked.retry_timestamp, refused.retry_timestamp,
        "a peek answers like consume, one wait one stamp"
    );
    let rows: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM {}_calls", plans.names().prefix()),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        rows, 4,
        "two calls on two keys; refusals and peeks recorded nothing"
    );
    run(&mut client, &plans.plan_release(&release));
    run(&mut client, &plans.plan_release(&release));
    assert!(
        consume(&mut client, plans, &entries).0.allowed,
        "the released call was given back"
    );
    assert!(
        !consume(&mut client, plans, &entries).0.allowed,
        "and only that one"
    );
}

#[test]
fn a_refused_batch_records_nothing_and_names_the_longest_wait() {
    let schema = Schema::install("batch");
    let (plans, mut client) = (&schema.plans, connect());
    assert!(
        consume(&mut client, plans, &[Entry::new("b", limit(1, 60_000))])
            .0
            .allowed
    );
    assert!(
        consume(&mut client, plans, &[Entry::new("c", limit(1, 120_000))])
            .0
            .allowed
    );
    let batch = [
        Entry::new("a", limit(1, 60_000)),
        Entry::new("b", limit(1, 60_000)),
        Entry::new("c", limit(1, 120_000)),
    ];
    assert_eq!(consume(&mut client, plans, &batch).0.blocked, Some(2));
    assert!(
        consume(&mut client, plans, &[Entry::new("a", limit(1, 60_000))])
            .0
            .allowed
    );
}

#[test]
fn of_many_connections_racing_exactly_the_limit_passes_and_opposite_batches_never_deadlock() {
    let schema = Schema::install("race");
    let plans = schema.plans.clone();
    let limit = limit(10, 60_000);
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let plans = plans.clone();
            std::thread::spawn(move || {
                let mut client = connect();
                // Half the threads name the keys in the opposite order.
                let batch = if t % 2 == 0 {
                    [
                        Entry::new("x", limit),
                        Entry::new("y", limit),
                        Entry::new("z", limit),
                    ]
                } else {
                    [
                        Entry::new("z", limit),
                        Entry::new("y", limit),
                        Entry::new("x", limit),
                    ]
                };
                (0..16)
                    .filter(|_| consume(&mut client, &plans, &batch).0.allowed)
                    .count()
            })
        })
        .collect();
    let allowed: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(allowed, 10);
}

#[test]
fn the_fixed_window_on_the_server_clock() {
    let schema = Schema::install("fixed");
    let (plans, mut client) = (&schema.plans, connect());
    let decay = Window::from_ms(60_000).unwrap();
    let mut window =
        |statement: Statement| Postgres::decode_window(&run(&mut client, &statement)).unwrap();
    assert_eq!(window(plans.plan_get_window("k")), None);
    assert_eq!(window(plans.plan_hit("k", decay, 2)).unwrap().count, 2);
    let second = window(plans.plan_hit("k", decay, -1)).unwrap();
    assert_eq!(second.count, 1);
    assert!(second.ms_left <= 60_000);
    assert_eq!(window(plans.plan_reset_attempts("k")).unwrap().count, 0);
    assert_eq!(window(plans.plan_clear("k")), None);
    assert_eq!(window(plans.plan_get_window("k")), None);
}

#[test]
fn purge_removes_exactly_what_left_its_window() {
    let schema = Schema::install("purge");
    let (plans, mut client) = (&schema.plans, connect());
    consume(&mut client, plans, &[Entry::new("gone", limit(5, 1))]);
    consume(&mut client, plans, &[Entry::new("kept", limit(5, 60_000))]);
    Postgres::decode_window(&run(
        &mut client,
        &plans.plan_hit("w", Window::from_ms(1).unwrap(), 1),
    ))
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    let (calls, windows) = Postgres::decode_purge(&run(&mut client, &plans.plan_purge())).unwrap();
    assert_eq!((calls, windows), (1, 1));
    let left: Vec<String> = client
        .query(
            &format!("SELECT key FROM {}_calls", plans.names().prefix()),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, ["kept"]);
}

#[test]
fn rows_of_the_wrong_shape_are_typed_errors() {
    let row = |v: Vec<SqlValue>| vec![v];
    assert!(Postgres::decode_batch(&[], 1).is_err());
    assert!(Postgres::decode_batch(&row(vec![SqlValue::Bool(true)]), 1).is_err());
    let refused_no_wait = row(vec![
        SqlValue::Bool(false),
        SqlValue::Int(0),
        SqlValue::Int(9),
        SqlValue::Int(0),
        SqlValue::Int(1),
    ]);
    assert!(Postgres::decode_batch(&refused_no_wait, 1).is_err());
    let text_ints = row(vec![
        SqlValue::Text("f".into()),
        SqlValue::Text("5".into()),
        SqlValue::Text("15".into()),
        SqlValue::Int(0),
        SqlValue::Text("10".into()),
    ]);
    assert_eq!(
        Postgres::decode_batch(&text_ints, 1)
            .unwrap()
            .retry_after_ms,
        5,
        "node-postgres gives bigint as text"
    );
    assert!(Postgres::decode_window(&row(vec![SqlValue::Int(1), SqlValue::Int(-1)])).is_err());
    assert!(Postgres::decode_purge(&[]).is_err());
}

#[test]
fn one_entry_and_many_entries_follow_the_same_rules() {
    let schema = Schema::install("paths");
    let (plans, mut client) = (&schema.plans, connect());
    let one = [Entry::new("k", limit(3, 60_000))];
    for _ in 0..3 {
        assert!(consume(&mut client, plans, &one).0.allowed);
    }
    let single = consume(&mut client, plans, &one).0;
    // The same key twice takes the many-entry path: the same wait, the first entry blocking.
    let twice = [
        Entry::new("k", limit(3, 60_000)),
        Entry::new("k", limit(3, 60_000)),
    ];
    let many = Postgres::decode_batch(&run(&mut client, &plans.plan_peek_many(&twice)), 2).unwrap();
    assert_eq!((single.blocked, many.blocked), (Some(0), Some(0)));
    assert_eq!(single.retry_timestamp, many.retry_timestamp);
    // A lowered limit waits on the oldest of the newest `uses` calls, on both paths.
    let lowered = [Entry::new("k", limit(1, 60_000))];
    let peek_one =
        Postgres::decode_batch(&run(&mut client, &plans.plan_peek_many(&lowered)), 1).unwrap();
    let newest: i64 = client
        .query_one(
            &format!(
                "SELECT max(at) FROM {}_calls WHERE key = 'k'",
                plans.names().prefix()
            ),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(peek_one.retry_timestamp, Some(newest as u64 + 60_000));
}

#[test]
fn a_durable_plan_leaves_a_callers_transaction_its_own_commit_setting() {
    let schema = Schema::install("commits");
    let one = [Entry::new("k", limit(5, 60_000))];
    let show = |tx: &mut postgres::Transaction<'_>| -> String {
        tx.query_one("SHOW synchronous_commit", &[]).unwrap().get(0)
    };
    let mut client = connect();
    for (plans, want) in [
        (schema.plans.clone().durable(true), "on"),
        (schema.plans.clone(), "off"),
    ] {
        let mut tx = client.transaction().unwrap();
        tx.batch_execute("SET LOCAL synchronous_commit = on")
            .unwrap();
        let (statement, _) = plans
            .plan_consume_many(&one, &format!("in-a-transaction-{want}"))
            .unwrap();
        assert_eq!(
            statement.params.last(),
            Some(&SqlValue::Bool(want == "off"))
        );
        let params = to_sql(&statement);
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|b| b.as_ref()).collect();
        let rows = tx.query(statement.sql.as_str(), &refs).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            show(&mut tx),
            want,
            "a relaxed plan relaxes the transaction it runs in, a durable one does not"
        );
        tx.commit().unwrap();
    }
    // On its own (autocommit), a relaxed call relaxes only its own transaction.
    assert!(consume(&mut client, &schema.plans, &one).0.allowed);
    let after: String = client
        .query_one("SHOW synchronous_commit", &[])
        .unwrap()
        .get(0);
    assert_eq!(after, "on");
}
