//! [`Key`]: a JS string read as UTF-8 into a stack buffer, with no heap allocation for short keys.
//!
//! napi-rs' `String` asks V8 for the UTF-8 length, allocates, then copies: two calls and a malloc per
//! key. Keys are nearly always short, so this reads them in one call into a fixed buffer, and falls
//! back to `String` only when the buffer might have cut the key short.

use napi::bindgen_prelude::{FromNapiValue, Result, TypeName, ValidateNapiValue, ValueType};
use napi::{sys, Error, Status};

/// Bytes a key may take without a heap allocation.
const INLINE: usize = 128;

/// A key argument: `&str` through [`Key::as_str`].
pub struct Key {
    len: usize,
    inline: [u8; INLINE],
    heap: Option<String>,
}

impl Key {
    /// The key as text.
    #[inline]
    pub fn as_str(&self) -> &str {
        match &self.heap {
            Some(s) => s,
            // Written by V8 as UTF-8 with invalid sequences replaced, and never cut inside a character
            // (see `from_napi_value`), so this check only guards the contract; it cannot fail.
            None => std::str::from_utf8(&self.inline[..self.len]).unwrap_or_default(),
        }
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
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> Result<Self> {
        let mut key = Key {
            len: 0,
            inline: [0; INLINE],
            heap: None,
        };
        let mut written = 0usize;
        // SAFETY: `env` and `value` come from napi-rs for this call; the buffer is INLINE bytes long and
        // V8 writes at most INLINE - 1 of them plus a NUL.
        let status = unsafe {
            sys::napi_get_value_string_utf8(
                env,
                value,
                key.inline.as_mut_ptr().cast(),
                INLINE,
                &mut written,
            )
        };
        if status != sys::Status::napi_ok {
            return Err(Error::new(
                Status::StringExpected,
                "a key must be a string".to_owned(),
            ));
        }
        // V8 never splits a character (at most 4 bytes), so a key that stopped 4 or more bytes before
        // the end of the room was copied whole; otherwise it may have been cut: read it in full.
        if written + 4 < INLINE {
            key.len = written;
        } else {
            // SAFETY: as above.
            key.heap = Some(unsafe { String::from_napi_value(env, value) }?);
        }
        Ok(key)
    }
}
