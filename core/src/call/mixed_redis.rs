//! Batches mixing algorithms on Redis (and on a Cluster when the batch's keys share one slot: a hash
//! tag): the same verdicts as [`MemoryStore::consume_mixed`](crate::MemoryStore::consume_mixed), all
//! or nothing, exact under concurrency.
//!
//! **Why two steps, not one script.** Each algorithm's rules live once, in Rust; the single-algorithm
//! scripts re-implement only the check each needs to write, and the machine re-derives every field and
//! refuses a reply that disagrees. A batch of several algorithms would need all three checks and the
//! batch rules (a sliding key named twice is one call at its largest cost; GCRA and counter states
//! chained through the batch) in Lua, a second copy to keep in step. Instead `mixed.lua` only reads and
//! writes, and the call decides in between, in a scratch [`MemoryStore`](crate::MemoryStore) seeded
//! with what the read found (the SQLite machine's `decide_rows`):
//!
//! 1. `mixed.lua 'r'`: the server's `TIME` and every key's state (a log's scores and expiry, a text
//!    key's value) with a SHA1 of each log. A peek, and a refused consume, end here: the read is one
//!    atomic script, so the verdict is the store's at that instant. One round trip.
//! 2. An allowed consume: `mixed.lua 'w'` with what the read found and the state to write; the script
//!    writes only if no key changed since (compare and set). A write that lost the race (a concurrent
//!    call changed a key) writes nothing, and the call reads again: up to [`MIXED_RACES`] times, each
//!    loss meaning another call's write went in. Two round trips when nothing races.
//!
//! **Cluster**: one script a step, so every key must be in one slot (a hash tag, `RedisOptions::
//! with_hash_tag_before`); a `CROSSSLOT` ends the call in [`CallError::Unsupported`], nothing
//! written (key by key would not be all or nothing).
//!
//! **Release**: the sliding-log calls, by the call's id (the weighted script's members, so the
//! ordinary release token gives them back); GCRA and counter uses are not given back, as on SQLite.

use super::mixed::{check_mixed, decide_rows, keys_by_kind, longest};
use super::{errors, Call, CallError, Command, Fed, Outcome, Redis, ReleaseToken};
use crate::redis::{RedisRelease, Reply, ReplyError, Script};
use crate::sql::SqlValue;
use crate::MixedEntry;

/// The mixed batch's read and compare-and-set write.
pub static MIXED: Script = Script {
    name: "mixed",
    source: MIXED_SOURCE,
    sha1: "15b2793d3fa9c76865aa3d4054e5a2dd734b8705",
};
crate::sql::schema_text!(MIXED_SOURCE = include_str!("../redis/mixed.lua"));

/// How many writes a mixed consume may lose to concurrent calls before it gives up with a
/// [`CallError::Store`] (each loss means another call's write went in, so the store moves on).
pub const MIXED_RACES: u32 = 1_000;

const READ_EXPECTED: &str =
    "[seconds, microseconds, per log [expiry, sha1, scores…], per text key \
                             its value or \"\"]";

#[derive(Debug)]
enum Step {
    Read,
    /// The write of an allowed consume; its outcome when it goes in.
    Write(Outcome),
}

/// One mixed batch in progress on Redis.
#[derive(Debug)]
pub(crate) struct MixedRedisCall {
    entries: Vec<MixedEntry>,
    /// The host's clock, when it keeps one (else the server's `TIME`).
    now: Option<u64>,
    /// `Some` for a consume.
    call_id: Option<String>,
    /// The distinct Redis keys: logs, GCRA keys, counter keys.
    keys: Vec<String>,
    /// The user's key of each.
    names: Vec<String>,
    /// How many of `keys` are logs; then GCRA keys up to `gcras`.
    logs: usize,
    gcras: usize,
    args: Vec<String>,
    by_sha1: bool,
    step: Step,
    races: u32,
    done: Option<Result<Outcome, CallError>>,
    /// While a write runs: its release token (the write may have run when the client fails).
    written: Option<ReleaseToken>,
}

impl Redis {
    /// Starts a batch mixing algorithms, all or nothing: a consume with `call_id` (unique to the
    /// call: its members in the logs, for a release), a peek without; on the server's clock, or at
    /// `now` (ms) when the host keeps its own. Check the costs first with [`check_mixed`] to raise the
    /// typed error naming the entry; a bad cost ends the call at once in [`CallError::Unsupported`].
    /// See the module's notes: one round trip for a peek or a refusal, two for an allowed consume.
    pub fn mixed(&self, entries: Vec<MixedEntry>, now: Option<u64>, call_id: Option<&str>) -> Call {
        if check_mixed(&entries).is_err() {
            return Call::done(Err(CallError::Unsupported(
                "invalid cost in a mixed batch (check with check_mixed first)",
            )));
        }
        if entries.len() > crate::redis::MAX_BATCH {
            return Call::done(Err(CallError::Unsupported(
                "a mixed batch of more than 10,000 entries: split it",
            )));
        }
        if call_id == Some("") {
            return Call::done(Err(CallError::Unsupported("an empty call id")));
        }
        let o = self.options();
        let [logs, gcras, counters] = keys_by_kind(&entries);
        let mut keys: Vec<String> = logs.iter().map(|k| o.log_key(k)).collect();
        keys.extend(gcras.iter().map(|k| o.gcra_key(k)));
        keys.extend(counters.iter().map(|k| o.counter_key(k)));
        let names = [&logs, &gcras, &counters]
            .into_iter()
            .flatten()
            .map(|&k| k.to_owned())
            .collect();
        let (logs, gcras) = (logs.len(), logs.len() + gcras.len());
        if keys.is_empty() {
            return Call::done(Ok(Outcome::Verdict {
                verdict: crate::BatchVerdict::at(now.unwrap_or(0), None),
                release: None,
            }));
        }
        Call::mixed_redis(MixedRedisCall {
            entries,
            now,
            call_id: call_id.map(str::to_owned),
            keys,
            names,
            logs,
            gcras,
            args: read_args(logs),
            by_sha1: self.runs_by_sha1(),
            step: Step::Read,
            races: 0,
            done: None,
            written: None,
        })
    }
}

fn read_args(logs: usize) -> Vec<String> {
    vec!["r".to_owned(), logs.to_string()]
}

/// A reply item as text (clients give integers back as numbers or text).
fn text(reply: &Reply) -> Option<String> {
    match reply {
        Reply::Text(s) => Some(s.clone()),
        Reply::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// How far the server's clock is ahead of the decision's.
fn offset(server_now: u64, now: u64) -> i128 {
    i128::from(server_now) - i128::from(now)
}

fn number(reply: &Reply) -> Option<i64> {
    match reply {
        Reply::Int(i) => Some(*i),
        Reply::Text(s) => s.parse().ok(),
        _ => None,
    }
}

/// What the read found: the clock, the rows `decide_rows` reads, and each key's value as found (a
/// log's SHA1), which the write compares.
struct Found {
    server_now: u64,
    rows: Vec<Vec<SqlValue>>,
    found: Vec<String>,
}

impl MixedRedisCall {
    pub(crate) fn command(&self) -> Command<'_> {
        Command::Script {
            script: &MIXED,
            keys: &self.keys,
            args: &self.args,
            by_sha1: self.by_sha1,
        }
    }

    /// The outcome, once; a write that failed in the client (it may have run) leaves the token that
    /// gives its sliding-log calls back in `failed_release` ([`Call::failed_release`]).
    pub(crate) fn result(
        &mut self,
        failed_release: &mut Option<ReleaseToken>,
    ) -> Option<Result<Outcome, CallError>> {
        let done = self.done.take()?;
        if let (Err(CallError::Store { .. } | CallError::Reply(_)), Some(token)) =
            (&done, self.written.take())
        {
            *failed_release = Some(token);
        }
        Some(done)
    }

    fn user_key(&self, k: usize) -> &str {
        &self.names[k]
    }

    /// Reads the read's reply (`None`: not its shape).
    fn found(&self, reply: &Reply) -> Option<Found> {
        let Reply::Array(items) = reply else {
            return None;
        };
        if items.len() != 2 + self.keys.len() {
            return None;
        }
        let secs = u64::try_from(number(&items[0])?).ok()?;
        let micros = u64::try_from(number(&items[1])?).ok()?;
        let server_now = secs.checked_mul(1000)?.checked_add(micros / 1000)?;
        let now = self.now.unwrap_or(server_now);
        let mut rows = Vec::new();
        let mut found = Vec::with_capacity(self.keys.len());
        for (k, item) in items[2..].iter().enumerate() {
            let key = SqlValue::Text(self.user_key(k).to_owned());
            let int = |n: u64| SqlValue::Int(i64::try_from(n).unwrap_or(i64::MAX));
            if k < self.logs {
                let Reply::Array(log) = item else {
                    return None;
                };
                let [expiry, sha1, scores @ ..] = log.as_slice() else {
                    return None;
                };
                let expiry = number(expiry)?;
                found.push(text(sha1)?);
                if scores.is_empty() {
                    continue;
                }
                // The server's instant on the decision's clock; no expiry (someone's PERSIST) lives
                // as long as the key's longest window here.
                let expires_at = match u64::try_from(expiry) {
                    Ok(at) => u64::try_from(i128::from(at) - offset(server_now, now)).unwrap_or(0),
                    Err(_) => now.saturating_add(longest(&self.entries, self.user_key(k))),
                };
                for score in scores {
                    let at: u64 = text(score)?.parse().ok()?;
                    rows.push(vec![
                        SqlValue::Int(0),
                        key.clone(),
                        int(at),
                        int(expires_at),
                    ]);
                }
                continue;
            }
            let value = text(item)?;
            if !value.is_empty() {
                let mut parts = value.split(':');
                let nums: Vec<u64> = parts
                    .by_ref()
                    .map(|p| p.parse().ok())
                    .collect::<Option<_>>()?;
                let row = if k < self.gcras {
                    // gcra.lua's 'ms', or 'ms:rem:per'; a plain TAT is counted in the first
                    // GCRA entry's uses of the key (no fraction: any uses read it alike).
                    let per = self.entries.iter().find_map(|e| match e.rule {
                        crate::Rule::Gcra(g) if e.key == self.user_key(k) => Some(g.uses()),
                        _ => None,
                    })?;
                    match *nums.as_slice() {
                        [ms] => vec![1, ms, 0, per.into()],
                        [ms, rem, per] => vec![1, ms, rem, per],
                        _ => return None,
                    }
                } else {
                    match *nums.as_slice() {
                        [start, w, cur, prev] => vec![2, start, w, cur, prev],
                        _ => return None,
                    }
                };
                let mut row: Vec<SqlValue> = row.into_iter().map(int).collect();
                row.insert(1, key);
                rows.push(row);
            }
            found.push(value);
        }
        Some(Found {
            server_now,
            rows,
            found,
        })
    }

    pub(crate) fn feed(&mut self, fed: Result<Fed, String>) {
        let step = std::mem::replace(&mut self.step, Step::Read);
        let reply = match fed {
            Err(message) if self.by_sha1 && errors::is_noscript(&message) => {
                // Not loaded (nothing ran): the same step with the source.
                self.by_sha1 = false;
                self.step = step;
                return;
            }
            Err(message) if errors::is_crossslot(&message) => {
                self.done = Some(Err(CallError::Unsupported(
                    "a batch mixing algorithms on Redis Cluster needs its keys in one slot: give \
                     them one hash tag (the store's hashTag option)",
                )));
                return;
            }
            Err(message) => {
                if let Step::Write(Outcome::Verdict { release, .. }) = step {
                    self.written = release;
                }
                self.done = Some(Err(CallError::Store { message }));
                return;
            }
            Ok(Fed::Rows(_)) => {
                self.done = Some(Err(CallError::Protocol {
                    expected: "a Redis reply",
                    got: "rows",
                }));
                return;
            }
            Ok(Fed::Reply(reply)) => reply,
        };
        let result = match step {
            Step::Read => match self.read(&reply) {
                Ok(None) => return,
                Ok(Some(outcome)) => Ok(outcome),
                Err(e) => Err(e),
            },
            Step::Write(outcome) => match number(&reply) {
                Some(1) => Ok(outcome),
                Some(0) if self.races + 1 < MIXED_RACES => {
                    // A concurrent call changed a key: read again.
                    self.races += 1;
                    self.args = read_args(self.logs);
                    self.step = Step::Read;
                    return;
                }
                Some(0) => Err(CallError::Store {
                    message: format!(
                        "a batch mixing algorithms lost its write to concurrent calls {MIXED_RACES} \
                         times in a row; nothing was counted"
                    ),
                }),
                _ => {
                    if let Outcome::Verdict { release, .. } = outcome {
                        self.written = release;
                    }
                    Err(CallError::Reply(ReplyError::new(
                        "mixed",
                        "1 (written) or 0 (a key changed)",
                        &reply,
                    )))
                }
            },
        };
        self.done = Some(result);
    }

    /// Decides from the read: the outcome of a peek or a refusal (`Some`), or the write to run.
    fn read(&mut self, reply: &Reply) -> Result<Option<Outcome>, CallError> {
        let Found {
            server_now,
            rows,
            found,
        } = self
            .found(reply)
            .ok_or_else(|| ReplyError::new("mixed", READ_EXPECTED, reply))?;
        let now = self.now.unwrap_or(server_now);
        let record = self.call_id.is_some();
        let (consumed, scratch, dead) = decide_rows(&self.entries, &rows, now, record)
            .map_err(|_| ReplyError::new("mixed", READ_EXPECTED, reply))?;
        let (Some(call_id), Some(release)) = (self.call_id.clone(), consumed.release) else {
            return Ok(Some(Outcome::Verdict {
                verdict: consumed.verdict,
                release: None,
            }));
        };
        // Text keys expire after a span, logs at an instant of the server's clock (their expiry is
        // read back): a host's clock is taken to keep its offset from the server's.
        let px = |until: u64| until.saturating_sub(now).max(1).to_string();
        let at = |until: u64| {
            let at = i128::from(until) + offset(server_now, now);
            at.clamp(1, i128::from(i64::MAX)).to_string()
        };
        let mut args = Vec::with_capacity(3 + self.keys.len() * 5);
        args.extend(["w".to_owned(), self.logs.to_string(), call_id.clone()]);
        args.extend(found);
        let mut max_cost = 1;
        for (k, key) in self.names.iter().enumerate() {
            let key = key.as_str();
            if k < self.logs {
                let call = release
                    .calls()
                    .iter()
                    .find(|c| c.key == key)
                    .ok_or_else(|| ReplyError::new("mixed", READ_EXPECTED, reply))?;
                let drop = if dead[k] {
                    "x".to_owned()
                } else {
                    let cutoff = now as i128 - longest(&self.entries, key) as i128;
                    if cutoff >= 0 {
                        cutoff.to_string()
                    } else {
                        "-inf".to_owned()
                    }
                };
                let expires_at = scratch
                    .log_expiry(key)
                    .unwrap_or(call.at.saturating_add(call.window_ms));
                max_cost = max_cost.max(call.cost);
                args.extend([
                    drop,
                    call.at.to_string(),
                    call.cost.to_string(),
                    at(expires_at),
                ]);
            } else if k < self.gcras {
                match scratch.gcra_state(key) {
                    Some(t) => {
                        let value = if t.rem == 0 {
                            t.ms.to_string()
                        } else {
                            format!("{:018}:{}:{}", t.ms, t.rem, t.per)
                        };
                        // The key lives until its TAT (a fraction: the ms after).
                        args.extend([px(t.ms.saturating_add(1)), value]);
                    }
                    None => args.extend([String::new(), String::new()]),
                }
            } else {
                match scratch.counter_state(key) {
                    Some(c) => args.extend([
                        px(c.expires_at()),
                        format!("{}:{}:{}:{}", c.start, c.window_ms, c.cur, c.prev),
                    ]),
                    None => args.extend([String::new(), String::new()]),
                }
            }
        }
        let token = (self.logs > 0).then(|| {
            #[cfg(feature = "weights")]
            let call_id = if max_cost > 1 {
                crate::redis::weighted::token_id(&call_id, max_cost)
            } else {
                call_id
            };
            ReleaseToken::Redis(RedisRelease {
                keys: self.keys[..self.logs].to_vec(),
                call_id,
            })
        });
        self.args = args;
        self.step = Step::Write(Outcome::Verdict {
            verdict: consumed.verdict,
            release: token,
        });
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_sha1_is_the_sha1_of_the_source() {
        let computed = sha1_smol::Sha1::from(super::MIXED.source)
            .digest()
            .to_string();
        assert_eq!(super::MIXED.sha1, computed, "update MIXED's sha1 constant");
    }
}
