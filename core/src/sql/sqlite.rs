//! SQLite: `BEGIN IMMEDIATE`, so processes sharing one file cannot both take the last use; the host's
//! clock, passed as `now`.

use std::collections::HashMap;

use crate::redis::{EmptyCallId, WindowState};
use crate::sliding::in_window;
use crate::sql::{
    distinct_keys, window_state, RowError, SqlNames, SqlRelease, SqlValue, Statement,
};
use crate::{BatchVerdict, Entry, Limit, Quota, Window};

// The schema, and with the `rates` feature GCRA's and the counter's tables, without comment lines.
#[cfg(not(feature = "rates"))]
crate::sql::schema_text!(SCHEMA = include_str!("sqlite_schema.sql"));
#[cfg(feature = "rates")]
crate::sql::schema_text!(
    SCHEMA = concat!(
        include_str!("sqlite_schema.sql"),
        include_str!("sqlite_rates.sql")
    )
);

/// Plans and decoders for SQLite (better-sqlite3, node:sqlite, Python's sqlite3), under one name
/// prefix. Run [`schema`](Self::schema) once per file, and [`CONNECTION_SETUP`](Self::CONNECTION_SETUP)
/// on every connection.
#[derive(Debug, Clone)]
pub struct Sqlite {
    names: SqlNames,
}

impl Default for Sqlite {
    fn default() -> Self {
        Sqlite::new(SqlNames::default())
    }
}

impl Sqlite {
    /// The most entries one call carries. Up to [`BOUND_KEYS`](Self::BOUND_KEYS) entries, the keys'
    /// select and the release bind one parameter per key; above it they bind the keys as one JSON
    /// array, read with `json_each` (built into SQLite since 3.38: better-sqlite3 12 ships 3.5x,
    /// Python's `sqlite3` links the system's, 3.40 here), so a JSON key cannot hold U+0000 (SQLite's
    /// JSON reader ends the text there) and such a batch is refused. A larger batch, or a batch above
    /// `BOUND_KEYS` with a U+0000 in a key, is refused before any statement runs (an `unsupported`
    /// error): split it.
    pub const MAX_BATCH: usize = 100_000;

    /// The most keys a statement binds one parameter each: the release binds one more (the call id),
    /// and SQLite binds at most 32,766 (its default `SQLITE_MAX_VARIABLE_NUMBER` since 3.32).
    pub const BOUND_KEYS: usize = 32_765;

    /// Whether this many `entries` can be carried: at most [`MAX_BATCH`](Self::MAX_BATCH), and above
    /// [`BOUND_KEYS`](Self::BOUND_KEYS) (keys read from JSON) no key holding U+0000.
    pub fn carries(entries: &[Entry]) -> bool {
        entries.len() <= Self::MAX_BATCH
            && (entries.len() <= Self::BOUND_KEYS || !entries.iter().any(|e| e.key.contains('\0')))
    }

    /// Run on every connection: another process's write is waited for up to 5 s rather than failing
    /// the call at once.
    pub const CONNECTION_SETUP: &'static str = "PRAGMA busy_timeout = 5000";

    /// [`CONNECTION_SETUP`](Self::CONNECTION_SETUP) with a busy timeout of your own.
    pub fn connection_setup(busy_timeout_ms: u32) -> String {
        format!("PRAGMA busy_timeout = {busy_timeout_ms}")
    }

    /// Statements for the tables named by `names`.
    pub fn new(names: SqlNames) -> Sqlite {
        Sqlite { names }
    }

    /// The names in use.
    pub fn names(&self) -> &SqlNames {
        &self.names
    }

    /// The schema (tables and indexes). Idempotent.
    pub fn schema(&self) -> String {
        self.names.apply(SCHEMA)
    }

    fn begin(&self, entries: &[Entry], now: u64, call_id: Option<&str>) -> SqliteCall {
        let now = now.min(i64::MAX as u64);
        let keys = distinct_keys(entries);
        let mut statements = Vec::new();
        if call_id.is_some() {
            statements.push(Statement::new("BEGIN IMMEDIATE", vec![]));
            // A call drops the times that have left its (longest) window: now - at >= window. Above
            // BOUND_KEYS, one statement over a JSON list of [key, cutoff] rather than one per key.
            let cutoff = |longest: u64| {
                let cutoff = now as i128 - longest as i128;
                (cutoff >= i64::MIN as i128).then(|| cutoff.min(i64::MAX as i128) as i64)
            };
            if keys.len() > Sqlite::BOUND_KEYS {
                let mut json = JsonList::new(keys.len());
                for &(key, longest) in &keys {
                    if let Some(cutoff) = cutoff(longest) {
                        json.row(key, &[cutoff]);
                    }
                }
                statements.push(Statement::new(
                    self.names.apply(
                        "DELETE FROM {p}_calls WHERE rowid IN (SELECT c.rowid FROM json_each(?) AS j \
                         JOIN {p}_calls AS c ON c.key = json_extract(j.value, '$[0]') \
                         AND c.at <= json_extract(j.value, '$[1]'))",
                    ),
                    vec![SqlValue::Text(json.finish())],
                ));
            } else {
                statements.reserve(keys.len() + 1);
                let trim = self
                    .names
                    .apply("DELETE FROM {p}_calls WHERE key = ? AND at <= ?");
                for &(key, longest) in &keys {
                    if let Some(cutoff) = cutoff(longest) {
                        statements.push(Statement::new(
                            trim.clone(),
                            vec![SqlValue::Text(key.to_owned()), SqlValue::Int(cutoff)],
                        ));
                    }
                }
            }
        }
        let (list, params) = key_list(keys.iter().map(|&(k, _)| k), keys.len());
        statements.push(Statement::new(
            self.names.apply(&format!(
                "SELECT key, at FROM {{p}}_calls WHERE key IN ({list}) ORDER BY key, at"
            )),
            params,
        ));
        SqliteCall {
            entries: entries.iter().map(|e| (e.key.clone(), e.limit)).collect(),
            #[cfg(feature = "weights")]
            costs: if entries.iter().any(|e| e.cost() > 1) {
                entries.iter().map(Entry::cost).collect()
            } else {
                Vec::new()
            },
            now,
            call_id: call_id.map(str::to_owned),
            insert: self
                .names
                .apply("INSERT INTO {p}_calls (key, at, id, expires_at) VALUES (?, ?, ?, ?)"),
            #[cfg(feature = "weights")]
            insert_cost: self.names.apply(
                "INSERT INTO {p}_calls (key, at, id, expires_at) WITH RECURSIVE n(i) AS \
                 (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) SELECT ?, ?, ?, ? FROM n",
            ),
            insert_json: self.names.apply(
                "INSERT INTO {p}_calls (key, at, id, expires_at) SELECT json_extract(value, '$[0]'), \
                 json_extract(value, '$[1]'), ?, json_extract(value, '$[2]') FROM json_each(?)",
            ),
            statements,
        }
    }

    /// Starts counting one call against every entry at `now` (the host's clock, ms), all or nothing.
    /// `call_id` must be unique to this call: it marks the call's rows for a release.
    pub fn begin_consume(
        &self,
        entries: &[Entry],
        now: u64,
        call_id: &str,
    ) -> Result<SqliteCall, EmptyCallId> {
        if call_id.is_empty() {
            return Err(EmptyCallId);
        }
        Ok(self.begin(entries, now, Some(call_id)))
    }

    /// Starts a peek: one `SELECT`, writing nothing.
    pub fn begin_peek(&self, entries: &[Entry], now: u64) -> SqliteCall {
        self.begin(entries, now, None)
    }

    /// Removes exactly the rows of the call `release` recorded.
    pub fn plan_release(&self, release: &SqlRelease) -> Statement {
        let (list, keys) = key_list(release.keys.iter().map(String::as_str), release.keys.len());
        let mut params = vec![SqlValue::Text(release.call_id.clone())];
        params.extend(keys);
        Statement::new(
            self.names.apply(&format!(
                "DELETE FROM {{p}}_calls WHERE id = ? AND key IN ({list})"
            )),
            params,
        )
    }

    fn begin_window(&self, op: WindowOp, key: &str, now: u64) -> SqliteWindowCall {
        let now = now.min(i64::MAX as u64);
        let mut statements = Vec::new();
        if op != WindowOp::Get {
            statements.push(Statement::new("BEGIN IMMEDIATE", vec![]));
        }
        statements.push(Statement::new(
            self.names
                .apply("SELECT hits, ends_at FROM {p}_windows WHERE key = ?"),
            vec![SqlValue::Text(key.to_owned())],
        ));
        SqliteWindowCall {
            op,
            key: key.to_owned(),
            now,
            names: self.names.clone(),
            statements,
        }
    }

    /// Starts adding `amount` hits to `key`'s fixed window at `now`, opening one of `decay` if none runs.
    pub fn begin_hit(&self, key: &str, decay: Window, amount: i64, now: u64) -> SqliteWindowCall {
        self.begin_window(WindowOp::Hit { decay, amount }, key, now)
    }

    /// Starts one hit on `key`'s fixed window at `now` only if it holds fewer than `max` (opening a
    /// window of `decay` if none runs), inside the `BEGIN IMMEDIATE` transaction: atomic.
    pub fn begin_attempt(&self, key: &str, max: i64, decay: Window, now: u64) -> SqliteWindowCall {
        self.begin_window(WindowOp::Attempt { max, decay }, key, now)
    }

    /// Starts `cost` hits on `key`'s fixed window at `now` only if its count plus `cost` is at most
    /// `max` (opening a window of `decay` with `cost` hits if none runs and `cost <= max`), inside
    /// the `BEGIN IMMEDIATE` transaction: atomic. Cargo feature `weights`.
    #[cfg(feature = "weights")]
    pub fn begin_attempt_cost(
        &self,
        key: &str,
        max: i64,
        cost: u32,
        decay: Window,
        now: u64,
    ) -> SqliteWindowCall {
        let cost = i64::from(cost);
        self.begin_window(WindowOp::AttemptCost { max, cost, decay }, key, now)
    }

    /// Starts reading `key`'s fixed window at `now`.
    pub fn begin_get_window(&self, key: &str, now: u64) -> SqliteWindowCall {
        self.begin_window(WindowOp::Get, key, now)
    }

    /// Starts setting `key`'s count to zero at `now`, keeping its window.
    pub fn begin_reset_attempts(&self, key: &str, now: u64) -> SqliteWindowCall {
        self.begin_window(WindowOp::Reset, key, now)
    }

    /// Removes `key`'s count and window.
    pub fn plan_clear(&self, key: &str) -> Statement {
        Statement::new(
            self.names.apply("DELETE FROM {p}_windows WHERE key = ?"),
            vec![SqlValue::Text(key.to_owned())],
        )
    }

    /// Deletes every row whose calls have left their windows at `now`, every window ended by then,
    /// every lock whose TTL ended and, with the `rates` feature, what
    /// [`plan_rates_purge`](Self::plan_rates_purge) deletes: statements run in order (a host reports
    /// the first two's counts as calls and windows).
    pub fn plan_purge(&self, now: u64) -> Vec<Statement> {
        #[cfg(feature = "rates")]
        let now_ms = now;
        let now = SqlValue::Int(now.min(i64::MAX as u64) as i64);
        #[allow(unused_mut)]
        let mut statements = vec![
            Statement::new(
                self.names
                    .apply("DELETE FROM {p}_calls WHERE expires_at <= ?"),
                vec![now.clone()],
            ),
            Statement::new(
                self.names
                    .apply("DELETE FROM {p}_windows WHERE ends_at <= ?"),
                vec![now.clone()],
            ),
            // Locks whose TTL ended (an acquire would replace them; nothing else deletes them).
            Statement::new(
                self.names
                    .apply("DELETE FROM {p}_locks WHERE expires_at <= ?"),
                vec![now],
            ),
        ];
        // GCRA buckets full again and counters that weigh nothing (with the `rates` feature).
        #[cfg(feature = "rates")]
        statements.extend(self.plan_rates_purge(now_ms));
        statements
    }
}

/// The list a statement reads `n` keys from, and its parameters: one `?` per key up to
/// [`Sqlite::BOUND_KEYS`], else one JSON array of the keys read with `json_each` (so any number of keys
/// takes one parameter).
fn key_list<'a>(keys: impl Iterator<Item = &'a str>, n: usize) -> (String, Vec<SqlValue>) {
    if n <= Sqlite::BOUND_KEYS {
        let params = keys.map(|k| SqlValue::Text(k.to_owned())).collect();
        (vec!["?"; n].join(", "), params)
    } else {
        let mut json = String::with_capacity(n * 16);
        json.push('[');
        for (i, key) in keys.enumerate() {
            if i > 0 {
                json.push(',');
            }
            json_string(&mut json, key);
        }
        json.push(']');
        (
            "SELECT value FROM json_each(?)".to_owned(),
            vec![SqlValue::Text(json)],
        )
    }
}

/// A JSON list of rows `[key, n, ...]`, one per key, for a statement that reads them with `json_each`.
struct JsonList(String);

impl JsonList {
    fn new(rows: usize) -> JsonList {
        let mut json = String::with_capacity(rows * 40);
        json.push('[');
        JsonList(json)
    }

    fn row(&mut self, key: &str, numbers: &[i64]) {
        use std::fmt::Write;
        if self.0.len() > 1 {
            self.0.push(',');
        }
        self.0.push('[');
        json_string(&mut self.0, key);
        for n in numbers {
            let _ = write!(self.0, ",{n}");
        }
        self.0.push(']');
    }

    fn finish(mut self) -> String {
        self.0.push(']');
        self.0
    }
}

/// Appends `text` as a JSON string: `"` and `\` escaped, control characters as `\u00XX`, the rest as
/// it is (UTF-8).
fn json_string(out: &mut String, text: &str) {
    use std::fmt::Write;
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// One sliding-log call on SQLite. Run [`statements`](Self::statements) in order on one connection,
/// hand the rows of the last (`key, at`) to [`decide`](Self::decide), then run the statements it
/// returns. On any error after `BEGIN IMMEDIATE`, run [`ROLLBACK`](Self::ROLLBACK).
#[derive(Debug, Clone)]
#[must_use = "a call does nothing until the host runs its statements"]
pub struct SqliteCall {
    entries: Vec<(String, Limit)>,
    /// Each entry's cost when one costs more than 1 (cargo feature `weights`), else empty.
    #[cfg(feature = "weights")]
    costs: Vec<u32>,
    now: u64,
    /// `Some` for a consume, `None` for a peek.
    call_id: Option<String>,
    insert: String,
    /// The insert of a call costing n: n rows (cargo feature `weights`).
    #[cfg(feature = "weights")]
    insert_cost: String,
    /// The insert of every key's row from one JSON list (a batch above [`Sqlite::BOUND_KEYS`]).
    insert_json: String,
    statements: Vec<Statement>,
}

/// What a SQLite call decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// The verdict.
    pub verdict: BatchVerdict,
    /// The statements still to run: the call's rows and `COMMIT` for an allowed consume, `COMMIT`
    /// for a refused one, nothing for a peek.
    pub statements: Vec<Statement>,
    /// For an allowed consume, what gives the call back.
    pub release: Option<SqlRelease>,
}

impl SqliteCall {
    /// Undoes a call whose statements failed after `BEGIN IMMEDIATE`.
    pub const ROLLBACK: &'static str = "ROLLBACK";

    /// The statements to run first, in order; the last one's rows go to [`decide`](Self::decide).
    pub fn statements(&self) -> &[Statement] {
        &self.statements
    }

    /// Whether the statements open a transaction (a consume does; a peek does not).
    pub fn in_transaction(&self) -> bool {
        self.call_id.is_some()
    }

    /// Decides the call from the rows (`key TEXT, at INTEGER`) of the last statement: the verdict
    /// with the quota of the tightest entry, and the statements still to run.
    pub fn decide(self, rows: &[Vec<SqlValue>]) -> Result<Decided, RowError> {
        let err = || RowError::new("the calls select", "rows (key of this call, at >= 0)", rows);
        let keys = distinct_keys_owned(&self.entries);
        // Each key's place, by hashing: a batch of any size decides in linear time.
        let index: HashMap<&str, usize> = keys
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.as_str(), i))
            .collect();
        let mut times: Vec<Vec<u64>> = vec![Vec::new(); keys.len()];
        for row in rows {
            let [SqlValue::Text(key), at] = row.as_slice() else {
                return Err(err());
            };
            let at = at.int().filter(|&t| t >= 0).ok_or_else(err)? as u64;
            let i = *index.get(key.as_str()).ok_or_else(err)?;
            times[i].push(at);
        }
        for log in &mut times {
            log.sort_unstable();
        }
        let times_of = |key: &str| -> &[u64] {
            index
                .get(key)
                .and_then(|&i| times.get(i))
                .map_or(&[], Vec::as_slice)
        };
        // Entries naming one key are one call costing the largest cost they give (the memory
        // store's rule): recorded as that many rows at one time, one row a use.
        #[cfg(feature = "weights")]
        let key_costs: Vec<u32> = {
            let mut costs = vec![1u32; keys.len()];
            for ((key, _), &cost) in self.entries.iter().zip(&self.costs) {
                if let Some(&i) = index.get(key.as_str()) {
                    costs[i] = costs[i].max(cost);
                }
            }
            costs
        };
        #[cfg(feature = "weights")]
        let cost_of = |key: &str| index.get(key).map_or(1, |&i| key_costs[i]);

        let mut blocked: Option<(usize, u64)> = None;
        for (i, (key, limit)) in self.entries.iter().enumerate() {
            #[cfg(feature = "weights")]
            let wait = wait_until_cost(times_of(key), *limit, cost_of(key), self.now);
            #[cfg(not(feature = "weights"))]
            let wait = wait_until(times_of(key), *limit, self.now);
            if let Some(until) = wait {
                if blocked.is_none_or(|(_, longest)| until > longest) {
                    blocked = Some((i, until));
                }
            }
        }
        let commit = || Statement::new("COMMIT", vec![]);
        let record = self.call_id.is_some() && blocked.is_none();
        // A clock that stepped back records at the newest call, keeping the log in order.
        let recorded_at = |key: &str| {
            times_of(key)
                .last()
                .map_or(self.now, |&newest| newest.max(self.now))
        };
        let quota = match blocked {
            Some((i, _)) => {
                let retry_after = BatchVerdict::at(self.now, blocked).retry_after_ms;
                self.entries.get(i).map_or(Quota::NONE, |(key, limit)| {
                    #[cfg(feature = "weights")]
                    if cost_of(key) > 1 {
                        return refused_quota_cost(times_of(key), *limit, self.now, retry_after);
                    }
                    let seen = EntryWindow::of(times_of(key), *limit, self.now, None);
                    Quota {
                        limit: limit.uses(),
                        remaining: 0,
                        refill_after_ms: retry_after,
                        reset_after_ms: seen.reset_after_ms(),
                    }
                })
            }
            None => tightest(self.entries.iter().map(|(key, limit)| {
                let at = record.then(|| recorded_at(key));
                #[allow(unused_mut)]
                let mut window = EntryWindow::of(times_of(key), *limit, self.now, at);
                #[cfg(feature = "weights")]
                if at.is_some() {
                    window.inside += u64::from(cost_of(key)) - 1;
                }
                window
            })),
        };
        let verdict = BatchVerdict::at(self.now, blocked).with_quota(quota);
        let Some(call_id) = self.call_id.clone() else {
            return Ok(Decided {
                verdict,
                statements: vec![],
                release: None,
            });
        };
        if blocked.is_some() {
            return Ok(Decided {
                verdict,
                statements: vec![commit()],
                release: None,
            });
        }
        if keys.len() > Sqlite::BOUND_KEYS {
            // One insert of every key's row from a JSON list of [key, at, expires_at].
            let mut json = JsonList::new(keys.len());
            for (key, longest) in &keys {
                let at = recorded_at(key);
                let expires_at = at.saturating_add(*longest).min(i64::MAX as u64);
                #[cfg(feature = "weights")]
                for _ in 1..cost_of(key) {
                    json.row(key, &[at.min(i64::MAX as u64) as i64, expires_at as i64]);
                }
                json.row(key, &[at.min(i64::MAX as u64) as i64, expires_at as i64]);
            }
            let insert = self.insert_json.clone();
            let statements = vec![
                Statement::new(
                    insert,
                    vec![
                        SqlValue::Text(call_id.clone()),
                        SqlValue::Text(json.finish()),
                    ],
                ),
                commit(),
            ];
            let release = SqlRelease {
                keys: keys.into_iter().map(|(k, _)| k).collect(),
                call_id,
            };
            return Ok(Decided {
                verdict,
                statements,
                release: Some(release),
            });
        }
        let mut statements: Vec<Statement> = keys
            .iter()
            .map(|(key, longest)| {
                let at = recorded_at(key);
                let expires_at = at.saturating_add(*longest).min(i64::MAX as u64);
                #[cfg(feature = "weights")]
                if cost_of(key) > 1 {
                    // One row a use, from one statement.
                    return Statement::new(
                        self.insert_cost.clone(),
                        vec![
                            SqlValue::Int(i64::from(cost_of(key))),
                            SqlValue::Text(key.clone()),
                            SqlValue::Int(at.min(i64::MAX as u64) as i64),
                            SqlValue::Text(call_id.clone()),
                            SqlValue::Int(expires_at as i64),
                        ],
                    );
                }
                Statement::new(
                    self.insert.clone(),
                    vec![
                        SqlValue::Text(key.clone()),
                        SqlValue::Int(at.min(i64::MAX as u64) as i64),
                        SqlValue::Text(call_id.clone()),
                        SqlValue::Int(expires_at as i64),
                    ],
                )
            })
            .collect();
        statements.push(commit());
        let release = SqlRelease {
            keys: keys.into_iter().map(|(k, _)| k).collect(),
            call_id,
        };
        Ok(Decided {
            verdict,
            statements,
            release: Some(release),
        })
    }
}

/// One entry's window at `now`, after the call: its limit, the calls in it, the oldest and newest.
struct EntryWindow {
    limit: Limit,
    now: u64,
    inside: u64,
    oldest: Option<u64>,
    newest: Option<u64>,
}

impl EntryWindow {
    /// From the key's sorted `times`, with the call recorded `at` (an allowed consume) counted.
    fn of(times: &[u64], limit: Limit, now: u64, at: Option<u64>) -> EntryWindow {
        // The calls inside the window are a suffix of the sorted times.
        let first = times.partition_point(|&t| !in_window(t, now, limit.window_ms()));
        let inside = &times[first.min(times.len())..];
        // A recorded call is at or after every call of its key.
        EntryWindow {
            limit,
            now,
            inside: inside.len() as u64 + u64::from(at.is_some()),
            oldest: inside.first().copied().or(at),
            newest: at.or(inside.last().copied()),
        }
    }

    fn remaining(&self) -> u32 {
        u64::from(self.limit.uses()).saturating_sub(self.inside) as u32
    }

    fn left(&self, t: Option<u64>) -> u64 {
        t.map_or(0, |t| {
            t.saturating_add(self.limit.window_ms())
                .saturating_sub(self.now)
        })
    }

    fn reset_after_ms(&self) -> u64 {
        self.left(self.newest)
    }

    fn quota(&self) -> Quota {
        Quota {
            limit: self.limit.uses(),
            remaining: self.remaining(),
            refill_after_ms: self.left(self.oldest),
            reset_after_ms: self.reset_after_ms(),
        }
    }
}

/// The quota of the tightest entry: fewest uses left, ties the longer window, then the first.
fn tightest(entries: impl Iterator<Item = EntryWindow>) -> Quota {
    let mut best: Option<EntryWindow> = None;
    for entry in entries {
        let tighter = best.as_ref().is_none_or(|b| {
            (
                entry.remaining(),
                std::cmp::Reverse(entry.limit.window_ms()),
            ) < (b.remaining(), std::cmp::Reverse(b.limit.window_ms()))
        });
        if tighter {
            best = Some(entry);
        }
    }
    best.map_or(Quota::NONE, |b| b.quota())
}

fn distinct_keys_owned(entries: &[(String, Limit)]) -> Vec<(String, u64)> {
    let entries: Vec<Entry> = entries
        .iter()
        .map(|(k, l)| Entry::new(k.clone(), *l))
        .collect();
    distinct_keys(&entries)
        .into_iter()
        .map(|(k, w)| (k.to_owned(), w))
        .collect()
}

/// The sliding-log rule over sorted times (as the memory store applies it).
#[cfg(not(feature = "weights"))]
fn wait_until(times: &[u64], limit: Limit, now: u64) -> Option<u64> {
    let uses = limit.uses() as usize;
    let inside = times
        .iter()
        .filter(|&&t| in_window(t, now, limit.window_ms()))
        .count();
    (inside >= uses).then(|| times[times.len() - uses].saturating_add(limit.window_ms()))
}

/// [`wait_until`] for a call costing `cost` (clamped to `1..=uses`): refused when more than
/// `uses - cost` calls are inside the window, until the oldest of the newest `uses - cost + 1` leaves
/// (the memory store's `wait_until_cost`).
#[cfg(feature = "weights")]
fn wait_until_cost(times: &[u64], limit: Limit, cost: u32, now: u64) -> Option<u64> {
    let uses = limit.uses() as usize;
    let cost = (cost as usize).clamp(1, uses);
    let inside = times
        .iter()
        .filter(|&&t| in_window(t, now, limit.window_ms()))
        .count();
    (inside + cost > uses)
        .then(|| times[times.len() + cost - 1 - uses].saturating_add(limit.window_ms()))
}

/// The quota of a refused call costing more than 1 (the memory store's `refused_quota_cost`): the
/// uses that do remain, a use back when the oldest call holding one leaves, empty when the newest
/// leaves.
#[cfg(feature = "weights")]
fn refused_quota_cost(times: &[u64], limit: Limit, now: u64, retry_after_ms: u64) -> Quota {
    let (uses, w) = (limit.uses() as usize, limit.window_ms());
    let inside = times.iter().filter(|&&t| in_window(t, now, w)).count();
    let leaves = |t: u64| t.saturating_add(w).saturating_sub(now);
    let refill = match inside.min(uses) {
        0 => retry_after_ms,
        held => leaves(times[times.len() - held]),
    };
    Quota {
        limit: limit.uses(),
        remaining: uses.saturating_sub(inside) as u32,
        refill_after_ms: refill,
        reset_after_ms: times.last().map_or(0, |&t| leaves(t)).max(retry_after_ms),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WindowOp {
    Hit {
        decay: Window,
        amount: i64,
    },
    Attempt {
        max: i64,
        decay: Window,
    },
    #[cfg(feature = "weights")]
    AttemptCost {
        max: i64,
        cost: i64,
        decay: Window,
    },
    Get,
    Reset,
}

/// One fixed-window call on SQLite: run [`statements`](Self::statements), hand the rows of the last
/// (`hits, ends_at`) to [`decide`](Self::decide), run what it returns; `ROLLBACK` on any error.
#[derive(Debug, Clone)]
#[must_use = "a call does nothing until the host runs its statements"]
pub struct SqliteWindowCall {
    op: WindowOp,
    key: String,
    now: u64,
    names: SqlNames,
    statements: Vec<Statement>,
}

impl SqliteWindowCall {
    /// The statements to run first, in order; the last one's rows go to [`decide`](Self::decide).
    pub fn statements(&self) -> &[Statement] {
        &self.statements
    }

    /// Whether the statements open a transaction (everything but a read does).
    pub fn in_transaction(&self) -> bool {
        self.op != WindowOp::Get
    }

    /// Decides from the rows of the last statement: the window after the call (or `None`), and the
    /// statements still to run.
    pub fn decide(
        self,
        rows: &[Vec<SqlValue>],
    ) -> Result<(Option<WindowState>, Vec<Statement>), RowError> {
        self.settle(rows).map(|s| (s.window, s.statements))
    }

    /// [`decide`](Self::decide), saying also whether an attempt counted its hit.
    pub(crate) fn settle(self, rows: &[Vec<SqlValue>]) -> Result<Settled, RowError> {
        let err = || {
            RowError::new(
                "the window select",
                "no row, or one row (hits, ends_at)",
                rows,
            )
        };
        let live = match rows {
            [] => None,
            [row] => {
                let [hits, ends_at] = row.as_slice() else {
                    return Err(err());
                };
                let (hits, ends_at) = (hits.int().ok_or_else(err)?, ends_at.int().ok_or_else(err)?);
                (ends_at > self.now as i64).then_some((hits, ends_at))
            }
            _ => return Err(err()),
        };
        let key = SqlValue::Text(self.key.clone());
        let commit = Statement::new("COMMIT", vec![]);
        let ms_left = |ends_at: i64| ends_at.saturating_sub(self.now as i64);
        let update = |hits: i64, key: SqlValue| {
            let sql = self
                .names
                .apply("UPDATE {p}_windows SET hits = ? WHERE key = ?");
            Statement::new(sql, vec![SqlValue::Int(hits), key])
        };
        let open = |hits: i64, decay: Window, key: SqlValue| {
            let ends_at = self.now.saturating_add(decay.as_ms()).min(i64::MAX as u64) as i64;
            let upsert = self
                .names
                .apply("INSERT OR REPLACE INTO {p}_windows (key, hits, ends_at) VALUES (?, ?, ?)");
            let params = vec![key, SqlValue::Int(hits), SqlValue::Int(ends_at)];
            (
                window_state(hits, ms_left(ends_at)),
                Statement::new(upsert, params),
            )
        };
        let settled = |window, counted, statements| Settled {
            window,
            counted,
            statements,
        };
        Ok(match (self.op, live) {
            (WindowOp::Get, live) => settled(
                live.and_then(|(h, e)| window_state(h, ms_left(e))),
                false,
                vec![],
            ),
            (WindowOp::Reset, None) => settled(None, false, vec![commit]),
            (WindowOp::Reset, Some((_, ends_at))) => {
                let reset = self
                    .names
                    .apply("UPDATE {p}_windows SET hits = 0 WHERE key = ?");
                settled(
                    window_state(0, ms_left(ends_at)),
                    false,
                    vec![Statement::new(reset, vec![key]), commit],
                )
            }
            (WindowOp::Hit { amount, .. }, Some((hits, ends_at))) => {
                let hits = hits.saturating_add(amount);
                settled(
                    window_state(hits, ms_left(ends_at)),
                    true,
                    vec![update(hits, key), commit],
                )
            }
            (WindowOp::Hit { decay, amount }, None) => {
                let (window, upsert) = open(amount, decay, key);
                settled(window, true, vec![upsert, commit])
            }
            (WindowOp::Attempt { max, .. }, Some((hits, ends_at))) if hits >= max => {
                settled(window_state(hits, ms_left(ends_at)), false, vec![commit])
            }
            (WindowOp::Attempt { .. }, Some((hits, ends_at))) => {
                let hits = hits.saturating_add(1);
                settled(
                    window_state(hits, ms_left(ends_at)),
                    true,
                    vec![update(hits, key), commit],
                )
            }
            (WindowOp::Attempt { max, .. }, None) if max < 1 => settled(None, false, vec![commit]),
            (WindowOp::Attempt { decay, .. }, None) => {
                let (window, upsert) = open(1, decay, key);
                settled(window, true, vec![upsert, commit])
            }
            #[cfg(feature = "weights")]
            (WindowOp::AttemptCost { max, cost, .. }, Some((hits, ends_at)))
                if hits > max.saturating_sub(cost) =>
            {
                settled(window_state(hits, ms_left(ends_at)), false, vec![commit])
            }
            #[cfg(feature = "weights")]
            (WindowOp::AttemptCost { cost, .. }, Some((hits, ends_at))) => {
                let hits = hits.saturating_add(cost);
                settled(
                    window_state(hits, ms_left(ends_at)),
                    true,
                    vec![update(hits, key), commit],
                )
            }
            #[cfg(feature = "weights")]
            (WindowOp::AttemptCost { max, cost, .. }, None) if cost > max => {
                settled(None, false, vec![commit])
            }
            #[cfg(feature = "weights")]
            (WindowOp::AttemptCost { cost, decay, .. }, None) => {
                let (window, upsert) = open(cost, decay, key);
                settled(window, true, vec![upsert, commit])
            }
        })
    }
}

/// What a fixed-window call on SQLite settled: the window after it, whether a hit was counted, and the
/// statements still to run.
#[derive(Debug)]
pub(crate) struct Settled {
    pub(crate) window: Option<WindowState>,
    pub(crate) counted: bool,
    pub(crate) statements: Vec<Statement>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{Call, CallError, Command, Fed, Op, Outcome, ReleaseToken};
    use rusqlite::types::{Value, ValueRef};

    fn run(db: &rusqlite::Connection, statement: &Statement) -> Vec<Vec<SqlValue>> {
        let mut st = db.prepare(&statement.sql).unwrap();
        let params = statement.params.iter().map(|p| match p {
            SqlValue::Int(i) => Value::Integer(*i),
            SqlValue::Text(s) => Value::Text(s.clone()),
            other => panic!("SQLite takes no {other:?}"),
        });
        let columns = st.column_count();
        let rows = st
            .query_map(rusqlite::params_from_iter(params), |row| {
                (0..columns)
                    .map(|i| {
                        Ok(match row.get_ref(i)? {
                            ValueRef::Integer(v) => SqlValue::Int(v),
                            ValueRef::Text(t) => {
                                SqlValue::Text(String::from_utf8(t.to_vec()).unwrap())
                            }
                            other => panic!("unexpected column {other:?}"),
                        })
                    })
                    .collect()
            })
            .unwrap();
        rows.collect::<rusqlite::Result<_>>().unwrap()
    }

    fn go(db: &rusqlite::Connection, call: Call) -> Result<Outcome, CallError> {
        let (result, _) = call.drive(|command: Command<'_>| {
            let Command::Sql { statements } = command else {
                return Err("no scripts".to_owned());
            };
            let mut rows = Vec::new();
            for statement in statements {
                rows = run(db, statement);
            }
            Ok(Fed::Rows(rows))
        });
        result
    }

    /// Above `BOUND_KEYS` the keys cross as one JSON text: every key, however spelled, is found by the
    /// select and by the release, on a real SQLite; a U+0000 in such a batch is refused.
    #[test]
    fn a_batch_above_the_bound_parameters_reads_its_keys_from_json() {
        let db = rusqlite::Connection::open_in_memory().unwrap();
        let sqlite = Sqlite::default();
        db.execute_batch(&sqlite.schema()).unwrap();
        let limit = Limit::new(1, 60_000).unwrap();
        let odd = [
            "q\"uote",
            "back\\slash",
            "\u{1}ctl\n",
            "é😀",
            "12",
            "",
            "null",
            "[1]",
        ];
        let mut entries: Vec<Entry> = (0..Sqlite::BOUND_KEYS + 10)
            .map(|i| Entry::new(format!("k{i}"), limit))
            .collect();
        entries.extend(odd.iter().map(|k| Entry::new(*k, limit)));
        let consume = |entries: Vec<Entry>, id: &str| Op::Consume {
            entries,
            call_id: id.to_owned(),
        };
        let Ok(Outcome::Verdict {
            verdict,
            release: Some(ReleaseToken::Sql(release)),
        }) = go(&db, sqlite.start(consume(entries.clone(), "one"), 1_000))
        else {
            panic!("expected an allowed consume");
        };
        assert!(verdict.allowed);
        let count: i64 = db
            .query_row("SELECT count(*) FROM ratewindow_calls", [], |r| r.get(0))
            .unwrap();
        assert_eq!(count as usize, entries.len());
        // Each odd key is found by the big select (its rows come back, spelled as written).
        let peek = sqlite.begin_peek(&entries, 2_000);
        let select = peek.statements().last().unwrap();
        assert_eq!(select.params.len(), 1, "one JSON text");
        let found: std::collections::HashSet<String> = run(&db, select)
            .into_iter()
            .map(|row| match &row[0] {
                SqlValue::Text(key) => key.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(found.len(), entries.len());
        for key in odd {
            assert!(found.contains(key), "{key:?}");
        }
        // The release finds every row by the JSON list.
        let released = go(
            &db,
            sqlite.start(
                Op::Release {
                    token: ReleaseToken::Sql(release),
                },
                3_000,
            ),
        );
        assert!(matches!(released, Ok(Outcome::Unit)));
        let count: i64 = db
            .query_row("SELECT count(*) FROM ratewindow_calls", [], |r| r.get(0))
            .unwrap();
        assert_eq!(count, 0);

        // Counted at 2,000; a minute later every call has left its window: the JSON trim deletes them
        // and the JSON insert writes the new ones, one statement each, inside the transaction.
        let counted = go(&db, sqlite.start(consume(entries.clone(), "two"), 2_000));
        assert!(matches!(counted, Ok(Outcome::Verdict { verdict, .. }) if verdict.allowed));
        let Ok(Outcome::Verdict {
            verdict,
            release: Some(_),
        }) = go(&db, sqlite.start(consume(entries.clone(), "three"), 62_000))
        else {
            panic!("expected an allowed consume");
        };
        assert!(verdict.allowed);
        let (count, oldest): (i64, i64) = db
            .query_row("SELECT count(*), min(at) FROM ratewindow_calls", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!((count as usize, oldest), (entries.len(), 62_000));
        let Ok(Outcome::Verdict { verdict, .. }) =
            go(&db, sqlite.start(consume(entries.clone(), "four"), 63_000))
        else {
            panic!("expected a verdict");
        };
        assert!(
            !verdict.allowed,
            "refused by the calls the JSON insert wrote"
        );

        let mut with_nul = entries;
        with_nul.push(Entry::new("nul\0key", limit));
        assert!(matches!(
            go(&db, sqlite.start(consume(with_nul.clone(), "two"), 4_000)),
            Err(CallError::Unsupported(m)) if m.contains("U+0000")
        ));
        // Below the bound a U+0000 is bound as it is.
        assert!(Sqlite::carries(&with_nul[Sqlite::BOUND_KEYS + 1..]));
    }
}
