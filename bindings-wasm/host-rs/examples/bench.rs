//! Per-call cost of `consume`: the native core against the component in wasmtime (both worlds).
//!
//!     cargo run --release -p ratewindow-host-rs --example bench [calls]

use std::hint::black_box;
use std::time::Instant;

use ratewindow_core::{Limit as CoreLimit, MemoryStore};
use ratewindow_host_rs::{hosted, EngineWorld, HostedWorld, Ops};

fn per_call(calls: u64, mut f: impl FnMut(u64)) -> f64 {
    for i in 0..20_000 {
        f(i);
    }
    let t = Instant::now();
    for i in 0..calls {
        f(20_000 + i);
    }
    t.elapsed().as_nanos() as f64 / calls as f64
}

fn main() -> wasmtime::Result<()> {
    let calls: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let keys: Vec<String> = (0..100).map(|i| format!("user:{i}")).collect();
    let key = |i: u64| keys[(i % 100) as usize].as_str();

    let native = MemoryStore::new();
    let limit = CoreLimit::new(10, 1000).expect("valid");
    let ns = per_call(calls, |i| {
        black_box(native.consume(key(i), limit, i));
    });
    println!("native core consume: {:.3} µs/call", ns / 1000.0);

    let mut engine = EngineWorld::new()?;
    engine.fresh_store()?;
    let handle = engine.store_handle()?;
    let (store, memory) = engine.split();
    let memory = memory.memory_store();
    let wit = ratewindow_host_rs::engine::exports::ratewindow::engine::types::Limit {
        uses: 10.0,
        window_ms: 1000.0,
    };
    let ns = per_call(calls, |i| {
        black_box(
            memory
                .call_consume(&mut *store, handle, key(i), wit, i)
                .expect("no trap")
                .expect("valid"),
        );
    });
    println!(
        "wasmtime-rs consume (engine world): {:.3} µs/call",
        ns / 1000.0
    );

    let mut hosted_world = HostedWorld::new()?;
    hosted_world.fresh_store()?;
    let handle = hosted_world.store_handle()?;
    let (store, clocked) = hosted_world.split();
    let clocked = clocked.memory_store();
    let wit = hosted::exports::ratewindow::engine::types::Limit {
        uses: 10.0,
        window_ms: 1000.0,
    };
    let ns = per_call(calls, |i| {
        store.data_mut().clock_ms = i;
        black_box(
            clocked
                .call_consume(&mut *store, handle, key(i), wit)
                .expect("no trap")
                .expect("valid"),
        );
    });
    println!(
        "wasmtime-rs consume (hosted world, imported clock): {:.3} µs/call",
        ns / 1000.0
    );
    Ok(())
}
