//! PostgreSQL: one statement, one round trip, one transaction per call.

use crate::redis::{EmptyCallId, WindowState};
use crate::sql::{
    distinct_keys, window_state, RowError, SqlNames, SqlRelease, SqlValue, Statement,
};
use crate::{BatchVerdict, Entry, Window};

const SCHEMA: &str = include_str!("postgres_schema.sql");
/// The server's clock in ms, as the functions read it.
const NOW_MS: &str = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

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
    window: String,
    release: String,
    purge: String,
}

impl Default for Postgres {
    fn default() -> Self {
        Postgres::new(SqlNames::default())
    }
}

impl Postgres {
    /// Statements for the objects named by `names`.
    pub fn new(names: SqlNames) -> Postgres {
        Postgres {
            consume: names.apply(
                "SELECT allowed, retry_after_ms, retry_timestamp, blocked, now_ms \
                 FROM {p}_consume($1, $2, $3::text[], $4::bigint[], $5::bigint[], $6::boolean)",
            ),
            window: names.apply("SELECT hits, ms_left FROM {p}_window($1, $2, $3::bigint, $4::bigint, $5::boolean)"),
            release: names.apply("DELETE FROM {p}_calls WHERE key = ANY($1::text[]) AND id = $2"),
            purge: names.apply(&format!(
                "WITH calls AS (DELETE FROM {{p}}_calls WHERE expires_at <= {NOW_MS} RETURNING 1), \
                 windows AS (DELETE FROM {{p}}_windows WHERE ends_at <= {NOW_MS} RETURNING 1) \
                 SELECT (SELECT count(*) FROM calls) AS calls, (SELECT count(*) FROM windows) AS windows"
            )),
            names,
            durable: false,
        }
    }

    /// Whether each call waits for its commit to be flushed (the server's `synchronous_commit`),
    /// rather than the default `off` for the call's own transaction. Plan durable calls for statements
    /// that run inside a transaction of the caller's: the relaxed setting would apply to its commit.
    pub fn durable(mut self, durable: bool) -> Postgres {
        self.durable = durable;
        self
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
        Ok((
            self.sliding("c", entries, call_id),
            SqlRelease {
                keys,
                call_id: call_id.to_owned(),
            },
        ))
    }

    /// The verdict [`plan_consume_many`](Self::plan_consume_many) would give, writing nothing.
    pub fn plan_peek_many(&self, entries: &[Entry]) -> Statement {
        self.sliding("p", entries, "")
    }

    /// Removes exactly the rows of the call `release` recorded.
    pub fn plan_release(&self, release: &SqlRelease) -> Statement {
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

    /// Deletes every row whose calls have left their windows, and every ended window, by the server's
    /// clock. Returns one row: (calls deleted, windows deleted).
    pub fn plan_purge(&self) -> Statement {
        Statement::new(self.purge.clone(), vec![])
    }

    /// Decodes the row of a consume or peek of `entries` entries.
    pub fn decode_batch(rows: &[Vec<SqlValue>], entries: usize) -> Result<BatchVerdict, RowError> {
        const EXPECTED: &str =
            "one row (allowed, retry_after_ms, retry_timestamp, blocked, now_ms)";
        let err = || RowError::new("consume", EXPECTED, rows);
        let [row] = rows else { return Err(err()) };
        let [allowed, retry_after, retry_ts, blocked, now] = row.as_slice() else {
            return Err(err());
        };
        let (allowed, retry_after, retry_ts, blocked, now) = (
            allowed.bool().ok_or_else(err)?,
            retry_after.int().ok_or_else(err)?,
            retry_ts.int().ok_or_else(err)?,
            blocked.int().ok_or_else(err)?,
            now.int().ok_or_else(err)?,
        );
        match allowed {
            true if retry_after == 0 && retry_ts == -1 && blocked == -1 && now >= 0 => {
                Ok(BatchVerdict::ALLOWED)
            }
            false
                if retry_after >= 1
                    && retry_ts > now
                    && now >= 0
                    && (0..entries as i64).contains(&blocked) =>
            {
                Ok(BatchVerdict {
                    allowed: false,
                    retry_after_ms: retry_after as u64,
                    retry_timestamp: Some(retry_ts as u64),
                    blocked: Some(blocked as usize),
                })
            }
            _ => Err(err()),
        }
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
