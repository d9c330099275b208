//! [`Key`]: a JS string read as UTF-8 into a stack buffer in one napi call, with no heap allocation for
//! short keys (`ratewindow_js_glue::key::InlineKey`); [`Keys`]: a batch's keys. A key holding a lone
//! surrogate is refused (code `invalid_argument:key`, naming `key` or `entries[i].key`), never
//! replaced: only a key whose UTF-8 holds U+FFFD is read a second time, as UTF-16, to tell.
//!
//! napi-rs' `String` asks V8 for the UTF-8 length, allocates, then copies: two calls and a malloc per
//! key. Keys are nearly always short, so this reads them in one call into a fixed buffer, and falls
//! back to `String` only when the buffer might have cut the key short.

use napi::bindgen_prelude::{FromNapiValue, Result, TypeName, ValidateNapiValue, ValueType};
use std::ptr;

use napi::{sys, Error, Status};
use ratewindow_core::input::KeyPosition;
use ratewindow_js_glue::key::{InlineKey, INLINE};
use ratewindow_js_glue::Res;

/// A key argument: `&str` through [`Key::get`] (a single call's key) or [`Key::entry`] (a batch's).
pub struct Key(InlineKey);

impl Key {
    /// The key as text, or the failure naming `key` when it is not valid Unicode.
    #[inline]
    pub fn get(&self) -> Res<&str> {
        self.0.get(KeyPosition::Key)
    }

    /// The key of a batch's entry `index`, or the failure naming `entries[index].key`.
    #[inline]
    pub fn entry(&self, index: usize) -> Res<&str> {
        self.0.get(KeyPosition::Entry(index))
    }
}

/// A JS string's UTF-16 code units (read only for a key whose UTF-8 holds U+FFFD).
///
/// # Safety
/// `env` and `value` must be napi-rs' for this call, `value` a string.
#[cold]
unsafe fn utf16(env: sys::napi_env, value: sys::napi_value) -> Result<Vec<u16>> {
    let mut len = 0usize;
    // SAFETY: a null buffer asks for the length only.
    let status =
        unsafe { sys::napi_get_value_string_utf16(env, value, ptr::null_mut(), 0, &mut len) };
    if status != sys::Status::napi_ok {
        return Err(Error::new(
            Status::StringExpected,
            "a key must be a string".to_owned(),
        ));
    }
    let mut units = vec![0u16; len + 1];
    let mut written = 0usize;
    // SAFETY: the buffer holds len + 1 units; V8 writes at most len and a NUL.
    let status = unsafe {
        sys::napi_get_value_string_utf16(env, value, units.as_mut_ptr(), len + 1, &mut written)
    };
    if status != sys::Status::napi_ok {
        return Err(Error::new(
            Status::StringExpected,
            "a key must be a string".to_owned(),
        ));
    }
    units.truncate(written);
    Ok(units)
}

/// A batch's keys (a JS array of strings), each read bytes-exact: `Vec<String>` through
/// [`Keys::get`], which names the first key that is not valid Unicode by its entry index.
pub struct Keys(Vec<Key>);

impl Keys {
    /// The keys as text, or the failure naming `entries[i].key`.
    pub fn get(self) -> Res<Vec<String>> {
        self.0
            .iter()
            .enumerate()
            .map(|(i, key)| key.entry(i).map(str::to_owned))
            .collect()
    }
}

impl TypeName for Keys {
    fn type_name() -> &'static str {
        "Array<string>"
    }

    fn value_type() -> ValueType {
        ValueType::Object
    }
}

impl ValidateNapiValue for Keys {}

impl FromNapiValue for Keys {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> Result<Self> {
        let mut len = 0u32;
        // SAFETY: `env` and `value` come from napi-rs for this call.
        let status = unsafe { sys::napi_get_array_length(env, value, &mut len) };
        if status != sys::Status::napi_ok {
            return Err(Error::new(
                Status::ArrayExpected,
                "keys must be an array of strings".to_owned(),
            ));
        }
        let mut keys = Vec::with_capacity(len as usize);
        for i in 0..len {
            let mut element = ptr::null_mut();
            // SAFETY: as above; `i` is below the array's length.
            let status = unsafe { sys::napi_get_element(env, value, i, &mut element) };
            if status != sys::Status::napi_ok {
                return Err(Error::new(
                    Status::ArrayExpected,
                    "keys must be an array of strings".to_owned(),
                ));
            }
            // SAFETY: `element` is a value of this call's scope.
            keys.push(unsafe { Key::from_napi_value(env, element) }?);
        }
        Ok(Keys(keys))
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
        // SAFETY: as above.
        let units = || unsafe { utf16(env, value) };
        InlineKey::read(fill, whole, units).map(Key)
    }
}
