//! `ratewindow_core::http` for the Python middleware (`ratewindow.asgi`, `.fastapi`, `.wsgi`,
//! `.flask`): a request's store entries (`HttpPlan`), its response fields (`HttpPlan.headers`) and the
//! client's address (`Trust.client_address`). Strings and numbers cross; the core decides everything.

use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyString, PyTuple, PyType};
use pyo3::PyTraverseError;
use ratewindow_core::http::{self, HeaderOptions, HttpLimit, ProxyHeader};
use ratewindow_core::input::KeyPosition;

use crate::entry::{key_str, Entry};
use crate::errors::guard;
use crate::limit::Limit;
use crate::verdict::Verdict;

static HTTP_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static UNLIMITED: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `ratewindow.HttpError(message, kind, status)`, the core's `HttpError` with its stable kind.
fn http_error(py: Python<'_>, error: &http::HttpError) -> PyErr {
    match HTTP_ERROR.import(py, "ratewindow._http", "HttpError") {
        Ok(class) => match class.call1((error.to_string(), error.kind(), error.status())) {
            Ok(instance) => PyErr::from_value(instance),
            Err(e) => e,
        },
        Err(e) => e,
    }
}

/// The entries of one request to a named limiter: `HttpPlan(name, limits)`.
///
/// `limits` are the named limiter's `ratewindow.Limit` objects (their `key` read, `Unlimited` ones
/// skipped). `entries` go to the store as one `consume_many`; `source(i)` is the index among `limits`
/// of the limit `entries[i]` came from; `headers(verdict, ietf, legacy)` the response fields.
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "HttpPlan")]
pub(crate) struct HttpPlan {
    name: String,
    entries: Py<PyList>,
    sources: Vec<usize>,
    limits: Vec<ratewindow_core::Limit>,
}

#[pymethods]
impl HttpPlan {
    #[new]
    fn new(name: &Bound<'_, PyAny>, limits: &Bound<'_, PyAny>) -> PyResult<HttpPlan> {
        guard(|| {
            let py = name.py();
            let name = name
                .cast::<PyString>()
                .map_err(|_| PyTypeError::new_err("a limiter's name must be a str"))?
                .to_str()?;
            let unlimited = UNLIMITED.import(py, "ratewindow._limits", "Unlimited")?;
            let given: Vec<Bound<'_, Limit>> = limits
                .try_iter()?
                .map(|item| {
                    item?.cast_into::<Limit>().map_err(|_| {
                        PyTypeError::new_err("a named limiter must return ratewindow.Limit objects")
                    })
                })
                .collect::<PyResult<_>>()?;
            let mut keys: Vec<Option<Bound<'_, PyString>>> = Vec::with_capacity(given.len());
            for limit in &given {
                if limit.is_instance(unlimited)? {
                    keys.push(None);
                    continue;
                }
                let key = limit.getattr(pyo3::intern!(py, "key"))?;
                keys.push(Some(key.cast_into::<PyString>().map_err(|_| {
                    PyTypeError::new_err("a limit's key must be a str")
                })?));
            }
            let mut asked = Vec::with_capacity(given.len());
            for (limit, key) in given.iter().zip(&keys) {
                asked.push(match key {
                    // A lone surrogate: `InvalidArgumentError` naming `key`, as every store refuses it.
                    Some(key) => HttpLimit::new(key_str(key, KeyPosition::Key)?, limit.get().inner),
                    None => HttpLimit::Unlimited,
                });
            }
            let planned = http::request_entries(name, &asked).map_err(|e| http_error(py, &e))?;
            let entries = PyList::empty(py);
            for (entry, &source) in planned.entries.iter().zip(&planned.sources) {
                let made = Entry {
                    key: PyString::new(py, &entry.key).unbind(),
                    limit: given[source].clone().into_any().unbind(),
                    cost: 1,
                };
                entries.append(Bound::new(py, made)?)?;
            }
            Ok(HttpPlan {
                name: name.to_owned(),
                limits: planned.limits(),
                entries: entries.unbind(),
                sources: planned.sources,
            })
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.entries)
    }

    /// The store entries (`ratewindow.Entry`), for one `consume_many`; empty when every limit is
    /// `Unlimited` (then nothing is counted and no field is sent).
    #[getter]
    fn entries(&self, py: Python<'_>) -> Py<PyList> {
        self.entries.clone_ref(py)
    }

    /// The index, among the limits given, of the limit entry `index` was made from.
    fn source(&self, index: usize) -> PyResult<usize> {
        self.sources
            .get(index)
            .copied()
            .ok_or_else(|| PyValueError::new_err(format!("no entry {index}")))
    }

    /// The response fields of `verdict` (the store's answer to `entries`), `(name, value)` pairs:
    /// `Retry-After` on a refusal, the IETF fields with `ietf`, `X-RateLimit-*` with `legacy`.
    /// `now_ms` (the legacy reset's clock) defaults to the host's.
    #[pyo3(signature = (verdict, ietf = true, legacy = false, now_ms = None))]
    fn headers<'py>(
        &self,
        py: Python<'py>,
        verdict: &Bound<'py, Verdict>,
        ietf: bool,
        legacy: bool,
        now_ms: Option<u64>,
    ) -> PyResult<Bound<'py, PyList>> {
        guard(|| {
            let now = now_ms.unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            });
            let fields = http::response_headers(
                &self.name,
                &self.limits,
                &verdict.get().to_core(),
                now,
                HeaderOptions { ietf, legacy },
            );
            let out = PyList::empty(py);
            for (field, value) in fields {
                out.append(PyTuple::new(py, [field, value.as_str()])?)?;
            }
            Ok(out)
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "HttpPlan(name={:?}, entries={})",
            self.name,
            self.sources.len()
        )
    }
}

/// Whom `client_address` believes: `Trust()` the peer alone (the default), `Trust(hops=n)` n reverse
/// proxies in front, `Trust(proxies=["10.0.0.0/8", "::1"])` the proxies at these addresses;
/// `header` the header they write (`"x-forwarded-for"` or `"forwarded"`), `ipv6_prefix` the block an
/// IPv6 client is counted by (128: the whole address; 64: its /64).
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "Trust")]
pub(crate) struct Trust {
    inner: http::Trust,
}

#[pymethods]
impl Trust {
    #[new]
    #[pyo3(signature = (*, hops = 0, proxies = None, header = "x-forwarded-for", ipv6_prefix = 128))]
    fn new(
        py: Python<'_>,
        hops: u32,
        proxies: Option<&Bound<'_, PyAny>>,
        header: &str,
        ipv6_prefix: u32,
    ) -> PyResult<Trust> {
        guard(|| {
            let base = match proxies {
                Some(list) => {
                    if hops != 0 {
                        return Err(PyValueError::new_err("give hops or proxies, not both"));
                    }
                    if list.is_instance_of::<PyString>() {
                        return Err(PyTypeError::new_err(
                            "proxies must be a list of addresses, not a str",
                        ));
                    }
                    let texts: Vec<String> = list
                        .try_iter()?
                        .map(|item| item?.extract::<String>())
                        .collect::<PyResult<_>>()?;
                    http::Trust::proxies(&texts).map_err(|e| http_error(py, &e))?
                }
                None => http::Trust::hops(hops),
            };
            let header = match header.to_ascii_lowercase().as_str() {
                "x-forwarded-for" => ProxyHeader::XForwardedFor,
                "forwarded" => ProxyHeader::Forwarded,
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "header must be \"x-forwarded-for\" or \"forwarded\", not {header:?}"
                    )))
                }
            };
            let inner = base
                .with_header(header)
                .with_ipv6_prefix(ipv6_prefix)
                .map_err(|e| http_error(py, &e))?;
            Ok(Trust { inner })
        })
    }

    /// The header (lower case) `client_address` reads, `None` when it believes the peer alone.
    #[getter]
    fn header(&self) -> Option<&'static str> {
        self.inner.header().map(|h| match h {
            ProxyHeader::XForwardedFor => "x-forwarded-for",
            ProxyHeader::Forwarded => "forwarded",
        })
    }

    /// The client's address from the peer's (`None`: there is none) and the request's
    /// `X-Forwarded-For` / `Forwarded` values (repeated lines joined by `", "`), normalised.
    /// A peer that is not an IP address is the client as its text; no peer at all (`None`, a Unix
    /// socket) walks on into a trusted hop's header, else `HttpError` (`no_peer`).
    #[pyo3(signature = (peer, forwarded_for = None, forwarded = None))]
    fn client_address(
        &self,
        py: Python<'_>,
        peer: Option<&str>,
        forwarded_for: Option<&str>,
        forwarded: Option<&str>,
    ) -> PyResult<String> {
        guard(|| {
            http::client_address(peer.unwrap_or(""), forwarded_for, forwarded, &self.inner)
                .map_err(|e| http_error(py, &e))
        })
    }

    fn __repr__(&self) -> String {
        format!("Trust({:?})", self.inner)
    }
}
