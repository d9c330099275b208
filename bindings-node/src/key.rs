//! [`Key`]: a JS string read as UTF-8 into a stack buffer in one napi call, with no heap allocation for
//! short keys (`ratewindow_js_glue::key::InlineKey`, which says how lone surrogates read).
//!
//! napi-rs' `String` asks V8 for the UTF-8 length, allocates, then copies: two calls and a malloc per
//! key. Keys are nearly always short, so this reads them in one call into a fixed buffer, and falls
//! back to `String` only when the buffer might have cut the key short.

use napi::bindgen_prelude::{FromNapiValue, Result, TypeName, ValidateNapiValue, ValueType};
use napi::{sys, Error, Status};
use ratewindow_js_glue::key::{InlineKey, INLINE};

/// A key argument: `&str` through [`Key::as_str`].
pub struct Key(InlineKey);

impl Key {
    /// The key as text.
    #[inline]
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl TypeName for Key {
    fn type_name() -> &'static str {
        "string"
    }

    fn value_type() -> ValueType {
        ValueType::String
    }
}

impl ValidateNapiValue for Key {}

impl FromNapiValue for Key {
    #[inline(always)]
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> Result<Self> {
        let fill = |buffer: &mut [u8; INLINE]| {
            let mut written = 0usize;
            // SAFETY: `env` and `value` come from napi-rs for this call; the buffer is INLINE bytes
            // long and V8 writes at most INLINE - 1 of them plus a NUL.
            let status = unsafe {
                sys::napi_get_value_string_utf8(
                    env,
                    value,
                    buffer.as_mut_ptr().cast(),
                    INLINE,
                    &mut written,
                )
            };
            if status == sys::Status::napi_ok {
                Ok(written)
            } else {
                Err(Error::new(
                    Status::StringExpected,
                    "a key must be a string".to_owned(),
                ))
            }
        };
        // SAFETY: as above.
        let whole = || unsafe { String::from_napi_value(env, value) };
        InlineKey::read(fill, whole).map(Key)
    }
}
