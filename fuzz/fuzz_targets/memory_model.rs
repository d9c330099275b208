//! Random operation sequences on the memory store (batches of up to 24 entries with repeated keys, so
//! both the scan and the hashed path of a batch run), each answer compared with the plain model of
//! `core/tests/model/mod.rs`.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use ratewindow_core::MemoryStore;
use ratewindow_fuzz::{model, model_op};

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let store = MemoryStore::with_shards(u.int_in_range(1..=4)?);
    let mut reference = model::Model::new();
    let mut now: u64 = u.int_in_range(0..=1_000_000)?;
    while !u.is_empty() {
        now += u.int_in_range(0..=40)?;
        let op = model_op(u)?;
        let want = reference.apply(&op, now);
        let got = model::apply(&store, &op, now);
        assert_eq!(got, want, "{op:?} at {now}");
    }
    Ok(())
}
