//! The SQL call machines: PostgreSQL's one statement a call, SQLite's `BEGIN IMMEDIATE` sequence with
//! its `ROLLBACK`, driven by [`Call`].
//!
//! PostgreSQL: every operation is one statement (a function of the schema, or the release `DELETE`):
//! its rows decide, a failure is the store's. SQLite: a write opens with `BEGIN IMMEDIATE` and reads;
//! the machine decides from the rows and asks for the writes and `COMMIT`. Any failure, or rows of the
//! wrong shape, after `BEGIN` → `ROLLBACK`, then the original error (a failed rollback changes
//! nothing: the error stands). A busy timeout (`database is locked`) is a store error like any other:
//! the transaction rolled back, nothing was counted.

use crate::call::{Call, CallError, Command, Fed, Op, Outcome, ReleaseToken, WindowQuery};
use crate::redis::WindowState;
use crate::sql::postgres::decode_sliding;
use crate::sql::sqlite::Settled;
use crate::sql::{
    Postgres, RowError, SqlRelease, SqlValue, Sqlite, SqliteCall, SqliteWindowCall, Statement,
};
use crate::{BatchVerdict, Limit, Quota};

const EMPTY_CALL_ID: &str = "a call id must not be empty: pass a fresh random id for every call";
const REDIS_TOKEN: &str = "a Redis store's release token was given to a SQL store";
/// A batch above [`Postgres::MAX_BATCH`] entries.
const PG_TOO_LARGE: CallError = CallError::Unsupported(
    "a PostgreSQL call carries at most 100000 entries (ratewindow_core::sql::Postgres::MAX_BATCH): \
     split the batch into calls of at most that many",
);
/// A batch above [`Sqlite::MAX_BATCH`] entries.
const SQLITE_TOO_LARGE: CallError = CallError::Unsupported(
    "a SQLite call carries at most 100000 entries (ratewindow_core::sql::Sqlite::MAX_BATCH), and \
     above 32765 (Sqlite::BOUND_KEYS: the keys go as one JSON text) no key holding U+0000: split \
     the batch",
);

/// One SQL operation in progress: the statements it waits on, and what their rows mean.
#[derive(Debug)]
pub(crate) struct SqlCall {
    statements: Vec<Statement>,
    step: Step,
    result: Option<Result<Outcome, CallError>>,
    /// A PostgreSQL consume's release, kept when its statement failed (it may have committed).
    failed_release: Option<SqlRelease>,
}

/// What the rows of the statements asked for mean.
#[derive(Debug)]
enum Step {
    /// PostgreSQL's one statement.
    Postgres(PgRows),
    /// SQLite's sliding log: the calls' select (after `BEGIN IMMEDIATE` and the trims for a consume).
    SqliteSliding(SqliteCall),
    /// SQLite's fixed window: the window's select (after `BEGIN IMMEDIATE` for a write).
    SqliteWindow(SqliteWindowCall, FixedOutcome),
    /// Statements whose rows say nothing (the writes and `COMMIT`, a release, a clear): then this.
    Then(Outcome),
    /// `ROLLBACK` after a failure: then the original error, whatever the rollback gives.
    RollBack(CallError),
    /// The result is out.
    Over,
}

/// How PostgreSQL's rows decode.
#[derive(Debug)]
enum PgRows {
    Sliding {
        limits: Vec<Limit>,
        /// `Some` for a consume: its token when allowed.
        release: Option<SqlRelease>,
        /// An entry costs more than 1 (its refusal may leave uses).
        weighted: bool,
    },
    Hit,
    Attempt {
        max: i64,
    },
    /// An attempt costing `cost` (cargo feature `weights`).
    #[cfg(feature = "weights")]
    AttemptCost {
        max: i64,
        cost: u32,
    },
    Window(FixedOutcome),
}

/// What a fixed-window call answers from the window after it.
#[derive(Debug, Clone, Copy)]
enum FixedOutcome {
    Hit,
    Attempt,
    Read(WindowQuery),
    Unit,
}

impl FixedOutcome {
    fn outcome(self, window: Option<WindowState>, counted: bool) -> Outcome {
        let (count, reset_after_ms) = window.map_or((0, 0), |w| (w.count, w.ms_left));
        match self {
            FixedOutcome::Hit => Outcome::Hit {
                count,
                reset_after_ms,
            },
            FixedOutcome::Attempt => Outcome::Attempt {
                allowed: counted,
                count,
                reset_after_ms,
            },
            FixedOutcome::Read(query) => query.answer(window),
            FixedOutcome::Unit => Outcome::Unit,
        }
    }
}

fn empty_batch(call_id: Option<String>) -> Call {
    Call::done(Ok(Outcome::Verdict {
        verdict: BatchVerdict::ALLOWED.with_quota(Quota::NONE),
        release: call_id.map(|call_id| {
            ReleaseToken::Sql(SqlRelease {
                keys: Vec::new(),
                call_id,
            })
        }),
    }))
}

fn verdict(verdict: BatchVerdict, release: Option<SqlRelease>) -> Outcome {
    Outcome::Verdict {
        release: release.filter(|_| verdict.allowed).map(ReleaseToken::Sql),
        verdict,
    }
}

impl SqlCall {
    fn call(statements: Vec<Statement>, step: Step) -> Call {
        Call::sql(SqlCall {
            statements,
            step,
            result: None,
            failed_release: None,
        })
    }

    pub(crate) fn command(&self) -> Command<'_> {
        Command::Sql {
            statements: &self.statements,
        }
    }

    /// Whether the statements asked for run inside a transaction this machine opened (or may have:
    /// a failed `BEGIN IMMEDIATE` leaves none, and the `ROLLBACK` that follows fails harmlessly).
    fn in_transaction(&self) -> bool {
        match &self.step {
            Step::SqliteSliding(call) => call.in_transaction(),
            Step::SqliteWindow(call, _) => call.in_transaction(),
            Step::Then(_) => self.statements.last().is_some_and(|s| s.sql == "COMMIT"),
            Step::Postgres(_) | Step::RollBack(_) | Step::Over => false,
        }
    }

    pub(crate) fn feed(&mut self, fed: Result<Fed, String>) {
        let failure = match fed {
            Ok(Fed::Rows(rows)) => return self.rows(rows),
            Ok(Fed::Reply(_)) => CallError::Protocol {
                expected: "rows",
                got: "a Redis reply",
            },
            Err(message) => CallError::Store { message },
        };
        if matches!(failure, CallError::Store { .. }) {
            self.keep_release();
        }
        match std::mem::replace(&mut self.step, Step::Over) {
            // The original error stands, whatever the rollback gave.
            Step::RollBack(error) => self.finish(Err(error)),
            Step::Over => self.finish(Err(CallError::Protocol {
                expected: "nothing (the call is over)",
                got: if matches!(failure, CallError::Store { .. }) {
                    "a failure"
                } else {
                    "a Redis reply"
                },
            })),
            step => {
                self.step = step;
                self.fail(failure);
            }
        }
    }

    /// Ends with `error`, rolling back first inside a transaction.
    fn fail(&mut self, error: CallError) {
        if self.in_transaction() {
            self.statements = vec![Statement::new(SqliteCall::ROLLBACK, vec![])];
            self.step = Step::RollBack(error);
        } else {
            self.finish(Err(error));
        }
    }

    fn finish(&mut self, result: Result<Outcome, CallError>) {
        self.statements.clear();
        self.step = Step::Over;
        self.result = Some(result);
    }

    /// PostgreSQL's consume statement failed, or answered rows of the wrong shape: it commits on its
    /// own, so it may have counted; its release is kept ([`Call::failed_release`](crate::call::Call)).
    fn keep_release(&mut self) {
        if let Step::Postgres(PgRows::Sliding {
            release: Some(release),
            ..
        }) = &self.step
        {
            self.failed_release = Some(release.clone());
        }
    }

    fn rows(&mut self, rows: Vec<Vec<SqlValue>>) {
        let decided: Result<Outcome, RowError> =
            match std::mem::replace(&mut self.step, Step::Over) {
                Step::Over => {
                    return self.finish(Err(CallError::Protocol {
                        expected: "nothing (the call is over)",
                        got: "rows",
                    }))
                }
                Step::RollBack(error) => return self.finish(Err(error)),
                Step::Then(outcome) => Ok(outcome),
                Step::Postgres(PgRows::Sliding {
                    limits,
                    release,
                    weighted,
                }) => {
                    let known = Some((limits.as_slice(), release.is_some()));
                    match decode_sliding(&rows, limits.len(), known, weighted) {
                        Ok(v) => Ok(verdict(v, release)),
                        Err(e) => {
                            self.failed_release = release;
                            Err(e)
                        }
                    }
                }
                Step::Postgres(PgRows::Hit) => {
                    Postgres::decode_window(&rows).and_then(|w| match w {
                        Some(w) => Ok(FixedOutcome::Hit.outcome(Some(w), true)),
                        // A hit always leaves a running window.
                        None => Err(RowError::new("hit", "one row (hits, ms_left >= 1)", &rows)),
                    })
                }
                Step::Postgres(PgRows::Attempt { max }) => Postgres::decode_attempt(&rows, max)
                    .map(|(allowed, count, reset_after_ms)| Outcome::Attempt {
                        allowed,
                        count,
                        reset_after_ms,
                    }),
                #[cfg(feature = "weights")]
                Step::Postgres(PgRows::AttemptCost { max, cost }) => Postgres::decode_attempt_cost(
                    &rows, max, cost,
                )
                .map(|(allowed, count, reset_after_ms)| Outcome::Attempt {
                    allowed,
                    count,
                    reset_after_ms,
                }),
                Step::Postgres(PgRows::Window(then)) => {
                    Postgres::decode_window(&rows).map(|w| then.outcome(w, false))
                }
                Step::SqliteSliding(call) => {
                    let transaction = call.in_transaction();
                    match call.decide(&rows) {
                        Ok(decided) if decided.statements.is_empty() => {
                            Ok(verdict(decided.verdict, decided.release))
                        }
                        Ok(decided) => {
                            self.statements = decided.statements;
                            self.step = Step::Then(verdict(decided.verdict, decided.release));
                            return;
                        }
                        Err(e) => {
                            return self.rows_failed(e, transaction);
                        }
                    }
                }
                Step::SqliteWindow(call, then) => {
                    let transaction = call.in_transaction();
                    match call.settle(&rows) {
                        Ok(Settled {
                            window,
                            counted,
                            statements,
                        }) => {
                            let outcome = then.outcome(window, counted);
                            if statements.is_empty() {
                                Ok(outcome)
                            } else {
                                self.statements = statements;
                                self.step = Step::Then(outcome);
                                return;
                            }
                        }
                        Err(e) => return self.rows_failed(e, transaction),
                    }
                }
            };
        self.finish(decided.map_err(CallError::Rows));
    }

    fn rows_failed(&mut self, error: RowError, transaction: bool) {
        if transaction {
            self.statements = vec![Statement::new(SqliteCall::ROLLBACK, vec![])];
            self.step = Step::RollBack(CallError::Rows(error));
        } else {
            self.finish(Err(CallError::Rows(error)));
        }
    }

    pub(crate) fn result(
        &mut self,
        failed_release: &mut Option<ReleaseToken>,
    ) -> Option<Result<Outcome, CallError>> {
        let result = self.result.take()?;
        if result.is_err() {
            *failed_release = self.failed_release.take().map(ReleaseToken::Sql);
        }
        Some(result)
    }
}

impl Postgres {
    /// Starts `op`: one statement, one round trip, one transaction, on the server's clock.
    pub fn start(&self, op: Op) -> Call {
        let (statement, rows) = match op {
            Op::Consume { entries, call_id } => {
                if call_id.is_empty() {
                    return Call::done(Err(CallError::Unsupported(EMPTY_CALL_ID)));
                }
                if entries.is_empty() {
                    return empty_batch(Some(call_id));
                }
                if entries.len() > Postgres::MAX_BATCH {
                    return Call::done(Err(PG_TOO_LARGE));
                }
                let Ok((statement, release)) = self.plan_consume_many(&entries, &call_id) else {
                    return Call::done(Err(CallError::Unsupported(EMPTY_CALL_ID)));
                };
                let limits = entries.iter().map(|e| e.limit).collect();
                (
                    statement,
                    PgRows::Sliding {
                        limits,
                        release: Some(release),
                        weighted: entries.iter().any(|e| e.cost() > 1),
                    },
                )
            }
            Op::Peek { entries } => {
                if entries.is_empty() {
                    return empty_batch(None);
                }
                if entries.len() > Postgres::MAX_BATCH {
                    return Call::done(Err(PG_TOO_LARGE));
                }
                let limits = entries.iter().map(|e| e.limit).collect();
                (
                    self.plan_peek_many(&entries),
                    PgRows::Sliding {
                        limits,
                        release: None,
                        weighted: entries.iter().any(|e| e.cost() > 1),
                    },
                )
            }
            Op::Release { token } => match token {
                ReleaseToken::Sql(release) if release.keys.is_empty() => {
                    return Call::done(Ok(Outcome::Unit))
                }
                ReleaseToken::Sql(release) => {
                    return SqlCall::call(
                        vec![self.plan_release(&release)],
                        Step::Then(Outcome::Unit),
                    )
                }
                ReleaseToken::Redis(_) => {
                    return Call::done(Err(CallError::Unsupported(REDIS_TOKEN)))
                }
            },
            Op::Hit { key, decay, amount } => (self.plan_hit(&key, decay, amount), PgRows::Hit),
            Op::Attempt { key, max, decay } => {
                (self.plan_attempt(&key, max, decay), PgRows::Attempt { max })
            }
            #[cfg(feature = "weights")]
            Op::AttemptCost { cost: 0, .. } => {
                return Call::done(Err(CallError::Unsupported(
                    "an attempt's cost must be at least 1",
                )))
            }
            #[cfg(feature = "weights")]
            Op::AttemptCost {
                key,
                max,
                decay,
                cost,
            } => (
                self.plan_attempt_cost(&key, max, cost, decay),
                PgRows::AttemptCost { max, cost },
            ),
            Op::Read { key, query } => (
                self.plan_get_window(&key),
                PgRows::Window(FixedOutcome::Read(query)),
            ),
            Op::ResetAttempts { key } => (
                self.plan_reset_attempts(&key),
                PgRows::Window(FixedOutcome::Unit),
            ),
            Op::Clear { key } => (self.plan_clear(&key), PgRows::Window(FixedOutcome::Unit)),
        };
        SqlCall::call(vec![statement], Step::Postgres(rows))
    }
}

impl Sqlite {
    /// Starts `op` at `now` (the host's clock, ms): `BEGIN IMMEDIATE`, the reads, then the writes and
    /// `COMMIT` the machine decides; `ROLLBACK` after any failure inside the transaction.
    pub fn start(&self, op: Op, now: u64) -> Call {
        match op {
            Op::Consume { entries, call_id } => {
                if call_id.is_empty() {
                    return Call::done(Err(CallError::Unsupported(EMPTY_CALL_ID)));
                }
                if entries.is_empty() {
                    return empty_batch(Some(call_id));
                }
                if !Sqlite::carries(&entries) {
                    return Call::done(Err(SQLITE_TOO_LARGE));
                }
                match self.begin_consume(&entries, now, &call_id) {
                    Ok(call) => {
                        SqlCall::call(call.statements().to_vec(), Step::SqliteSliding(call))
                    }
                    Err(_) => Call::done(Err(CallError::Unsupported(EMPTY_CALL_ID))),
                }
            }
            Op::Peek { entries } => {
                if entries.is_empty() {
                    return empty_batch(None);
                }
                if !Sqlite::carries(&entries) {
                    return Call::done(Err(SQLITE_TOO_LARGE));
                }
                let call = self.begin_peek(&entries, now);
                SqlCall::call(call.statements().to_vec(), Step::SqliteSliding(call))
            }
            Op::Release { token } => match token {
                ReleaseToken::Sql(release) if release.keys.is_empty() => {
                    Call::done(Ok(Outcome::Unit))
                }
                ReleaseToken::Sql(release) => {
                    SqlCall::call(vec![self.plan_release(&release)], Step::Then(Outcome::Unit))
                }
                ReleaseToken::Redis(_) => Call::done(Err(CallError::Unsupported(REDIS_TOKEN))),
            },
            Op::Clear { key } => {
                SqlCall::call(vec![self.plan_clear(&key)], Step::Then(Outcome::Unit))
            }
            Op::Hit { key, decay, amount } => {
                self.window(self.begin_hit(&key, decay, amount, now), FixedOutcome::Hit)
            }
            Op::Attempt { key, max, decay } => self.window(
                self.begin_attempt(&key, max, decay, now),
                FixedOutcome::Attempt,
            ),
            #[cfg(feature = "weights")]
            Op::AttemptCost { cost: 0, .. } => Call::done(Err(CallError::Unsupported(
                "an attempt's cost must be at least 1",
            ))),
            #[cfg(feature = "weights")]
            Op::AttemptCost {
                key,
                max,
                decay,
                cost,
            } => self.window(
                self.begin_attempt_cost(&key, max, cost, decay, now),
                FixedOutcome::Attempt,
            ),
            Op::Read { key, query } => {
                self.window(self.begin_get_window(&key, now), FixedOutcome::Read(query))
            }
            Op::ResetAttempts { key } => {
                self.window(self.begin_reset_attempts(&key, now), FixedOutcome::Unit)
            }
        }
    }

    fn window(&self, call: SqliteWindowCall, then: FixedOutcome) -> Call {
        SqlCall::call(call.statements().to_vec(), Step::SqliteWindow(call, then))
    }
}

#[cfg(test)]
mod tests {
    //! Batches are linear and bounded: the largest batch each store carries plans into the statements
    //! it should (one statement of three arrays on PostgreSQL; one parameter per key on SQLite) and
    //! decides from a row per key; one entry more is refused before any statement. Structural, not
    //! timed: the scans these replaced made such batches take seconds (quadratic), which the
    //! Criterion bench across stores measures.
    use super::*;
    use crate::call::Next;
    use crate::{Entry, Limit};

    fn batch(n: usize) -> Vec<Entry> {
        let limit = Limit::new(2, 60_000).unwrap();
        (0..n).map(|i| Entry::new(format!("k{i}"), limit)).collect()
    }

    fn statements(call: &mut Call) -> Vec<Statement> {
        match call.next() {
            Next::Run(Command::Sql { statements }) => statements.to_vec(),
            other => panic!("expected statements, got {other:?}"),
        }
    }

    fn consume(entries: Vec<Entry>) -> Op {
        Op::Consume {
            entries,
            call_id: "id".to_owned(),
        }
    }

    #[test]
    fn postgres_carries_max_batch_entries_in_one_statement_of_three_arrays() {
        let n = Postgres::MAX_BATCH;
        let mut call = Postgres::default().start(consume(batch(n)));
        let [statement] = statements(&mut call).try_into().unwrap();
        assert_eq!(statement.params.len(), 6);
        assert!(matches!(&statement.params[2], SqlValue::Texts(k) if k.len() == n));
        let mut row = vec![SqlValue::Bool(true)];
        row.extend([0, -1, -1, 1000, 2, 1, 60_000, 60_000].map(SqlValue::Int));
        call.feed(Fed::Rows(vec![row]));
        let Next::Done(Ok(Outcome::Verdict {
            verdict,
            release: Some(ReleaseToken::Sql(release)),
        })) = call.next()
        else {
            panic!("expected an allowed verdict with its release");
        };
        assert!(verdict.allowed);
        assert_eq!(release.keys.len(), n, "every distinct key, once");

        for op in [
            consume(batch(n + 1)),
            Op::Peek {
                entries: batch(n + 1),
            },
        ] {
            let mut call = Postgres::default().start(op);
            assert!(matches!(
                call.next(),
                Next::Done(Err(CallError::Unsupported(m))) if m.contains("100000")
            ));
        }
    }

    #[test]
    fn sqlite_carries_max_batch_keys_one_parameter_each_and_decides_from_a_row_each() {
        let n = Sqlite::BOUND_KEYS;
        let mut call = Sqlite::default().start(consume(batch(n)), 100_000);
        let planned = statements(&mut call);
        // BEGIN IMMEDIATE, one trim per key, the select of every key's calls.
        assert_eq!(planned.len(), n + 2);
        assert_eq!(planned.last().unwrap().params.len(), n);
        let rows = (0..n)
            .map(|i| vec![SqlValue::Text(format!("k{i}")), SqlValue::Int(99_000)])
            .collect();
        call.feed(Fed::Rows(rows));
        // One insert per key, then COMMIT.
        let writes = statements(&mut call);
        assert_eq!(writes.len(), n + 1);
        call.feed(Fed::Rows(vec![]));
        let Next::Done(Ok(Outcome::Verdict {
            verdict,
            release: Some(ReleaseToken::Sql(release)),
        })) = call.next()
        else {
            panic!("expected an allowed verdict with its release");
        };
        assert!(verdict.allowed);
        assert_eq!(
            verdict.quota.remaining, 0,
            "one call before, this one: 2 of 2"
        );
        // The release binds the id and every key: SQLite's limit exactly.
        let release = Sqlite::default().plan_release(&release);
        assert_eq!(release.params.len(), n + 1);

        // Above it, the keys go as one JSON text (tested on SQLite in sql::sqlite), up to MAX_BATCH.
        let mut call = Sqlite::default().start(consume(batch(n + 1)), 100_000);
        assert_eq!(statements(&mut call).last().unwrap().params.len(), 1);
        let mut call = Sqlite::default().start(consume(batch(Sqlite::MAX_BATCH + 1)), 100_000);
        assert!(matches!(
            call.next(),
            Next::Done(Err(CallError::Unsupported(m))) if m.contains("100000")
        ));
    }

    #[test]
    fn repeated_keys_of_a_long_batch_count_once_with_their_longest_window() {
        let short = Limit::new(1, 1_000).unwrap();
        let long = Limit::new(1, 5_000).unwrap();
        // Above the scanning size: the keys go through the hash index.
        let entries: Vec<Entry> = (0..100)
            .flat_map(|i| {
                [
                    Entry::new(format!("k{i}"), short),
                    Entry::new(format!("k{i}"), long),
                ]
            })
            .collect();
        let keys = crate::sql::distinct_keys(&entries);
        assert_eq!(keys.len(), 100);
        assert!(keys
            .iter()
            .enumerate()
            .all(|(i, (k, w))| *k == format!("k{i}") && *w == 5_000));
    }
}
