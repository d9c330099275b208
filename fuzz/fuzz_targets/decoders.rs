//! Every reply and row decoder on its own, fed any value: a decoded answer or the typed error, never a
//! panic; a decoded verdict is consistent with itself.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use ratewindow_core::redis;
use ratewindow_core::sql::Postgres;
use ratewindow_fuzz as gen;

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    match u.int_in_range(0..=7)? {
        0 => {
            let limits: Vec<_> = (0..u.int_in_range(0..=6)?)
                .map(|_| gen::limit(u))
                .collect::<Result<_>>()?;
            let reply = gen::reply(u, 3)?;
            if let Ok((verdict, _)) = redis::decode_batch(&reply, &limits) {
                if verdict.allowed {
                    assert_eq!(verdict.retry_after_ms, 0, "{reply} -> {verdict:?}");
                } else {
                    assert!(verdict.retry_after_ms >= 1, "{reply} -> {verdict:?}");
                    let blocked = verdict.blocked.expect("a refusal names an entry");
                    assert!(blocked < limits.len().max(1), "{reply} -> {verdict:?}");
                }
            }
        }
        1 => {
            let _ = redis::decode_release(&gen::reply(u, 2)?);
        }
        2 => {
            let _ = redis::decode_window(&gen::reply(u, 2)?);
        }
        3 => {
            let _ = redis::decode_attempt(&gen::reply(u, 2)?);
        }
        4 => {
            let entries = u.int_in_range(0..=6)?;
            if let Ok(verdict) = Postgres::decode_batch(&gen::rows(u)?, entries) {
                if let Some(blocked) = verdict.blocked {
                    assert!(blocked < entries.max(1), "{verdict:?}");
                }
            }
        }
        5 => {
            let _ = Postgres::decode_window(&gen::rows(u)?);
        }
        6 => {
            let _ = Postgres::decode_attempt(&gen::rows(u)?, gen::int(u)?);
        }
        _ => {
            let _ = Postgres::decode_purge(&gen::rows(u)?);
        }
    }
    Ok(())
}
