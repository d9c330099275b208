//! A consume whose reply was lost after its command ran on the real server (a connection cut after
//! the server answered) stays counted; [`Call::failed_release`] gives it back by its call id, and
//! giving back a call that never ran removes nothing. Redis (127.0.0.1:6379 or `REDIS_URL`),
//! PostgreSQL (`PGHOST`/`PGUSER`/`PGDATABASE`, default the unix socket, `postgres`, `test`) and
//! SQLite (a failed call commits nothing: no token).

mod servers;
use servers::{pg_connect as pg, redis_connection, to_reply};

use std::time::{SystemTime, UNIX_EPOCH};

use ratewindow_core::call::{
    Call, CallError, Command, Fed, Next, Op, Outcome, Redis, ReleaseToken,
};
use ratewindow_core::redis::{RedisOptions, RedisRelease, Reply};
use ratewindow_core::sql::{Postgres, SqlNames, Sqlite};
use ratewindow_core::{Entry, Limit};

fn nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn entries(key: &str) -> Vec<Entry> {
    vec![Entry::new(key, Limit::new(3, 60_000).unwrap())]
}

// ---- Redis ----

/// Runs a script command as a host does (EVAL: no script cache to depend on).
fn eval(con: &mut redis::Connection, command: Command<'_>) -> Result<Fed, String> {
    let Command::Script {
        script, keys, args, ..
    } = command
    else {
        panic!("a Redis call asked for SQL");
    };
    redis::cmd("EVAL")
        .arg(script.source)
        .arg(keys.len())
        .arg(keys)
        .arg(args)
        .query::<redis::Value>(con)
        .map(|v| Fed::Reply(to_reply(v)))
        .map_err(|e| e.to_string())
}

fn calls_in(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("ZCOUNT")
        .arg(key)
        .arg(0)
        .arg("+inf")
        .query(con)
        .unwrap()
}

/// Drives `call` to its end; the first command runs on the server but its reply is "lost": the
/// client's failure `lost` is fed instead.
fn lose_first_reply(con: &mut redis::Connection, mut call: Call, lost: &str) -> Call {
    let Next::Run(command) = call.next() else {
        panic!("the call asked for nothing")
    };
    eval(con, command).expect("the script ran");
    call.fail(lost);
    call
}

#[test]
fn redis_a_consume_whose_reply_was_lost_is_given_back_by_its_call_id() {
    let mut con = redis_connection();
    let options =
        RedisOptions::default().with_prefix(format!("ratewindow-test:C-failed:{}:", nanos()));
    let store = Redis::new(options).evalsha(false);
    let key = store.options().log_key("k");

    let call = store.start(Op::Consume {
        entries: entries("k"),
        call_id: "lost-1".into(),
    });
    let mut call = lose_first_reply(&mut con, call, "Connection closed");
    let Next::Done(Err(CallError::Store { .. })) = call.next() else {
        panic!("a lost reply is a store error")
    };
    assert_eq!(
        calls_in(&mut con, &key),
        1,
        "the script ran: the call is counted"
    );
    let token = call
        .take_failed_release()
        .expect("a failed consume's token");
    assert_eq!(
        token,
        ReleaseToken::Redis(RedisRelease {
            keys: vec![key.clone()],
            call_id: "lost-1".into()
        })
    );

    // Another call counted meanwhile: the give-back removes exactly the failed one.
    let (other, _) = store
        .start(Op::Consume {
            entries: entries("k"),
            call_id: "other".into(),
        })
        .drive(|c| eval(&mut con, c));
    assert!(matches!(other, Ok(Outcome::Verdict { .. })));
    for _ in 0..2 {
        // Twice: a give-back is idempotent.
        let (released, _) = store
            .start(Op::Release {
                token: token.clone(),
            })
            .drive(|c| eval(&mut con, c));
        assert_eq!(released, Ok(Outcome::Unit));
        assert_eq!(calls_in(&mut con, &key), 1);
    }

    // A consume that failed before its script ran: its give-back removes nothing.
    let mut never = store.start(Op::Consume {
        entries: entries("k"),
        call_id: "never-ran".into(),
    });
    let Next::Run(_) = never.next() else { panic!() };
    never.fail("Connection refused");
    let Next::Done(Err(_)) = never.next() else {
        panic!()
    };
    let token = never
        .take_failed_release()
        .expect("it may have run: a token");
    let (released, _) = store
        .start(Op::Release { token })
        .drive(|c| eval(&mut con, c));
    assert_eq!(released, Ok(Outcome::Unit));
    assert_eq!(
        calls_in(&mut con, &key),
        1,
        "nobody else's call was removed"
    );
    let _: () = redis::cmd("DEL").arg(&key).query(&mut con).unwrap();
}

#[test]
fn redis_a_reply_of_the_wrong_shape_keeps_the_token_and_refusals_and_peeks_have_none() {
    let store = Redis::new(RedisOptions::default());
    // A reply the decoder refuses: the script ran, so the call may have counted.
    let mut call = store.start(Op::Consume {
        entries: entries("k"),
        call_id: "bad-reply".into(),
    });
    let Next::Run(_) = call.next() else { panic!() };
    call.feed(Fed::Reply(Reply::Text("OK".into())));
    let Next::Done(Err(CallError::Reply(_))) = call.next() else {
        panic!()
    };
    assert!(call.failed_release().is_some());

    // An answered call (allowed or refused) has no failed token; neither has a failed peek.
    let mut answered = store.start(Op::Consume {
        entries: entries("k"),
        call_id: "answered".into(),
    });
    let Next::Run(_) = answered.next() else {
        panic!()
    };
    answered.feed(Fed::Reply(Reply::Array(
        [0, 5, 1_005, 0, 1_000, 0, 0, 5, 5].map(Reply::Int).to_vec(),
    )));
    let Next::Done(Ok(_)) = answered.next() else {
        panic!()
    };
    assert!(answered.failed_release().is_none());
    let mut peek = store.start(Op::Peek {
        entries: entries("k"),
    });
    let Next::Run(_) = peek.next() else { panic!() };
    peek.fail("Connection closed");
    let Next::Done(Err(_)) = peek.next() else {
        panic!()
    };
    assert!(peek.failed_release().is_none());
    // The fixed window has no failed token: a hit has no id to give back by.
    let mut hit = store.start(Op::Hit {
        key: "k".into(),
        decay: ratewindow_core::Window::from_ms(1_000).unwrap(),
        amount: 1,
    });
    let Next::Run(_) = hit.next() else { panic!() };
    hit.fail("Connection closed");
    let Next::Done(Err(_)) = hit.next() else {
        panic!()
    };
    assert!(hit.failed_release().is_none());
}

// ---- PostgreSQL ----

fn pg_run(client: &mut postgres::Client, command: Command<'_>) -> Result<Fed, String> {
    servers::pg_answer(client, command)
}

#[test]
fn postgres_a_committed_consume_whose_answer_was_lost_is_given_back() {
    let prefix = format!(
        "rwt_cfail_{}_{}",
        std::process::id(),
        nanos() % 1_000_000_000
    );
    let store = Postgres::new(SqlNames::new(&prefix).unwrap());
    let mut client = pg();
    client.batch_execute(&store.schema()).unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut call = store.start(Op::Consume {
            entries: entries("k"),
            call_id: "lost-pg".into(),
        });
        let Next::Run(command) = call.next() else {
            panic!()
        };
        pg_run(&mut client, command).expect("the statement committed");
        call.fail("Connection terminated unexpectedly");
        let Next::Done(Err(CallError::Store { .. })) = call.next() else {
            panic!()
        };
        let token = call
            .take_failed_release()
            .expect("it committed on its own: a token");
        let (verdict, _) = store
            .start(Op::Consume {
                entries: entries("k"),
                call_id: "peer".into(),
            })
            .drive(|c| pg_run(&mut client, c));
        let Ok(Outcome::Verdict { verdict, .. }) = verdict else {
            panic!()
        };
        assert_eq!(verdict.quota.remaining, 1, "the lost call counted");
        for _ in 0..2 {
            let (released, _) = store
                .start(Op::Release {
                    token: token.clone(),
                })
                .drive(|c| pg_run(&mut client, c));
            assert_eq!(released, Ok(Outcome::Unit));
        }
        let (peek, _) = store
            .start(Op::Peek {
                entries: entries("k"),
            })
            .drive(|c| pg_run(&mut client, c));
        let Ok(Outcome::Verdict { verdict, .. }) = peek else {
            panic!()
        };
        assert_eq!(verdict.quota.remaining, 2, "only the peer's call is left");
    }));
    let _ = client.batch_execute(&format!(
        "DO $d$ DECLARE f text; BEGIN \
           FOR f IN SELECT oid::regprocedure::text FROM pg_proc WHERE proname LIKE '{prefix}\\_%' LOOP \
             EXECUTE 'DROP FUNCTION IF EXISTS ' || f; \
           END LOOP; END $d$; \
         DROP TABLE IF EXISTS {prefix}_log; DROP TABLE IF EXISTS {prefix}_calls; \
         DROP TABLE IF EXISTS {prefix}_windows;"
    ));
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn sqlite_a_failed_consume_commits_nothing_and_has_no_token() {
    let store = Sqlite::new(SqlNames::new("rwt_cfail").unwrap());
    let mut call = store.start(
        Op::Consume {
            entries: entries("k"),
            call_id: "lost-sqlite".into(),
        },
        1_000,
    );
    let Next::Run(_) = call.next() else { panic!() };
    call.fail("database is locked");
    // The machine rolls back (or is done): either way no token.
    loop {
        match call.next() {
            Next::Run(_) => call.feed(Fed::Rows(Vec::new())),
            Next::Done(result) => {
                assert!(result.is_err());
                break;
            }
        }
    }
    assert!(call.failed_release().is_none());
}
