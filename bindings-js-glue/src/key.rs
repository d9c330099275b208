//! A key's UTF-8, as each build reads it from a JS string.
//!
//! Both builds read a key the same way: a lone surrogate (a JS string need not be valid UTF-16) is
//! written as U+FFFD — V8's `napi_get_value_string_utf8` in the addon, `TextEncoder.encodeInto` in the
//! wasm wrapper — so `"a\uD800"` and `"a\uDC00"` are one key in either build, and the same key in both.
//!
//! - [`InlineKey`] (napi): read in one host call into a stack buffer, with no heap allocation for
//!   short keys; read in full only when the buffer may have cut it short.
//! - [`KeyBuffer`] (wasm): the wrapper writes each call's key into a buffer in linear memory and passes
//!   its length.

/// Bytes a key may take without a heap allocation.
pub const INLINE: usize = 128;

/// A key read into a stack buffer, or read in full when long: `&str` through [`InlineKey::as_str`].
pub struct InlineKey {
    len: usize,
    inline: [u8; INLINE],
    heap: Option<String>,
}

impl InlineKey {
    /// Reads a key: `fill` writes its UTF-8 into the buffer (at most `INLINE - 1` bytes and a NUL,
    /// never cutting a character) and returns the bytes written; `whole` reads it in full, called only
    /// when `fill` may have cut it short.
    #[inline(always)]
    pub fn read<E>(
        fill: impl FnOnce(&mut [u8; INLINE]) -> Result<usize, E>,
        whole: impl FnOnce() -> Result<String, E>,
    ) -> Result<InlineKey, E> {
        let mut key = InlineKey {
            len: 0,
            inline: [0; INLINE],
            heap: None,
        };
        let written = fill(&mut key.inline)?;
        // A character takes at most 4 bytes, so a key that stopped 4 or more bytes before the end of
        // the room was copied whole; otherwise it may have been cut: read it in full.
        if written + 4 < INLINE {
            key.len = written;
        } else {
            key.heap = Some(whole()?);
        }
        Ok(key)
    }

    /// The key as text.
    #[inline]
    pub fn as_str(&self) -> &str {
        match &self.heap {
            Some(s) => s,
            // Written as UTF-8 with invalid sequences replaced, and never cut inside a character, so
            // this check only guards the contract; it cannot fail.
            None => std::str::from_utf8(&self.inline[..self.len.min(INLINE)]).unwrap_or_default(),
        }
    }
}

/// The buffer in linear memory the wasm wrapper writes each call's key into. It only grows.
pub struct KeyBuffer(Vec<u8>);

impl Default for KeyBuffer {
    fn default() -> Self {
        KeyBuffer(vec![0; 256])
    }
}

impl KeyBuffer {
    /// Makes the buffer hold at least `capacity` bytes, keeping the bytes it holds, and returns its
    /// address. The address changes only when this grows it.
    pub fn reserve(&mut self, capacity: usize) -> *mut u8 {
        if self.0.len() < capacity {
            self.0.resize(capacity, 0);
        }
        self.0.as_mut_ptr()
    }

    /// The key the wrapper wrote: the first `len` bytes; `None` when they are past the buffer or not
    /// UTF-8 (the wrapper never writes such a key).
    #[inline(always)]
    pub fn key(&self, len: u32) -> Option<&str> {
        std::str::from_utf8(self.0.get(..len as usize)?).ok()
    }

    /// The buffer, for a test to write a key into.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_key_stays_inline_and_a_long_one_is_read_whole() {
        let fill = |text: &'static str| {
            move |buf: &mut [u8; INLINE]| -> Result<usize, ()> {
                let n = text.len().min(INLINE - 1);
                buf[..n].copy_from_slice(&text.as_bytes()[..n]);
                Ok(n)
            }
        };
        let short = InlineKey::read(fill("user:1"), || -> Result<String, ()> {
            panic!("not read")
        });
        assert_eq!(short.unwrap().as_str(), "user:1");
        let long = "k".repeat(200);
        let key = InlineKey::read(fill("kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"), || Ok(long.clone()));
        assert_eq!(key.unwrap().as_str(), long);
    }

    #[test]
    fn the_key_buffer_refuses_what_the_wrapper_never_writes() {
        let mut buffer = KeyBuffer::default();
        buffer.reserve(4);
        buffer.bytes_mut()[..3].copy_from_slice(&[0x66, 0xff, 0x6f]);
        assert_eq!(buffer.key(3), None);
        assert_eq!(buffer.key(u32::MAX), None);
        buffer.bytes_mut()[..3].copy_from_slice(b"abc");
        assert_eq!(buffer.key(3), Some("abc"));
        let address = buffer.reserve(10_000);
        assert_eq!(buffer.reserve(16), address, "it only grows");
        assert_eq!(buffer.key(3), Some("abc"), "growing keeps the bytes");
    }
}
