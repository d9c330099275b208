//! The `hosted` world: its store reads the host's clock through the imported `clock`, once per call.

use ratewindow_host_rs::{HostedWorld, Limit, Ops};

#[test]
fn every_store_call_reads_the_imported_clock_once() {
    let mut world = HostedWorld::new().unwrap();
    world.fresh_store().unwrap();
    let limit = Limit {
        uses: 2.0,
        window_ms: 1000.0,
    };
    let s = world.store_handle().unwrap();
    let wit_limit = ratewindow_host_rs::hosted::exports::ratewindow::engine::types::Limit {
        uses: 2.0,
        window_ms: 1000.0,
    };
    // Through Ops: it sets the host clock to `now` and the component reads it.
    let before = world.store.data().clock_reads;
    assert!(world.consume("k", limit, 10_000).unwrap().unwrap().allowed);
    assert_eq!(world.store.data().clock_reads, before + 1);

    // Directly: the host only moves its clock; no time crosses the call.
    let (store, clocked) = world.split();
    let clocked = clocked.memory_store();
    store.data_mut().clock_ms = 10_100;
    assert!(
        clocked
            .call_consume(&mut *store, s, "k", wit_limit)
            .unwrap()
            .unwrap()
            .allowed
    );
    assert_eq!(store.data().clock_reads, before + 2);
    store.data_mut().clock_ms = 10_400;
    let refused = clocked
        .call_consume(&mut *store, s, "k", wit_limit)
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            refused.allowed,
            refused.retry_after_ms,
            refused.retry_timestamp
        ),
        (false, 600, Some(11_000))
    );

    // Moving the host clock past the window frees the key, with no `now` passed by the host.
    store.data_mut().clock_ms = 11_000;
    assert!(
        clocked
            .call_consume(&mut *store, s, "k", wit_limit)
            .unwrap()
            .unwrap()
            .allowed
    );

    // A clock that steps back is the host's business; the store copes and never traps.
    store.data_mut().clock_ms = 0;
    assert!(
        !clocked
            .call_consume(&mut *store, s, "k", wit_limit)
            .unwrap()
            .unwrap()
            .allowed
    );
    // A clock past 2^53 - 1 (a wrapped one reads 2^64 - 1) is refused, naming `now`.
    store.data_mut().clock_ms = u64::MAX;
    assert!(clocked
        .call_consume(&mut *store, s, "k", wit_limit)
        .unwrap()
        .is_err());
    store.data_mut().clock_ms = (1 << 53) - 1;
    assert!(
        clocked
            .call_consume(&mut *store, s, "k", wit_limit)
            .unwrap()
            .unwrap()
            .allowed
    );
}

#[test]
fn fixed_windows_run_on_the_host_clock() {
    let mut world = HostedWorld::new().unwrap();
    world.fresh_store().unwrap();
    let s = world.store_handle().unwrap();
    let (store, clocked) = world.split();
    let clocked = clocked.memory_store();
    store.data_mut().clock_ms = 1_000;
    assert!(matches!(
        clocked
            .call_hit(&mut *store, s, "login", 60_000.0, 1)
            .unwrap(),
        Ok(1)
    ));
    store.data_mut().clock_ms = 60_999;
    assert_eq!(
        clocked
            .call_available_in_ms(&mut *store, s, "login")
            .unwrap(),
        1
    );
    assert_eq!(clocked.call_attempts(&mut *store, s, "login").unwrap(), 1);
    store.data_mut().clock_ms = 61_000;
    assert_eq!(clocked.call_attempts(&mut *store, s, "login").unwrap(), 0);
}
