//! What the fuzz targets share: values built from the fuzzer's bytes. Replies and rows lean towards
//! the shapes real servers send (small integers, the keys' own timestamps, short arrays), so the
//! fuzzer spends its time inside the decoders' checks rather than at their first test.

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use ratewindow_core::call::{Op, ReleaseToken, WindowQuery};
use ratewindow_core::redis::{RedisRelease, Reply};
use ratewindow_core::sql::{SqlRelease, SqlValue};
use ratewindow_core::{Entry, Limit, Window};

/// An integer, mostly small or near a boundary.
pub fn int(u: &mut Unstructured<'_>) -> Result<i64> {
    Ok(match u.int_in_range(0..=9)? {
        0 => i64::MIN,
        1 => i64::MAX,
        2 => -1,
        3 => 0,
        4 => u.int_in_range(-3..=3)?,
        5 => u.int_in_range(0..=2_000)?,
        6 => (1 << 53) + u.int_in_range(-2..=2)?,
        _ => u.arbitrary()?,
    })
}

/// A short string: a number, a client's error spelling, or anything.
pub fn text(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(match u.int_in_range(0..=5)? {
        0 => int(u)?.to_string(),
        1 => "NOSCRIPT No matching script. Please use EVAL.".to_owned(),
        2 => "CROSSSLOT Keys in request don't hash to the same slot".to_owned(),
        3 => "OK".to_owned(),
        4 => format!("{}.{}", int(u)?, u.int_in_range(0..=9)?),
        _ => u.arbitrary()?,
    })
}

/// A Redis reply of any shape, at most `depth` arrays deep.
pub fn reply(u: &mut Unstructured<'_>, depth: u32) -> Result<Reply> {
    let kinds = if depth == 0 { 2 } else { 3 };
    Ok(match u.int_in_range(0..=kinds)? {
        0 => Reply::Nil,
        1 => Reply::Int(int(u)?),
        2 => Reply::Text(text(u)?),
        _ => {
            let n = u.int_in_range(0..=8)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(reply(u, depth - 1)?);
            }
            Reply::Array(items)
        }
    })
}

/// A SQL value of any kind.
pub fn sql_value(u: &mut Unstructured<'_>) -> Result<SqlValue> {
    Ok(match u.int_in_range(0..=5)? {
        0 => SqlValue::Null,
        1 => SqlValue::Bool(u.arbitrary()?),
        2 => SqlValue::Int(int(u)?),
        3 => SqlValue::Text(text(u)?),
        4 => {
            let n = u.int_in_range(0..=6)?;
            SqlValue::Ints((0..n).map(|_| int(u)).collect::<Result<_>>()?)
        }
        _ => {
            let n = u.int_in_range(0..=4)?;
            SqlValue::Texts((0..n).map(|_| text(u)).collect::<Result<_>>()?)
        }
    })
}

/// Rows: up to 4 rows of up to 8 columns.
pub fn rows(u: &mut Unstructured<'_>) -> Result<Vec<Vec<SqlValue>>> {
    let n = u.int_in_range(0..=4)?;
    (0..n)
        .map(|_| {
            let cols = u.int_in_range(0..=8)?;
            (0..cols).map(|_| sql_value(u)).collect()
        })
        .collect()
}

/// A valid limit, mostly small.
pub fn limit(u: &mut Unstructured<'_>) -> Result<Limit> {
    let uses = match u.int_in_range(0..=3)? {
        0 => u32::MAX as u64,
        _ => u.int_in_range(1..=5)?,
    };
    let window = match u.int_in_range(0..=3)? {
        0 => ratewindow_core::MAX_WINDOW_MS,
        1 => 1,
        _ => u.int_in_range(1..=5_000)?,
    };
    Ok(Limit::new(uses, window).expect("in range"))
}

/// A valid window.
pub fn window(u: &mut Unstructured<'_>) -> Result<Window> {
    Ok(limit(u)?.window())
}

/// A key from a small set (so batches repeat keys) or anything.
pub fn key(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(match u.int_in_range(0..=4)? {
        0 => "a".to_owned(),
        1 => "b".to_owned(),
        2 => "click:alice".to_owned(),
        3 => String::new(),
        _ => u.arbitrary()?,
    })
}

/// A batch of up to 12 entries.
pub fn entries(u: &mut Unstructured<'_>) -> Result<Vec<Entry>> {
    let n = u.int_in_range(0..=12)?;
    (0..n).map(|_| Ok(Entry::new(key(u)?, limit(u)?))).collect()
}

/// Any store operation.
pub fn op(u: &mut Unstructured<'_>) -> Result<Op> {
    Ok(match u.int_in_range(0..=8)? {
        0 => Op::Consume {
            entries: entries(u)?,
            call_id: if u.arbitrary()? {
                "c0ffee".to_owned()
            } else {
                u.arbitrary()?
            },
        },
        1 => Op::Peek {
            entries: entries(u)?,
        },
        2 => Op::Release {
            token: if u.arbitrary()? {
                ReleaseToken::Redis(RedisRelease {
                    keys: (0..u.int_in_range(0..=3)?)
                        .map(|_| key(u))
                        .collect::<Result<_>>()?,
                    call_id: u.arbitrary()?,
                })
            } else {
                ReleaseToken::Sql(SqlRelease {
                    keys: (0..u.int_in_range(0..=3)?)
                        .map(|_| key(u))
                        .collect::<Result<_>>()?,
                    call_id: u.arbitrary()?,
                })
            },
        },
        3 => Op::Hit {
            key: key(u)?,
            decay: window(u)?,
            amount: int(u)?,
        },
        4 => Op::Attempt {
            key: key(u)?,
            max: int(u)?,
            decay: window(u)?,
        },
        5 => Op::Read {
            key: key(u)?,
            query: match u.int_in_range(0..=4)? {
                0 => WindowQuery::Attempts,
                1 => WindowQuery::TooManyAttempts { max: int(u)? },
                2 => WindowQuery::Remaining { max: int(u)? },
                3 => WindowQuery::AvailableIn,
                _ => WindowQuery::AvailableInMs,
            },
        },
        6 => Op::ResetAttempts { key: key(u)? },
        _ => Op::Clear { key: key(u)? },
    })
}

/// The reference model of the memory store, shared with the core's differential proptest.
#[path = "../../core/tests/model/mod.rs"]
pub mod model;

/// A model operation from the fuzzer's bytes.
pub fn model_op(u: &mut Unstructured<'_>) -> Result<model::Op> {
    let keys = |u: &mut Unstructured<'_>| -> Result<Vec<usize>> {
        (0..u.int_in_range(0..=24)?)
            .map(|_| u.int_in_range(0..=model::KEYS - 1))
            .collect()
    };
    let k = |u: &mut Unstructured<'_>| u.int_in_range(0..=model::KEYS - 1);
    Ok(match u.int_in_range(0..=5)? {
        0 => model::Op::Consume(keys(u)?),
        1 => model::Op::Peek(keys(u)?),
        2 => model::Op::Hit(k(u)?, u.int_in_range(-3..=3)?),
        3 => model::Op::Attempt(k(u)?, u.int_in_range(-1..=4)?),
        4 => model::Op::Attempts(k(u)?),
        _ => model::Op::Clear(k(u)?),
    })
}
