//! The component in wasmtime: one test binary (wasmtime is big to link), a module per surface.

mod bad_input;
mod common;
mod conversations;
mod differential;
mod hosted;
mod lock;
mod rates;
mod redis;
mod vectors;
