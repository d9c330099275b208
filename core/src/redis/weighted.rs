//! Weighted calls on the Redis sliding log (cargo feature `weights`): a call with an entry costing
//! more than one use runs its own script, `weighted.lua`, so a call costing 1 keeps `sliding.lua` and
//! builds without the feature (the wasm ones) carry neither this code nor the script.
//!
//! A call costing `n` uses is `n` members of the key's sorted set at one score (the call's id, then
//! `id \u{1} i` for `i` in `2..=n`): one member per use, as the unweighted script counts them, so both
//! scripts share a log; a key holds at most `uses` members inside its window whatever the costs.
//! Its release token names the largest cost (`id \u{1} n`), and [`plan_release`] removes exactly those
//! members.

use super::plan::{Plan, RedisOptions, RedisRelease, Script, WindowState, CLOCK_STEP_MS};
use super::reply::{ints, Reply, ReplyError};
use crate::{BatchVerdict, Entry, Limit, Quota};

// Shipped without their comment lines, as the other scripts are; the SHA1s are of the stripped text.
crate::sql::schema_text!(WEIGHTED_SOURCE = include_str!("weighted.lua"));
crate::sql::schema_text!(WEIGHTED_ATTEMPT_SOURCE = include_str!("weighted_attempt.lua"));

/// The weighted sliding-log script: consume, peek and release of a call with costs.
pub static WEIGHTED: Script = Script {
    name: "weighted",
    source: WEIGHTED_SOURCE,
    sha1: "90a7472ab63014ad42ad44efdf38b4071c43e00e",
};

/// The fixed window's attempt costing more than one hit.
pub static WEIGHTED_ATTEMPT: Script = Script {
    name: "weighted_attempt",
    source: WEIGHTED_ATTEMPT_SOURCE,
    sha1: "dd4aa563df27e441cecf1f0f5064e4eff201494a",
};

/// Counts `cost` hits on `key`'s fixed window only if its count plus `cost` is at most `max` (opening
/// a window of `decay` with `cost` hits if none runs and `cost <= max`), atomically.
pub fn plan_attempt_cost(
    key: &str,
    decay: crate::Window,
    max: i64,
    cost: u32,
    options: &RedisOptions,
) -> Plan {
    Plan {
        script: &WEIGHTED_ATTEMPT,
        keys: vec![options.window_key(key)],
        args: vec![decay.as_ms().to_string(), max.to_string(), cost.to_string()],
    }
}

/// Decodes a reply of [`plan_attempt_cost`]: whether the hits were counted and the window after the
/// call, believed only when consistent with `max` and `cost` (counted: at most `max` after; refused:
/// the count plus `cost` above `max`, or no window when `cost > max`).
pub fn decode_attempt_cost(
    reply: &Reply,
    max: i64,
    cost: u32,
) -> Result<(bool, Option<WindowState>), ReplyError> {
    let decoded = super::decode_attempt(reply)?;
    let cost = i64::from(cost);
    let consistent = match decoded {
        (false, None) => cost > max,
        (true, Some(w)) => w.count <= max,
        (false, Some(w)) => w.count > max.saturating_sub(cost),
        (true, None) => false,
    };
    if consistent {
        Ok(decoded)
    } else {
        Err(ReplyError::new(
            "weighted_attempt",
            "[counted 0|1, count, ms until the window ends], consistent with the maximum and cost",
            reply,
        ))
    }
}

/// The byte between a weighted call's id and a member's (or its token's) number.
const SEP: char = '\u{1}';

/// Whether a call with these entries runs the weighted script (an entry costing more than 1).
pub fn is_weighted(entries: &[Entry]) -> bool {
    entries.iter().any(|e| e.cost() > 1)
}

/// The weighted plan of `(key index, limit, cost)` triples (key indices 0-based into `keys`), at the
/// server's clock (`now` `None`) or at `now`.
pub(crate) fn plan_of(
    mode: &str,
    keys: Vec<String>,
    entries: impl IntoIterator<Item = (usize, Limit, u32)>,
    call_id: &str,
    now: Option<u64>,
) -> Plan {
    let mut args = vec![
        mode.to_owned(),
        call_id.to_owned(),
        now.map_or(String::new(), |n| n.to_string()),
    ];
    for (k, limit, cost) in entries {
        args.push((k + 1).to_string());
        args.push(limit.uses().to_string());
        args.push(limit.window_ms().to_string());
        args.push(cost.to_string());
    }
    Plan {
        script: &WEIGHTED,
        keys,
        args,
    }
}

/// The weighted plan of a consume (`mode` `"c"`) or peek (`"p"`) of `entries`: each distinct key once,
/// in order of first appearance.
pub fn plan_weighted(
    mode: &str,
    entries: &[Entry],
    options: &RedisOptions,
    call_id: &str,
    now: Option<u64>,
) -> Plan {
    let mut keys: Vec<String> = Vec::new();
    let mut index_of: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut triples = Vec::with_capacity(entries.len());
    for e in entries {
        let key = options.log_key(&e.key);
        let k = *index_of.entry(key.clone()).or_insert_with(|| {
            keys.push(key);
            keys.len() - 1
        });
        triples.push((k, e.limit, e.cost()));
    }
    plan_of(mode, keys, triples, call_id, now)
}

/// The release token's id of a weighted call `call_id` whose largest cost is `cost`.
pub fn token_id(call_id: &str, cost: u32) -> String {
    format!("{call_id}{SEP}{cost}")
}

/// The release of a weighted call's token id (`id \u{1} n`), or `None` for an unweighted call's.
pub fn plan_release(release: &RedisRelease) -> Option<Plan> {
    let (id, cost) = release.call_id.rsplit_once(SEP)?;
    let cost: u32 = cost.parse().ok().filter(|&c| c >= 1)?;
    Some(Plan {
        script: &WEIGHTED,
        keys: release.keys.clone(),
        args: vec!["r".to_owned(), id.to_owned(), cost.to_string()],
    })
}

/// The largest cost of `entries`.
pub(crate) fn max_cost(entries: &[Entry]) -> u32 {
    entries.iter().map(Entry::cost).max().unwrap_or(1)
}

/// Decodes a weighted consume (`consume`) or peek reply of a call whose entries have `limits` and
/// costs `costs` (the largest cost of each entry's key, as the script counts it): the verdict and the
/// index of its tightest entry, believed only when consistent with itself and the call.
pub fn decode_weighted(
    reply: &Reply,
    limits: &[Limit],
    consume: bool,
) -> Result<(BatchVerdict, usize), ReplyError> {
    let err = || {
        ReplyError::new(
            "weighted",
            "[allowed 0|1, retry_after_ms, retry_timestamp, blocked, server time, tightest entry, \
             remaining, refill_after_ms, reset_after_ms], consistent with the call",
            reply,
        )
    };
    let [allowed, retry_after, retry_ts, blocked, now, tight, remaining, refill, reset] =
        ints::<9>(reply).ok_or_else(err)?;
    let tight_index = usize::try_from(tight)
        .ok()
        .filter(|&i| i < limits.len())
        .ok_or_else(err)?;
    let limit = limits[tight_index];
    let (uses, window) = (limit.uses() as i64, limit.window_ms() as i64);
    let reach = window + CLOCK_STEP_MS as i64;
    let counts_ok = (0..=1i64 << 53).contains(&now)
        && (0..=uses).contains(&remaining)
        && (0..=reach).contains(&refill)
        && (refill..=reach).contains(&reset);
    let quota = Quota {
        limit: uses as u32,
        remaining: remaining as u32,
        refill_after_ms: refill as u64,
        reset_after_ms: reset as u64,
    };
    match allowed {
        1 if counts_ok
            && retry_after == 0
            && retry_ts == -1
            && blocked == -1
            && (remaining == uses) == (reset == 0)
            && (!consume || remaining < uses) =>
        {
            Ok((BatchVerdict::ALLOWED.with_quota(quota), tight_index))
        }
        0 if counts_ok
            && (1..=reach).contains(&retry_after)
            && retry_ts.checked_sub(now) == Some(retry_after)
            && blocked == tight
            && remaining < uses
            && refill <= retry_after
            && reset >= retry_after =>
        {
            Ok((
                BatchVerdict {
                    allowed: false,
                    retry_after_ms: retry_after as u64,
                    retry_timestamp: Some(retry_ts as u64),
                    blocked: Some(tight_index),
                    quota,
                },
                tight_index,
            ))
        }
        _ => Err(err()),
    }
}

/// Decodes a weighted release reply: the keys the call was removed from (at most `keys`).
pub fn decode_release_of(reply: &Reply, keys: usize) -> Result<u64, ReplyError> {
    match ints::<1>(reply) {
        Some([removed]) if (0..=keys as i64).contains(&removed) => Ok(removed as u64),
        _ => Err(ReplyError::new(
            "weighted",
            "[keys the call was removed from, at most the call's keys]",
            reply,
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_sha1_is_the_sha1_of_its_source() {
        for script in [&super::WEIGHTED, &super::WEIGHTED_ATTEMPT] {
            let computed = sha1_smol::Sha1::from(script.source).digest().to_string();
            assert_eq!(script.sha1, computed, "update the {} sha1", script.name);
        }
    }

    #[test]
    fn a_token_names_the_largest_cost_and_plans_its_release() {
        use super::{plan_release, token_id, RedisRelease};
        let token = RedisRelease {
            keys: vec!["a".into()],
            call_id: token_id("f3", 4),
        };
        let plan = plan_release(&token).expect("weighted");
        assert_eq!(plan.args, ["r", "f3", "4"]);
        let plain = RedisRelease {
            keys: vec!["a".into()],
            call_id: "f3".into(),
        };
        assert!(plan_release(&plain).is_none());
    }
}
