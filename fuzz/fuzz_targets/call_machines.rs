//! The call machines (Redis with and without a hash tag, PostgreSQL, SQLite) started on any operation
//! and fed any replies, rows or client failures: they end with an outcome or a typed error, never
//! panic, never loop, and an allowed verdict never carries a wait.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use ratewindow_core::call::{Command, Fed, Outcome, Redis};
use ratewindow_core::redis::RedisOptions;
use ratewindow_core::sql::{Postgres, SqlNames, Sqlite};
use ratewindow_fuzz as gen;

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let op = gen::op(u)?;
    let names = SqlNames::new("fz").expect("valid");
    let call = match u.int_in_range(0..=3)? {
        0 => Redis::new(RedisOptions::default()).start(op),
        1 => Redis::new(
            RedisOptions::default()
                .with_hash_tag_before(":")
                .expect("valid"),
        )
        .start(op),
        2 => Postgres::new(names).start(op),
        _ => Sqlite::new(names).start(op, u.int_in_range(0..=(1 << 53) - 1)?),
    };
    let mut steps = 0u32;
    let mut out_of_bytes = false;
    let (result, _give_back_failures) = call.drive(|command| {
        steps += 1;
        assert!(steps < 10_000, "a call machine did not end");
        if out_of_bytes || u.is_empty() {
            out_of_bytes = true;
            return Err("fuzz: connection lost".to_owned());
        }
        let fail = u.ratio(1, 4).unwrap_or(true);
        if fail {
            return Err(gen::text(u).unwrap_or_default());
        }
        Ok(match command {
            Command::Script { .. } | Command::Plain { .. } => {
                Fed::Reply(gen::reply(u, 3).unwrap_or(ratewindow_core::redis::Reply::Nil))
            }
            Command::Sql { .. } => Fed::Rows(gen::rows(u).unwrap_or_default()),
        })
    });
    if let Ok(Outcome::Verdict { verdict, release }) = result {
        if verdict.allowed {
            assert_eq!(verdict.retry_after_ms, 0, "{verdict:?}");
            assert_eq!(verdict.retry_timestamp, None, "{verdict:?}");
        } else {
            assert!(verdict.retry_after_ms >= 1, "{verdict:?}");
            assert!(release.is_none(), "a refused call gave a release");
        }
    }
    Ok(())
}
