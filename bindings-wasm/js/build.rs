//! Exports the module's shadow stack pointer (`__stack_pointer`) on wasm: after a trap the JS wrapper
//! resets it, since the aborted frames never pop theirs (see `ts/wasm.ts`).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo:rustc-link-arg-cdylib=--export=__stack_pointer");
    }
}
