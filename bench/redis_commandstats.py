"""Server time per script call, from Redis's own ``INFO commandstats``: ratewindow's sliding-log script
against the scripts its peers run, on the peers' workload.

Starts a private ``redis-server`` on a spare loopback port (``--port``, default 6397: the Node tests own 6390-6394), so no other
traffic counts, and stops it at the end. Workload: 10,000 keys round-robin. For each script, each
round, four timed parts:

- ``fill``: 5 uses a key (per 600 s, so the fill outlasts the timed part), 5 passes over the keys,
  every call allowed;
- ``refused 1st``: one more pass over the same keys, every call refused for the first time (ours
  writes its refusal marker here);
- ``refused``: two more passes, every call refused again (the peers' abuse workload: a key refused
  repeatedly);
- ``allowed``: a limit the keys never reach (10^9 uses per 10 s, as ``bench/node/redis.mjs``'s allowed
  variant), 5 passes over fresh keys, every call allowed and recorded.

``CONFIG RESETSTAT`` before each timed part; ``usec_per_call`` of ``cmdstat_evalsha`` after it, and the
server process's CPU time per call (from ``/proc``: less inflated by other load on a busy machine than
commandstats' wall time). The scripts run interleaved round by round (a, b, a, b ...) and the table
gives the median round; the calls are pipelined (1,000 a batch) so the run is short, which does not
change the server's time per call. Call ids are shaped as the core's ``CallIds`` makes them (16 hex
digits and a hex counter).

Contenders (the scripts are the peers' own, sent by ``EVALSHA``):

- ``return 1``: the floor, an EVALSHA that runs no command (the key and arguments of our one-entry consume).
- ratewindow: ``core/src/redis/sliding.lua`` of this checkout, and with ``--before FILE`` (repeatable)
  other versions of it (e.g. the one before a change: ``git show REV:core/src/redis/sliding.lua > old.lua``).
- ratewindow's fixed window: ``core/src/redis/fixed.lua`` of this checkout, ``attempt`` (one hit only
  below the limit: rlf's verdict, refusals not counted) and ``hit`` (every call counted, as rlf does);
  ``--before-fixed FILE`` (repeatable) measures another version's ``attempt``.
- rate-limiter-flexible's ``RateLimiterRedis``: a fixed window, ``SET NX`` + ``INCRBY`` + ``PTTL``.
- ``limits``' moving window (``acquire_moving_window.lua``: ``LINDEX``, ``LPUSH``, ``LTRIM``, ``EXPIRE``
  on the client's clock).
- ``limits``' fixed window (``incr_expire.lua``: ``INCRBY``, and ``EXPIRE`` on the window's first hit).
- a plain sliding-log script: ``ZREMRANGEBYSCORE``, ``ZCARD``, ``ZADD`` + ``PEXPIRE`` (or ``ZRANGE`` of
  the oldest for the wait), on the server's clock.

With ``--callgrind`` the server runs under ``valgrind --tool=callgrind`` (instrumentation off except while a
part runs, switched by ``callgrind_control``) and the table gives the server's instructions per call
instead: the whole process (reading the pipelined request, the script, the reply), independent of the
load on the machine, so two scripts can be compared on a busy machine. Take fewer keys there
(``--keys 1000``: a call runs ~50x slower) and one round (the count hardly moves between rounds).

Run: ``.venv/bin/python bench/redis_commandstats.py [--rounds 5] [--port 6397] [--before old.lua ...]``
(``--only TEXT`` keeps the contenders whose name holds TEXT, e.g. ``--only fixed --only rate-limiter``)
and ``... --callgrind --keys 1000 --rounds 1`` (``redis-server`` and redis-py are all it needs;
valgrind for ``--callgrind``).
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import redis

SLIDING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "core", "src", "redis", "sliding.lua")
FIXED = os.path.join(os.path.dirname(SLIDING), "fixed.lua")
# The window is long enough that the fill outlasts the timed part on a busy machine (its length
# costs the scripts nothing).
KEYS, USES, WINDOW_MS = 10_000, 5, 600_000
# The allowed variant: a limit never reached, the Node bench's (10^9 per 10 s).
BIG_USES, BIG_WINDOW_MS = 1_000_000_000, 10_000
PIPE = 1_000
ID_PREFIX = "9e3779b97f4a7c15"

FLOOR = "return 1"

RLF = """redis.call('set', KEYS[1], 0, 'EX', ARGV[2], 'NX') \
local consumed = redis.call('incrby', KEYS[1], ARGV[1]) \
local ttl = redis.call('pttl', KEYS[1]) \
if ttl == -1 then \
  redis.call('expire', KEYS[1], ARGV[2]) \
  ttl = 1000 * ARGV[2] \
end \
return {consumed, ttl} \
"""

LIMITS_MOVING = """local timestamp = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local expiry = tonumber(ARGV[3])
local amount = tonumber(ARGV[4])

if amount > limit then
    return false
end

local entry = redis.call('lindex', KEYS[1], limit - amount)

if entry and tonumber(entry) >= timestamp - expiry then
    return false
end
local entries = {}
for i = 1, amount do
    entries[i] = timestamp
end

for i=1,#entries,5000 do
    redis.call('lpush', KEYS[1], unpack(entries, i, math.min(i+4999, #entries)))
end
redis.call('ltrim', KEYS[1], 0, limit - 1)
redis.call('expire', KEYS[1], expiry)

return true
"""

LIMITS_FIXED = """local current
local amount = tonumber(ARGV[2])
current = redis.call("incrby", KEYS[1], amount)

if tonumber(current) == amount then
    redis.call("expire", KEYS[1], ARGV[1])
end

return current
"""

PLAIN = """local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key, limit, window = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local count = redis.call('ZCARD', key)
if count >= limit then
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {0, tonumber(oldest[2]) + window - now}
end
redis.call('ZADD', key, now, ARGV[3])
redis.call('PEXPIRE', key, window)
return {1, limit - count - 1}
"""

# (script source, KEYS of key i, ARGV of call n under a limit of uses per window ms) for each contender.
Args = Callable[[int, int, int], list[str]]
Contender = tuple[str, Callable[[str, int], list[str]], Args]


def ours(source: str, tag: str) -> Contender:
    # Each version of the script has keys of its own (a tag in the key), or one would count the calls
    # another recorded. A one-entry consume's arguments as that version takes them: the short form
    # ('uses:window', id) since the scripts that test `#ARGV <= 2`, before that mode, id, key index,
    # uses, window.
    if "#ARGV <= 2" in source:
        return (source, lambda p, i: [f"{p}{tag}:user:{i}"],
                lambda n, uses, window: [f"{uses}:{window}", f"{ID_PREFIX}{n:x}"])
    return (source, lambda p, i: [f"{p}{tag}:user:{i}"],
            lambda n, uses, window: ["c", f"{ID_PREFIX}{n:x}", "1", str(uses), str(window)])


def ours_fixed(source: str, tag: str, op: str) -> Contender:
    # The core's arguments: 'attempt' decay max (one hit only below max: rlf's consume verdict without
    # counting refusals) or 'hit' decay amount (counts every call, as rlf's consume does).
    return (source, lambda p, i: [f"{p}{tag}:user:{i}"],
            (lambda n, uses, window: ["attempt", str(window), str(uses)]) if op == "attempt"
            else (lambda n, uses, window: ["hit", str(window), "1"]))


def contenders(before: list[str], fixed_before: list[str]) -> dict[str, Contender]:
    out: dict[str, Contender] = {
        "return 1 (the EVALSHA floor)": (
            FLOOR, lambda p, i: [f"{p}floor:user:{i}"],
            lambda n, uses, window: [f"{uses}:{window}", f"{ID_PREFIX}{n:x}"]),
    }
    for n, path in enumerate(before):
        with open(path) as f:
            out[f"ratewindow {os.path.basename(path)}"[:40]] = ours(f.read(), f"before{n}")
    with open(SLIDING) as f:
        out["ratewindow sliding.lua (this checkout)"] = ours(f.read(), "log")
    for n, path in enumerate(fixed_before):
        with open(path) as f:
            out[f"ratewindow attempt {os.path.basename(path)}"[:40]] = ours_fixed(f.read(), f"fbefore{n}", "attempt")
    with open(FIXED) as f:
        fixed = f.read()
    out["ratewindow fixed.lua attempt"] = ours_fixed(fixed, "fixed", "attempt")
    out["ratewindow fixed.lua hit"] = ours_fixed(fixed, "fixedhit", "hit")
    out["rate-limiter-flexible RateLimiterRedis"] = (
        RLF, lambda p, i: [f"{p}rlf:user:{i}"], lambda n, uses, window: ["1", str(window // 1000)])
    out["limits moving window"] = (
        LIMITS_MOVING, lambda p, i: [f"{p}lim:user:{i}"],
        lambda n, uses, window: [repr(time.time()), str(uses), str(window // 1000), "1"])
    out["limits fixed window"] = (
        LIMITS_FIXED, lambda p, i: [f"{p}limfix:user:{i}"], lambda n, uses, window: [str(window // 1000), "1"])
    out["plain sliding-log script"] = (
        PLAIN, lambda p, i: [f"{p}plain:user:{i}"],
        lambda n, uses, window: [str(uses), str(window), f"b{n}"])
    return out


def run_pass(r: redis.Redis, sha: str, contender: Contender, prefix: str, counter: "itertools.count[int]",
             uses: int = USES, window: int = WINDOW_MS) -> None:
    _, keys, args = contender
    pipe = r.pipeline(transaction=False)
    for i in range(KEYS):
        pipe.evalsha(sha, 1, *keys(prefix, i), *args(next(counter), uses, window))
        if len(pipe) == PIPE:
            pipe.execute()
    pipe.execute()


def callgrind_instructions(pid: int, workdir: str) -> int:
    """Dumps the counts collected since the last dump (``callgrind_control --dump``) and returns the
    instructions (Ir) of that dump."""
    before = set(os.listdir(workdir))
    subprocess.run(["callgrind_control", "--dump", str(pid)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        new = [f for f in set(os.listdir(workdir)) - before if f.startswith("callgrind.out")]
        if new:
            path = os.path.join(workdir, new[0])
            for _ in range(100):
                with open(path) as f:
                    for line in f:
                        if line.startswith("totals:"):
                            return int(line.split()[1])
                time.sleep(0.05)
        time.sleep(0.05)
    raise RuntimeError("callgrind wrote no dump")


def usec_per_call(r: redis.Redis) -> float:
    return float(r.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])


def server_cpu_s(pid: int) -> float:
    """The server process's CPU time (user + system), which other load on the machine does not inflate
    as much as the wall time commandstats measures (Linux: /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def main() -> None:
    global KEYS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--port", type=int, default=6397)
    parser.add_argument("--before", action="append", default=[],
                        help="another version of sliding.lua to measure beside this checkout's (repeatable)")
    parser.add_argument("--before-fixed", action="append", default=[],
                        help="another version of fixed.lua to measure ('attempt') beside this checkout's (repeatable)")
    parser.add_argument("--only", action="append", default=[],
                        help="measure only the contenders whose name contains this text (repeatable)")
    parser.add_argument("--keys", type=int, default=KEYS, help="keys round-robin (default 10,000)")
    parser.add_argument("--callgrind", action="store_true",
                        help="run the server under callgrind and report its instructions per call")
    args = parser.parse_args()
    KEYS = args.keys

    server_bin = shutil.which("redis-server")
    if server_bin is None:
        sys.exit("redis-server is not on the PATH")
    workdir = tempfile.mkdtemp(prefix="rw-cmdstats-")
    command = [server_bin, "--port", str(args.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--dir", workdir]
    if args.callgrind:
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                   f"--callgrind-out-file={workdir}/callgrind.out.%p", *command]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = redis.Redis(port=args.port)
        for _ in range(600):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        scripts = contenders(args.before, args.before_fixed)
        if args.only:
            scripts = {k: v for k, v in scripts.items() if any(o in k for o in args.only)}
        shas = {name: r.script_load(c[0]) for name, c in scripts.items()}
        counter = itertools.count()
        parts = ("fill", "refused 1st", "refused", "allowed", "fill cpu", "refused 1st cpu", "refused cpu", "allowed cpu")
        results: dict[str, dict[str, list[float]]] = {name: {k: [] for k in parts} for name in scripts}
        names = list(scripts)

        def timed(name: str, part: str, passes: int, prefix: str, uses: int, window: int) -> None:
            r.config_resetstat()
            if args.callgrind:
                callgrind_instructions(server.pid, workdir)  # the counts so far, set aside
                subprocess.run(["callgrind_control", "--instr=on", str(server.pid)], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            cpu = server_cpu_s(server.pid)
            for _ in range(passes):
                run_pass(r, shas[name], scripts[name], prefix, counter, uses, window)
            if args.callgrind:
                subprocess.run(["callgrind_control", "--instr=off", str(server.pid)], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                instructions = callgrind_instructions(server.pid, workdir) / (passes * KEYS)
                results[name][f"{part} cpu"].append(instructions)
                results[name][part].append(instructions)
                return
            results[name][f"{part} cpu"].append((server_cpu_s(server.pid) - cpu) / (passes * KEYS) * 1e6)
            results[name][part].append(usec_per_call(r))

        for rnd in range(args.rounds):
            for name in names[rnd % len(names):] + names[: rnd % len(names)]:
                timed(name, "fill", USES, f"r{rnd}:", USES, WINDOW_MS)
                timed(name, "refused 1st", 1, f"r{rnd}:", USES, WINDOW_MS)
                timed(name, "refused", 2, f"r{rnd}:", USES, WINDOW_MS)
                timed(name, "allowed", USES, f"r{rnd}:big:", BIG_USES, BIG_WINDOW_MS)
            r.flushall()  # the private server's keys only
        load = os.getloadavg()
        print(f"Server µs per EVALSHA, {KEYS:,} keys round-robin; median of {args.rounds} interleaved rounds; "
              f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        print(f"fill: {USES} per {WINDOW_MS // 1000} s, {USES} passes (allowed); refused 1st: one more pass; refused: 2 more; "
              f"allowed: {BIG_USES:.0e} per {BIG_WINDOW_MS // 1000} s, {USES} passes over fresh keys")
        if args.callgrind:
            print("callgrind: the server process's instructions per call (reading the request, the script, "
                  "the reply)")
            print(f"{'script':<40} {'fill':>9} {'ref 1st':>9} {'refused':>9} {'allowed':>9}")
            for name in names:
                m = [statistics.median(results[name][k]) for k in parts]
                print(f"{name:<40} {m[0]:>9.0f} {m[1]:>9.0f} {m[2]:>9.0f} {m[3]:>9.0f}")
            return
        print("cmdstats: µs inside EVALSHA (INFO commandstats); CPU: the whole server process's CPU µs per call")
        print(f"{'script':<40} {'fill':>6} {'ref 1st':>8} {'refused':>8} {'allowed':>8} | {'fill CPU':>9} "
              f"{'ref 1st CPU':>12} {'refused CPU':>12} {'allowed CPU':>12}")
        for name in names:
            m = [statistics.median(results[name][k]) for k in parts]
            print(f"{name:<40} {m[0]:>6.2f} {m[1]:>8.2f} {m[2]:>8.2f} {m[3]:>8.2f} | {m[4]:>9.2f} {m[5]:>12.2f} "
                  f"{m[6]:>12.2f} {m[7]:>12.2f}")
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
