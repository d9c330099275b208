//! Every case of `tests/vectors/*.json` and `tests/vectors/weights/*.json` through the component in
//! wasmtime, in both worlds.

use crate::common;

use ratewindow_host_rs::{EngineWorld, HostedWorld};

#[test]
fn engine_world_passes_every_vector() {
    let mut world = EngineWorld::new().expect("instantiate the engine component");
    let ops = common::run_all(&mut world);
    assert!(ops > 0);
}

#[test]
fn hosted_world_passes_every_vector_on_the_host_clock() {
    let mut world = HostedWorld::new().expect("instantiate the hosted component");
    let ops = common::run_all(&mut world);
    // Every op but `limit` runs on the store and reads the imported clock (once per call).
    assert!(world.store.data().clock_reads > 0);
    assert!(world.store.data().clock_reads <= ops as u64);
}

/// `tests/vectors/weights/`: `cost` on consume, peek and batch entries (`consume-cost`, `peek-cost`,
/// an entry's `cost`), in both worlds.
#[test]
fn both_worlds_pass_the_weights_vectors() {
    let mut engine = EngineWorld::new().expect("instantiate the engine component");
    let ops = common::run_files(&mut engine, common::json_files("weights"));
    assert!(ops >= 40, "only {ops} weighted ops");
    let mut hosted = HostedWorld::new().expect("instantiate the hosted component");
    assert_eq!(
        common::run_files(&mut hosted, common::json_files("weights")),
        ops
    );
}
