//! PostgreSQL through the core's plans, on the real server (`PGHOST`/`PGUSER`/`PGDATABASE`, default
//! the unix socket, user `postgres`, database `test`): the schema, every operation, one statement a
//! call, exactly-once under contention, no deadlock between batches in opposite orders, and purge.
//! Each test installs its own objects under a prefix of its own and drops them after.

mod servers;
use servers::pg_connect as connect;

use std::time::{SystemTime, UNIX_EPOCH};

use postgres::types::ToSql;
use ratewindow_core::sql::{Postgres, SqlNames, SqlValue, Statement};
use ratewindow_core::{BatchVerdict, Entry, Limit, Quota, Window};

/// Objects of this test's own, dropped when it ends.
struct Schema {
    plans: Postgres,
}

impl Schema {
    fn install(test: &str) -> Schema {
        let schema = Schema::named(test);
        connect().batch_execute(&schema.plans.schema()).unwrap();
        schema
    }

    /// A prefix of this test's own, nothing installed yet (dropped all the same).
    fn named(test: &str) -> Schema {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 1_000_000_000;
        let plans = Postgres::new(
            SqlNames::new(&format!("rwt_{test}_{}_{nanos}", std::process::id())).unwrap(),
        );
        Schema { plans }
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let p = self.plans.names().prefix();
        // Every function of the prefix, whatever version installed it (overloads included).
        let _ = connect().batch_execute(&format!(
            "DO $d$ DECLARE f text; BEGIN \
               FOR f IN SELECT oid::regprocedure::text FROM pg_proc WHERE proname LIKE '{p}\\_%' LOOP \
                 EXECUTE 'DROP FUNCTION IF EXISTS ' || f; \
               END LOOP; END $d$; \
             DROP TABLE IF EXISTS {p}_log; DROP TABLE IF EXISTS {p}_calls; \
             DROP TABLE IF EXISTS {p}_windows;"
        ));
    }
}

fn to_sql(statement: &Statement) -> Vec<Box<dyn ToSql + Sync>> {
    servers::pg_params(statement)
}

fn run(client: &mut postgres::Client, statement: &Statement) -> Vec<Vec<SqlValue>> {
    try_run(client, statement).unwrap()
}

fn try_run(
    client: &mut postgres::Client,
    statement: &Statement,
) -> Result<Vec<Vec<SqlValue>>, postgres::Error> {
    servers::pg_rows(client, statement)
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

/// The schema of an earlier version upgrades in place: its calls carry over (counted, released by
/// their ids), the functions earlier processes call count in the new log, and installing again
/// changes nothing. `first` is 0.1's first schema (`{p}_consume` without the commit parameter),
/// `main` the one before the per-key log, `log` the per-key log before the one-entry statement read
/// the row itself (its `{p}_sliding1` in PL/pgSQL), `take1` and `returning` two earlier `{p}_take1`s,
/// `cas` the one-entry statement before `{p}_put1`.
#[test]
fn an_earlier_schema_upgrades_in_place_with_its_calls() {
    for (version, old_schema, old_call) in [
        (
            "first",
            include_str!("data/postgres_schema_0_1_first.sql"),
            "SELECT allowed FROM {p}_consume('c', $1, ARRAY[$2], ARRAY[2::bigint], ARRAY[60000::bigint])",
        ),
        (
            "main",
            include_str!("data/postgres_schema_0_1_main.sql"),
            "SELECT allowed FROM {p}_sliding('c', $1, ARRAY[$2], ARRAY[2::bigint], ARRAY[60000::bigint], true)",
        ),
        (
            "log",
            include_str!("data/postgres_schema_0_1_log.sql"),
            "SELECT allowed FROM {p}_sliding1('c', $1, $2, 2::bigint, 60000::bigint, true)",
        ),
        // {p}_take1 whose compare-and-set found the window's first call by a sub-select over
        // unnest (its UPDATE planned a nested loop); the one-entry statement is the same text.
        (
            "take1",
            include_str!("data/postgres_schema_take1_subselect.sql"),
            "SELECT (verdict::bigint[])[1] = 1 FROM (SELECT (CASE WHEN s.u > s.now - 60000 \
             THEN ARRAY[0, greatest(1, s.u + 60000 - s.now), s.u + 60000, 0, s.now, 2, 0, \
             greatest(1, s.u + 60000 - s.now), s.ats[s.n] + 60000 - s.now] \
             ELSE {p}_take1('c', $1::text, $2::text, 2::bigint, 60000::bigint, true, s.ats, s.ids, s.now) \
             END)::text AS verdict \
             FROM (SELECT l.ats, l.ids, cardinality(l.ats) AS n, \
             CASE WHEN cardinality(l.ats) >= 2 THEN l.ats[cardinality(l.ats) - 2 + 1] END AS u, \
             greatest(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint, l.ats[cardinality(l.ats)]) AS now \
             FROM (SELECT) AS o LEFT JOIN {p}_log AS l ON l.key = $2::text OFFSET 0) AS s) AS t",
        ),
        // {p}_take1 whose compare-and-set UPDATE built the verdict in its RETURNING; the one-entry
        // statement is the one of that version (five parameters, one text column, nine numbers).
        (
            "returning",
            include_str!("data/postgres_schema_take1_returning.sql"),
            "SELECT (verdict::bigint[])[1] = 1 FROM (SELECT (CASE WHEN s.u > s.now - 60000 \
             THEN ARRAY[0, greatest(1, s.u + 60000 - s.now), s.u + 60000, 0, s.now, 2, 0, \
             greatest(1, s.u + 60000 - s.now), s.ats[s.n] + 60000 - s.now] \
             ELSE {p}_take1('c', $1::text, $2::text, 2::bigint, 60000::bigint, true, s.ats, s.ids, s.now) \
             END)::text AS verdict \
             FROM (SELECT l.ats, l.ids, cardinality(l.ats) AS n, \
             CASE WHEN cardinality(l.ats) >= 2 THEN l.ats[cardinality(l.ats) - 2 + 1] END AS u, \
             greatest(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint, l.ats[cardinality(l.ats)]) AS now \
             FROM (SELECT) AS o LEFT JOIN {p}_log AS l ON l.key = $2::text OFFSET 0) AS s) AS t",
        ),
        // {p}_take1 compared-and-set from the one-entry statement (before {p}_put1): that version's
        // statement, which hands it the ids too.
        (
            "cas",
            include_str!("data/postgres_schema_take1_cas.sql"),
            "SELECT (verdict::bigint[])[1] = 1 FROM (SELECT (CASE WHEN s.u > s.now - 60000::bigint \
             THEN ARRAY[0, s.u + 60000::bigint, s.now, s.ats[s.n] + 60000::bigint, 2::bigint] \
             ELSE {p}_take1('c', $1::text, $2::text, 2::bigint, 60000::bigint, true, s.ats, s.ids, s.now) \
             END)::text AS verdict \
             FROM (SELECT l.ats, l.ids, cardinality(l.ats) AS n, \
             CASE WHEN cardinality(l.ats) >= 2::bigint THEN l.ats[cardinality(l.ats) - 2::bigint + 1] END AS u, \
             greatest(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint, l.ats[cardinality(l.ats)]) AS now \
             FROM (SELECT) AS o LEFT JOIN {p}_log AS l ON l.key = $2::text OFFSET 0) AS s) AS t",
        ),
    ] {
        let schema = Schema::named(&format!("upgrade_{version}"));
        let (plans, mut client) = (&schema.plans, connect());
        let p = plans.names().prefix();
        client
            .batch_execute(&old_schema.replace("{p}", p))
            .unwrap();
        let old_call = old_call.replace("{p}", p);
        let call = |client: &mut postgres::Client, id: &str, key: &str| -> bool {
            client.query_one(&old_call, &[&id, &key]).unwrap().get(0)
        };
        // Under the old schema: `full` used up (2 of 2), `given` once by the call `back`.
        assert!(call(&mut client, "old-1", "full"));
        assert!(call(&mut client, "old-2", "full"));
        assert!(!call(&mut client, "old-3", "full"));
        assert!(call(&mut client, "back", "given"));

        client.batch_execute(&plans.schema()).unwrap();
        client.batch_execute(&plans.schema()).unwrap();
        let storage: i64 = client
            .query_one(
                &format!(
                    "SELECT count(*) FROM pg_attribute WHERE attrelid = '{p}_log'::regclass \
                     AND attname IN ('ats', 'ids') AND attstorage = 'e'"
                ),
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(storage, 2, "the log's arrays stored uncompressed after the upgrade");
        let two = [Entry::new("full", limit(2, 60_000))];
        let refused = consume(&mut client, plans, &two).0;
        assert!(!refused.allowed, "the old calls count: {refused:?}");
        assert!(refused.retry_after_ms > 59_000, "{refused:?}");
        let given = [Entry::new("given", limit(1, 60_000))];
        assert!(!consume(&mut client, plans, &given).0.allowed);
        // The old call's id still gives it back.
        run(
            &mut client,
            &plans.plan_release(&ratewindow_core::sql::SqlRelease {
                keys: vec!["given".to_owned()],
                call_id: "back".to_owned(),
            }),
        );
        assert!(consume(&mut client, plans, &given).0.allowed);
        // Processes still on the old version call the replaced functions: they count in the new log.
        let fresh = [Entry::new("fresh", limit(2, 60_000))];
        assert!(consume(&mut client, plans, &fresh).0.allowed);
        assert!(call(&mut client, "old-4", "fresh"));
        assert!(!call(&mut client, "old-5", "fresh"));
        assert!(!consume(&mut client, plans, &fresh).0.allowed);
        // 0.1's table of a row per call, where there was one, is left empty.
        let left: i64 = client
            .query_one(
                &format!(
                    "SELECT CASE WHEN to_regclass('{p}_calls') IS NULL THEN 0 \
                     ELSE (xpath('/row/c/text()', query_to_xml('SELECT count(*) AS c FROM {p}_calls', \
                     false, true, '')))[1]::text::bigint END"
                ),
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(left, 0, "the old table is left empty");
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
            &format!(
                "SELECT coalesce(sum(cardinality(ats)), 0)::bigint FROM {}_log",
                plans.names().prefix()
            ),
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

/// One entry: the statement's own read refuses, and a call it lets through writes by compare-and-set
/// in {p}_put1 (falling back to {p}_take1); racing calls on one key (a row that exists, and one that does not yet: the insert
/// race) let exactly the limit through, and every log holds exactly the allowed calls.
#[test]
fn one_entry_calls_racing_on_one_key_let_exactly_the_limit_through() {
    let schema = Schema::install("race1");
    let plans = schema.plans.clone();
    let p = plans.names().prefix().to_owned();
    let mut client = connect();
    // "old" has a row (a call long outside the window) before the race; "new" has none.
    client
        .batch_execute(&format!(
            "INSERT INTO {p}_log (key, ats, ids, expires_at) VALUES ('old', '{{1000}}', '{{gone}}', 2000)"
        ))
        .unwrap();
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let plans = plans.clone();
            std::thread::spawn(move || {
                let mut client = connect();
                let mut allowed = [0usize; 2];
                for _ in 0..12 {
                    for (slot, key) in ["old", "new"].into_iter().enumerate() {
                        let v =
                            consume(&mut client, &plans, &[Entry::new(key, limit(7, 60_000))]).0;
                        allowed[slot] += usize::from(v.allowed);
                    }
                }
                allowed
            })
        })
        .collect();
    let totals = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .fold([0, 0], |a, b| [a[0] + b[0], a[1] + b[1]]);
    assert_eq!(totals, [7, 7], "exactly the limit on each key");
    for key in ["old", "new"] {
        let n: i64 = client
            .query_one(
                &format!("SELECT cardinality(ats)::bigint FROM {p}_log WHERE key = $1"),
                &[&key],
            )
            .unwrap()
            .get(0);
        assert_eq!(n, 7, "{key}: the log holds the allowed calls only");
    }
}

/// An allowed one-entry call whose row changed after its read (`{p}_put1`'s `UPDATE` waits on the
/// writer's lock, then finds the times changed on the new version) reads again: with a limit of 1, the
/// call that read the row before the other committed is refused, and the log holds one call.
#[test]
fn a_one_entry_call_that_read_before_a_concurrent_write_reads_again() {
    let schema = Schema::install("lost");
    let plans = schema.plans.clone();
    let durable = plans.clone().durable(true);
    let p = plans.names().prefix().to_owned();
    let one = [Entry::new("k", limit(1, 60_000))];
    let mut setup = connect();
    // A row whose call has left the window: both calls below read it as allowing.
    setup
        .batch_execute(&format!(
            "INSERT INTO {p}_log (key, ats, ids, expires_at) VALUES ('k', '{{1000}}', '{{gone}}', 2000)"
        ))
        .unwrap();
    let mut holder = connect();
    holder.batch_execute("BEGIN").unwrap();
    let (first, _) = durable.plan_consume_many(&one, "first").unwrap();
    let v = Postgres::decode_batch(&run(&mut holder, &first), 1).unwrap();
    assert!(v.allowed, "{v:?}");
    // The second call reads the committed row (still allowing) and waits on the holder's row lock.
    let waiter = {
        let plans = plans.clone();
        std::thread::spawn(move || consume(&mut connect(), &plans, &one).0)
    };
    // Until the waiter is blocked on the lock (its statement is running and waiting).
    let mut watch = connect();
    let mut seen = false;
    for _ in 0..500 {
        let waiting: i64 = watch
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1",
                &[&format!("%{p}_put1%")],
            )
            .unwrap()
            .get(0);
        if waiting > 0 {
            seen = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    holder.batch_execute("COMMIT").unwrap();
    assert!(seen, "the second call waited on the first's row lock");
    let second = waiter.join().unwrap();
    assert!(
        !second.allowed,
        "the second call counts the first: {second:?}"
    );
    let ids: Vec<String> = setup
        .query_one(&format!("SELECT ids FROM {p}_log WHERE key = 'k'"), &[])
        .unwrap()
        .get(0);
    assert_eq!(ids, ["first"]);
}

/// A rolling upgrade: processes still sending the previous one-entry statement ({p}_take1 by
/// compare-and-set) race processes on this one ({p}_put1) on one key; exactly the limit gets through.
#[test]
fn previous_and_current_one_entry_statements_racing_let_exactly_the_limit_through() {
    let schema = Schema::install("rolling");
    let plans = schema.plans.clone();
    let p = plans.names().prefix().to_owned();
    let old_call = format!(
        "SELECT (CASE WHEN s.u > s.now - $4::bigint \
         THEN ARRAY[0, s.u + $4::bigint, s.now, s.ats[s.n] + $4::bigint, $3::bigint] \
         ELSE {p}_take1('c', $2::text, $1::text, $3::bigint, $4::bigint, $5::boolean, s.ats, s.ids, s.now) \
         END)::text AS verdict \
         FROM (SELECT l.ats, l.ids, cardinality(l.ats) AS n, \
         CASE WHEN cardinality(l.ats) >= $3::bigint THEN l.ats[cardinality(l.ats) - $3::bigint + 1] END AS u, \
         greatest(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint, l.ats[cardinality(l.ats)]) AS now \
         FROM (SELECT) AS o LEFT JOIN {p}_log AS l ON l.key = $1::text OFFSET 0) AS s"
    );
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let (plans, old_call) = (plans.clone(), old_call.clone());
            std::thread::spawn(move || {
                let mut client = connect();
                let one = [Entry::new("k", limit(9, 60_000))];
                let mut allowed = 0;
                for i in 0..10 {
                    let ok = if t % 2 == 0 {
                        let (statement, _) = plans
                            .plan_consume_many(&one, &format!("old-{t}-{i}"))
                            .unwrap();
                        let old = Statement {
                            sql: old_call.clone(),
                            params: statement.params,
                        };
                        Postgres::decode_batch(&run(&mut client, &old), 1)
                            .unwrap()
                            .allowed
                    } else {
                        consume(&mut client, &plans, &one).0.allowed
                    };
                    allowed += usize::from(ok);
                }
                allowed
            })
        })
        .collect();
    let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(total, 9, "exactly the limit");
    let n: i64 = connect()
        .query_one(
            &format!("SELECT cardinality(ats)::bigint FROM {p}_log WHERE key = 'k'"),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 9, "the log holds the allowed calls only");
}

/// The UNLOGGED opt-in the READMEs document (`ALTER TABLE {p}_log SET UNLOGGED`, and the windows'
/// table): installing the schema again keeps the user's choice, and the tables count as before:
/// racing one-entry calls and batches let exactly the limit through, a release gives back exactly
/// its call, and a durable plan (the server's commit setting) runs on it too.
#[test]
fn an_unlogged_log_stays_unlogged_and_exact() {
    let schema = Schema::install("unlogged");
    let plans = schema.plans.clone();
    let p = plans.names().prefix().to_owned();
    let mut client = connect();
    client
        .batch_execute(&format!(
            "ALTER TABLE {p}_log SET UNLOGGED; ALTER TABLE {p}_windows SET UNLOGGED"
        ))
        .unwrap();
    client.batch_execute(&plans.schema()).unwrap();
    client.batch_execute(&plans.schema()).unwrap();
    let persistence: Vec<String> = client
        .query(
            &format!(
                "SELECT relpersistence::text FROM pg_class WHERE oid IN ('{p}_log'::regclass, '{p}_windows'::regclass)"
            ),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        persistence,
        ["u", "u"],
        "the schema kept the tables unlogged"
    );
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let plans = if t % 2 == 0 {
                plans.clone()
            } else {
                plans.clone().durable(true)
            };
            std::thread::spawn(move || {
                let mut client = connect();
                let (mut one, mut many) = (0, 0);
                for _ in 0..10 {
                    one += usize::from(
                        consume(&mut client, &plans, &[Entry::new("one", limit(9, 60_000))])
                            .0
                            .allowed,
                    );
                    let batch = [
                        Entry::new("x", limit(6, 60_000)),
                        Entry::new("y", limit(8, 60_000)),
                    ];
                    many += usize::from(consume(&mut client, &plans, &batch).0.allowed);
                }
                (one, many)
            })
        })
        .collect();
    let totals = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    assert_eq!(totals, (9, 6), "exactly the limit, one entry and batches");
    let one = [Entry::new("given", limit(1, 60_000))];
    let (first, release) = consume(&mut client, &plans, &one);
    assert!(first.allowed);
    assert!(!consume(&mut client, &plans, &one).0.allowed);
    run(&mut client, &plans.plan_release(&release));
    assert!(consume(&mut client, &plans, &one).0.allowed, "given back");
    assert!(
        !consume(&mut client, &plans, &one).0.allowed,
        "exactly once"
    );
}

/// The largest limit a call can carry (u32::MAX uses) is counted like any other: the one-entry
/// statement's refusal test never subscripts the log out of PostgreSQL's integer range.
#[test]
fn the_largest_limit_is_counted() {
    let schema = Schema::install("largest");
    let (plans, mut client) = (&schema.plans, connect());
    let largest = [Entry::new("k", limit(u32::MAX as u64, 60_000))];
    for remaining in [u32::MAX - 1, u32::MAX - 2] {
        let v = consume(&mut client, plans, &largest).0;
        assert!(v.allowed && v.quota.remaining == remaining, "{v:?}");
    }
    let peeked =
        Postgres::decode_batch(&run(&mut client, &plans.plan_peek_many(&largest)), 1).unwrap();
    assert_eq!(peeked.quota.remaining, u32::MAX - 2);
}

/// A busy key's log outgrows the row (its arrays move out of line, stored uncompressed): every call
/// up to the limit passes and the next is refused, one entry or in a batch, a release gives exactly
/// one use back, and the arrays are neither compressed nor inline.
#[test]
fn a_key_whose_log_moves_out_of_line_stays_exact() {
    let schema = Schema::install("toast");
    let (plans, mut client) = (&schema.plans, connect());
    let p = plans.names().prefix();
    let uses = 700;
    let one = [Entry::new("busy", limit(uses, 600_000))];
    let mut releases = Vec::new();
    for remaining in (0..uses as u32).rev() {
        let (v, release) = consume(&mut client, plans, &one);
        assert!(v.allowed && v.quota.remaining == remaining, "{v:?}");
        releases.push(release);
    }
    assert!(!consume(&mut client, plans, &one).0.allowed);
    let both = [
        Entry::new("busy", limit(uses, 600_000)),
        Entry::new("other", limit(1, 600_000)),
    ];
    assert_eq!(consume(&mut client, plans, &both).0.blocked, Some(0));
    run(
        &mut client,
        &plans.plan_release(&releases[uses as usize / 2]),
    );
    let (back, _) = consume(&mut client, plans, &one);
    assert!(back.allowed && back.quota.remaining == 0, "{back:?}");
    assert!(!consume(&mut client, plans, &one).0.allowed);
    let row = client
        .query_one(
            &format!(
                "SELECT cardinality(ids), pg_column_compression(ats) IS NULL \
                 AND pg_column_compression(ids) IS NULL, pg_column_size(ids) \
                 FROM {p}_log WHERE key = 'busy'"
            ),
            &[],
        )
        .unwrap();
    let (n, uncompressed, size): (i32, bool, i32) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(n, uses as i32);
    assert!(uncompressed && size > 2_000, "{uncompressed} {size}");
}

/// The batch function names the verdict's nine columns, the one-entry statement its one text column
/// `verdict` (a query function may return rows as objects keyed by column name).
#[test]
fn every_consume_statement_names_the_verdicts_columns() {
    let schema = Schema::install("columns");
    let (plans, mut client) = (&schema.plans, connect());
    let names = [
        "allowed",
        "retry_after_ms",
        "retry_timestamp",
        "blocked",
        "now_ms",
        "quota_limit",
        "remaining",
        "refill_after_ms",
        "reset_after_ms",
    ];
    for entries in [
        vec![Entry::new("c", limit(1, 60_000))],
        vec![
            Entry::new("c", limit(1, 60_000)),
            Entry::new("d", limit(1, 60_000)),
        ],
    ] {
        for statement in [
            plans.plan_consume_many(&entries, "cols").unwrap().0,
            plans.plan_peek_many(&entries),
        ] {
            let params = to_sql(&statement);
            let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|b| b.as_ref()).collect();
            let row = client.query_one(statement.sql.as_str(), &refs).unwrap();
            let got: Vec<&str> = row.columns().iter().map(|c| c.name()).collect();
            if entries.len() == 1 {
                assert_eq!(got, ["verdict"], "{}", statement.sql);
                assert_eq!(row.columns()[0].type_().name(), "text");
            } else {
                assert_eq!(got, names, "{}", statement.sql);
            }
        }
    }
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
    consume(&mut client, plans, &[Entry::new("held", limit(5, 1))]);
    std::thread::sleep(std::time::Duration::from_millis(5));
    // A call holding a row (here a transaction that locked it): the purge skips it without waiting
    // (a wait could deadlock with a batch taking its rows in key order), and takes it next time.
    let mut holder = connect();
    let mut held = holder.transaction().unwrap();
    held.execute(
        &format!(
            "SELECT 1 FROM {}_log WHERE key = 'held' FOR UPDATE",
            plans.names().prefix()
        ),
        &[],
    )
    .unwrap();
    client
        .batch_execute("SET statement_timeout = 5000")
        .unwrap();
    let (calls, windows) = Postgres::decode_purge(&run(&mut client, &plans.plan_purge())).unwrap();
    assert_eq!((calls, windows), (1, 1));
    held.commit().unwrap();
    assert_eq!(
        Postgres::decode_purge(&run(&mut client, &plans.plan_purge())).unwrap(),
        (1, 0)
    );
    let left: Vec<String> = client
        .query(
            &format!("SELECT key FROM {}_log", plans.names().prefix()),
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
    let row = |v: Vec<i64>| {
        let mut row = vec![SqlValue::Bool(v[0] == 1)];
        row.extend(v[1..].iter().map(|&i| SqlValue::Int(i)));
        vec![row]
    };
    assert!(Postgres::decode_batch(&[], 1).is_err());
    assert!(Postgres::decode_batch(&[vec![SqlValue::Bool(true)]], 1).is_err());
    // allowed, retry_after, retry_ts, blocked, now, limit, remaining, refill, reset
    assert!(Postgres::decode_batch(&row(vec![1, 0, -1, -1, 1, 3, 2, 10, 10]), 1).is_ok());
    // The one-entry statement's one column: the nine as a bigint[]'s text, or an array of integers.
    let column = |v: SqlValue| Postgres::decode_batch(&[vec![v]], 1);
    let text = |s: &str| column(SqlValue::Text(s.to_owned()));
    let verdict = text("{1,0,-1,-1,1,3,2,10,10}").unwrap();
    assert!(
        verdict.allowed && verdict.quota.remaining == 2,
        "{verdict:?}"
    );
    let refused = text("{0,5,15,0,10,3,0,5,10}").unwrap();
    assert_eq!((refused.allowed, refused.retry_after_ms), (false, 5));
    assert!(column(SqlValue::Ints(vec![1, 0, -1, -1, 1, 3, 2, 10, 10])).is_ok());
    for bad in [
        "{1,0,-1,-1,1,3,2,10}",      // eight
        "{1,0,-1,-1,1,3,2,10,10,0}", // ten
        "1,0,-1,-1,1,3,2,10,10",     // no braces
        "{1,0,-1,-1,1,3,2,10,NULL}", // a NULL
        "{1, 0,-1,-1,1,3,2,10,10}",  // a space
        "{2,0,-1,-1,1,3,2,10,10}",   // allowed neither 1 nor 0
        "{1,0,-1,-1,1,3,4,10,10}",   // more left than the limit
        "{}",
        "",
    ] {
        assert!(text(bad).is_err(), "{bad:?}");
    }
    assert!(column(SqlValue::Ints(vec![1, 0, -1])).is_err());
    assert!(column(SqlValue::Int(1)).is_err());
    assert!(
        Postgres::decode_batch(&row(vec![1, 0, -1, -1, 1]), 1).is_err(),
        "no quota"
    );
    for bad in [
        vec![0, 0, 9, 0, 1, 3, 0, 0, 5],      // refused without a wait
        vec![1, 0, -1, -1, 1, 3, 4, 10, 10],  // more left than the limit
        vec![1, 0, -1, -1, 1, 0, 0, 0, 0],    // no limit
        vec![1, 0, -1, -1, 1, 3, 2, 10, 5],   // refills after the window is empty
        vec![1, 0, -1, -1, 1, 3, 3, 10, 10],  // all left, yet calls in the window
        vec![1, 0, -1, -1, 1, 3, 2, 0, 0],    // a use taken, no call in the window
        vec![1, 0, -1, -1, 1, 3, -1, 10, 10], // negative remaining
        vec![0, 5, 15, 0, 10, 3, 1, 5, 10],   // refused with uses left
        vec![0, 5, 15, 0, 10, 3, 0, 4, 10],   // refused, refill is not the wait
    ] {
        assert!(
            Postgres::decode_batch(&row(bad.clone()), 1).is_err(),
            "{bad:?}"
        );
    }
    let text_ints = vec![vec![
        SqlValue::Text("f".into()),
        SqlValue::Text("5".into()),
        SqlValue::Text("15".into()),
        SqlValue::Int(0),
        SqlValue::Text("10".into()),
        SqlValue::Text("3".into()),
        SqlValue::Text("0".into()),
        SqlValue::Text("5".into()),
        SqlValue::Text("9".into()),
    ]];
    assert_eq!(
        Postgres::decode_batch(&text_ints, 1).unwrap().quota,
        Quota {
            limit: 3,
            remaining: 0,
            refill_after_ms: 5,
            reset_after_ms: 9
        },
        "node-postgres gives bigint as text"
    );
    assert!(Postgres::decode_window(&[vec![SqlValue::Int(1), SqlValue::Int(-1)]]).is_err());
    assert!(Postgres::decode_attempt(
        &[vec![
            SqlValue::Bool(true),
            SqlValue::Int(6),
            SqlValue::Int(5)
        ]],
        5
    )
    .is_err());
    assert!(Postgres::decode_attempt(
        &[vec![
            SqlValue::Bool(false),
            SqlValue::Int(4),
            SqlValue::Int(5)
        ]],
        5
    )
    .is_err());
    assert!(Postgres::decode_attempt(
        &[vec![
            SqlValue::Bool(false),
            SqlValue::Int(5),
            SqlValue::Int(5)
        ]],
        5
    )
    .is_ok());
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
                "SELECT ats[cardinality(ats)] FROM {}_log WHERE key = 'k'",
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

// ---- The call machine, driven on the real server ----

use ratewindow_core::call::{
    Call, CallError, Command, Fed, Next, Op, Outcome, ReleaseToken, WindowQuery,
};

/// Runs each command's statements in order on `client`; the driver's message on the first failure.
fn answer(client: &mut postgres::Client, command: Command<'_>) -> Result<Fed, String> {
    servers::pg_answer(client, command)
}

fn drive(client: &mut postgres::Client, call: Call) -> Result<Outcome, CallError> {
    let (result, give_backs) = call.drive(|command| answer(client, command));
    assert!(give_backs.is_empty());
    result
}

fn call_id() -> String {
    format!(
        "m-{}-{}",
        std::process::id(),
        ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

fn consume_op(entries: &[Entry]) -> Op {
    Op::Consume {
        entries: entries.to_vec(),
        call_id: call_id(),
    }
}

fn verdict_of(outcome: Result<Outcome, CallError>) -> (BatchVerdict, Option<ReleaseToken>) {
    match outcome {
        Ok(Outcome::Verdict { verdict, release }) => (verdict, release),
        other => panic!("expected a verdict, got {other:?}"),
    }
}

fn quota(limit: u32, remaining: u32, refill_after_ms: u64, reset_after_ms: u64) -> Quota {
    Quota {
        limit,
        remaining,
        refill_after_ms,
        reset_after_ms,
    }
}

#[test]
fn the_machine_consumes_peeks_and_releases_with_the_quota() {
    let schema = Schema::install("mslide");
    let (plans, mut client) = (&schema.plans, connect());
    let one = [Entry::new("k", limit(3, 60_000))];

    let (first, release) = verdict_of(drive(&mut client, plans.start(consume_op(&one))));
    assert!(first.allowed && release.is_some());
    assert_eq!(
        first.quota,
        quota(3, 2, 60_000, 60_000),
        "the call itself, recorded now"
    );

    let (second, _) = verdict_of(drive(&mut client, plans.start(consume_op(&one))));
    assert_eq!((second.quota.limit, second.quota.remaining), (3, 1));
    assert!(second.quota.refill_after_ms <= 60_000 && second.quota.refill_after_ms > 59_000);
    assert_eq!(
        second.quota.reset_after_ms, 60_000,
        "the newest call is this one"
    );

    let (peeked, none) = verdict_of(drive(
        &mut client,
        plans.start(Op::Peek {
            entries: one.to_vec(),
        }),
    ));
    assert!(peeked.allowed && none.is_none());
    assert_eq!(
        (peeked.quota.limit, peeked.quota.remaining),
        (3, 1),
        "a peek counts nothing"
    );
    assert!(peeked.quota.refill_after_ms <= peeked.quota.reset_after_ms);

    let (third, third_release) = verdict_of(drive(&mut client, plans.start(consume_op(&one))));
    assert_eq!(third.quota.remaining, 0);
    let (refused, no_release) = verdict_of(drive(&mut client, plans.start(consume_op(&one))));
    assert!(!refused.allowed && no_release.is_none());
    assert_eq!(refused.blocked, Some(0));
    assert_eq!(refused.quota.remaining, 0);
    assert_eq!(refused.quota.refill_after_ms, refused.retry_after_ms);
    assert!(refused.quota.reset_after_ms >= refused.retry_after_ms);
    assert!(refused.quota.reset_after_ms <= 60_000);

    // A release gives exactly that call back.
    let token = third_release.expect("allowed");
    assert_eq!(
        drive(
            &mut client,
            plans.start(Op::Release {
                token: token.clone()
            })
        ),
        Ok(Outcome::Unit)
    );
    let (again, _) = verdict_of(drive(&mut client, plans.start(consume_op(&one))));
    assert!(again.allowed);
    assert_eq!(again.quota.remaining, 0);
    assert!(
        !verdict_of(drive(&mut client, plans.start(consume_op(&one))))
            .0
            .allowed
    );
}

#[test]
fn the_machine_names_the_tightest_entry_of_a_batch() {
    let schema = Schema::install("mtight");
    let (plans, mut client) = (&schema.plans, connect());
    // Fewest left wins.
    let batch = [
        Entry::new("a", limit(5, 60_000)),
        Entry::new("b", limit(2, 1_000)),
    ];
    let (v, _) = verdict_of(drive(&mut client, plans.start(consume_op(&batch))));
    assert_eq!(v.quota, quota(2, 1, 1_000, 1_000));
    // Ties: the longer window.
    let tie = [
        Entry::new("c", limit(2, 1_000)),
        Entry::new("d", limit(2, 60_000)),
    ];
    let (v, _) = verdict_of(drive(&mut client, plans.start(consume_op(&tie))));
    assert_eq!(v.quota, quota(2, 1, 60_000, 60_000));
    // Ties of both: the first (3 uses with one taken before, 2 fresh: both have 1 left after).
    drive(
        &mut client,
        plans.start(consume_op(&[Entry::new("e", limit(3, 60_000))])),
    )
    .unwrap();
    let first = [
        Entry::new("e", limit(3, 60_000)),
        Entry::new("f", limit(2, 60_000)),
    ];
    let (v, _) = verdict_of(drive(
        &mut client,
        plans.start(Op::Peek {
            entries: first.to_vec(),
        }),
    ));
    assert_eq!(
        (v.quota.limit, v.quota.remaining),
        (3, 2),
        "a peek: e has 2 left, f 2"
    );
    let (v, _) = verdict_of(drive(&mut client, plans.start(consume_op(&first))));
    assert_eq!((v.quota.limit, v.quota.remaining), (3, 1));
    assert!(v.quota.refill_after_ms <= 60_000 && v.quota.refill_after_ms > 59_000);
    assert_eq!(v.quota.reset_after_ms, 60_000);
    // A refusal: the blocked entry, even when another has as few left.
    let (v, _) = verdict_of(drive(&mut client, plans.start(consume_op(&first))));
    assert!(v.allowed, "e: 1 left, f: 1 left");
    let (v, _) = verdict_of(drive(&mut client, plans.start(consume_op(&first))));
    assert!(!v.allowed);
    // e's oldest of its newest 3 calls is older than f's oldest of its newest 2: f waits longer.
    assert_eq!(v.blocked, Some(1), "the longest wait blocks");
    assert_eq!(
        (v.quota.limit, v.quota.remaining),
        (2, 0),
        "the blocked entry's quota"
    );
    assert_eq!(v.quota.refill_after_ms, v.retry_after_ms);
    // The same key twice takes the many-entry path: one record, both entries see it.
    let twice = [
        Entry::new("g", limit(4, 60_000)),
        Entry::new("g", limit(2, 30_000)),
    ];
    let (v, _) = verdict_of(drive(&mut client, plans.start(consume_op(&twice))));
    assert_eq!(v.quota, quota(2, 1, 30_000, 30_000));
}

#[test]
fn the_machine_runs_every_fixed_window_operation() {
    let schema = Schema::install("mfixed");
    let (plans, mut client) = (&schema.plans, connect());
    let decay = Window::from_ms(60_000).unwrap();
    let mut go = |op: Op| drive(&mut client, plans.start(op)).unwrap();
    let read = |query| Op::Read {
        key: "k".into(),
        query,
    };
    assert_eq!(go(read(WindowQuery::Attempts)), Outcome::Int(0));
    assert_eq!(go(read(WindowQuery::AvailableInMs)), Outcome::Int(0));
    assert_eq!(
        go(Op::Hit {
            key: "k".into(),
            decay,
            amount: 2
        }),
        Outcome::Hit {
            count: 2,
            reset_after_ms: 60_000
        }
    );
    let Outcome::Attempt {
        allowed: true,
        count: 3,
        reset_after_ms,
    } = go(Op::Attempt {
        key: "k".into(),
        max: 3,
        decay,
    })
    else {
        panic!("the third hit fits under 3");
    };
    assert!(reset_after_ms <= 60_000 && reset_after_ms > 59_000);
    let Outcome::Attempt {
        allowed: false,
        count: 3,
        ..
    } = go(Op::Attempt {
        key: "k".into(),
        max: 3,
        decay,
    })
    else {
        panic!("a fourth does not");
    };
    assert_eq!(
        go(read(WindowQuery::TooManyAttempts { max: 3 })),
        Outcome::Bool(true)
    );
    assert_eq!(go(read(WindowQuery::Remaining { max: 5 })), Outcome::Int(2));
    assert_eq!(go(read(WindowQuery::AvailableIn)), Outcome::Int(60));
    assert_eq!(go(Op::ResetAttempts { key: "k".into() }), Outcome::Unit);
    assert_eq!(go(read(WindowQuery::Attempts)), Outcome::Int(0));
    assert_eq!(go(Op::Clear { key: "k".into() }), Outcome::Unit);
    assert_eq!(go(read(WindowQuery::AvailableInMs)), Outcome::Int(0));
    // An attempt on a key without a window opens one; with max 0 it counts nothing.
    assert_eq!(
        go(Op::Attempt {
            key: "z".into(),
            max: 0,
            decay
        }),
        Outcome::Attempt {
            allowed: false,
            count: 0,
            reset_after_ms: 0
        }
    );
    assert_eq!(
        go(Op::Attempt {
            key: "n".into(),
            max: 1,
            decay
        }),
        Outcome::Attempt {
            allowed: true,
            count: 1,
            reset_after_ms: 60_000
        }
    );
}

#[test]
fn attempt_lets_exactly_max_through_under_concurrency() {
    let schema = Schema::install("mattempt");
    let decay = Window::from_ms(60_000).unwrap();
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let plans = schema.plans.clone();
            std::thread::spawn(move || {
                let mut client = connect();
                (0..20)
                    .filter(|_| {
                        let op = Op::Attempt {
                            key: "race".into(),
                            max: 5,
                            decay,
                        };
                        match drive(&mut client, plans.start(op)) {
                            Ok(Outcome::Attempt { allowed, count, .. }) => {
                                assert!((1..=5).contains(&count));
                                allowed
                            }
                            other => panic!("{other:?}"),
                        }
                    })
                    .count()
            })
        })
        .collect();
    let allowed: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(allowed, 5);
}

#[test]
fn a_connection_lost_mid_call_is_a_store_error() {
    let schema = Schema::install("mlost");
    let mut client = connect();
    let pid: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    connect()
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .unwrap();
    let call = schema
        .plans
        .start(consume_op(&[Entry::new("k", limit(1, 1_000))]));
    match drive(&mut client, call) {
        Err(CallError::Store { message }) => assert!(!message.is_empty()),
        other => panic!("expected a store error, got {other:?}"),
    }
}

#[test]
fn the_machine_types_rows_of_the_wrong_shape_and_misuse() {
    let plans = Postgres::default();
    let one = vec![Entry::new("k", limit(3, 1_000))];
    let feed = |op: Op, rows: Vec<Vec<SqlValue>>| {
        let mut call = plans.start(op);
        let Next::Run(Command::Sql { statements }) = call.next() else {
            panic!("one statement");
        };
        assert_eq!(statements.len(), 1);
        call.feed(Fed::Rows(rows));
        match call.next() {
            Next::Done(result) => result,
            Next::Run(command) => panic!("one round trip, then {command:?}"),
        }
    };
    let ints = |v: &[i64]| {
        let mut row = vec![SqlValue::Bool(v[0] == 1)];
        row.extend(v[1..].iter().map(|&i| SqlValue::Int(i)));
        vec![row]
    };
    // A limit no entry has; an allowed consume with every use left.
    for rows in [
        ints(&[1, 0, -1, -1, 1, 4, 2, 10, 10]),
        ints(&[1, 0, -1, -1, 1, 3, 3, 0, 0]),
        vec![],
        vec![vec![SqlValue::Text("nope".into())]],
    ] {
        let result = feed(
            Op::Consume {
                entries: one.clone(),
                call_id: "x".into(),
            },
            rows.clone(),
        );
        assert!(
            matches!(result, Err(CallError::Rows(_))),
            "{rows:?}: {result:?}"
        );
    }
    // A peek may leave every use.
    assert!(feed(
        Op::Peek {
            entries: one.clone()
        },
        ints(&[1, 0, -1, -1, 1, 3, 3, 0, 0])
    )
    .is_ok());
    let err = feed(
        Op::Hit {
            key: "k".into(),
            decay: Window::from_ms(10).unwrap(),
            amount: 1,
        },
        vec![vec![SqlValue::Int(1), SqlValue::Int(0)]],
    );
    assert!(
        matches!(err, Err(CallError::Rows(_))),
        "a hit leaves a window: {err:?}"
    );
    let err = feed(
        Op::Attempt {
            key: "k".into(),
            max: 2,
            decay: Window::from_ms(10).unwrap(),
        },
        vec![vec![
            SqlValue::Bool(true),
            SqlValue::Int(3),
            SqlValue::Int(5),
        ]],
    );
    assert!(matches!(err, Err(CallError::Rows(_))), "{err:?}");
    assert_eq!(err.unwrap_err().kind(), "reply");

    // A Redis reply is a host bug.
    let mut call = plans.start(Op::Clear { key: "k".into() });
    let _ = call.next();
    call.feed(Fed::Reply(ratewindow_core::redis::Reply::Nil));
    assert!(matches!(
        call.next(),
        Next::Done(Err(CallError::Protocol { .. }))
    ));
    // An empty batch: allowed, no quota, no statement.
    for op in [
        Op::Peek { entries: vec![] },
        Op::Consume {
            entries: vec![],
            call_id: "e".into(),
        },
    ] {
        let mut call = plans.start(op);
        match call.next() {
            Next::Done(Ok(Outcome::Verdict { verdict, .. })) => {
                assert!(verdict.allowed);
                assert_eq!(verdict.quota, Quota::NONE);
            }
            other => panic!("{other:?}"),
        }
    }
    // A Redis token, an empty call id.
    let token = ReleaseToken::Redis(ratewindow_core::redis::RedisRelease {
        keys: vec!["k".into()],
        call_id: "x".into(),
    });
    let mut call = plans.start(Op::Release { token });
    assert!(matches!(
        call.next(),
        Next::Done(Err(CallError::Unsupported(_)))
    ));
    let mut call = plans.start(Op::Consume {
        entries: one,
        call_id: String::new(),
    });
    assert!(matches!(
        call.next(),
        Next::Done(Err(CallError::Unsupported(_)))
    ));
}
