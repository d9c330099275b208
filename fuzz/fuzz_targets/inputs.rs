//! The checks of what a host hands over: limits and windows from host numbers, `now`, keys read from
//! UTF-16, Redis prefixes. Never a panic; every accepted value is in range; the UTF-16 reading agrees
//! with the standard library's; two accepted prefixes never name one Redis key.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use ratewindow_core::input::{self, check_redis_prefix, MAX_NOW_MS};
use ratewindow_core::redis::RedisOptions;
use ratewindow_core::{Limit, Window, MAX_WINDOW_MS};

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    match u.int_in_range(0..=4)? {
        0 => {
            let (uses, window): (f64, f64) = (u.arbitrary()?, u.arbitrary()?);
            if let Ok(limit) = Limit::from_f64(uses, window) {
                assert_eq!(limit.uses() as f64, uses);
                assert_eq!(limit.window_ms() as f64, window);
                assert!((1..=MAX_WINDOW_MS).contains(&limit.window_ms()));
            }
            if let Ok(w) = Window::from_f64(window) {
                assert_eq!(w.as_ms() as f64, window);
            }
            let (uses, window): (u64, u64) = (u.arbitrary()?, u.arbitrary()?);
            if let Ok(limit) = Limit::new(uses, window) {
                assert_eq!((limit.uses() as u64, limit.window_ms()), (uses, window));
            }
        }
        1 => {
            let now: u64 = u.arbitrary()?;
            assert_eq!(input::check_now(now).is_ok(), now <= MAX_NOW_MS);
            let signed: i128 = u.arbitrary()?;
            assert_eq!(
                input::check_now_i128(signed).is_ok(),
                (0..=MAX_NOW_MS as i128).contains(&signed)
            );
        }
        2 => {
            let units: Vec<u16> = u.arbitrary()?;
            match input::utf16_to_utf8(&units) {
                Ok(text) => assert_eq!(Some(text), String::from_utf16(&units).ok()),
                Err(at) => {
                    assert!(String::from_utf16(&units).is_err());
                    assert!(String::from_utf16(&units[..at]).is_ok(), "{at}");
                    assert!(String::from_utf16(&units[..=at]).is_err(), "{at}");
                }
            }
        }
        _ => {
            // Two stores' prefixes and keys: accepted prefixes never share a Redis key.
            let pick = |u: &mut Unstructured<'_>| -> Result<String> {
                Ok(match u.int_in_range(0..=6)? {
                    0 => "p:".to_owned(),
                    1 => "p:log:".to_owned(),
                    2 => "p:l".to_owned(),
                    3 => "log:".to_owned(),
                    4 => "win:".to_owned(),
                    5 => String::new(),
                    _ => u.arbitrary()?,
                })
            };
            let (p1, p2, k1, k2) = (pick(u)?, pick(u)?, pick(u)?, pick(u)?);
            let (a, b) = (
                RedisOptions::default().with_prefix(p1.clone()),
                RedisOptions::default().with_prefix(p2.clone()),
            );
            if check_redis_prefix(&p1).is_ok() && check_redis_prefix(&p2).is_ok() {
                for (x, y) in [
                    (a.log_key(&k1), b.log_key(&k2)),
                    (a.window_key(&k1), b.window_key(&k2)),
                    (a.log_key(&k1), b.window_key(&k2)),
                ] {
                    if x == y {
                        assert_eq!((&p1, &k1), (&p2, &k2), "one Redis key {x:?}");
                    }
                }
            }
        }
    }
    Ok(())
}
