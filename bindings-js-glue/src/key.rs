//! A key's UTF-8, as each build reads it from a JS string, bytes-exact.
//!
//! A JS string need not be valid UTF-16: it may hold a lone surrogate, which has no UTF-8. Both JS
//! engines' UTF-8 writers (V8's `napi_get_value_string_utf8` for the addon, `TextEncoder.encodeInto` in
//! the wasm wrapper) write U+FFFD for it, which would make `"a\uD800"`, `"a\uDC00"` and `"a\uFFFD"` one
//! key. So such a key is refused, never replaced: [`InlineKey::get`] and [`KeyBuffer::key`] answer a
//! [`Failure`] coded `invalid_argument:key` whose message is the core's
//! [`KeyError`](ratewindow_core::input::KeyError), naming the key's position (`key`, or
//! `entries[3].key` in a batch) and the surrogate's UTF-16 index.
//!
//! - [`InlineKey`] (napi): read in one host call into a stack buffer, with no heap allocation for
//!   short keys; read in full only when the buffer may have cut it short. Only a key whose UTF-8 holds
//!   U+FFFD (`EF BF BD`) is read again, as UTF-16, to tell a real U+FFFD from a replaced surrogate: an
//!   ASCII key costs one byte search of at most 127 bytes.
//! - [`KeyBuffer`] (wasm): the wrapper writes each call's key into a buffer in linear memory and passes
//!   its length; a key that is not well-formed is written as its UTF-16 code units instead, its length
//!   flagged with [`UTF16_FLAG`].

use ratewindow_core::input::{utf16_to_utf8, KeyError, KeyPosition};

use crate::{Failure, Res};

/// Bytes a key may take without a heap allocation.
pub const INLINE: usize = 128;

/// A key read into a stack buffer, or read in full when long: `&str` through [`InlineKey::get`].
pub struct InlineKey {
    len: usize,
    inline: [u8; INLINE],
    heap: Option<String>,
    /// The UTF-16 index of the key's first lone surrogate: the key is refused.
    lone_surrogate: Option<usize>,
}

/// Whether UTF-8 `bytes` hold U+FFFD, the replacement a UTF-8 writer puts for a lone surrogate.
#[inline(always)]
fn has_replacement(bytes: &[u8]) -> bool {
    // `contains` on bytes is a memchr: an ASCII key is one vectorised scan.
    bytes.contains(&0xEF) && bytes.windows(3).any(|w| w == [0xEF, 0xBF, 0xBD])
}

impl InlineKey {
    /// Reads a key: `fill` writes its UTF-8 into the buffer (at most `INLINE - 1` bytes and a NUL,
    /// never cutting a character, a lone surrogate written as U+FFFD) and returns the bytes written;
    /// `whole` reads it in full, called only when `fill` may have cut it short; `utf16` reads its code
    /// units, called only when the UTF-8 holds U+FFFD.
    #[inline(always)]
    pub fn read<E>(
        fill: impl FnOnce(&mut [u8; INLINE]) -> Result<usize, E>,
        whole: impl FnOnce() -> Result<String, E>,
        utf16: impl FnOnce() -> Result<Vec<u16>, E>,
    ) -> Result<InlineKey, E> {
        let mut key = InlineKey {
            len: 0,
            inline: [0; INLINE],
            heap: None,
            lone_surrogate: None,
        };
        let written = fill(&mut key.inline)?;
        // A character takes at most 4 bytes, so a key that stopped 4 or more bytes before the end of
        // the room was copied whole; otherwise it may have been cut: read it in full.
        let replaced = if written + 4 < INLINE {
            key.len = written;
            has_replacement(&key.inline[..written.min(INLINE)])
        } else {
            let text = whole()?;
            let replaced = has_replacement(text.as_bytes());
            key.heap = Some(text);
            replaced
        };
        if replaced {
            key.recheck(utf16()?);
        }
        Ok(key)
    }

    /// Reads the key again from its UTF-16: exact text, or the lone surrogate's index.
    #[cold]
    fn recheck(&mut self, units: Vec<u16>) {
        match utf16_to_utf8(&units) {
            Ok(text) => self.heap = Some(text),
            Err(at) => self.lone_surrogate = Some(at),
        }
    }

    /// The key as text, or the failure naming `position` when it is not valid Unicode.
    #[inline]
    pub fn get(&self, position: KeyPosition) -> Res<&str> {
        match self.lone_surrogate {
            None => Ok(self.text()),
            Some(at) => Err(key_failure(position, at)),
        }
    }

    #[inline]
    fn text(&self) -> &str {
        match &self.heap {
            Some(s) => s,
            // Written as UTF-8 and never cut inside a character, so this check only guards the
            // contract; it cannot fail.
            None => std::str::from_utf8(&self.inline[..self.len.min(INLINE)]).unwrap_or_default(),
        }
    }
}

/// The failure for a key that is not valid Unicode: code `invalid_argument:key`, the core's message.
#[cold]
pub fn key_failure(position: KeyPosition, at: usize) -> Failure {
    Failure::new(
        "invalid_argument:key",
        KeyError { position, at }.to_string(),
    )
}

/// Set in a key's length by the wasm wrapper when it wrote the key's UTF-16 code units (little-endian)
/// rather than its UTF-8, because the key is not well-formed.
pub const UTF16_FLAG: u32 = 1 << 31;

/// Why [`KeyBuffer::key`] refused a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyIssue {
    /// Past the buffer, or not UTF-8 (the wrapper never writes such a key).
    Unreadable,
    /// A lone surrogate at this UTF-16 index.
    LoneSurrogate(usize),
}

impl KeyIssue {
    /// The failure to throw, naming `position`.
    #[cold]
    pub fn failure(self, position: KeyPosition) -> Failure {
        match self {
            KeyIssue::LoneSurrogate(at) => key_failure(position, at),
            KeyIssue::Unreadable => Failure::new(
                "invalid_argument:key",
                format!("invalid {position}: the engine could not read the key"),
            ),
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

    /// The key the wrapper wrote: the first `len` bytes as UTF-8; with [`UTF16_FLAG`] set, the first
    /// `len` bytes as UTF-16 code units, which name the lone surrogate that made the wrapper write them.
    #[inline(always)]
    pub fn key(&self, len: u32) -> Result<&str, KeyIssue> {
        if len & UTF16_FLAG != 0 {
            return Err(self.utf16_issue((len & !UTF16_FLAG) as usize));
        }
        let bytes = self.0.get(..len as usize).ok_or(KeyIssue::Unreadable)?;
        std::str::from_utf8(bytes).map_err(|_| KeyIssue::Unreadable)
    }

    #[cold]
    fn utf16_issue(&self, bytes: usize) -> KeyIssue {
        let Some(bytes) = self.0.get(..bytes) else {
            return KeyIssue::Unreadable;
        };
        let units: Vec<u16> = bytes
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        match utf16_to_utf8(&units) {
            Err(at) => KeyIssue::LoneSurrogate(at),
            // The wrapper writes UTF-16 only for a key that is not well-formed.
            Ok(_) => KeyIssue::Unreadable,
        }
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
        let short = InlineKey::read(
            fill("user:1"),
            || -> Result<String, ()> { panic!("not read") },
            || panic!("not read"),
        );
        assert_eq!(short.unwrap().get(KeyPosition::Key), Ok("user:1"));
        let long = "k".repeat(200);
        let key = InlineKey::read(
            fill("kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"),
            || Ok(long.clone()),
            || panic!("not read"),
        );
        assert_eq!(key.unwrap().get(KeyPosition::Key), Ok(long.as_str()));
    }

    #[test]
    fn a_replaced_surrogate_is_refused_and_a_real_replacement_character_kept() {
        let fill = |text: &'static str| {
            move |buf: &mut [u8; INLINE]| -> Result<usize, ()> {
                buf[..text.len()].copy_from_slice(text.as_bytes());
                Ok(text.len())
            }
        };
        // "s\uD800" as V8 writes it: "s\u{FFFD}"; its UTF-16 tells the truth.
        let lone =
            InlineKey::read(fill("s\u{FFFD}"), || panic!(), || Ok(vec![0x73, 0xD800])).unwrap();
        let e = lone.get(KeyPosition::Entry(3)).unwrap_err();
        assert_eq!(e.code, "invalid_argument:key");
        assert!(
            e.message
                .starts_with("invalid entries[3].key: not valid Unicode"),
            "{}",
            e.message
        );
        assert!(e.message.contains("index 1"), "{}", e.message);
        let real =
            InlineKey::read(fill("s\u{FFFD}"), || panic!(), || Ok(vec![0x73, 0xFFFD])).unwrap();
        assert_eq!(real.get(KeyPosition::Key), Ok("s\u{FFFD}"));
        let long_lone = InlineKey::read(
            |_| Ok::<usize, ()>(INLINE - 1),
            || Ok(format!("{}\u{FFFD}", "x".repeat(200))),
            || Ok("x".repeat(200).encode_utf16().chain([0xDC00]).collect()),
        )
        .unwrap();
        assert!(long_lone
            .get(KeyPosition::Key)
            .unwrap_err()
            .message
            .contains("index 200"));
    }

    #[test]
    fn the_key_buffer_refuses_what_the_wrapper_never_writes() {
        let mut buffer = KeyBuffer::default();
        buffer.reserve(4);
        buffer.bytes_mut()[..3].copy_from_slice(&[0x66, 0xff, 0x6f]);
        assert_eq!(buffer.key(3), Err(KeyIssue::Unreadable));
        assert_eq!(buffer.key(!UTF16_FLAG), Err(KeyIssue::Unreadable));
        buffer.bytes_mut()[..3].copy_from_slice(b"abc");
        assert_eq!(buffer.key(3), Ok("abc"));
        let address = buffer.reserve(10_000);
        assert_eq!(buffer.reserve(16), address, "it only grows");
        assert_eq!(buffer.key(3), Ok("abc"), "growing keeps the bytes");
        // "s\uDC00" as UTF-16 code units, flagged.
        buffer.bytes_mut()[..4].copy_from_slice(&[0x73, 0, 0x00, 0xDC]);
        assert_eq!(buffer.key(4 | UTF16_FLAG), Err(KeyIssue::LoneSurrogate(1)));
        let e = KeyIssue::LoneSurrogate(1).failure(KeyPosition::Entry(0));
        assert!(
            e.message.starts_with("invalid entries[0].key"),
            "{}",
            e.message
        );
    }
}
