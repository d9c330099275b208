//! The Redis half of the addon's call boundary: the scripts, for the host to run by SHA1 or in full.
//! The calls themselves are `NativeCalls::redis` (`src/call.rs`).

use napi_derive::napi;

/// The two scripts: `[sliding sha1, sliding source, fixed sha1, fixed source]`.
#[napi]
pub fn redis_scripts() -> Vec<String> {
    ratewindow_js_glue::calls::redis_scripts()
}
