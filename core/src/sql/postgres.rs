//! PostgreSQL: one statement, one round trip, one transaction per call.

use crate::redis::{EmptyCallId, WindowState};
use crate::sql::{
    distinct_keys, window_state, RowError, SqlNames, SqlRelease, SqlValue, Statement,
};
use crate::{BatchVerdict, Entry, Quota, Window};

// The schema, and with the `rates` feature GCRA's and the counter's tables and functions, with the
// `weights` feature the weighted sliding-log function (a build without them, such as the wasm-bindgen
// package's, does not carry their text), in one transaction, without the sources' comment lines.
macro_rules! pg_schema {
    ($($part:literal),*) => {
        crate::sql::schema_text!(
            SCHEMA = concat!(include_str!("postgres_schema.sql"), $(include_str!($part),)* "COMMIT;\n")
        );
    };
}
#[cfg(all(not(feature = "rates"), not(feature = "weights")))]
pg_schema!();
#[cfg(all(feature = "rates", not(feature = "weights"), not(feature = "mixed")))]
pg_schema!("postgres_rates.sql");
#[cfg(all(feature = "rates", not(feature = "weights"), feature = "mixed"))]
pg_schema!("postgres_rates.sql", "postgres_mixed.sql");
#[cfg(all(not(feature = "rates"), feature = "weights"))]
pg_schema!("postgres_weights.sql");
#[cfg(all(feature = "rates", feature = "weights", not(feature = "mixed")))]
pg_schema!("postgres_weights.sql", "postgres_rates.sql");
#[cfg(all(feature = "rates", feature = "weights", feature = "mixed"))]
pg_schema!(
    "postgres_weights.sql",
    "postgres_rates.sql",
    "postgres_mixed.sql"
);
/// The server's clock in ms, as the functions read it.
pub(crate) const NOW_MS: &str = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// Plans and decoders for PostgreSQL (node-postgres, psycopg, …), under one name prefix.
///
/// Run [`schema`](Self::schema) once per database (it is idempotent and safe to run from several
/// processes at once); then every call is one statement.
///
/// **Commits.** By default each call's statement sets `synchronous_commit = off` for the transaction
/// it runs in (locally): a call does not wait for the WAL flush, which is most of its cost on a durable
/// server. That is meant for a statement that is its own transaction (autocommit, as a pool runs it);
/// a host that runs a call inside a transaction of its caller's plans it [`durable`](Self::durable),
/// so the caller's commit keeps the server's setting. The database stays consistent; a server crash can lose the calls of
/// the last moments (at most `3 × wal_writer_delay`, 600 ms by default) — for counting rate limits
/// that is the right trade. [`durable`](Self::durable) keeps the server's own setting instead.
#[derive(Debug, Clone)]
pub struct Postgres {
    names: SqlNames,
    durable: bool,
    consume: String,
    consume_one: String,
    peek_one: String,
    window: String,
    attempt: String,
    release: String,
    purge: String,
    /// The statements of weighted calls (boxed: a `Postgres` stays the size it was).
    #[cfg(feature = "weights")]
    weighted: Box<Weighted>,
}

/// The statements of weighted calls (cargo feature `weights`).
#[cfg(feature = "weights")]
#[derive(Debug, Clone)]
struct Weighted {
    /// A consume or peek with an entry costing more than 1: `{p}_take_n`.
    take_n: String,
    /// The release of a weighted call: every time its ids hold.
    release_n: String,
    /// The fixed window's attempt costing more than 1: `{p}_attempt_n`.
    attempt_n: String,
}

impl Default for Postgres {
    fn default() -> Self {
        Postgres::new(SqlNames::default())
    }
}

impl Postgres {
    /// The most entries one call carries. A call binds six parameters whatever its size (the keys,
    /// uses and windows travel as three arrays), so PostgreSQL's 65,535 bind parameters never limit
    /// it; the server works through a batch key by key (a row lock each), so 100,000 entries is the
    /// bound. A larger batch is refused before any statement runs (an `unsupported` error): split it.
    pub const MAX_BATCH: usize = 100_000;

    /// Statements for the objects named by `names`.
    pub fn new(names: SqlNames) -> Postgres {
        // With the `rates` feature the purge also deletes GCRA buckets that are full again and counters
        // whose counts weigh nothing (those tables exist wherever the schema holds the locks' table).
        #[cfg(feature = "rates")]
        let rates = format!(", {}", crate::call::postgres_rates_purge_ctes());
        #[cfg(not(feature = "rates"))]
        let rates = "";
        Postgres {
            consume: names.apply(
                "SELECT allowed, retry_after_ms, retry_timestamp, blocked, now_ms, \
                 quota_limit, remaining, refill_after_ms, reset_after_ms \
                 FROM {p}_sliding($1, $2, $3::text[], $4::bigint[], $5::bigint[], $6::boolean)",
            ),
            // One entry: a plain read of the key's row (no function call) answers a refusal; only
            // a call it does not refuse runs {p}_take1, handed the row it read (no second read).
            // The refusal test is one comparison: the times are ascending (an array from 1), so
            // `uses` calls lie inside the window exactly when the uses-th newest, `u`, does (NULL,
            // never inside, when the row holds fewer: the subscript, clamped at 0, names no element;
            // the clamp also keeps it, an int4, in range for any `uses` up to u32::MAX; a `CASE`
            // guard cost ~2,100 more server instructions a call). The verdict leaves as ONE text column, the
            // nine numbers as PostgreSQL prints a `bigint[]` (`{0,412,…}`, allowed as 1 or 0): a
            // driver passes text through without a parser per column (node-postgres parsed nine
            // fields, bigints by a regex each, and built a row template from their names every
            // call). The mode is part of the text (a consume and a peek are two statements); the
            // parameters are the key, the call id, uses, window and whether the commit is relaxed.
            consume_one: Self::one_entry(&names, 'c'),
            peek_one: Self::one_entry(&names, 'p'),
            window: names.apply("SELECT hits, ms_left FROM {p}_window($1, $2, $3::bigint, $4::bigint, $5::boolean)"),
            attempt: names.apply(
                "SELECT counted, hits, ms_left FROM {p}_attempt($1, $2::bigint, $3::bigint, $4::boolean)",
            ),
            release: names.apply(
                "WITH locked AS (SELECT key FROM {p}_log WHERE key = ANY($1::text[]) AND $2::text = ANY(ids) \
                 ORDER BY key FOR UPDATE) \
                 UPDATE {p}_log l SET ats = l.ats[:array_position(l.ids, $2::text) - 1] || l.ats[array_position(l.ids, $2::text) + 1:], \
                 ids = array_remove(l.ids, $2::text) FROM locked WHERE l.key = locked.key AND $2::text = ANY(l.ids)",
            ),
            purge: names.apply(&format!(
                // Rows a call holds are skipped (they are in use): the purge never waits on a call,
                // so it cannot deadlock with a batch taking its rows in key order.
                "WITH calls AS (DELETE FROM {{p}}_log WHERE key IN (SELECT key FROM {{p}}_log \
                 WHERE expires_at <= {NOW_MS} FOR UPDATE SKIP LOCKED) \
                 RETURNING cardinality(ats) AS n), \
                 windows AS (DELETE FROM {{p}}_windows WHERE ends_at <= {NOW_MS} RETURNING 1), \
                 locks AS (DELETE FROM {{p}}_locks WHERE key IN (SELECT key FROM {{p}}_locks \
                 WHERE expires_at <= clock_timestamp() FOR UPDATE SKIP LOCKED) RETURNING 1){rates} \
                 SELECT (SELECT coalesce(sum(n), 0) FROM calls)::bigint AS calls, \
                 (SELECT count(*) FROM windows) AS windows"
            )),
            #[cfg(feature = "weights")]
            weighted: Box::new(Weighted {
                take_n: names.apply(
                    "SELECT allowed, retry_after_ms, retry_timestamp, blocked, now_ms, \
                     quota_limit, remaining, refill_after_ms, reset_after_ms \
                     FROM {p}_take_n($1, $2, $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::boolean)",
                ),
                attempt_n: names.apply(
                    "SELECT counted, hits, ms_left FROM {p}_attempt_n($1, $2::bigint, $3::bigint, $4::bigint, $5::boolean)",
                ),
                release_n: names.apply(
                    "WITH locked AS (SELECT key FROM {p}_log WHERE key = ANY($1::text[]) AND $2::text = ANY(ids) \
                     ORDER BY key FOR UPDATE) \
                     UPDATE {p}_log l SET \
                     ats = coalesce((SELECT array_agg(u.a ORDER BY u.o) FROM unnest(l.ats, l.ids) WITH ORDINALITY AS u(a, d, o) \
                     WHERE u.d <> $2::text AND NOT starts_with(u.d, $2::text || chr(1))), '{}'), \
                     ids = coalesce((SELECT array_agg(u.d ORDER BY u.o) FROM unnest(l.ids) WITH ORDINALITY AS u(d, o) \
                     WHERE u.d <> $2::text AND NOT starts_with(u.d, $2::text || chr(1))), '{}') \
                     FROM locked WHERE l.key = locked.key",
                ),
            }),
            names,
            durable: false,
        }
    }

    /// The one-entry statement of `mode` (`'c'` consume, `'p'` peek): `$1` key, `$2` call id,
    /// `$3` uses, `$4` window (ms), `$5` relaxed commit; one row of one text column, `verdict`.
    /// A refusal answers five numbers, `{0,until,now,reset_at,uses}` (the wait and the quota follow
    /// from them, in [`decode_sliding`]): PostgreSQL builds the whole `CASE` again on every execution,
    /// so its fewer expressions cost every call less (callgrind, a refusal: 137,521 -> 127,670
    /// server instructions; an allowed call too).
    ///
    /// A consume it does not refuse runs `{p}_put1`, handed the times it read and where it read them
    /// (the row's `ctid`): one `UPDATE` of that row by a TID scan, compared on the times
    /// (callgrind, `bench/python/pg_callgrind.sh`: an allowed call 266,469 -> 239,685 server
    /// instructions, a refusal 127,843 -> 126,670). A peek runs `{p}_take1`, which writes nothing.
    fn one_entry(names: &SqlNames, mode: char) -> String {
        let (row, otherwise) = if mode == 'c' {
            (
                "l.ctid AS t",
                "{p}_put1($2::text, $1::text, $3::bigint, $4::bigint, $5::boolean, s.ats, s.now, s.t)",
            )
        } else {
            (
                "l.ids",
                "{p}_take1('p', $2::text, $1::text, $3::bigint, $4::bigint, $5::boolean, s.ats, s.ids, s.now)",
            )
        };
        names.apply(&format!(
            "SELECT (CASE WHEN s.u > s.now - $4::bigint \
             THEN ARRAY[0, s.u + $4::bigint, s.now, s.ats[s.n] + $4::bigint, $3::bigint] \
             ELSE {otherwise} \
             END)::text AS verdict \
             FROM (SELECT l.ats, {row}, cardinality(l.ats) AS n, \
             l.ats[greatest(cardinality(l.ats) - $3::bigint + 1, 0)] AS u, \
             greatest({NOW_MS}, l.ats[cardinality(l.ats)]) AS now \
             FROM (SELECT) AS o LEFT JOIN {{p}}_log AS l ON l.key = $1::text OFFSET 0) AS s"
        ))
    }

    /// Whether each call waits for its commit to be flushed (the server's `synchronous_commit`),
    /// rather than the default `off` for the call's own transaction. Plan durable calls for statements
    /// that run inside a transaction of the caller's: the relaxed setting would apply to its commit.
    pub fn durable(mut self, durable: bool) -> Postgres {
        self.durable = durable;
        self
    }

    /// Whether calls keep the server's `synchronous_commit` (see [`durable`](Self::durable)).
    pub fn is_durable(&self) -> bool {
        self.durable
    }

    /// The names in use.
    pub fn names(&self) -> &SqlNames {
        &self.names
    }

    /// The schema: tables, indexes and the two functions, in one transaction. Idempotent.
    pub fn schema(&self) -> String {
        self.names.apply(SCHEMA)
    }

    fn sliding(&self, mode: &str, entries: &[Entry], call_id: &str) -> Statement {
        // An entry costing more than 1: the weighted function, every entry's cost.
        #[cfg(feature = "weights")]
        if entries.iter().any(|e| e.cost() > 1) {
            return Statement::new(
                self.weighted.take_n.clone(),
                vec![
                    SqlValue::Text(mode.to_owned()),
                    SqlValue::Text(call_id.to_owned()),
                    SqlValue::Texts(entries.iter().map(|e| e.key.clone()).collect()),
                    SqlValue::Ints(entries.iter().map(|e| e.limit.uses() as i64).collect()),
                    SqlValue::Ints(entries.iter().map(|e| e.limit.window_ms() as i64).collect()),
                    SqlValue::Ints(entries.iter().map(|e| i64::from(e.cost())).collect()),
                    SqlValue::Bool(!self.durable),
                ],
            );
        }
        // One entry, the usual call: scalar parameters, a function of one row.
        if let [entry] = entries {
            let sql = if mode == "c" {
                &self.consume_one
            } else {
                &self.peek_one
            };
            return Statement::new(
                sql.clone(),
                vec![
                    SqlValue::Text(entry.key.clone()),
                    SqlValue::Text(call_id.to_owned()),
                    SqlValue::Int(entry.limit.uses() as i64),
                    SqlValue::Int(entry.limit.window_ms() as i64),
                    SqlValue::Bool(!self.durable),
                ],
            );
        }
        Statement::new(
            self.consume.clone(),
            vec![
                SqlValue::Text(mode.to_owned()),
                SqlValue::Text(call_id.to_owned()),
                SqlValue::Texts(entries.iter().map(|e| e.key.clone()).collect()),
                SqlValue::Ints(entries.iter().map(|e| e.limit.uses() as i64).collect()),
                SqlValue::Ints(entries.iter().map(|e| e.limit.window_ms() as i64).collect()),
                SqlValue::Bool(!self.durable),
            ],
        )
    }

    /// Counts one call against every entry, all or nothing. `call_id` must be unique to this call: it
    /// marks the call's rows so [`plan_release`](Self::plan_release) removes exactly them.
    pub fn plan_consume_many(
        &self,
        entries: &[Entry],
        call_id: &str,
    ) -> Result<(Statement, SqlRelease), EmptyCallId> {
        if call_id.is_empty() {
            return Err(EmptyCallId);
        }
        let keys = distinct_keys(entries)
            .into_iter()
            .map(|(k, _)| k.to_owned())
            .collect();
        // A weighted call's token names its largest cost (`id\x01n`, as on Redis): its release
        // removes the id's every time, on hosts that rebuild the token from the keys and the id too.
        #[allow(unused_mut)]
        let mut release_id = call_id.to_owned();
        #[cfg(feature = "weights")]
        if let Some(cost) = entries.iter().map(Entry::cost).max().filter(|&c| c > 1) {
            release_id = format!("{call_id}\x01{cost}");
        }
        Ok((
            self.sliding("c", entries, call_id),
            SqlRelease {
                keys,
                call_id: release_id,
            },
        ))
    }

    /// The verdict [`plan_consume_many`](Self::plan_consume_many) would give, writing nothing.
    pub fn plan_peek_many(&self, entries: &[Entry]) -> Statement {
        self.sliding("p", entries, "")
    }

    /// Removes exactly the rows of the call `release` recorded.
    pub fn plan_release(&self, release: &SqlRelease) -> Statement {
        // A weighted call's token (`id\x01n`): every time of the id.
        #[cfg(feature = "weights")]
        if let Some((id, _)) = release.call_id.split_once('\x01') {
            return Statement::new(
                self.weighted.release_n.clone(),
                vec![
                    SqlValue::Texts(release.keys.clone()),
                    SqlValue::Text(id.to_owned()),
                ],
            );
        }
        Statement::new(
            self.release.clone(),
            vec![
                SqlValue::Texts(release.keys.clone()),
                SqlValue::Text(release.call_id.clone()),
            ],
        )
    }

    fn fixed(&self, op: &str, key: &str, decay_ms: u64, amount: i64) -> Statement {
        Statement::new(
            self.window.clone(),
            vec![
                SqlValue::Text(op.to_owned()),
                SqlValue::Text(key.to_owned()),
                SqlValue::Int(decay_ms as i64),
                SqlValue::Int(amount),
                SqlValue::Bool(!self.durable),
            ],
        )
    }

    /// Adds `amount` hits to `key`'s fixed window, opening one of `decay` if none runs.
    pub fn plan_hit(&self, key: &str, decay: Window, amount: i64) -> Statement {
        self.fixed("hit", key, decay.as_ms(), amount)
    }

    /// One hit on `key`'s fixed window only if it holds fewer than `max` (opening a window of `decay`
    /// if none runs), atomically. Returns one row: (counted, hits, ms_left); see
    /// [`decode_attempt`](Self::decode_attempt).
    pub fn plan_attempt(&self, key: &str, max: i64, decay: Window) -> Statement {
        Statement::new(
            self.attempt.clone(),
            vec![
                SqlValue::Text(key.to_owned()),
                SqlValue::Int(max),
                SqlValue::Int(decay.as_ms() as i64),
                SqlValue::Bool(!self.durable),
            ],
        )
    }

    /// [`plan_attempt`](Self::plan_attempt) costing `cost` hits: counted only when the window's count
    /// plus `cost` is at most `max` (a window of `decay` opens with `cost` hits when none runs and
    /// `cost <= max`), else nothing. Decode with [`decode_attempt_cost`](Self::decode_attempt_cost).
    /// Cargo feature `weights`.
    #[cfg(feature = "weights")]
    pub fn plan_attempt_cost(&self, key: &str, max: i64, cost: u32, decay: Window) -> Statement {
        Statement::new(
            self.weighted.attempt_n.clone(),
            vec![
                SqlValue::Text(key.to_owned()),
                SqlValue::Int(max),
                SqlValue::Int(decay.as_ms() as i64),
                SqlValue::Int(i64::from(cost)),
                SqlValue::Bool(!self.durable),
            ],
        )
    }

    /// Reads `key`'s fixed window.
    pub fn plan_get_window(&self, key: &str) -> Statement {
        self.fixed("get", key, 0, 0)
    }

    /// Sets `key`'s count to zero, keeping its window.
    pub fn plan_reset_attempts(&self, key: &str) -> Statement {
        self.fixed("reset", key, 0, 0)
    }

    /// Removes `key`'s count and window.
    pub fn plan_clear(&self, key: &str) -> Statement {
        self.fixed("clear", key, 0, 0)
    }

    /// Deletes every row whose calls have left their windows, every ended window and every lock whose
    /// TTL ended, by the server's clock, and with the `rates` feature what
    /// [`plan_rates_purge`](Self::plan_rates_purge) deletes. Returns one row: (calls deleted, windows
    /// deleted); the rest is not counted.
    pub fn plan_purge(&self) -> Statement {
        Statement::new(self.purge.clone(), vec![])
    }

    /// Decodes the row of a consume or peek of `entries` entries: the verdict and the quota of its
    /// tightest entry.
    pub fn decode_batch(rows: &[Vec<SqlValue>], entries: usize) -> Result<BatchVerdict, RowError> {
        decode_sliding(rows, entries, None, false)
    }

    /// [`decode_batch`](Self::decode_batch) for a call with an entry costing more than 1: its refusal
    /// answers the uses that do remain (a heavy call may be refused while lighter ones would pass)
    /// and when the oldest call holding one leaves. Cargo feature `weights`.
    #[cfg(feature = "weights")]
    pub fn decode_weighted_batch(
        rows: &[Vec<SqlValue>],
        entries: usize,
    ) -> Result<BatchVerdict, RowError> {
        decode_sliding(rows, entries, None, true)
    }

    /// Decodes the row of any fixed-window statement: the window, or `None` when the key has none.
    pub fn decode_window(rows: &[Vec<SqlValue>]) -> Result<Option<WindowState>, RowError> {
        let err = || RowError::new("window", "one row (hits, ms_left >= 0)", rows);
        let [row] = rows else { return Err(err()) };
        let [hits, ms_left] = row.as_slice() else {
            return Err(err());
        };
        let (hits, ms_left) = (hits.int().ok_or_else(err)?, ms_left.int().ok_or_else(err)?);
        if ms_left < 0 {
            return Err(err());
        }
        Ok(window_state(hits, ms_left))
    }

    /// Decodes the row of an attempt with `max`: whether the hit was counted, the count after the call
    /// and the ms left (0 without a window).
    pub fn decode_attempt(rows: &[Vec<SqlValue>], max: i64) -> Result<(bool, i64, u64), RowError> {
        let err = || RowError::new("attempt", "one row (counted, hits, ms_left >= 0)", rows);
        let [row] = rows else { return Err(err()) };
        let [counted, hits, ms_left] = row.as_slice() else {
            return Err(err());
        };
        let (counted, hits, ms_left) = (
            counted.bool().ok_or_else(err)?,
            hits.int().ok_or_else(err)?,
            ms_left.int().ok_or_else(err)?,
        );
        let consistent = if counted {
            // Counted: below max before, so at most max after, in a running window.
            ms_left >= 1 && hits <= max
        } else {
            (ms_left >= 1 && hits >= max) || (ms_left == 0 && hits == 0 && max < 1)
        };
        if !consistent {
            return Err(err());
        }
        Ok((counted, hits, ms_left as u64))
    }

    /// Decodes the row of an attempt costing `cost` with `max` (as [`decode_attempt`](Self::decode_attempt)):
    /// refused, the window holds more than `max - cost`, or none runs and `cost > max`. Cargo feature
    /// `weights`.
    #[cfg(feature = "weights")]
    pub fn decode_attempt_cost(
        rows: &[Vec<SqlValue>],
        max: i64,
        cost: u32,
    ) -> Result<(bool, i64, u64), RowError> {
        let err = || RowError::new("attempt", "one row (counted, hits, ms_left >= 0)", rows);
        let [row] = rows else { return Err(err()) };
        let [counted, hits, ms_left] = row.as_slice() else {
            return Err(err());
        };
        let (counted, hits, ms_left) = (
            counted.bool().ok_or_else(err)?,
            hits.int().ok_or_else(err)?,
            ms_left.int().ok_or_else(err)?,
        );
        let (cost, max) = (i128::from(cost), i128::from(max));
        let consistent = if counted {
            ms_left >= 1 && i128::from(hits) >= cost && i128::from(hits) <= max
        } else {
            (ms_left >= 1 && i128::from(hits) + cost > max)
                || (ms_left == 0 && hits == 0 && cost > max)
        };
        if !consistent {
            return Err(err());
        }
        Ok((counted, hits, ms_left as u64))
    }

    /// Decodes the row of a purge: (calls deleted, windows deleted).
    pub fn decode_purge(rows: &[Vec<SqlValue>]) -> Result<(u64, u64), RowError> {
        let err = || RowError::new("purge", "one row (calls, windows)", rows);
        let [row] = rows else { return Err(err()) };
        let [calls, windows] = row.as_slice() else {
            return Err(err());
        };
        match (calls.int(), windows.int()) {
            (Some(c), Some(w)) if c >= 0 && w >= 0 => Ok((c as u64, w as u64)),
            _ => Err(err()),
        }
    }
}

/// The one-entry statement's verdict column as nine integers: the text PostgreSQL prints for a
/// `bigint[]` (`{1,0,-1,-1,1700000000000,5,4,10000,10000}`: braces, no spaces, no NULLs), or an
/// array a driver parsed. A refusal's five, `{0,until,now,reset_at,uses}`, read as the nine they
/// stand for: `{0,until-now,until,0,now,uses,0,until-now,reset_at-now}`. Anything else (another
/// length, a NULL, a number that is not an integer, a five that is not a refusal or overflows) is
/// `None`: rows of the wrong shape.
fn verdict_array(value: &SqlValue) -> Option<[SqlValue; 9]> {
    let mut out: [SqlValue; 9] = std::array::from_fn(|_| SqlValue::Null);
    let mut n = 0;
    let mut put = |v: i64| {
        let slot = out.get_mut(n)?;
        *slot = SqlValue::Int(v);
        n += 1;
        Some(())
    };
    match value {
        SqlValue::Text(text) => {
            let inner = text.strip_prefix('{')?.strip_suffix('}')?;
            for item in inner.split(',') {
                put(item.parse().ok()?)?;
            }
        }
        SqlValue::Ints(items) => {
            for &item in items {
                put(item)?;
            }
        }
        _ => return None,
    }
    if n == 5 {
        let int = |v: &SqlValue| v.int();
        let (refused, until, now) = (int(&out[0])?, int(&out[1])?, int(&out[2])?);
        let (reset_at, uses) = (int(&out[3])?, int(&out[4])?);
        if refused != 0 {
            return None;
        }
        let wait = until.checked_sub(now)?;
        let reset = reset_at.checked_sub(now)?;
        return Some([0, wait, until, 0, now, uses, 0, wait, reset].map(SqlValue::Int));
    }
    (n == 9).then_some(out)
}

/// Decodes the row of a consume or peek of `entries` entries. With `limits` (the machine knows them)
/// the quota is checked against the call too: its limit is an entry's (the blocked one's on a
/// refusal), its times within that entry's window, and an allowed consume (`consumed`) has used one.
/// (The functions take a call's time as the later of the server's clock and the newest call they
/// read, so no time they answer exceeds its window, even after the clock stepped back.) A
/// `weighted` call's refusal may leave uses (fewer than the limit) and a use back before the wait.
pub(crate) fn decode_sliding(
    rows: &[Vec<SqlValue>],
    entries: usize,
    known: Option<(&[crate::Limit], bool)>,
    weighted: bool,
) -> Result<BatchVerdict, RowError> {
    const EXPECTED: &str = "one row (allowed, retry_after_ms, retry_timestamp, blocked, now_ms, \
                            quota_limit, remaining, refill_after_ms, reset_after_ms) of one verdict, \
                            or one column of those nine as a bigint array";
    let err = || RowError::new("consume", EXPECTED, rows);
    let [row] = rows else { return Err(err()) };
    // The one-entry statement's one column (`{1,0,-1,…}`): its nine numbers, read as the columns.
    let nine;
    let row: &[SqlValue] = match row.as_slice() {
        [one] => {
            nine = verdict_array(one).ok_or_else(err)?;
            &nine
        }
        columns => columns,
    };
    let [allowed, rest @ ..] = row else {
        return Err(err());
    };
    let allowed = allowed.bool().ok_or_else(err)?;
    let [retry_after, retry_ts, blocked, now, limit, remaining, refill, reset] = rest else {
        return Err(err());
    };
    let int = |v: &SqlValue| v.int().ok_or_else(err);
    let (retry_after, retry_ts, blocked, now) =
        (int(retry_after)?, int(retry_ts)?, int(blocked)?, int(now)?);
    let (limit, remaining, refill, reset) =
        (int(limit)?, int(remaining)?, int(refill)?, int(reset)?);
    // Every quota: a limit an entry can have, uses left within it, and the window's times in order;
    // no call in the window (all uses left) exactly when nothing is to refill or reset.
    let quota_ok = (1..=u32::MAX as i64).contains(&limit)
        && (0..=limit).contains(&remaining)
        && refill >= 0
        && reset >= refill
        && (refill == 0) == (reset == 0)
        && (remaining == limit) == (reset == 0);
    if !quota_ok || now < 0 {
        return Err(err());
    }
    let quota = Quota {
        limit: limit as u32,
        remaining: remaining as u32,
        refill_after_ms: refill as u64,
        reset_after_ms: reset as u64,
    };
    let verdict = if allowed {
        if retry_after != 0 || retry_ts != -1 || blocked != -1 {
            return Err(err());
        }
        BatchVerdict::ALLOWED.with_quota(quota)
    } else {
        // The wait is the time to the stamp, by the server's clock.
        if retry_after < 1
            || retry_ts <= now
            || retry_ts.checked_sub(now) != Some(retry_after)
            || !(0..entries as i64).contains(&blocked)
            || (!weighted && (remaining != 0 || refill != retry_after))
            || (weighted && (remaining >= limit || refill < 1 || refill > retry_after))
        {
            return Err(err());
        }
        BatchVerdict {
            allowed: false,
            retry_after_ms: retry_after as u64,
            retry_timestamp: Some(retry_ts as u64),
            blocked: Some(blocked as usize),
            quota,
        }
    };
    if let Some((limits, consumed)) = known {
        // Every time in the quota lies within the window of the entry it is about (the blocked one,
        // or one with the quota's limit): a wait or a reset longer than that window, or a consume
        // that leaves nothing to reset, is no server's answer.
        let within = |limit: &crate::Limit| {
            let window = limit.window_ms();
            limit.uses() == quota.limit
                && quota.refill_after_ms <= window
                && quota.reset_after_ms <= window
                && verdict.retry_after_ms <= window
        };
        let ok = match verdict.blocked {
            Some(i) => limits.get(i).is_some_and(within),
            None => {
                limits.iter().any(within)
                    && (!consumed || (quota.remaining < quota.limit && quota.reset_after_ms >= 1))
            }
        };
        if limits.len() != entries || !ok {
            return Err(err());
        }
    }
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(column: &str) -> Result<BatchVerdict, RowError> {
        decode_sliding(&[vec![SqlValue::Text(column.to_owned())]], 1, None, false)
    }

    #[test]
    fn a_refusals_five_numbers_read_as_the_nine() {
        let five = decode("{0,1700000010000,1700000000500,1700000012000,5}").unwrap();
        let nine = decode("{0,9500,1700000010000,0,1700000000500,5,0,9500,11500}").unwrap();
        assert_eq!(five, nine);
        assert!(!five.allowed);
        assert_eq!(five.retry_after_ms, 9_500);
        assert_eq!(five.retry_timestamp, Some(1_700_000_010_000));
        assert_eq!(five.quota.reset_after_ms, 11_500);
        // Five numbers that are not a refusal, or not a consistent one, are rows of the wrong shape.
        for bad in [
            "{1,1700000010000,1700000000500,1700000012000,5}",
            "{0,1700000000500,1700000000500,1700000012000,5}",
            "{0,1700000010000,1700000000500,1700000009000,5}",
            "{0,1700000010000,1700000000500,1700000012000,0}",
            "{0,-9223372036854775808,1,1700000012000,5}",
            "{0,1700000010000,1700000000500,1700000012000}",
        ] {
            assert!(decode(bad).is_err(), "{bad}");
        }
    }
}
