//! Batches mixing algorithms (sliding-log, GCRA and counter entries in one all-or-nothing call) on
//! the networked stores (cargo features `rates` and `sql`): SQLite here, Redis in `mixed_redis.rs`.
//!
//! The store answers the state it holds for every key of the batch; the call decides in a scratch
//! [`MemoryStore`] seeded with that state, by [`MemoryStore::consume_mixed`]'s own rules, so a mixed
//! batch gives the memory store's verdict to the last field. The write is the state the scratch
//! store ends with.
//!
//! **SQLite**: `BEGIN IMMEDIATE`, one `SELECT` of every key's rows (the calls, the GCRA TATs, the
//! counters), then for an allowed consume the writes (the sliding keys' old calls trimmed, the new
//! ones, the GCRA and counter states) and `COMMIT` (a refusal commits nothing); `ROLLBACK` after any failure inside the transaction. A peek is the one `SELECT`.
//!
//! **Release**: an allowed consume's token gives back the sliding-log calls it recorded (by its call
//! id, as a sliding batch's does). GCRA and counter uses taken on a networked store are not given
//! back (as a single GCRA or counter call's are not): the memory store's release gives them back.

use super::{Call, CallError, Fed, Outcome, ReleaseToken};
use crate::counter::CounterState;
use crate::gcra::{RateError, Tat};
use crate::sql::{RowError, SqlRelease, SqlValue, Sqlite, Statement};
use crate::{Consumed, MemoryStore, MixedEntry, Rule};

/// Checks a mixed batch's costs (`1..=uses` for the sliding log and the counter, `1..=burst` for
/// GCRA) as [`MemoryStore::consume_mixed`] does: the first refusal, with the entry's index.
pub fn check_mixed(entries: &[MixedEntry]) -> Result<(), (usize, RateError)> {
    for (i, e) in entries.iter().enumerate() {
        let checked = match e.rule {
            #[cfg(feature = "weights")]
            Rule::Sliding(limit) => crate::verdict::check_cost(e.cost, limit).map(|_| ()),
            #[cfg(not(feature = "weights"))]
            Rule::Sliding(_) if e.cost == 1 => Ok(()),
            #[cfg(not(feature = "weights"))]
            Rule::Sliding(_) => Err(RateError::new(crate::gcra::RateField::Cost, e.cost)),
            Rule::Gcra(g) => g.check_cost(e.cost).map(|_| ()),
            Rule::Counter(c) => c.check_cost(e.cost).map(|_| ()),
        };
        checked.map_err(|err| (i, err))?;
    }
    Ok(())
}

/// Which table a key is read from: `0` the calls, `1` GCRA, `2` the counters (the `SELECT`'s first
/// column).
fn kind(rule: &Rule) -> i64 {
    match rule {
        Rule::Sliding(_) => 0,
        Rule::Gcra(_) => 1,
        Rule::Counter(_) => 2,
    }
}

/// The distinct keys of each kind, in first-seen order: `[sliding, gcra, counter]`.
pub(super) fn keys_by_kind(entries: &[MixedEntry]) -> [Vec<&str>; 3] {
    let mut keys: [Vec<&str>; 3] = Default::default();
    for e in entries {
        let list = &mut keys[kind(&e.rule) as usize];
        if !list.contains(&e.key.as_str()) {
            list.push(&e.key);
        }
    }
    keys
}

/// The longest window each sliding key is counted under in this batch.
pub(super) fn longest(entries: &[MixedEntry], key: &str) -> u64 {
    entries
        .iter()
        .filter_map(|e| match e.rule {
            Rule::Sliding(l) if e.key == key => Some(l.window_ms()),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

const ROWS_EXPECTED: &str = "rows (kind 0, key, at, expires_at) of the calls, (1, key, ms, rem, per) of GCRA, \
                             (2, key, start, window_ms, cur, prev) of the counters, for this batch's keys";

/// The batch decided in a scratch store seeded with `rows` (the mixed `SELECT`'s): the outcome, the
/// scratch store, which holds the state to write, and which sliding keys were gone (every call past
/// its expiry: their rows all go when the key records again).
pub(super) fn decide_rows(
    entries: &[MixedEntry],
    rows: &[Vec<SqlValue>],
    now: u64,
    record: bool,
) -> Result<(Consumed, MemoryStore, Vec<bool>), RowError> {
    let err = || RowError::new("mixed select", ROWS_EXPECTED, rows);
    let keys = keys_by_kind(entries);
    let scratch = MemoryStore::with_shards(1);
    let mut times: Vec<Vec<u64>> = vec![Vec::new(); keys[0].len()];
    // A key lives until its last call's expiry (the memory store's rule: a log whose calls have all
    // left the windows they were counted under is gone, whatever window asks now). Each row holds
    // its key's expiry as it stood when the row was written, trimmed rows' included.
    let mut expires: Vec<u64> = vec![0; keys[0].len()];
    for row in rows {
        let [kind, SqlValue::Text(key), rest @ ..] = row.as_slice() else {
            return Err(err());
        };
        let n: Vec<u64> = rest
            .iter()
            .map(|v| v.int().and_then(|i| u64::try_from(i).ok()))
            .collect::<Option<_>>()
            .ok_or_else(err)?;
        let kind = kind.int().ok_or_else(err)?;
        let place = |k: usize| keys[k].iter().position(|&x| x == key.as_str());
        match (kind, n.as_slice()) {
            (0, &[at, expires_at, ..]) => {
                let i = place(0).ok_or_else(err)?;
                times[i].push(at);
                expires[i] = expires[i].max(expires_at);
            }
            (1, &[ms, rem, per, ..]) => {
                place(1).ok_or_else(err)?;
                let per = u32::try_from(per).ok().filter(|&p| p > 0).ok_or_else(err)?;
                let rem = u32::try_from(rem)
                    .ok()
                    .filter(|&r| r < per)
                    .ok_or_else(err)?;
                scratch.seed_gcra(key, Tat { ms, rem, per });
            }
            (2, &[start, window_ms, cur, prev]) => {
                place(2).ok_or_else(err)?;
                let state = CounterState {
                    start,
                    window_ms,
                    cur: u32::try_from(cur).map_err(|_| err())?,
                    prev: u32::try_from(prev).map_err(|_| err())?,
                };
                // A previous count the arithmetic cannot weigh in u64 is no answer (the single
                // counter call's rule, for every limit this key is counted under here).
                let heavy = entries.iter().any(|e| match e.rule {
                    Rule::Counter(c) if e.key == *key => {
                        u128::from(state.prev) * u128::from(c.limit().window_ms())
                            > u128::from(u64::MAX)
                    }
                    _ => false,
                });
                if window_ms == 0 || heavy {
                    return Err(err());
                }
                scratch.seed_counter(key, state);
            }
            _ => return Err(err()),
        }
    }
    for (i, log) in times.iter_mut().enumerate() {
        if expires[i] <= now {
            continue;
        }
        log.sort_unstable();
        let limit = entries
            .iter()
            .find_map(|e| match e.rule {
                Rule::Sliding(l) if e.key == keys[0][i] => Some(l),
                _ => None,
            })
            .ok_or_else(err)?;
        scratch.seed_log(keys[0][i], log, limit, expires[i]);
    }
    let consumed = if record {
        scratch.consume_mixed(entries, now)
    } else {
        scratch.peek_mixed(entries, now).map(|verdict| Consumed {
            verdict,
            release: None,
        })
    };
    // The costs were checked when the call started.
    let consumed = consumed.map_err(|_| err())?;
    let dead = expires.iter().map(|&e| e <= now).collect();
    Ok((consumed, scratch, dead))
}

/// SQLite's steps.
#[derive(Debug)]
enum Step {
    /// The read (after `BEGIN IMMEDIATE` and the trims for a consume).
    Read,
    /// The writes and `COMMIT` (or the `COMMIT` of a refusal): then `outcome`.
    Commit(Outcome),
    /// `ROLLBACK` after a failure: the failure stands, whatever it gives.
    Rollback(CallError),
    /// Over.
    Over,
}

/// One mixed batch in progress (SQLite).
#[derive(Debug)]
pub(crate) struct MixedCall {
    entries: Vec<MixedEntry>,
    now: u64,
    /// `Some` for a consume (inside `BEGIN IMMEDIATE`).
    call_id: Option<String>,
    prefix: String,
    step: Step,
    statements: Vec<Statement>,
    done: Option<Result<Outcome, CallError>>,
    /// PostgreSQL's one statement (`{p}_mixed`), whose rows end in the verdict it wrote by.
    postgres: bool,
}

fn statement(sql: String, params: Vec<SqlValue>) -> Statement {
    Statement { sql, params }
}

fn int(n: u64) -> SqlValue {
    SqlValue::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

fn placeholders(n: usize) -> String {
    let mut s = String::with_capacity(n * 3);
    for i in 0..n {
        if i > 0 {
            s.push_str(", ");
        }
        s.push('?');
    }
    s
}

impl Sqlite {
    /// Starts a batch mixing algorithms at `now` (the host's clock, ms), all or nothing: a consume
    /// with `call_id` (unique to the call: it marks the sliding-log rows for a release), a peek
    /// without. Check the costs first with [`check_mixed`] to raise the typed error naming the entry;
    /// a batch with a bad cost, or of more than [`Sqlite::BOUND_KEYS`] entries, ends at once in
    /// [`CallError::Unsupported`], nothing run.
    pub fn mixed(&self, entries: Vec<MixedEntry>, now: u64, call_id: Option<&str>) -> Call {
        if check_mixed(&entries).is_err() {
            return Call::done(Err(CallError::Unsupported(
                "invalid cost in a mixed batch (check with check_mixed first)",
            )));
        }
        if entries.len() > Sqlite::BOUND_KEYS {
            return Call::done(Err(CallError::Unsupported(
                "a mixed batch of more than 32,765 entries: split it",
            )));
        }
        if call_id == Some("") {
            return Call::done(Err(CallError::Unsupported("an empty call id")));
        }
        let now = now.min(i64::MAX as u64);
        let p = self.names().prefix().to_owned();
        let keys = keys_by_kind(&entries);
        let mut statements = Vec::new();
        if call_id.is_some() {
            statements.push(statement("BEGIN IMMEDIATE".to_owned(), vec![]));
        }
        let mut parts = Vec::new();
        let mut params = Vec::new();
        for (k, select) in [
            "SELECT 0, key, at, expires_at, 0, 0 FROM {p}_calls",
            "SELECT 1, key, ms, rem, per, 0 FROM {p}_gcra",
            "SELECT 2, key, start_ms, window_ms, cur, prev FROM {p}_counters",
        ]
        .into_iter()
        .enumerate()
        {
            if keys[k].is_empty() {
                continue;
            }
            parts.push(format!(
                "{} WHERE key IN ({})",
                select.replace("{p}", &p),
                placeholders(keys[k].len())
            ));
            params.extend(keys[k].iter().map(|&k| SqlValue::Text(k.to_owned())));
        }
        if parts.is_empty() {
            return Call::done(Ok(Outcome::Verdict {
                verdict: crate::BatchVerdict::at(now, None),
                release: None,
            }));
        }
        statements.push(statement(parts.join(" UNION ALL "), params));
        Call::mixed(MixedCall {
            entries,
            now,
            call_id: call_id.map(str::to_owned),
            prefix: p,
            step: Step::Read,
            statements,
            done: None,
            postgres: false,
        })
    }
}

impl MixedCall {
    pub(crate) fn command(&self) -> super::Command<'_> {
        super::Command::Sql {
            statements: &self.statements,
        }
    }

    pub(crate) fn result(&mut self) -> Option<Result<Outcome, CallError>> {
        self.done.take()
    }

    /// Whether the step that ran is inside the transaction.
    fn in_tx(&self) -> bool {
        match self.step {
            Step::Read => self.call_id.is_some() && !self.postgres,
            Step::Commit(_) => true,
            _ => false,
        }
    }

    pub(crate) fn feed(&mut self, fed: Result<Fed, String>) {
        let in_tx = self.in_tx();
        let step = std::mem::replace(&mut self.step, Step::Over);
        let result = match (step, fed) {
            (Step::Rollback(error), _) => Err(error),
            (Step::Over, _) => Err(CallError::Protocol {
                expected: "nothing (the call is over)",
                got: "a result",
            }),
            (_, Err(message)) => Err(CallError::Store { message }),
            (_, Ok(Fed::Reply(_))) => Err(CallError::Protocol {
                expected: "rows",
                got: "a Redis reply",
            }),
            (Step::Commit(outcome), Ok(Fed::Rows(_))) => Ok(outcome),
            (Step::Read, Ok(Fed::Rows(rows))) if self.postgres => self.read_postgres(&rows),
            (Step::Read, Ok(Fed::Rows(rows))) => match self.read(&rows) {
                Ok(None) => return,
                Ok(Some(outcome)) => Ok(outcome),
                Err(e) => Err(e),
            },
        };
        match result {
            Err(error) if in_tx => {
                self.statements = vec![statement("ROLLBACK".to_owned(), vec![])];
                self.step = Step::Rollback(error);
            }
            result => self.done = Some(result),
        }
    }

    /// Decides from the read: the outcome of a peek (`Some`), or the writes and `COMMIT` to run
    /// (`None`, the step moved on).
    fn read(&mut self, rows: &[Vec<SqlValue>]) -> Result<Option<Outcome>, CallError> {
        let record = self.call_id.is_some();
        let (consumed, scratch, dead) = decide_rows(&self.entries, rows, self.now, record)?;
        let Some(call_id) = self.call_id.clone() else {
            return Ok(Some(Outcome::Verdict {
                verdict: consumed.verdict,
                release: None,
            }));
        };
        let commit = statement("COMMIT".to_owned(), vec![]);
        let Some(release) = consumed.release else {
            self.statements = vec![commit];
            self.step = Step::Commit(Outcome::Verdict {
                verdict: consumed.verdict,
                release: None,
            });
            return Ok(None);
        };
        let p = &self.prefix;
        let keys = keys_by_kind(&self.entries);
        let mut statements = Vec::new();
        // An allowed consume drops the times that have left each sliding key's longest window (the
        // memory store's batch trims as it records; a refusal trims nothing).
        let trim = format!("DELETE FROM {p}_calls WHERE key = ? AND at <= ?");
        for (&key, dead) in keys[0].iter().zip(dead) {
            let cutoff = if dead {
                self.now as i128
            } else {
                self.now as i128 - longest(&self.entries, key) as i128
            };
            if cutoff >= 0 {
                statements.push(statement(
                    trim.clone(),
                    vec![SqlValue::Text(key.to_owned()), SqlValue::Int(cutoff as i64)],
                ));
            }
        }
        // Each sliding key's call, one row a use at one time, from one statement.
        let insert = format!(
            "INSERT INTO {p}_calls (key, at, id, expires_at) WITH RECURSIVE n(i) AS \
             (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) SELECT ?, ?, ?, ? FROM n"
        );
        for call in release.calls() {
            // The key's expiry, which a trimmed call's longer window may have set (the memory
            // store's log keeps it until the log empties).
            let expires_at = scratch
                .log_expiry(&call.key)
                .unwrap_or(call.at.saturating_add(call.window_ms));
            statements.push(statement(
                insert.clone(),
                vec![
                    int(call.cost.into()),
                    SqlValue::Text(call.key.clone()),
                    int(call.at),
                    SqlValue::Text(call_id.clone()),
                    int(expires_at),
                ],
            ));
        }
        let upsert_gcra = format!(
            "INSERT INTO {p}_gcra (key, ms, rem, per) VALUES (?, ?, ?, ?) ON CONFLICT (key) \
             DO UPDATE SET ms = excluded.ms, rem = excluded.rem, per = excluded.per"
        );
        for &key in &keys[1] {
            if let Some(t) = scratch.gcra_state(key) {
                statements.push(statement(
                    upsert_gcra.clone(),
                    vec![
                        SqlValue::Text(key.to_owned()),
                        int(t.ms),
                        int(t.rem.into()),
                        int(t.per.into()),
                    ],
                ));
            }
        }
        let upsert_counter = format!(
            "INSERT INTO {p}_counters (key, start_ms, window_ms, cur, prev) VALUES (?, ?, ?, ?, ?) \
             ON CONFLICT (key) DO UPDATE SET start_ms = excluded.start_ms, \
             window_ms = excluded.window_ms, cur = excluded.cur, prev = excluded.prev"
        );
        for &key in &keys[2] {
            if let Some(c) = scratch.counter_state(key) {
                statements.push(statement(
                    upsert_counter.clone(),
                    vec![
                        SqlValue::Text(key.to_owned()),
                        int(c.start),
                        int(c.window_ms),
                        int(c.cur.into()),
                        int(c.prev.into()),
                    ],
                ));
            }
        }
        statements.push(commit);
        let token = (!keys[0].is_empty()).then(|| {
            ReleaseToken::Sql(SqlRelease {
                keys: keys[0].iter().map(|&k| k.to_owned()).collect(),
                call_id,
            })
        });
        self.statements = statements;
        self.step = Step::Commit(Outcome::Verdict {
            verdict: consumed.verdict,
            release: token,
        });
        Ok(None)
    }
}

/// A PostgreSQL mixed batch's statement: `{p}_mixed` (installed by the schema with the `mixed`
/// feature); the parameters are the mode, the call id, then one array a field of the entries.
const PG_MIXED: &str =
    "SELECT k, key, a, b, c, d FROM {p}_mixed($1, $2, $3::bigint[], $4::text[], \
                        $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], \
                        $10::bigint[], $11::bigint[], $12::boolean)";

const PG_EXPECTED: &str = "the batch's state rows, then (-1, NULL, now, 1 allowed / 0 refused / \
                           -1 a peek, 0, 0) agreeing with the verdict the state gives";

impl crate::sql::Postgres {
    /// The most entries one mixed batch carries (the server works through it entry by entry, and
    /// the engine decides it in a scratch store): a larger batch ends in [`CallError::Unsupported`].
    pub const MAX_MIXED: usize = 10_000;

    /// Starts a batch mixing algorithms (sliding-log, GCRA and counter entries), all or nothing, on
    /// the server's clock: a consume with `call_id` (unique to the call: it marks the sliding-log
    /// calls for a release), a peek without. **One statement** (`{prefix}_mixed`, its own
    /// transaction, so a pool may run each call on any connection): a consume locks every key's row
    /// in one global order, reads the state, counts the entries and writes all or nothing; it
    /// answers the state it read, from which the call derives the verdict by
    /// [`MemoryStore::consume_mixed`]'s rules and refuses rows whose verdict disagrees.
    ///
    /// Check the costs first with [`check_mixed`] to raise the typed error naming the entry; a bad
    /// cost, an empty call id or more than [`MAX_MIXED`](Self::MAX_MIXED) entries end the call at
    /// once in [`CallError::Unsupported`], nothing run. The release token gives back the
    /// sliding-log calls (GCRA and counter uses are not given back, as a single GCRA or counter
    /// call's are not, and as on Redis and SQLite).
    pub fn mixed(&self, entries: Vec<MixedEntry>, call_id: Option<&str>) -> Call {
        if check_mixed(&entries).is_err() {
            return Call::done(Err(CallError::Unsupported(
                "invalid cost in a mixed batch (check with check_mixed first)",
            )));
        }
        if entries.len() > Self::MAX_MIXED {
            return Call::done(Err(CallError::Unsupported(
                "a mixed batch of more than 10,000 entries: split it",
            )));
        }
        if call_id == Some("") {
            return Call::done(Err(CallError::Unsupported("an empty call id")));
        }
        if entries.is_empty() {
            return Call::done(Ok(Outcome::Verdict {
                verdict: crate::BatchVerdict::at(0, None),
                release: None,
            }));
        }
        let n = entries.len();
        let (mut kinds, mut keys, mut uses, mut windows, mut costs) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let mut gcra: [Vec<i64>; 4] = Default::default();
        let big = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        for e in &entries {
            kinds.push(kind(&e.rule));
            keys.push(e.key.clone());
            costs.push(big(e.cost));
            let (u, w, qrde) = match e.rule {
                Rule::Sliding(l) => (u64::from(l.uses()), l.window_ms(), [0; 4]),
                Rule::Gcra(g) => {
                    let [u, q, r, d, e, _] = super::rates::gcra_args(g, e.cost);
                    (u, g.window_ms(), [q, r, d, e])
                }
                Rule::Counter(c) => (u64::from(c.limit().uses()), c.limit().window_ms(), [0; 4]),
            };
            uses.push(big(u));
            windows.push(big(w));
            for (column, v) in gcra.iter_mut().zip(qrde) {
                column.push(big(v));
            }
        }
        let [q, r, d, e] = gcra;
        let mode = if call_id.is_some() { "c" } else { "p" };
        let params = vec![
            SqlValue::Text(mode.to_owned()),
            SqlValue::Text(call_id.unwrap_or("").to_owned()),
            SqlValue::Ints(kinds),
            SqlValue::Texts(keys),
            SqlValue::Ints(uses),
            SqlValue::Ints(windows),
            SqlValue::Ints(costs),
            SqlValue::Ints(q),
            SqlValue::Ints(r),
            SqlValue::Ints(d),
            SqlValue::Ints(e),
            SqlValue::Bool(!self.is_durable()),
        ];
        let p = self.names().prefix().to_owned();
        Call::mixed(MixedCall {
            entries,
            now: 0,
            call_id: call_id.map(str::to_owned),
            statements: vec![statement(PG_MIXED.replace("{p}", &p), params)],
            prefix: p,
            step: Step::Read,
            done: None,
            postgres: true,
        })
    }
}

impl MixedCall {
    /// PostgreSQL's rows: the state the statement read and, last, its clock and what it did. The
    /// verdict is the memory store's from that state; a consume the statement recorded must be one
    /// the state allows, and a refusal one it refuses.
    fn read_postgres(&mut self, rows: &[Vec<SqlValue>]) -> Result<Outcome, CallError> {
        let err = || RowError::new("mixed", PG_EXPECTED, rows);
        let Some((last, state)) = rows.split_last() else {
            return Err(err().into());
        };
        let [k, SqlValue::Null, now, did, ..] = last.as_slice() else {
            return Err(err().into());
        };
        let (Some(-1), Some(now), Some(did)) = (k.int(), now.int(), did.int()) else {
            return Err(err().into());
        };
        let now = u64::try_from(now).map_err(|_| err())?;
        // Never before the newest call read (the consume's clock already is not; a peek's read its
        // clock in the same snapshot).
        let newest = state
            .iter()
            .filter(|row| row.first().and_then(SqlValue::int) == Some(0))
            .filter_map(|row| row.get(2).and_then(SqlValue::int))
            .max()
            .and_then(|at| u64::try_from(at).ok());
        let now = now.max(newest.unwrap_or(0));
        let record = self.call_id.is_some();
        let (consumed, _, _) = decide_rows(&self.entries, state, now, record)?;
        let expected = match (record, consumed.verdict.allowed) {
            (false, _) => -1,
            (true, true) => 1,
            (true, false) => 0,
        };
        if did != expected {
            return Err(err().into());
        }
        let keys = keys_by_kind(&self.entries);
        let token = match (&self.call_id, consumed.release) {
            (Some(call_id), Some(_)) if !keys[0].is_empty() => {
                // A call costing more than 1 in a log is recorded as its id and `id\x01i` (the
                // weighted function's ids): its token names the largest cost, so the release
                // removes them all.
                #[allow(unused_mut)]
                let mut id = call_id.clone();
                #[cfg(feature = "weights")]
                if let Some(top) = self
                    .entries
                    .iter()
                    .filter(|e| matches!(e.rule, Rule::Sliding(_)))
                    .map(|e| e.cost)
                    .max()
                    .filter(|&c| c > 1)
                {
                    id = format!("{call_id}\x01{top}");
                }
                Some(ReleaseToken::Sql(SqlRelease {
                    keys: keys[0].iter().map(|&k| k.to_owned()).collect(),
                    call_id: id,
                }))
            }
            _ => None,
        };
        Ok(Outcome::Verdict {
            verdict: consumed.verdict,
            release: token,
        })
    }
}
