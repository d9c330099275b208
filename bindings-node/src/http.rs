//! The HTTP middleware's decisions (`ratewindow_core::http`) for `ratewindow/express`,
//! `ratewindow/fastify` and the rest of `ts/http/`: strings and numbers in, strings out, one call per
//! request for the entries and one for the response fields. Nothing is decided here.
//!
//! Errors: a [`HttpError`] is thrown with code `http:<kind>` (`http:key_too_long`, ...) and the core's
//! message; [`http_error_status`] gives the status the core answers it with. A limit the core refuses
//! is `invalid_limit:<field>`, a key that is not valid Unicode (a lone surrogate) `invalid_argument:key`,
//! as everywhere in the addon (keys are read by [`Key`], bytes-exact).

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratewindow_core::http::{self, HeaderOptions, HttpError, HttpLimit, ProxyHeader, Trust};
use ratewindow_core::{BatchVerdict, Limit, Quota};

use crate::key::Key;
use crate::{guard, limit, thrown};

/// A core HTTP error as a JS error coded `http:<kind>`.
fn http_error(e: HttpError) -> Error<String> {
    Error::new(format!("http:{}", e.kind()), e.to_string())
}

/// A limiter name read as a [`Key`] (one napi call into a stack buffer, no allocation: the name
/// crosses on every request): one that is not valid Unicode is an invalid name, as the core says of
/// any name outside printable ASCII.
fn name_of(name: &Key) -> Result<&str, String> {
    name.get().map_err(|_| {
        http_error(HttpError::InvalidName {
            name: "\u{fffd}".to_owned(),
            reason: "it holds a character outside printable ASCII",
        })
    })
}

/// A header value or peer read as a [`Key`]; one that is not valid Unicode (a lone surrogate, which
/// no HTTP parser gives) reads as U+FFFD, as napi's lossy `String` read it: no address.
fn text_of(value: &Key) -> &str {
    value.get().unwrap_or("\u{fffd}")
}

/// The limits as the core reads them: `uses[i]` per `window_ms[i]`, validated as every limit is.
fn limits(uses: &[f64], window_ms: &[f64]) -> Result<Vec<Limit>, String> {
    if uses.len() != window_ms.len() {
        return Err(Error::new(
            "invalid_argument:limits".to_owned(),
            "uses and windowMs differ in length".to_owned(),
        ));
    }
    uses.iter()
        .zip(window_ms)
        .map(|(&u, &w)| limit(u, w))
        .collect()
}

/// What [`http_entries`] answers: the store key of each entry and the index of the limit it is from.
#[napi(object)]
pub struct HttpEntries {
    /// `throttle:{name}:{key}` (escaped; a shared key rewritten to its fallback key), in order.
    pub keys: Vec<String>,
    /// `sources[i]`: the index, among the limits given, of the limit `keys[i]` counts against.
    pub sources: Vec<u32>,
}

/// The entries of one request to the limiter `name` (`ratewindow_core::http::request_entries`): limit
/// `i` is `uses[i]` per `window_ms[i]` under `keys[i]`, or unlimited when `keys[i]` is `null`.
#[napi]
pub fn http_entries(
    name: String,
    keys: Vec<Option<Key>>,
    uses: Vec<f64>,
    window_ms: Vec<f64>,
) -> Result<HttpEntries, String> {
    guard(|| {
        if keys.len() != uses.len() || uses.len() != window_ms.len() {
            return Err(Error::new(
                "invalid_argument:limits".to_owned(),
                "keys, uses and windowMs differ in length".to_owned(),
            ));
        }
        let mut given = Vec::with_capacity(keys.len());
        for (i, key) in keys.iter().enumerate() {
            given.push(match key {
                None => HttpLimit::Unlimited,
                Some(key) => {
                    HttpLimit::new(key.get().map_err(thrown)?, limit(uses[i], window_ms[i])?)
                }
            });
        }
        let plan = http::request_entries(&name, &given).map_err(http_error)?;
        Ok(HttpEntries {
            keys: plan.entries.into_iter().map(|e| e.key).collect(),
            sources: plan.sources.into_iter().map(|i| i as u32).collect(),
        })
    })
}

/// [`http_entries`] for the common request: one limit, `uses` per `window_ms` under `key`. Answers its
/// store key (no array crosses).
#[napi]
pub fn http_entry(name: Key, key: Key, uses: f64, window_ms: f64) -> Result<String, String> {
    guard(|| {
        let name = name_of(&name)?;
        // `request_entry`: the same key as `request_entries` of one limit, without its two lists.
        let limit = limit(uses, window_ms)?;
        let entry =
            http::request_entry(name, key.get().map_err(thrown)?, limit).map_err(http_error)?;
        Ok(entry.key)
    })
}

/// A JS number as the core's unsigned field: NaN, negatives and missing values are 0, the rest
/// saturates (the verdict comes from a store, possibly the user's own).
#[inline]
fn whole(v: f64) -> u64 {
    v as u64
}

/// The verdict a request got, from its fields as they cross: `quota` is `[limit, remaining,
/// refill_after_ms, reset_after_ms]`.
fn verdict(
    allowed: bool,
    retry_after_ms: f64,
    blocked: Option<usize>,
    quota: [f64; 4],
) -> BatchVerdict {
    let [limit, remaining, refill_after_ms, reset_after_ms] = quota;
    BatchVerdict {
        allowed,
        retry_after_ms: whole(retry_after_ms),
        retry_timestamp: None,
        blocked,
        quota: Quota {
            limit: limit as u32,
            remaining: remaining as u32,
            refill_after_ms: whole(refill_after_ms),
            reset_after_ms: whole(reset_after_ms),
        },
    }
}

/// `flags`: 1 the IETF fields, 2 the legacy `X-RateLimit-*`.
fn header_options(flags: u32) -> HeaderOptions {
    HeaderOptions {
        ietf: flags & 1 != 0,
        legacy: flags & 2 != 0,
    }
}

/// The response fields (`ratewindow_core::http::response_headers`) of a request to `name` whose
/// entries had the limits `uses[i]` per `window_ms[i]` and got the verdict given field by field
/// (`blocked` -1: none; the quota fields 0 when the store gave none), at `now_ms`. `flags`: 1 the IETF
/// fields, 2 the legacy `X-RateLimit-*`. Answers `[name, value, name, value, ...]`, as Node's
/// `rawHeaders`.
#[napi]
#[allow(clippy::too_many_arguments)]
pub fn http_headers(
    name: String,
    uses: Vec<f64>,
    window_ms: Vec<f64>,
    allowed: bool,
    retry_after_ms: f64,
    blocked: f64,
    quota_limit: f64,
    remaining: f64,
    refill_after_ms: f64,
    reset_after_ms: f64,
    now_ms: f64,
    flags: u32,
) -> Result<Vec<String>, String> {
    guard(|| {
        let limits = limits(&uses, &window_ms)?;
        let verdict = verdict(
            allowed,
            retry_after_ms,
            (blocked >= 0.0).then_some(blocked as usize),
            [quota_limit, remaining, refill_after_ms, reset_after_ms],
        );
        let options = header_options(flags);
        let fields = http::response_headers(&name, &limits, &verdict, whole(now_ms), options);
        let mut out = Vec::with_capacity(fields.len() * 2);
        for (field, value) in fields {
            out.push(field.to_owned());
            out.push(value);
        }
        Ok(out)
    })
}

/// The names of the response fields (`ratewindow_core::http::FIELD_NAMES`), in the order
/// [`http_headers1`] numbers them.
#[napi]
pub fn http_field_names() -> Vec<String> {
    http::FIELD_NAMES.iter().map(|&f| f.to_owned()).collect()
}

/// [`http_headers`] for one entry of `uses` per `window_ms`, the response fields as lines (`\n`; no
/// field value holds one) of the field's index in [`http_field_names`] (one digit) then its value, so
/// one string crosses instead of an array, and the host sets each field by a name string it made
/// once (a string of its own per request costs Fastify and Node a lookup of it as a property key).
#[napi]
#[allow(clippy::too_many_arguments)]
pub fn http_headers1(
    name: Key,
    uses: f64,
    window_ms: f64,
    allowed: bool,
    retry_after_ms: f64,
    quota_limit: f64,
    remaining: f64,
    refill_after_ms: f64,
    reset_after_ms: f64,
    now_ms: f64,
    flags: u32,
) -> Result<String, String> {
    guard(|| {
        let name = name_of(&name)?;
        let limits = [limit(uses, window_ms)?];
        let verdict = verdict(
            allowed,
            retry_after_ms,
            (!allowed).then_some(0),
            [quota_limit, remaining, refill_after_ms, reset_after_ms],
        );
        let options = header_options(flags);
        // Each field written straight after the last (`write_response_headers` reuses one value
        // buffer): two allocations a request, not one a field and a list.
        let mut out = Vec::with_capacity(64 + 2 * name.len());
        let value = Vec::with_capacity(32 + name.len());
        http::write_response_headers(
            name,
            &limits,
            &verdict,
            whole(now_ms),
            options,
            value,
            |field, value| {
                if !out.is_empty() {
                    out.push(b'\n');
                }
                // The field's index in `FIELD_NAMES` (one digit: six fields), not its name.
                let index = http::FIELD_NAMES
                    .iter()
                    .position(|&f| f == field)
                    .unwrap_or(0);
                out.push(b'0' + index as u8);
                out.extend_from_slice(&value);
                value
            },
        );
        // ASCII field names and values (the core's): never the empty default.
        Ok(String::from_utf8(out).unwrap_or_default())
    })
}

/// The status the core answers an HTTP error of `kind` with (`key_too_long`: 400, the rest 500).
#[napi]
pub fn http_error_status(kind: String) -> u32 {
    match kind.as_str() {
        "key_too_long" => u32::from(HttpError::KeyTooLong { bytes: 0, max: 0 }.status()),
        _ => 500,
    }
}

/// Whom the middleware believes about the client address (`ratewindow_core::http::Trust`), built once.
#[napi]
pub struct HttpTrust {
    trust: Trust,
}

#[napi]
impl HttpTrust {
    /// `hops` proxies in front (`null`: see `proxies`), or the trusted `proxies` (addresses and CIDR
    /// blocks; `null` with `hops` `null`: the peer alone); `header`: `forwarded` to read RFC 7239
    /// `Forwarded`, else `X-Forwarded-For`; `ipv6_prefix`: answer IPv6 clients by this block (1 to 128).
    #[napi(constructor)]
    pub fn new(
        hops: Option<f64>,
        proxies: Option<Vec<String>>,
        header: Option<String>,
        ipv6_prefix: Option<f64>,
    ) -> Result<Self, String> {
        guard(|| {
            let mut trust = match (hops, proxies) {
                (Some(h), _) => {
                    if !(0.0..=f64::from(u32::MAX)).contains(&h) || h.fract() != 0.0 {
                        return Err(Error::new(
                            "invalid_argument:trustProxy".to_owned(),
                            format!("invalid trustProxy: {h} (expected a whole number of hops from 0 to 4294967295)"),
                        ));
                    }
                    Trust::hops(h as u32)
                }
                (None, Some(list)) => Trust::proxies(&list).map_err(http_error)?,
                (None, None) => Trust::peer(),
            };
            match header.as_deref() {
                None | Some("x-forwarded-for") => {}
                Some("forwarded") => trust = trust.with_header(ProxyHeader::Forwarded),
                Some(other) => {
                    return Err(Error::new(
                        "invalid_argument:proxyHeader".to_owned(),
                        format!("invalid proxyHeader: {other:?} (expected 'x-forwarded-for' or 'forwarded')"),
                    ))
                }
            }
            if let Some(p) = ipv6_prefix {
                let prefix = if p.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&p) {
                    p as u32
                } else {
                    0
                };
                trust = trust.with_ipv6_prefix(prefix).map_err(http_error)?;
            }
            Ok(HttpTrust { trust })
        })
    }

    /// The request header the trust reads (`x-forwarded-for` or `forwarded`, lower case), `null` when
    /// it believes the peer alone.
    #[napi(getter)]
    pub fn header(&self) -> Option<&'static str> {
        self.trust.header().map(|h| match h {
            ProxyHeader::XForwardedFor => "x-forwarded-for",
            ProxyHeader::Forwarded => "forwarded",
        })
    }

    /// The client's address (`ratewindow_core::http::client_address`) from the peer and the value of
    /// the header [`HttpTrust::header`] names (`null` when absent).
    #[napi]
    pub fn client_address(&self, peer: Key, forwarded: Option<Key>) -> Result<String, String> {
        guard(|| {
            let peer = text_of(&peer);
            let value = forwarded.as_ref().map(text_of);
            let (xff, fwd) = match self.trust.header() {
                Some(ProxyHeader::Forwarded) => (None, value),
                _ => (value, None),
            };
            http::client_address(peer, xff, fwd, &self.trust).map_err(http_error)
        })
    }
}
