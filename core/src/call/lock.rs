//! The lock's call machines: one command a call on every networked store (see [`crate::lock`]).
//!
//! Redis: one command on one key. A store made with [`Redis::plain_commands`] acquires by the plain
//! `SET key owner NX PX ttl`, forces by `DEL` and reads the owner by `GET` ([`Command::Plain`]: the
//! server runs no script, 1.7-2.4 µs against 4.2-5.9 µs for an `EVALSHA` of the same `SET`); a release
//! is always the lock script (compare and delete in one step), and so is every step of a store without
//! plain commands: by SHA1 first and with its source after `NOSCRIPT` (the rule of
//! [`errors::is_noscript`], as every Redis call). PostgreSQL and SQLite: one statement whose rows
//! answer. Any other failure is the store's; a reply or rows of the wrong shape are never read as an
//! answer. Without the `sql` feature only the Redis machine is built (the component's).

use super::{errors, Call, CallError, Command, Fed, Outcome, Redis};
use crate::lock::{LockError, LockOp};
use crate::redis::{Plan, Reply, ReplyError, Script};
#[cfg(feature = "sql")]
use crate::sql::{Postgres, RowError, SqlValue, Sqlite, Statement};

/// The lock script: acquire (`SET NX PX`), release (compare and delete), force release, owner.
pub static LOCK: Script = Script {
    name: "lock",
    source: LOCK_SOURCE,
    sha1: "f3bc3c2899ae52ca78e6ea399bf434e498c46a66",
};
// Without its comment lines (the SHA1 is of this text): see `redis::SLIDING`.
crate::sql::schema_text!(LOCK_SOURCE = include_str!("../redis/lock.lua"));

/// What the answer means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    /// A yes or no (acquire, release, force release).
    Bool,
    /// `SET … NX`'s answer: `OK` (taken) or nil (held by another).
    #[cfg(feature = "lock-commands")]
    Set,
    /// The holder's token, or none.
    Owner,
}

impl Asked {
    fn of(op: &LockOp) -> Asked {
        match op {
            LockOp::Owner { .. } => Asked::Owner,
            _ => Asked::Bool,
        }
    }
}

#[derive(Debug)]
enum Step {
    Script {
        plan: Plan,
        by_sha1: bool,
    },
    /// A plain command: its name, its key, its arguments.
    #[cfg(feature = "lock-commands")]
    Plain(Vec<String>),
    #[cfg(feature = "sql")]
    Sql(Vec<Statement>),
}

/// One lock call in progress.
#[derive(Debug)]
pub(crate) struct LockCall {
    step: Step,
    asked: Asked,
    done: Option<Result<Outcome, CallError>>,
    over: bool,
}

/// An operation the binding should have refused (its owner token): the hosts check arguments with
/// [`LockOp::check`] first, to raise their language's typed error naming the field.
fn refused(_: LockError) -> Call {
    Call::done(Err(CallError::Unsupported(
        "invalid lock owner: a non-empty string of at most 256 bytes (check with LockOp::check first)",
    )))
}

impl LockCall {
    pub(crate) fn command(&self) -> Command<'_> {
        match &self.step {
            Step::Script { plan, by_sha1 } => Command::Script {
                script: plan.script,
                keys: &plan.keys,
                args: &plan.args,
                by_sha1: *by_sha1,
            },
            #[cfg(feature = "lock-commands")]
            Step::Plain(args) => Command::Plain { args },
            #[cfg(feature = "sql")]
            Step::Sql(statements) => Command::Sql { statements },
        }
    }

    pub(crate) fn result(&mut self) -> Option<Result<Outcome, CallError>> {
        let done = self.done.take();
        if done.is_some() {
            self.over = true;
        }
        done
    }

    pub(crate) fn feed(&mut self, fed: Result<Fed, String>) {
        if self.over || self.done.is_some() {
            self.done = Some(Err(CallError::Protocol {
                expected: "nothing (the call is over)",
                got: "a result",
            }));
            return;
        }
        self.done = Some(match (&mut self.step, fed) {
            (Step::Script { by_sha1, .. }, Err(message))
                if *by_sha1 && errors::is_noscript(&message) =>
            {
                // Nothing ran: the same command again, with the source.
                *by_sha1 = false;
                return;
            }
            (_, Err(message)) => Err(CallError::Store { message }),
            (Step::Script { .. }, Ok(Fed::Reply(reply))) => decode_reply(self.asked, &reply),
            #[cfg(feature = "lock-commands")]
            (Step::Plain(_), Ok(Fed::Reply(reply))) => decode_reply(self.asked, &reply),
            #[cfg(feature = "sql")]
            (Step::Sql(_), Ok(Fed::Rows(rows))) => decode_rows(self.asked, &rows),
            #[cfg(feature = "lock-commands")]
            (Step::Plain(_), Ok(Fed::Rows(_))) => Err(CallError::Protocol {
                expected: "a Redis reply",
                got: "rows",
            }),
            (Step::Script { .. }, Ok(Fed::Rows(_))) => Err(CallError::Protocol {
                expected: "a Redis reply",
                got: "rows",
            }),
            #[cfg(feature = "sql")]
            (Step::Sql(_), Ok(Fed::Reply(_))) => Err(CallError::Protocol {
                expected: "rows",
                got: "a Redis reply",
            }),
        });
    }
}

fn start(step: Step, asked: Asked) -> Call {
    Call::lock(LockCall {
        step,
        asked,
        done: None,
        over: false,
    })
}

/// The lock script's reply, or a plain command's: 1 or 0 (the script, `DEL`); `SET … NX`'s `OK` or
/// nil, in each client's spelling (node-redis and ioredis `'OK'` / `null`, redis-py `True` / `None`
/// or `b'OK'`, fed as text, 1 or nil); for `owner` the token or nil (the script, `GET`).
fn decode_reply(asked: Asked, reply: &Reply) -> Result<Outcome, CallError> {
    let error = |expected| CallError::Reply(ReplyError::new("lock", expected, reply));
    match (asked, reply) {
        #[cfg(feature = "lock-commands")]
        (Asked::Set, _) => answer_in(SET_ANSWERS, reply)
            .map(Outcome::Bool)
            .ok_or_else(|| error("OK or nil")),
        (Asked::Bool, _) => answer_in(BOOL_ANSWERS, reply)
            .map(Outcome::Bool)
            .ok_or_else(|| error("1 or 0")),
        (Asked::Owner, Reply::Nil) => Ok(Outcome::Owner(None)),
        (Asked::Owner, Reply::Text(owner)) => Ok(Outcome::Owner(Some(owner.clone()))),
        (Asked::Owner, _) => Err(error("the owner's token, or nil")),
    }
}

/// A reply that answers a lock's yes-or-no question, as [`LockAnswers`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerReply {
    /// A nil reply (`null` in JavaScript, `None` in Python).
    Nil,
    /// An integer reply.
    Int(i64),
    /// A bulk or status string.
    Text(&'static str),
}

impl AnswerReply {
    fn is(self, reply: &Reply) -> bool {
        match (self, reply) {
            (AnswerReply::Nil, Reply::Nil) => true,
            (AnswerReply::Int(a), Reply::Int(b)) => a == *b,
            (AnswerReply::Text(a), Reply::Text(b)) => a == b,
            _ => false,
        }
    }
}

/// The replies that answer a yes-or-no question, and their answers; any other reply is no answer.
pub type LockAnswers = &'static [(AnswerReply, bool)];

/// `SET … NX`'s answers, in each client's spelling: `OK` (taken) or nil (held by another): node-redis
/// and ioredis `'OK'` / `null`; a client that reads the reply as a boolean (redis-py's SET callback:
/// `True` or `None`) is fed 1 or nil.
#[cfg(feature = "lock-commands")]
const SET_ANSWERS: LockAnswers = &[
    (AnswerReply::Text("OK"), true),
    (AnswerReply::Nil, false),
    (AnswerReply::Int(1), true),
    (AnswerReply::Int(0), false),
];

/// The lock script's (and `DEL`'s) answers: 1 or 0, as an integer or its text.
const BOOL_ANSWERS: LockAnswers = &[
    (AnswerReply::Int(1), true),
    (AnswerReply::Int(0), false),
    (AnswerReply::Text("1"), true),
    (AnswerReply::Text("0"), false),
];

fn answer_in(answers: LockAnswers, reply: &Reply) -> Option<bool> {
    answers.iter().find(|(r, _)| r.is(reply)).map(|&(_, b)| b)
}

/// The lock statement's rows: none or one row of one boolean (or 1/0); for `owner` none or one row
/// of the token.
#[cfg(feature = "sql")]
fn decode_rows(asked: Asked, rows: &[Vec<SqlValue>]) -> Result<Outcome, CallError> {
    let error = |expected| {
        let shown: Vec<String> = rows
            .iter()
            .take(4)
            .map(|row| {
                let values: Vec<String> = row.iter().map(ToString::to_string).collect();
                format!("({})", values.join(", "))
            })
            .collect();
        CallError::Rows(RowError {
            statement: "lock",
            expected,
            got: format!("[{}]", shown.join(", ")),
        })
    };
    match (asked, rows) {
        (Asked::Bool, []) => Ok(Outcome::Bool(false)),
        (Asked::Bool, [row]) => match row.as_slice() {
            [value] => boolean(value)
                .map(Outcome::Bool)
                .ok_or_else(|| error("no row, or one row of one boolean")),
            _ => Err(error("no row, or one row of one boolean")),
        },
        (Asked::Owner, []) => Ok(Outcome::Owner(None)),
        (Asked::Owner, [row]) => match row.as_slice() {
            [SqlValue::Text(owner)] => Ok(Outcome::Owner(Some(owner.clone()))),
            _ => Err(error("no row, or one row of the owner's token")),
        },
        _ => Err(error("at most one row")),
    }
}

#[cfg(feature = "sql")]
fn boolean(value: &SqlValue) -> Option<bool> {
    match value {
        SqlValue::Bool(b) => Some(*b),
        SqlValue::Int(0) => Some(false),
        SqlValue::Int(1) => Some(true),
        SqlValue::Text(s) if s == "t" || s == "true" || s == "1" => Some(true),
        SqlValue::Text(s) if s == "f" || s == "false" || s == "0" => Some(false),
        _ => None,
    }
}

impl Redis {
    /// Starts a lock operation: one command on the key `{prefix}lck:{key}` (hash-tagged like every
    /// key), on the server's clock: a plain command when the host runs them
    /// ([`Redis::plain_commands`]) and the operation is one (all but a release), else the lock script.
    pub fn lock(&self, op: LockOp) -> Call {
        if let Err(e) = op.check() {
            return refused(e);
        }
        let key = self.options().lock_key(op.key());
        let asked = Asked::of(&op);
        // Without the `lock-commands` feature every step is the script (the component's build).
        #[cfg(feature = "lock-commands")]
        if self.runs_plain_commands() {
            match op {
                LockOp::Acquire { owner, ttl, .. } => {
                    let args = vec![
                        "SET".to_owned(),
                        key,
                        owner,
                        "NX".to_owned(),
                        "PX".to_owned(),
                        ttl.ms().to_string(),
                    ];
                    return start(Step::Plain(args), Asked::Set);
                }
                LockOp::ForceRelease { .. } => {
                    return start(Step::Plain(vec!["DEL".to_owned(), key]), asked)
                }
                LockOp::Owner { .. } => {
                    return start(Step::Plain(vec!["GET".to_owned(), key]), asked)
                }
                LockOp::Release { .. } => {}
            }
        }
        let args = match op {
            LockOp::Acquire { owner, ttl, .. } => {
                vec!["acquire".to_owned(), owner, ttl.ms().to_string()]
            }
            LockOp::Release { owner, .. } => vec!["release".to_owned(), owner],
            LockOp::ForceRelease { .. } => vec!["force".to_owned()],
            LockOp::Owner { .. } => vec!["owner".to_owned()],
        };
        let plan = Plan {
            script: &LOCK,
            keys: vec![key],
            args,
        };
        let by_sha1 = self.runs_by_sha1();
        start(Step::Script { plan, by_sha1 }, asked)
    }

    /// A lock's two commands planned once, for a host that keeps them and sends them again for every
    /// acquire and release of that lock (its key, owner and TTL do not change): the acquire's plain
    /// `SET key owner NX PX ttl`, then the release's lock script (by SHA1 when the host runs scripts
    /// by SHA1, [`Redis::runs_by_sha1`]) as its keys and arguments — the very commands [`Redis::lock`]
    /// starts with. `None` for a store without plain commands (every step is then the script: run
    /// [`Redis::lock`]); an owner or TTL refused as [`LockOp::check`] refuses it. The host reads each
    /// reply with [`Redis::lock_answer`], and anything that is not an answer (a client's failure, a
    /// `NOSCRIPT`, a reply of another shape) by starting that operation with [`Redis::lock`] and
    /// feeding it what came: the call machine decides it, as for any lock call.
    #[cfg(feature = "lock-commands")]
    pub fn lock_commands(
        &self,
        key: &str,
        owner: &str,
        ttl: crate::lock::LockTtl,
    ) -> Result<Option<LockCommands>, LockError> {
        crate::lock::check_owner(owner)?;
        if !self.runs_plain_commands() {
            return Ok(None);
        }
        let key = self.options().lock_key(key);
        Ok(Some(LockCommands {
            acquire: vec![
                "SET".to_owned(),
                key.clone(),
                owner.to_owned(),
                "NX".to_owned(),
                "PX".to_owned(),
                ttl.ms().to_string(),
            ],
            acquire_owner: 2,
            release_keys: vec![key],
            release_args: vec!["release".to_owned(), owner.to_owned()],
            release_owner: 1,
        }))
    }

    /// The answer in a reply to a command of [`Redis::lock_commands`] (`acquire`: the `SET … NX`'s,
    /// in each client's spelling; else the release script's 1 or 0): whether the lock was taken or
    /// freed; `None` when the reply is no answer (then start the operation with [`Redis::lock`] and
    /// feed it the reply: its error names what came).
    #[cfg(feature = "lock-commands")]
    pub fn lock_answer(acquire: bool, reply: &Reply) -> Option<bool> {
        answer_in(Redis::lock_answers(acquire), reply)
    }

    /// Every reply that answers a command of [`Redis::lock_commands`] (`acquire`: the `SET … NX`'s;
    /// else the release script's), with its answer: what [`Redis::lock_answer`] reads, for a host that
    /// looks a reply up in its own language rather than crossing to the core for each one. Any reply
    /// not listed is no answer (start the operation with [`Redis::lock`] and feed it the reply).
    #[cfg(feature = "lock-commands")]
    pub fn lock_answers(acquire: bool) -> LockAnswers {
        if acquire {
            SET_ANSWERS
        } else {
            BOOL_ANSWERS
        }
    }
}

/// A lock's commands on Redis, planned once by [`Redis::lock_commands`].
#[cfg(feature = "lock-commands")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockCommands {
    /// The acquire: `SET key owner NX PX ttl_ms`, a plain command.
    pub acquire: Vec<String>,
    /// Where the owner is in `acquire`: another owner's lock on the same key and TTL is these
    /// commands with its owner there (and at `release_owner`).
    pub acquire_owner: usize,
    /// The release: the lock script's (`LOCK`) keys.
    pub release_keys: Vec<String>,
    /// The release: the lock script's arguments.
    pub release_args: Vec<String>,
    /// Where the owner is in `release_args`.
    pub release_owner: usize,
}

#[cfg(feature = "sql")]
/// PostgreSQL's lock statements (`{p}` is the name prefix): times by `clock_timestamp()`.
const PG_ACQUIRE: &str = "INSERT INTO {p}_locks AS l (key, owner, expires_at) \
     VALUES ($1, $2, clock_timestamp() + $3::bigint * interval '1 millisecond') \
     ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at \
     WHERE l.expires_at <= clock_timestamp() RETURNING true";
#[cfg(feature = "sql")]
const PG_RELEASE: &str = "DELETE FROM {p}_locks WHERE key = $1 AND owner = $2 \
     RETURNING expires_at > clock_timestamp()";
#[cfg(feature = "sql")]
const PG_FORCE: &str =
    "DELETE FROM {p}_locks WHERE key = $1 RETURNING expires_at > clock_timestamp()";
#[cfg(feature = "sql")]
const PG_OWNER: &str =
    "SELECT owner FROM {p}_locks WHERE key = $1 AND expires_at > clock_timestamp()";

#[cfg(feature = "sql")]
/// SQLite's lock statements: times are the host's ms, given as parameters.
const SQLITE_ACQUIRE: &str = "INSERT INTO {p}_locks (key, owner, expires_at) VALUES (?, ?, ?) \
     ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at \
     WHERE {p}_locks.expires_at <= ? RETURNING 1";
#[cfg(feature = "sql")]
const SQLITE_RELEASE: &str =
    "DELETE FROM {p}_locks WHERE key = ? AND owner = ? RETURNING expires_at > ?";
#[cfg(feature = "sql")]
const SQLITE_FORCE: &str = "DELETE FROM {p}_locks WHERE key = ? RETURNING expires_at > ?";
#[cfg(feature = "sql")]
const SQLITE_OWNER: &str = "SELECT owner FROM {p}_locks WHERE key = ? AND expires_at > ?";

#[cfg(feature = "sql")]
fn text(s: String) -> SqlValue {
    SqlValue::Text(s)
}

#[cfg(feature = "sql")]
fn int(n: u64) -> SqlValue {
    SqlValue::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

#[cfg(feature = "sql")]
impl Postgres {
    /// Starts a lock operation: one statement on `{prefix}_locks`, on the server's clock.
    pub fn lock(&self, op: LockOp) -> Call {
        if let Err(e) = op.check() {
            return refused(e);
        }
        let p = self.names().prefix();
        let asked = Asked::of(&op);
        let (sql, params) = match op {
            LockOp::Acquire { key, owner, ttl } => {
                (PG_ACQUIRE, vec![text(key), text(owner), int(ttl.ms())])
            }
            LockOp::Release { key, owner } => (PG_RELEASE, vec![text(key), text(owner)]),
            LockOp::ForceRelease { key } => (PG_FORCE, vec![text(key)]),
            LockOp::Owner { key } => (PG_OWNER, vec![text(key)]),
        };
        let statement = Statement {
            sql: sql.replace("{p}", p),
            params,
        };
        start(Step::Sql(vec![statement]), asked)
    }
}

#[cfg(feature = "sql")]
impl Sqlite {
    /// Starts a lock operation at `now` (the host's clock, ms): one statement on `{prefix}_locks`.
    pub fn lock(&self, op: LockOp, now: u64) -> Call {
        if let Err(e) = op.check() {
            return refused(e);
        }
        let p = self.names().prefix();
        let asked = Asked::of(&op);
        let (sql, params) = match op {
            LockOp::Acquire { key, owner, ttl } => (
                SQLITE_ACQUIRE,
                vec![
                    text(key),
                    text(owner),
                    int(now.saturating_add(ttl.ms())),
                    int(now),
                ],
            ),
            LockOp::Release { key, owner } => {
                (SQLITE_RELEASE, vec![text(key), text(owner), int(now)])
            }
            LockOp::ForceRelease { key } => (SQLITE_FORCE, vec![text(key), int(now)]),
            LockOp::Owner { key } => (SQLITE_OWNER, vec![text(key), int(now)]),
        };
        let statement = Statement {
            sql: sql.replace("{p}", p),
            params,
        };
        start(Step::Sql(vec![statement]), asked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Next;
    use crate::lock::LockTtl;
    use crate::redis::RedisOptions;

    #[test]
    fn the_lock_script_sha1_is_its_source_sha1() {
        let computed = sha1_smol::Sha1::from(LOCK.source).digest().to_string();
        assert_eq!(
            LOCK.sha1, computed,
            "update the lock script's sha1 constant"
        );
    }

    fn acquire(owner: &str) -> LockOp {
        LockOp::Acquire {
            key: "job".into(),
            owner: owner.into(),
            ttl: LockTtl::from_ms(5_000).unwrap(),
        }
    }

    #[test]
    fn a_redis_acquire_is_one_script_by_sha1_then_its_source_on_noscript() {
        let redis = Redis::new(RedisOptions::default().with_prefix("p:"));
        let mut call = redis.lock(acquire("me"));
        let Next::Run(Command::Script {
            script,
            keys,
            args,
            by_sha1,
        }) = call.next()
        else {
            panic!("a script")
        };
        assert_eq!((script.name, by_sha1), ("lock", true));
        assert_eq!(keys, ["p:lck:job"]);
        assert_eq!(args, ["acquire", "me", "5000"]);
        call.fail("NOSCRIPT No matching script");
        let Next::Run(Command::Script { by_sha1: false, .. }) = call.next() else {
            panic!("the source")
        };
        call.feed(Fed::Reply(Reply::Int(1)));
        assert!(matches!(call.next(), Next::Done(Ok(Outcome::Bool(true)))));
        assert!(matches!(
            call.next(),
            Next::Done(Err(CallError::Protocol { .. }))
        ));
    }

    #[test]
    #[cfg(feature = "lock-commands")]
    fn with_plain_commands_acquire_force_and_owner_are_plain_and_release_the_script() {
        let redis = Redis::new(RedisOptions::default().with_prefix("p:")).plain_commands(true);
        let mut call = redis.lock(acquire("me"));
        let Next::Run(Command::Plain { args }) = call.next() else {
            panic!("a plain command")
        };
        assert_eq!(args, ["SET", "p:lck:job", "me", "NX", "PX", "5000"]);
        // A NOSCRIPT-like failure of a plain command is the store's: nothing is resent.
        call.fail("NOSCRIPT No matching script");
        let Next::Done(Err(e)) = call.next() else {
            panic!("done")
        };
        assert_eq!(e.kind(), "store");
        let one = |op: LockOp| {
            let mut call = redis.lock(op);
            match call.next() {
                Next::Run(Command::Plain { args }) => args.join(" "),
                Next::Run(Command::Script { keys, args, .. }) => {
                    format!("script {} {}", keys.join(" "), args.join(" "))
                }
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(
            one(LockOp::ForceRelease { key: "job".into() }),
            "DEL p:lck:job"
        );
        assert_eq!(one(LockOp::Owner { key: "job".into() }), "GET p:lck:job");
        assert_eq!(
            one(LockOp::Release {
                key: "job".into(),
                owner: "me".into()
            }),
            "script p:lck:job release me"
        );
    }

    #[test]
    #[cfg(feature = "lock-commands")]
    fn a_locks_commands_planned_once_are_the_ones_its_calls_start_with() {
        let redis = Redis::new(RedisOptions::default().with_prefix("p:")).plain_commands(true);
        let ttl = LockTtl::from_ms(5_000).unwrap();
        let plan = redis.lock_commands("job", "me", ttl).unwrap().unwrap();
        assert_eq!(plan.acquire[plan.acquire_owner], "me");
        assert_eq!(plan.release_args[plan.release_owner], "me");
        // Another owner's: the same commands with its owner in the owner's places.
        let theirs = redis.lock_commands("job", "you", ttl).unwrap().unwrap();
        let mut swapped = plan.clone();
        swapped.acquire[plan.acquire_owner] = "you".into();
        swapped.release_args[plan.release_owner] = "you".into();
        assert_eq!(swapped, theirs);
        let mut call = redis.lock(acquire("me"));
        let Next::Run(Command::Plain { args }) = call.next() else {
            panic!("a plain command")
        };
        assert_eq!(plan.acquire, args);
        let mut release = redis.lock(LockOp::Release {
            key: "job".into(),
            owner: "me".into(),
        });
        let Next::Run(Command::Script {
            script,
            keys,
            args,
            by_sha1: true,
        }) = release.next()
        else {
            panic!("the script by sha1")
        };
        assert_eq!(script.name, "lock");
        assert_eq!(
            (plan.release_keys.as_slice(), plan.release_args.as_slice()),
            (keys, args)
        );
        // Refused as a call refuses it; none without plain commands.
        assert_eq!(
            redis.lock_commands("job", "", ttl).unwrap_err().field,
            crate::lock::LockField::Owner
        );
        let scripts_only = Redis::new(RedisOptions::default());
        assert_eq!(scripts_only.lock_commands("job", "me", ttl), Ok(None));
        // The answers; anything else is for the call machine.
        for (acquire, reply, answer) in [
            (true, Reply::Text("OK".into()), Some(true)),
            (true, Reply::Nil, Some(false)),
            (true, Reply::Int(1), Some(true)),
            (true, Reply::Text("ok".into()), None),
            (true, Reply::Array(vec![]), None),
            (false, Reply::Int(1), Some(true)),
            (false, Reply::Int(0), Some(false)),
            (false, Reply::Text("1".into()), Some(true)),
            (false, Reply::Nil, None),
            (
                false,
                Reply::Text("NOSCRIPT No matching script".into()),
                None,
            ),
            (false, Reply::Int(2), None),
        ] {
            assert_eq!(
                Redis::lock_answer(acquire, &reply),
                answer,
                "{acquire} {reply:?}"
            );
        }
        // The listed answers are the call machine's: each reply listed decides the call so.
        for taking in [true, false] {
            for &(listed, answer) in Redis::lock_answers(taking) {
                let reply = match listed {
                    AnswerReply::Nil => Reply::Nil,
                    AnswerReply::Int(n) => Reply::Int(n),
                    AnswerReply::Text(t) => Reply::Text(t.into()),
                };
                assert_eq!(Redis::lock_answer(taking, &reply), Some(answer));
                let op = if taking {
                    acquire("me")
                } else {
                    LockOp::Release {
                        key: "job".into(),
                        owner: "me".into(),
                    }
                };
                let (result, _) = redis.lock(op).drive(|_| Ok(Fed::Reply(reply.clone())));
                assert_eq!(result, Ok(Outcome::Bool(answer)), "{taking} {reply:?}");
            }
        }
    }

    #[test]
    #[cfg(feature = "lock-commands")]
    fn set_nx_replies_in_every_clients_spelling() {
        let redis = Redis::new(RedisOptions::default()).plain_commands(true);
        for (reply, taken) in [
            (Reply::Text("OK".into()), Some(true)),
            (Reply::Nil, Some(false)),
            (Reply::Int(1), Some(true)),
            (Reply::Int(0), Some(false)),
            (Reply::Text("ok".into()), None),
            (Reply::Int(2), None),
            (Reply::Array(vec![]), None),
        ] {
            let (result, _) = redis
                .lock(acquire("me"))
                .drive(|_| Ok(Fed::Reply(reply.clone())));
            match taken {
                Some(b) => assert_eq!(result, Ok(Outcome::Bool(b)), "{reply:?}"),
                None => assert_eq!(result.unwrap_err().kind(), "reply", "{reply:?}"),
            }
        }
    }

    #[test]
    #[cfg(feature = "sql")]
    fn replies_and_rows_of_the_wrong_shape_are_reply_errors() {
        let redis = Redis::new(RedisOptions::default());
        let (result, _) = redis
            .lock(acquire("me"))
            .drive(|_| Ok(Fed::Reply(Reply::Int(7))));
        assert_eq!(result.unwrap_err().kind(), "reply");
        let (result, _) = redis
            .lock(LockOp::Owner { key: "k".into() })
            .drive(|_| Ok(Fed::Reply(Reply::Int(1))));
        assert_eq!(result.unwrap_err().kind(), "reply");
        let (result, _) = redis
            .lock(LockOp::Owner { key: "k".into() })
            .drive(|_| Ok(Fed::Reply(Reply::Nil)));
        assert_eq!(result, Ok(Outcome::Owner(None)));
        let pg = Postgres::new(crate::sql::SqlNames::default());
        let (result, _) = pg
            .lock(acquire("me"))
            .drive(|_| Ok(Fed::Rows(vec![vec![SqlValue::Bool(true)]; 2])));
        assert_eq!(result.unwrap_err().kind(), "reply");
        let (result, _) = pg.lock(acquire("me")).drive(|_| Ok(Fed::Rows(vec![])));
        assert_eq!(result, Ok(Outcome::Bool(false)));
        let (result, _) = pg
            .lock(acquire("me"))
            .drive(|_| Err("connection lost".into()));
        assert_eq!(result.unwrap_err().kind(), "store");
    }

    #[test]
    #[cfg(feature = "sql")]
    fn a_bad_owner_is_refused_before_any_command() {
        let call = Sqlite::default().lock(acquire(""), 0);
        let (result, _) = call.drive(|_| panic!("no command"));
        assert_eq!(result.unwrap_err().kind(), "unsupported");
        assert_eq!(
            acquire("").check().unwrap_err().field,
            crate::lock::LockField::Owner
        );
    }
}
