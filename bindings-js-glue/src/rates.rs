//! GCRA and the sliding-window counter on one memory store (cargo feature `rates`: the napi addon and
//! the wasm-bindgen package turn it on). Each method is one
//! `BackendStore` method of `bindings-node/ts/backend.ts`, answering as the cooldown methods do: `0`
//! allowed or the retry timestamp, the quota in the record; batches a release handle or minus the
//! retry timestamp.
//!
//! A limit crosses as `kind` (`1` GCRA, `2` the counter; `0` the sliding log in a batch) and the numbers
//! `uses`, `windowMs`, `burst` (GCRA only), `cost`, as the user gave them. Every refusal names the
//! field as JS spells it: `invalid_limit:uses`, `invalid_limit:window_ms`, `invalid_limit:burst`, or
//! `invalid_argument:cost` (`entries[i].cost` in a batch's message). A failing call changes nothing.

use ratewindow_core::counter::Counter;
use ratewindow_core::gcra::{Gcra, RateError, RateField};
use ratewindow_core::{Limit, MixedEntry, Rule, Verdict};

use crate::number::{self, MAX_SAFE_INTEGER};
use crate::record::{self, Record};
use crate::store::{refused, single};
use crate::{Failure, JsStore, Res};

/// `kind` of a GCRA limit.
pub const GCRA: u32 = 1;
/// `kind` of a sliding-window counter limit.
pub const COUNTER: u32 = 2;
/// `kind` of a sliding-log entry in a mixed batch.
pub const SLIDING: u32 = 0;

/// A checked rule and its cost.
#[derive(Debug, Clone, Copy)]
enum Checked {
    Gcra(Gcra, u64),
    Counter(Counter, u64),
}

/// The field's name as JS spells it.
const fn js_name(field: RateField) -> &'static str {
    match field {
        RateField::Uses => "uses",
        RateField::WindowMs => "windowMs",
        RateField::Burst => "burst",
        RateField::Cost => "cost",
    }
}

/// The core's refusal as a failure: limits as `invalid_limit:<engine field>`, a cost as
/// `invalid_argument:cost`; `at` is the entry's index in a batch (named in the message only).
#[cold]
fn rate_failure(e: RateError, at: Option<usize>) -> Failure {
    let code = match e.field {
        RateField::Cost => "invalid_argument:cost".to_owned(),
        field => format!("invalid_limit:{}", field.name()),
    };
    let name = match at {
        Some(i) => format!("entries[{i}].{}", js_name(e.field)),
        None => js_name(e.field).to_owned(),
    };
    Failure::new(
        code,
        format!("invalid {name}: {} (expected {})", e.value, e.field.range()),
    )
}

/// A whole number >= 0 as JS gave it, or the refusal of `field` with the value as JS writes it.
#[inline]
fn whole(field: RateField, v: f64, at: Option<usize>) -> Res<u64> {
    if (0.0..=MAX_SAFE_INTEGER).contains(&v) && (v as u64) as f64 == v {
        Ok(v as u64)
    } else {
        Err(rate_failure(RateError::new(field, number::text(v)), at))
    }
}

/// The cooldown part (`uses`, `windowMs`) checked as every limit is; its refusal renamed for an entry.
fn base(uses: f64, window_ms: f64, at: Option<usize>) -> Res<Limit> {
    number::limit(uses, window_ms).map_err(|f| match at {
        None => f,
        Some(i) => {
            let field = if f.code.ends_with("uses") {
                "uses"
            } else {
                "windowMs"
            };
            let prefix = format!("invalid {field}:");
            let message = match f.message.strip_prefix(&prefix) {
                Some(rest) => format!("invalid entries[{i}].{field}:{rest}"),
                None => f.message,
            };
            Failure::new(f.code, message)
        }
    })
}

/// A GCRA limit from JS numbers.
fn gcra(uses: f64, window_ms: f64, burst: f64, at: Option<usize>) -> Res<Gcra> {
    let limit = base(uses, window_ms, at)?;
    let burst = whole(RateField::Burst, burst, at)?;
    Gcra::new(limit.uses() as u64, limit.window_ms(), burst).map_err(|e| rate_failure(e, at))
}

/// A counter limit from JS numbers.
fn counter(uses: f64, window_ms: f64, at: Option<usize>) -> Res<Counter> {
    Counter::new(base(uses, window_ms, at)?).map_err(|e| rate_failure(e, at))
}

/// A limit of `kind` and a call's cost, all checked.
fn check(kind: u32, uses: f64, window_ms: f64, burst: f64, cost: f64) -> Res<Checked> {
    let cost_of = |v| whole(RateField::Cost, v, None);
    match kind {
        GCRA => {
            let g = gcra(uses, window_ms, burst, None)?;
            let cost = cost_of(cost)?;
            g.check_cost(cost).map_err(|e| rate_failure(e, None))?;
            Ok(Checked::Gcra(g, cost))
        }
        COUNTER => {
            let c = counter(uses, window_ms, None)?;
            let cost = cost_of(cost)?;
            c.check_cost(cost).map_err(|e| rate_failure(e, None))?;
            Ok(Checked::Counter(c, cost))
        }
        _ => Err(unknown_kind(kind)),
    }
}

/// A `kind` that names no algorithm (the TypeScript layer never sends one).
#[cold]
fn unknown_kind(kind: u32) -> Failure {
    Failure::new(
        "invalid_argument:algorithm",
        format!("invalid algorithm: {kind} (expected 0 sliding, 1 gcra or 2 counter)"),
    )
}

/// Validates a GCRA (`kind` 1) or counter (`kind` 2) limit with the core (what `checkRate` exports).
pub fn check_rate(kind: u32, uses: f64, window_ms: f64, burst: f64) -> Res<()> {
    check(kind, uses, window_ms, burst, 1.0).map(|_| ())
}

/// A limit of `kind` (`0` the sliding log, `1` GCRA, `2` the counter) and a call's `cost`, checked as
/// the memory store checks them (the sliding log's weights from 1 to `uses`); `at`, a batch entry's
/// index, is named in a refusal (`entries[at].cost`). The sharded store checks what it sends with it.
pub fn checked_rule(
    kind: u32,
    uses: f64,
    window_ms: f64,
    burst: f64,
    cost: f64,
    at: Option<usize>,
) -> Res<(Rule, u64)> {
    let rule = match kind {
        SLIDING => Rule::Sliding(base(uses, window_ms, at)?),
        GCRA => Rule::Gcra(gcra(uses, window_ms, burst, at)?),
        COUNTER => Rule::Counter(counter(uses, window_ms, at)?),
        _ => return Err(unknown_kind(kind)),
    };
    let cost = whole(RateField::Cost, cost, at)?;
    let checked = match rule {
        // The log's weights (1 to uses), as the core's batch takes them (a build without the core's
        // `weights` refuses a cost above 1 when it counts).
        Rule::Sliding(l) if cost == 0 || cost > u64::from(l.uses()) => {
            Err(RateError::new(RateField::Cost, cost))
        }
        Rule::Sliding(_) => Ok(cost),
        Rule::Gcra(g) => g.check_cost(cost).map(u64::from),
        Rule::Counter(c) => c.check_cost(cost).map(u64::from),
    };
    checked.map_err(|e| rate_failure(e, at))?;
    Ok((rule, cost))
}

/// Entry `at` of a mixed batch, checked ([`checked_rule`]): a refusal names `entries[at]`'s field.
pub(crate) fn mixed_entry(
    key: &str,
    kind: u32,
    uses: f64,
    window_ms: f64,
    burst: f64,
    cost: f64,
    at: usize,
) -> Res<MixedEntry> {
    let (rule, cost) = checked_rule(kind, uses, window_ms, burst, cost, Some(at))?;
    Ok(MixedEntry::new(key, rule, cost))
}

/// A networked store's GCRA or counter operation (`op`: 0 consume, 1 peek, 2 reset), checked as the
/// memory store's are (a reset reads `kind` alone).
pub(crate) fn rate_op(
    op: u32,
    key: String,
    kind: u32,
    uses: f64,
    window_ms: f64,
    burst: f64,
    cost: f64,
) -> Res<ratewindow_core::call::RateOp> {
    use ratewindow_core::call::RateOp;
    if op == 2 {
        return match kind {
            GCRA => Ok(RateOp::GcraReset { key }),
            COUNTER => Ok(RateOp::CounterReset { key }),
            _ => Err(unknown_kind(kind)),
        };
    }
    let consume = match op {
        0 => true,
        1 => false,
        _ => {
            return Err(Failure::new(
                "invalid_argument:op",
                format!("invalid op: {op} (expected 0 consume, 1 peek or 2 reset)"),
            ))
        }
    };
    Ok(match check(kind, uses, window_ms, burst, cost)? {
        Checked::Gcra(gcra, cost) if consume => RateOp::GcraConsume { key, gcra, cost },
        Checked::Gcra(gcra, cost) => RateOp::GcraPeek { key, gcra, cost },
        Checked::Counter(counter, cost) if consume => RateOp::CounterConsume { key, counter, cost },
        Checked::Counter(counter, cost) => RateOp::CounterPeek { key, counter, cost },
    })
}

impl JsStore {
    /// `MemoryStore::gcra_consume` / `counter_consume`: `0` when allowed (and recorded), else the retry
    /// timestamp; the quota in the record.
    #[allow(clippy::too_many_arguments)]
    pub fn rate_consume(
        &self,
        key: &str,
        kind: u32,
        uses: f64,
        window_ms: f64,
        burst: f64,
        cost: f64,
        now: f64,
        out: &mut Record,
    ) -> Res<f64> {
        let rule = check(kind, uses, window_ms, burst, cost)?;
        let now = number::now(now)?;
        let verdict: Result<Verdict, RateError> = match rule {
            Checked::Gcra(g, cost) => self.store.gcra_consume(key, g, cost, now),
            Checked::Counter(c, cost) => self.store.counter_consume(key, c, cost, now),
        };
        Ok(single(out, verdict.map_err(|e| rate_failure(e, None))?))
    }

    /// `MemoryStore::gcra_peek` / `counter_peek`: like [`rate_consume`](Self::rate_consume), recording
    /// and creating nothing.
    #[allow(clippy::too_many_arguments)]
    pub fn rate_peek(
        &self,
        key: &str,
        kind: u32,
        uses: f64,
        window_ms: f64,
        burst: f64,
        cost: f64,
        now: f64,
        out: &mut Record,
    ) -> Res<f64> {
        let rule = check(kind, uses, window_ms, burst, cost)?;
        let now = number::now(now)?;
        let verdict = match rule {
            Checked::Gcra(g, cost) => self.store.gcra_peek(key, g, cost, now),
            Checked::Counter(c, cost) => self.store.counter_peek(key, c, cost, now),
        };
        Ok(single(out, verdict.map_err(|e| rate_failure(e, None))?))
    }

    /// `MemoryStore::gcra_reset` (`kind` 1) / `counter_reset` (`kind` 2): the key's next call finds
    /// every use there.
    pub fn rate_reset(&self, key: &str, kind: u32) -> Res<()> {
        match kind {
            GCRA => self.store.gcra_reset(key),
            COUNTER => self.store.counter_reset(key),
            _ => return Err(unknown_kind(kind)),
        }
        Ok(())
    }

    /// Appends an entry of any algorithm to the pending mixed batch (`kind` 0 the sliding log, 1 GCRA,
    /// 2 the counter), checked now; a refusal clears the batch.
    #[allow(clippy::too_many_arguments)]
    pub fn mixed_push(
        &mut self,
        key: &str,
        kind: u32,
        uses: f64,
        window_ms: f64,
        burst: f64,
        cost: f64,
    ) -> Res<()> {
        let entry = mixed_entry(key, kind, uses, window_ms, burst, cost, self.mixed.len());
        match entry {
            Ok(entry) => {
                self.mixed.push(entry);
                Ok(())
            }
            Err(e) => {
                self.mixed.clear();
                Err(e)
            }
        }
    }

    /// How many entries the pending mixed batch holds (the index the next pushed entry gets).
    pub fn mixed_len(&self) -> usize {
        self.mixed.len()
    }

    /// Discards the pending mixed batch.
    pub fn mixed_clear(&mut self) {
        self.mixed.clear();
    }

    /// `MemoryStore::consume_mixed` of the pending mixed batch: a release handle (> 0) when allowed
    /// (it gives back the sliding-log calls), else minus the retry timestamp; the batch is cleared.
    pub fn mixed_consume(&mut self, now: f64, out: &mut Record) -> Res<f64> {
        let entries = std::mem::take(&mut self.mixed);
        let consumed = number::now(now).and_then(|now| {
            self.store
                .consume_mixed(&entries, now)
                .map_err(|e| rate_failure(e, None))
        });
        self.mixed = entries;
        self.mixed.clear();
        let consumed = consumed?;
        record::write_quota(out, consumed.verdict.quota);
        Ok(match consumed.release {
            Some(release) => self.keep_release(release),
            None => refused(
                out,
                consumed.verdict.blocked,
                consumed.verdict.retry_timestamp,
            ),
        })
    }

    /// `MemoryStore::peek_mixed` of the pending mixed batch: `0` when allowed, else minus the retry
    /// timestamp; the batch is cleared.
    pub fn mixed_peek(&mut self, now: f64, out: &mut Record) -> Res<f64> {
        let entries = std::mem::take(&mut self.mixed);
        let verdict = number::now(now).and_then(|now| {
            self.store
                .peek_mixed(&entries, now)
                .map_err(|e| rate_failure(e, None))
        });
        self.mixed = entries;
        self.mixed.clear();
        let verdict = verdict?;
        record::write_quota(out, verdict.quota);
        Ok(if verdict.allowed {
            0.0
        } else {
            refused(out, verdict.blocked, verdict.retry_timestamp)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratewindow_core::MemoryStore;

    #[test]
    fn gcra_and_counter_verdicts_with_their_quota() {
        let store = JsStore::new(MemoryStore::new());
        let mut out = [0.0; record::LEN];
        let c = |v: f64, out: &mut Record| {
            store.rate_consume("a", GCRA, 10.0, 1000.0, 10.0, v, 0.0, out)
        };
        assert_eq!(c(4.0, &mut out), Ok(0.0));
        assert_eq!(out[..4], [10.0, 6.0, 100.0, 400.0]);
        assert_eq!(c(6.0, &mut out), Ok(0.0));
        assert_eq!(c(1.0, &mut out), Ok(100.0));
        store.rate_reset("a", GCRA).unwrap();
        assert_eq!(c(10.0, &mut out), Ok(0.0));
        assert_eq!(
            store.rate_peek("k", COUNTER, 2.0, 1000.0, 0.0, 2.0, 0.0, &mut out),
            Ok(0.0)
        );
        assert_eq!(out[record::REMAINING], 2.0);
    }

    #[test]
    fn refusals_name_the_js_field() {
        let store = JsStore::new(MemoryStore::new());
        let mut out = [0.0; record::LEN];
        let e = store
            .rate_consume("a", GCRA, 10.0, 1000.0, 0.0, 1.0, 0.0, &mut out)
            .unwrap_err();
        assert_eq!(e.code, "invalid_limit:burst");
        assert!(
            e.message.starts_with("invalid burst: 0 (expected"),
            "{}",
            e.message
        );
        let e = store
            .rate_consume("a", GCRA, 10.0, 1.5, 1.0, 1.0, 0.0, &mut out)
            .unwrap_err();
        assert_eq!(e.code, "invalid_limit:window_ms");
        let e = store
            .rate_consume("a", COUNTER, 10.0, 1000.0, 0.0, 11.0, 0.0, &mut out)
            .unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.message.starts_with("invalid cost: 11 (")),
            ("invalid_argument:cost", true)
        );
        for v in [f64::NAN, -1.0, 0.5, f64::INFINITY, 1e300] {
            let e = store
                .rate_consume("a", GCRA, 10.0, 1000.0, 10.0, v, 0.0, &mut out)
                .unwrap_err();
            assert_eq!(e.code, "invalid_argument:cost");
            let e = store
                .rate_consume("a", GCRA, 10.0, 1000.0, v, 1.0, 0.0, &mut out)
                .unwrap_err();
            assert_eq!(e.code, "invalid_limit:burst");
        }
        let e = store
            .rate_consume("a", 7, 10.0, 1000.0, 10.0, 1.0, 0.0, &mut out)
            .unwrap_err();
        assert_eq!(e.code, "invalid_argument:algorithm");
        assert_eq!(store.size(), 0.0, "nothing was recorded");
    }

    #[test]
    fn mixed_batches_are_all_or_nothing_and_name_the_entry() {
        let mut store = JsStore::new(MemoryStore::new());
        let mut out = [0.0; record::LEN];
        store.mixed_push("u", GCRA, 2.0, 1000.0, 2.0, 2.0).unwrap();
        store
            .mixed_push("all", SLIDING, 3.0, 10_000.0, 0.0, 1.0)
            .unwrap();
        let handle = store.mixed_consume(0.0, &mut out).unwrap();
        assert!(handle > 0.0);
        store.mixed_push("u", GCRA, 2.0, 1000.0, 2.0, 1.0).unwrap();
        store
            .mixed_push("all", SLIDING, 3.0, 10_000.0, 0.0, 1.0)
            .unwrap();
        assert_eq!(store.mixed_consume(0.0, &mut out), Ok(-500.0));
        assert_eq!(out[record::BLOCKED], 0.0);
        store.mixed_push("u", GCRA, 2.0, 1000.0, 2.0, 1.0).unwrap();
        let e = store
            .mixed_push("c", COUNTER, 5.0, 1000.0, 0.0, 6.0)
            .unwrap_err();
        assert_eq!(e.code, "invalid_argument:cost");
        assert!(
            e.message.starts_with("invalid entries[1].cost: 6 ("),
            "{}",
            e.message
        );
        let e = store
            .mixed_push("c", SLIDING, 5.0, 0.0, 0.0, 1.0)
            .unwrap_err();
        assert!(
            e.message.starts_with("invalid entries[0].windowMs: 0 ("),
            "{}",
            e.message
        );
        // The refusals cleared the batch: an empty batch is allowed.
        assert_eq!(store.mixed_peek(500.0, &mut out), Ok(0.0));
    }
}
