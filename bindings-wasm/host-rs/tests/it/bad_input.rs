//! Bad input from the host comes back as the component's `error` variant, never a trap; the instance
//! keeps working afterwards.

use ratewindow_host_rs::{EngineWorld, Error, HostedWorld, Limit, Ops};

fn lim(uses: f64, window_ms: f64) -> Limit {
    Limit { uses, window_ms }
}

fn invalid(field: &'static str, value: &str) -> Error {
    Error::InvalidLimit {
        field,
        value: value.to_owned(),
    }
}

/// Limits no operation may accept, with the field and the value the error must name.
fn bad_limits() -> Vec<(Limit, Error)> {
    vec![
        (lim(f64::NAN, 1000.0), invalid("uses", "NaN")),
        (lim(f64::INFINITY, 1000.0), invalid("uses", "Infinity")),
        (lim(f64::NEG_INFINITY, 1000.0), invalid("uses", "-Infinity")),
        (lim(0.0, 1000.0), invalid("uses", "0")),
        (lim(-1.0, 1000.0), invalid("uses", "-1")),
        (lim(1.5, 1000.0), invalid("uses", "1.5")),
        (lim(4294967296.0, 1000.0), invalid("uses", "4294967296")),
        (lim(1.0, f64::NAN), invalid("window_ms", "NaN")),
        (lim(1.0, f64::INFINITY), invalid("window_ms", "Infinity")),
        (lim(1.0, 0.0), invalid("window_ms", "0")),
        (lim(1.0, -0.0), invalid("window_ms", "-0")),
        (lim(1.0, 2.5), invalid("window_ms", "2.5")),
        (
            lim(1.0, 4320000000000001.0),
            invalid("window_ms", "4320000000000001"),
        ),
        (
            lim(1.0, f64::MAX),
            // The engine's own spelling of an extreme float (the native core's, to the letter).
            invalid(
                "window_ms",
                &ratewindow_core::Limit::from_f64(1.0, f64::MAX)
                    .unwrap_err()
                    .value,
            ),
        ),
        (
            lim(f64::MIN_POSITIVE, 1.0),
            invalid(
                "uses",
                &ratewindow_core::Limit::from_f64(f64::MIN_POSITIVE, 1.0)
                    .unwrap_err()
                    .value,
            ),
        ),
    ]
}

fn check(ops: &mut dyn Ops) {
    ops.fresh_store().unwrap();
    for (limit, expected) in bad_limits() {
        let what = format!("{limit:?}");
        assert_eq!(
            ops.check_limit(limit).expect(&what),
            Err(expected.clone()),
            "check-limit {what}"
        );
        assert_eq!(
            ops.consume("k", limit, 5).expect(&what),
            Err(expected.clone()),
            "consume {what}"
        );
        assert_eq!(
            ops.peek("k", limit, 5).expect(&what),
            Err(expected.clone()),
            "peek {what}"
        );
        let batch = vec![("ok".to_owned(), lim(1.0, 1000.0)), ("k".to_owned(), limit)];
        assert_eq!(
            ops.consume_many(&batch, 5, None).expect(&what),
            Err(expected.clone()),
            "consume-many {what}"
        );
        assert_eq!(
            ops.peek_many(&batch, 5).expect(&what),
            Err(expected.clone()),
            "peek-many {what}"
        );
        if expected_field(&expected) == "window_ms" {
            let decay = limit.window_ms;
            assert_eq!(
                ops.hit("h", decay, 1, 5).expect(&what),
                Err(expected.clone()),
                "hit {what}"
            );
        }
    }
    // Nothing was recorded by the failed calls, and the instance still answers.
    assert_eq!(ops.key_count().unwrap(), 0);
    assert!(
        ops.consume("ok", lim(1.0, 1000.0), 5)
            .unwrap()
            .unwrap()
            .allowed
    );
    assert_eq!(ops.hit("h", 1000.0, 1, 5).unwrap(), Ok(1));
}

fn expected_field(e: &Error) -> &'static str {
    match e {
        Error::InvalidLimit { field, .. } => field,
        _ => "",
    }
}

#[test]
fn engine_world_returns_invalid_limit_for_every_bad_limit() {
    check(&mut EngineWorld::new().unwrap());
}

#[test]
fn hosted_world_returns_invalid_limit_for_every_bad_limit() {
    check(&mut HostedWorld::new().unwrap());
}

#[test]
fn odd_but_valid_input_does_not_trap() {
    let mut world = EngineWorld::new().unwrap();
    world.fresh_store().unwrap();
    let max = lim(4294967295.0, 4320000000000000.0);
    // Empty and long keys, non-ASCII keys, times at the extremes, an empty batch, huge amounts.
    for key in ["", "ключ:🔑", &"x".repeat(100_000)] {
        assert!(world.consume(key, max, 0).unwrap().unwrap().allowed);
        assert!(
            world
                .consume(key, lim(1.0, 1.0), (1 << 53) - 1)
                .unwrap()
                .unwrap()
                .allowed
        );
        assert_eq!(
            world.hit(key, 1.0, i64::MAX, (1 << 53) - 2).unwrap(),
            Ok(i64::MAX)
        );
        assert_eq!(
            world.hit(key, 1.0, i64::MAX, (1 << 53) - 2).unwrap(),
            Ok(i64::MAX),
            "saturates"
        );
        assert_eq!(world.remaining(key, i64::MIN, u64::MAX - 1).unwrap(), 0); // a read: any time
    }
    let empty = world.consume_many(&[], 0, Some("e")).unwrap().unwrap();
    assert!(empty.allowed);
    world.release("e", 0).unwrap();
    world.release("e", 0).unwrap();
    world.release("never-issued", 0).unwrap();
    // A big batch of one key under many limits.
    let batch: Vec<(String, Limit)> = (1..=2000)
        .map(|i| ("b".to_owned(), lim(i as f64, 1000.0)))
        .collect();
    assert!(
        world
            .consume_many(&batch, 1, None)
            .unwrap()
            .unwrap()
            .allowed
    );
    let refused = world.consume_many(&batch, 2, None).unwrap().unwrap();
    assert_eq!((refused.allowed, refused.blocked), (false, Some(0)));
}

#[test]
fn a_release_token_is_idempotent_and_bound_to_its_store() {
    let mut world = EngineWorld::new().unwrap();
    let limit = lim(1.0, 1000.0);
    world.fresh_store().unwrap();
    let first = world.store_handle().unwrap();
    let (store, memory) = world.split();
    let memory = memory.memory_store();
    let consumed = memory
        .call_consume_many(&mut *store, first, &[entry("a", limit)], 0)
        .unwrap()
        .unwrap();
    let token = consumed.release.expect("allowed");
    // Released in another store: nothing happens there, and the token still works here.
    let other = memory.call_constructor(&mut *store).unwrap();
    memory.call_release(&mut *store, other, token, 1).unwrap();
    assert!(
        !memory
            .call_consume(&mut *store, first, "a", limit_wit(limit), 2)
            .unwrap()
            .unwrap()
            .allowed
    );
    memory.call_release(&mut *store, first, token, 3).unwrap();
    let again = memory
        .call_consume(&mut *store, first, "a", limit_wit(limit), 4)
        .unwrap()
        .unwrap();
    assert!(again.allowed, "the released call no longer counts");
    // A second release gives nothing more back.
    memory.call_release(&mut *store, first, token, 5).unwrap();
    assert!(
        !memory
            .call_consume(&mut *store, first, "a", limit_wit(limit), 6)
            .unwrap()
            .unwrap()
            .allowed
    );
    token.resource_drop(&mut *store).unwrap();
    other.resource_drop(&mut *store).unwrap();
}

fn limit_wit(l: Limit) -> ratewindow_host_rs::engine::exports::ratewindow::engine::types::Limit {
    ratewindow_host_rs::engine::exports::ratewindow::engine::types::Limit {
        uses: l.uses,
        window_ms: l.window_ms,
    }
}

fn entry(
    key: &str,
    l: Limit,
) -> ratewindow_host_rs::engine::exports::ratewindow::engine::types::Entry {
    ratewindow_host_rs::engine::exports::ratewindow::engine::types::Entry {
        key: key.to_owned(),
        limit: limit_wit(l),
        cost: None,
    }
}

/// A wrapped clock (jco lowers -1 to `u64::MAX`) used to move the store's horizon to the end of time and
/// expire every key: now every call that can fail refuses it, naming `now`, in both worlds' memory store.
#[test]
fn a_time_past_2_53_is_refused_and_changes_nothing() {
    let mut world = EngineWorld::new().unwrap();
    world.fresh_store().unwrap();
    let one = lim(1.0, 60_000.0);
    assert!(world.consume("alice", one, 1_000).unwrap().unwrap().allowed);
    for bad in [u64::MAX, 1 << 53, 1 << 60] {
        let refused = Error::InvalidArgument {
            field: "now".to_owned(),
            value: bad.to_string(),
        };
        assert_eq!(
            world.consume("other", one, bad).unwrap().unwrap_err(),
            refused
        );
        assert_eq!(
            world.hit("w", 1000.0, 1, bad).unwrap().unwrap_err(),
            refused
        );
    }
    assert!(!world.consume("alice", one, 1_001).unwrap().unwrap().allowed);
}
