//! SQL values across the boundary: a statement's parameters as Python values (`int`, `str`, `bool`,
//! `list[int]`, `list[str]`, `None`), and the rows a driver returns (any iterable of rows, each an
//! iterable of `bool`/`int`/`str`/`bytes`/`None`) read into the core's `SqlValue`s.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyList, PyString, PyTuple};
use ratewindow_core::sql::{SqlValue, Statement};

fn value(py: Python<'_>, v: &SqlValue) -> PyResult<Py<PyAny>> {
    Ok(match v {
        SqlValue::Null => py.None(),
        SqlValue::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        SqlValue::Int(i) => i.into_pyobject(py)?.into_any().unbind(),
        SqlValue::Text(s) => PyString::new(py, s).into_any().unbind(),
        SqlValue::Ints(v) => PyList::new(py, v)?.into_any().unbind(),
        SqlValue::Texts(v) => PyList::new(py, v)?.into_any().unbind(),
    })
}

/// The statements as `[(sql, params), …]`.
pub(crate) fn statements<'py>(
    py: Python<'py>,
    statements: &[Statement],
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for st in statements {
        let params = PyList::empty(py);
        for v in &st.params {
            params.append(value(py, v)?)?;
        }
        out.append((PyString::new(py, &st.sql), params))?;
    }
    Ok(out)
}

/// One column value as the machine reads it. Objects no driver returns for these statements (floats,
/// dates, …) become a text the machine refuses, so they end in `StoreReplyError` too.
fn column(obj: &Bound<'_, PyAny>) -> SqlValue {
    if obj.is_none() {
        return SqlValue::Null;
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return SqlValue::Bool(b.is_true());
    }
    if let Ok(int) = obj.cast::<PyInt>() {
        if let Ok(v) = int.extract::<i64>() {
            return SqlValue::Int(v);
        }
    } else if let Ok(text) = obj.cast::<PyString>() {
        return SqlValue::Text(text.to_string_lossy().into_owned());
    } else if let Ok(bytes) = obj.cast::<PyBytes>() {
        return SqlValue::Text(String::from_utf8_lossy(bytes.as_bytes()).into_owned());
    } else if let Ok(list) = obj.cast::<PyList>() {
        if let Ok(ints) = list.extract::<Vec<i64>>() {
            return SqlValue::Ints(ints);
        }
        if let Ok(texts) = list.extract::<Vec<String>>() {
            return SqlValue::Texts(texts);
        }
    }
    let kind = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned());
    let shown = obj.repr().map(|r| r.to_string()).unwrap_or_default();
    SqlValue::Text(format!("<{kind} {shown}>"))
}

/// The rows as the core reads them: any iterable of rows, each an iterable of column values (tuples,
/// lists, `sqlite3.Row`, …). A row that is not iterable becomes a one-column row the machine refuses.
pub(crate) fn rows(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<SqlValue>>> {
    let mut out = Vec::new();
    for row in obj.try_iter()? {
        let row = row?;
        if let Ok(tuple) = row.cast::<PyTuple>() {
            out.push(tuple.iter().map(|c| column(&c)).collect());
        } else if row.is_instance_of::<PyString>() || row.is_instance_of::<PyBytes>() {
            out.push(vec![column(&row)]);
        } else {
            match row.try_iter() {
                Ok(columns) => out.push(
                    columns
                        .map(|c| c.map(|c| column(&c)))
                        .collect::<PyResult<_>>()?,
                ),
                Err(_) => out.push(vec![column(&row)]),
            }
        }
    }
    Ok(out)
}
