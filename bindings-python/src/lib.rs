//! `ratewindow._ratewindow`: the PyO3 module behind the `ratewindow` Python package.
//!
//! A thin forwarding layer: each function converts its Python arguments, calls `ratewindow-core`, and
//! converts the answer back. Validation of limits is the core's (`Limit::new`, `Limit::from_f64`,
//! `Window::from_ms`, `Window::from_f64`); this crate only decides which of them a Python number goes to.
//! No Rust panic reaches Python: every entry point runs under [`guard`], which turns one into
//! `ratewindow.InternalError` (a `RateWindowError`).
#![forbid(unsafe_code)]

mod call;
mod entry;
mod errors;
mod guard;
mod http;
mod limit;
mod lock;
mod rates;
mod redis;
mod shard;
mod sql;
mod store;
mod verdict;

use pyo3::prelude::*;

pub(crate) use errors::guard;

/// Panics inside a guarded entry point, so a test can prove a panic arrives as `InternalError`.
#[pyfunction]
fn _panic_for_tests() -> PyResult<()> {
    guard(|| -> PyResult<()> { panic!("deliberate panic for the no-panic test") })
}

/// The module. Every type is safe to share across threads (see `MemoryStore`), so it declares that it
/// does not need the GIL.
#[pymodule(gil_used = false)]
fn _ratewindow(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<limit::Limit>()?;
    m.add_class::<rates::GcraLimit>()?;
    m.add_class::<rates::CounterLimit>()?;
    m.add_class::<entry::Entry>()?;
    m.add_class::<verdict::Verdict>()?;
    m.add_class::<store::MemoryStore>()?;
    m.add_class::<verdict::HitResult>()?;
    m.add_class::<verdict::AttemptResult>()?;
    m.add_class::<verdict::PyReleaseToken>()?;
    m.add_class::<call::Machine>()?;
    m.add_class::<call::Call>()?;
    m.add_class::<call::Script>()?;
    m.add_class::<call::RedisCommand>()?;
    m.add_class::<call::Sql>()?;
    m.add_class::<guard::GuardCore>()?;
    m.add_class::<http::HttpPlan>()?;
    m.add_class::<http::Trust>()?;
    m.add_function(wrap_pyfunction!(redis::redis_scripts, m)?)?;
    m.add_class::<lock::MemoryLocks>()?;
    m.add_class::<lock::LockWait>()?;
    m.add_function(wrap_pyfunction!(lock::check_lock, m)?)?;
    m.add_function(wrap_pyfunction!(lock::lock_call, m)?)?;
    m.add_function(wrap_pyfunction!(lock::lock_commands, m)?)?;
    m.add_function(wrap_pyfunction!(lock::lock_answer, m)?)?;
    m.add_function(wrap_pyfunction!(limit::check_window, m)?)?;
    m.add_function(wrap_pyfunction!(rates::rate_call, m)?)?;
    m.add_class::<shard::ShardClient>()?;
    m.add_function(wrap_pyfunction!(shard::shard_decode, m)?)?;
    m.add_function(wrap_pyfunction!(shard::shard_answer, m)?)?;
    m.add_function(wrap_pyfunction!(shard::shard_answer_error, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_tests, m)?)?;
    m.add("MAX_WINDOW_MS", ratewindow_core::MAX_WINDOW_MS)?;
    m.add("MAX_USES", u32::MAX)?;
    Ok(())
}
