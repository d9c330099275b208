//! The SQL stores' calls are `NativeCalls::postgres` and `NativeCalls::sqlite` (`src/call.rs`), with
//! their schema, connection setup and purge; nothing else is left here.
