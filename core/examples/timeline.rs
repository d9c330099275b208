//! A timeline of allowed and refused calls: five simulated users press a button at their own pace,
//! under stacked cooldowns — 3 presses per 10 s for each user, and 12 per 10 s for everyone together —
//! counted by the embedded memory store on a simulated clock.
//!
//! `cargo run -p ratewindow-core --example timeline`

use ratewindow_core::{Clock, Entry, Limit, ManualClock, MemoryStore};

struct User {
    name: &'static str,
    /// Milliseconds between presses.
    every_ms: u64,
    next_at: u64,
}

fn main() -> Result<(), ratewindow_core::LimitError> {
    let store = MemoryStore::new();
    let clock = ManualClock::new(0);
    let per_user = Limit::new(3, 10_000)?;
    let everyone = Limit::new(12, 10_000)?;

    let mut users = [
        User {
            name: "ana",
            every_ms: 700,
            next_at: 0,
        },
        User {
            name: "ben",
            every_ms: 1_900,
            next_at: 300,
        },
        User {
            name: "chen",
            every_ms: 2_600,
            next_at: 900,
        },
        User {
            name: "dara",
            every_ms: 4_100,
            next_at: 1_500,
        },
        User {
            name: "eli",
            every_ms: 6_000,
            next_at: 2_200,
        },
    ];
    println!(
        "stacked cooldowns: {} per {} s per user, {} per {} s for everyone\n",
        per_user.uses(),
        per_user.window_ms() / 1000,
        everyone.uses(),
        everyone.window_ms() / 1000
    );
    println!("{:>8}  {:<5} {:<8} detail", "time", "user", "verdict");
    let (mut allowed, mut refused) = (0, 0);
    while let Some(user) = users
        .iter_mut()
        .filter(|u| u.next_at <= 20_000)
        .min_by_key(|u| u.next_at)
    {
        clock.set(user.next_at);
        let now = clock.now_ms();
        let key = format!("press:{}", user.name);
        let call = [Entry::new(key, per_user), Entry::new("press", everyone)];
        let verdict = store.consume_many(&call, now).verdict;
        let time = format!("{}.{:03}s", now / 1000, now % 1000);
        if verdict.allowed {
            allowed += 1;
            println!("{time:>8}  {:<5} {:<8}", user.name, "allowed");
        } else {
            refused += 1;
            let which = if verdict.blocked == Some(0) {
                "their own cooldown"
            } else {
                "the global cooldown"
            };
            println!(
                "{time:>8}  {:<5} {:<8} wait {:.1} s ({which}, until {:.3} s)",
                user.name,
                "refused",
                verdict.retry_after_ms as f64 / 1000.0,
                verdict.retry_timestamp.unwrap_or(0) as f64 / 1000.0,
            );
        }
        user.next_at += user.every_ms;
    }
    println!(
        "\n{allowed} allowed, {refused} refused; keys held: {}",
        store.len()
    );
    Ok(())
}
