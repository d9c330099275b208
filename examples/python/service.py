"""A small API handler with per-user and global limits, on ratewindow's in-memory store.

Each request counts against two cooldowns at once, all or nothing: 3 calls per 10 s for its user and
8 per 10 s for the whole service. A refused request answers 429 with Retry-After; a request whose
handler fails gives its use back with ``verdict.release()``. Logins are limited by ``RateLimiter``'s
fixed window, and the same store serves an asyncio handler. The clock is simulated, so the timeline
prints instantly and is the same on every run.

Run: ``scripts/demo-python.sh``.
"""

from __future__ import annotations

import asyncio

from ratewindow import AsyncMemoryStore, Entry, Limit, MemoryStore, RateLimiter
from ratewindow.testing import ManualClock

START = 1_767_225_600_000  # 2026-01-01T00:00:00Z, in Unix ms

clock = ManualClock(START)
store = MemoryStore(clock)
PER_USER = Limit(3, 10_000)
EVERYONE = Limit(8, 10_000)
logins = RateLimiter(store)


def at(offset_ms: int) -> str:
    return f"t={offset_ms / 1000:5.1f}s"


def handle(user: str, path: str, *, fail: bool = False) -> str:
    """The handler: counts the call, runs it, and answers."""
    verdict = store.consume_many([Entry(f"api:user:{user}", PER_USER), Entry("api:all", EVERYONE)])
    if not verdict.allowed:
        which = "per-user" if verdict.blocked == 0 else "global"
        return f"429 ({which} limit, Retry-After {verdict.retry_after_ms} ms)"
    if fail:
        verdict.release()  # the call never ran: give its use back
        return "503 (handler failed, use given back)"
    return f"200 {path}"


def login(user: str, password_ok: bool) -> str:
    key = f"login:{user}"
    if logins.too_many_attempts(key, 3):
        return f"locked out for {logins.available_in(key)} s"
    if password_ok:
        logins.clear(key)
        return "welcome"
    attempts = logins.hit(key, decay_seconds=60)
    return f"wrong password ({logins.remaining(key, 3)} tries left, attempt {attempts})"


def main() -> None:
    timeline = [
        (0, "alice", "/feed", False),
        (100, "alice", "/feed", False),
        (200, "alice", "/feed", False),
        (300, "alice", "/feed", False),  # 4th within 10 s: per-user refusal
        (400, "bob", "/search", True),  # fails: released
        (500, "bob", "/search", False),
        (600, "bob", "/search", False),
        (700, "carol", "/feed", False),
        (800, "carol", "/feed", False),
        (900, "dave", "/feed", False),
        (1_000, "erin", "/feed", False),  # global limit reached
        (10_000, "alice", "/feed", False),  # alice's first call left at exactly t=10.0s
        (10_300, "alice", "/feed", False),
    ]
    print("== API requests (3 per user and 8 in all, per 10 s)")
    for offset, user, path, fail in timeline:
        clock.set(START + offset)
        print(f"{at(offset)}  {user:<6} GET {path:<8} -> {handle(user, path, fail=fail)}")

    print("\n== logins (3 wrong passwords per 60 s fixed window)")
    for offset, ok in [(11_000, False), (12_000, False), (13_000, False), (14_000, True), (70_999, True), (71_000, True)]:
        clock.set(START + offset)
        print(f"{at(offset)}  mallory -> {login('mallory', ok)}")

    print("\n== the same store from asyncio")

    async def serve() -> None:
        shared = AsyncMemoryStore(store)
        clock.set(START + 80_000)
        verdicts = await asyncio.gather(*(shared.consume("api:user:zoe", PER_USER) for _ in range(5)))
        answers = ", ".join("200" if v.allowed else f"429/{v.retry_after_ms}ms" for v in verdicts)
        print(f"{at(80_000)}  zoe x5 concurrently -> {answers}")

    asyncio.run(serve())


if __name__ == "__main__":
    main()
