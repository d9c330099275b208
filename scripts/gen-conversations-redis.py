#!/usr/bin/env python3
# Writes tests/vectors/conversations/redis.json (run from that folder). The JSON is what the tests read;
# this keeps its replies consistent when a case is added.
import json
P = "ratewindow:"
def lk(k, p=P): return p + "log:" + k
def wk(k, p=P): return p + "win:" + k
def E(k, u, w): return {"key": k, "limit": {"uses": u, "window_ms": w}}
def sargs(mode, entries, cid="{call_id}"):
    # One entry: the script's short form, 'uses:window_ms' then the call id (a consume's only).
    if len(entries) == 1:
        e = entries[0]
        lim = "%d:%d" % (e["limit"]["uses"], e["limit"]["window_ms"])
        return [e["key"]], [lim, cid] if mode == "c" else [lim]
    keys = []
    args = [mode, cid]
    for e in entries:
        if e["key"] not in keys: keys.append(e["key"])
        args += [str(keys.index(e["key"]) + 1), str(e["limit"]["uses"]), str(e["limit"]["window_ms"])]
    return keys, args
def S(script, by_sha1, keys, args, **res):
    d = {"command": {"script": script, "by_sha1": by_sha1, "keys": keys, "args": args}}
    d.update(res); return d
def slide(mode, entries, by_sha1=True, p=P, **res):
    keys, args = sargs(mode, entries, "-" if mode == "p" else "{call_id}")
    return S("sliding", by_sha1, [lk(k, p) for k in keys], args, **res)
def rel(keys, by_sha1=True, **res):
    return S("sliding", by_sha1, [lk(k) for k in keys], ["r", "{call_id}"], **res)
def fixed(key, args, by_sha1=True, **res):
    return S("fixed", by_sha1, [wk(key)], args, **res)
def ok(now, tight, rem, refill, reset): return [1, 0, -1, -1, now, tight, rem, refill, reset]
def no(now, wait, blocked, reset): return [0, wait, now + wait, blocked, now, blocked, 0, wait, reset]
def V(allowed, wait=0, ts=None, blocked=None, limit=0, rem=0, refill=0, reset=0, single=False):
    v = {"allowed": allowed, "retry_after_ms": wait, "retry_timestamp": ts}
    if not single: v["blocked"] = blocked
    v.update({"limit": limit, "remaining": rem, "refill_after_ms": refill, "reset_after_ms": reset})
    return v
CROSS = "CROSSSLOT Keys in request don't hash to the same slot"
LOST = "Connection is closed."
NOSCRIPT = "NOSCRIPT No matching script. Please use EVAL."
a, b, c = E("a", 2, 1000), E("b", 1, 1000), E("c", 3, 2000)
cases = []
def case(name, calls, options=None):
    cases.append({"name": name, "store": "redis", "options": options or {"prefix": P, "evalsha": True}, "calls": calls})

one = E("k", 3, 1000)
case("an allowed consume is one EVALSHA and carries the quota", [
  {"op": {"op": "consume", "key": "k", "limit": one["limit"]}, "steps": [slide("c", [one], reply=ok(1000, 0, 2, 1000, 1000))],
   "outcome": {"verdict": V(True, limit=3, rem=2, refill=1000, reset=1000, single=True), "release": True}}])
case("NOSCRIPT: the script is sent in full, once", [
  {"op": {"op": "consume_many", "entries": [one]}, "steps": [slide("c", [one], fail=NOSCRIPT), slide("c", [one], by_sha1=False, reply=ok(1000, 0, 2, 1000, 1000))],
   "outcome": {"verdict": V(True, limit=3, rem=2, refill=1000, reset=1000), "release": True}}])
case("a store without EVALSHA sends the source every time; a refusal names the wait", [
  {"op": {"op": "consume_many", "entries": [one]}, "steps": [slide("c", [one], by_sha1=False, reply=no(1000, 400, 0, 900))],
   "outcome": {"verdict": V(False, 400, 1400, 0, 3, 0, 400, 900), "release": False}}], {"prefix": P, "evalsha": False})
case("NOSCRIPT, then the connection is lost: a store error, never a third try", [
  {"op": {"op": "consume_many", "entries": [one]}, "steps": [slide("c", [one], fail=NOSCRIPT), slide("c", [one], by_sha1=False, fail=LOST)],
   "outcome": {"error": "store"}}])
case("a connection lost mid-call is a store error", [
  {"op": {"op": "peek_many", "entries": [one]}, "steps": [slide("p", [one], fail=LOST)], "outcome": {"error": "store"}}])
case("a reply of the wrong shape is a reply error, not a verdict", [
  {"op": {"op": "consume_many", "entries": [one]}, "steps": [slide("c", [one], reply="OK")], "outcome": {"error": "reply"}}])
case("a reply that contradicts itself is not believed", [
  {"op": {"op": "consume_many", "entries": [one]}, "steps": [slide("c", [one], reply=[0, 999, 100, 0, 95, 0, 0, 999, 999])], "outcome": {"error": "reply"}}])
# Every invariant a real reply holds, one case each: a reply that breaks one is a reply error.
def bad(name, op, step, reply):
    case(name, [{"op": op, "steps": [step(reply)], "outcome": {"error": "reply"}}])
cons = {"op": "consume_many", "entries": [one]}
peek1 = {"op": "peek_many", "entries": [one]}
sc = lambda r: slide("c", [one], reply=r)
sp = lambda r: slide("p", [one], reply=r)
bad("a refusal whose timestamp is far past its window is not believed (1e15 for a 1,000 ms window)", cons, sc,
    [0, 10**15 - 1000, 10**15, 0, 1000, 0, 0, 10**15 - 1000, 10**15 - 1000])
bad("a refusal whose wait is more than its window and a clock step is not believed", cons, sc, no(1000, 1000 + 60001, 0, 61001 + 1000))
bad("a refusal whose refill is not its wait is not believed", cons, sc, [0, 400, 1400, 0, 1000, 0, 0, 300, 900])
bad("a refusal whose reset comes before its refill is not believed", cons, sc, no(1000, 400, 0, 300))
bad("a refusal with uses left is not believed", cons, sc, [0, 400, 1400, 0, 1000, 0, 1, 400, 900])
bad("a refusal naming an entry the call does not have is not believed", cons, sc, [0, 400, 1400, 1, 1000, 1, 0, 400, 900])
bad("a refusal whose blocked entry is not its tightest is not believed", {"op": "consume_many", "entries": [one, E("k2", 3, 1000)]},
    lambda r: slide("c", [one, E("k2", 3, 1000)], reply=r), [0, 400, 1400, 0, 1000, 1, 0, 400, 900])
bad("an allowed reply naming an entry the call does not have is not believed", cons, sc, ok(1000, 1, 2, 1000, 1000))
bad("an allowed reply with more uses left than the limit is not believed", peek1, sp, ok(1000, 0, 4, 1000, 1000))
bad("an allowed consume that left every use is not believed (it took one)", cons, sc, ok(1000, 0, 3, 0, 0))
bad("an allowed reply whose window is empty while uses are taken is not believed", peek1, sp, ok(1000, 0, 1, 0, 0))
bad("an allowed reply whose refill reaches past its window and a clock step is not believed", cons, sc, ok(1000, 0, 2, 61001, 61001))
bad("an allowed reply whose reset comes before its refill is not believed", cons, sc, ok(1000, 0, 2, 900, 800))
bad("an allowed reply carrying a wait is not believed", cons, sc, [1, 5, -1, -1, 1000, 0, 2, 1000, 1000])
bad("a server time past 2^53 ms is not believed", cons, sc, ok(2**54, 0, 2, 1000, 1000))
bad("a negative server time is not believed", cons, sc, ok(-5, 0, 2, 1000, 1000))
# A call of one entry is answered in fewer numbers (sliding.lua's header): allowed {1, remaining, refill,
# reset, server time}, refused {0, wait, server time, reset}. The same verdicts as the nine numbers
# give, and the same invariants, checked as the nine they stand for.
case("a call of one entry is answered in five numbers when allowed, four when refused, as the nine would", [
  {"op": cons, "steps": [sc([1, 2, 1000, 1000, 1000])], "outcome": {"verdict": V(True, limit=3, rem=2, refill=1000, reset=1000), "release": True}},
  {"op": cons, "steps": [sc([0, 400, 1000, 900])], "outcome": {"verdict": V(False, 400, 1400, 0, 3, 0, 400, 900), "release": False}},
  {"op": peek1, "steps": [sp([1, 3, 0, 0, 1000])], "outcome": {"verdict": V(True, limit=3, rem=3), "release": False}},
  {"op": {"op": "consume", "key": "k", "limit": one["limit"]}, "steps": [sc([0, 400, 1000, 900])],
   "outcome": {"verdict": V(False, 400, 1400, limit=3, refill=400, reset=900, single=True), "release": False}}])
bad("a five-number reply to a call of two entries is not believed", {"op": "consume_many", "entries": [one, E("k2", 3, 1000)]},
    lambda r: slide("c", [one, E("k2", 3, 1000)], reply=r), [1, 2, 1000, 1000, 1000])
bad("a four-number reply to a call of two entries is not believed", {"op": "consume_many", "entries": [one, E("k2", 3, 1000)]},
    lambda r: slide("c", [one, E("k2", 3, 1000)], reply=r), [0, 400, 1000, 900])
bad("a five-number reply neither allowed nor refused is not believed", cons, sc, [2, 2, 1000, 1000, 1000])
bad("a five-number refusal is not believed", cons, sc, [0, 400, 1000, 900, 1000])
bad("a four-number allowed reply is not believed", cons, sc, [1, 2, 1000, 1000])
# A one-entry refusal by the log's refusal marker is one text (sliding.lua's header): the marker's
# member (until and end in 16 digits each, then the limit's uses:window) and TIME's seconds and
# microseconds; the same verdict as the four numbers give.
def mark(until, end, limit="3:1000", secs="1", micros="999"):
    return "%016d%016d%s %s %s" % (until, end, limit, secs, micros)
case("a one-entry refusal by the log's marker is one text: the marker, then TIME's seconds and microseconds", [
  {"op": cons, "steps": [sc(mark(1400, 1900))], "outcome": {"verdict": V(False, 400, 1400, 0, 3, 0, 400, 900), "release": False}},
  {"op": peek1, "steps": [sp(mark(1400, 1900))], "outcome": {"verdict": V(False, 400, 1400, 0, 3, 0, 400, 900), "release": False}},
  {"op": {"op": "consume", "key": "k", "limit": one["limit"]}, "steps": [sc(mark(1001, 1001, secs="0", micros="999999"))],
   "outcome": {"verdict": V(False, 2, 1001, limit=3, refill=2, reset=2, single=True), "release": False}}])
bad("a marker written for another limit is not believed", cons, sc, mark(1400, 1900, limit="3:2000"))
bad("a marker's refusal that has run out is not believed", cons, sc, mark(1000, 1900))
bad("a marker's refusal whose end comes before its until is not believed", cons, sc, mark(1400, 1300))
bad("a marker's refusal with a million microseconds is not believed", cons, sc, mark(1400, 1900, micros="1000000"))
bad("a marker's refusal with a field too many is not believed", cons, sc, mark(1400, 1900) + " 5")
bad("a marker's refusal with a signed field is not believed", cons, sc, mark(1400, 1900, secs="+1"))
bad("a marker's refusal to a call of two entries is not believed", {"op": "consume_many", "entries": [one, E("k2", 3, 1000)]},
    lambda r: slide("c", [one, E("k2", 3, 1000)], reply=r), mark(1400, 1900))
# A one-entry consume allowed is one text (sliding.lua's header): the calls in the window after it,
# the times of its oldest and newest call, the server time (ms); the same verdict as the nine numbers
# give, checked as the nine.
case("a one-entry consume allowed is one text: count, oldest, newest, server time", [
  {"op": cons, "steps": [sc("1 1000 1000 1000")], "outcome": {"verdict": V(True, limit=3, rem=2, refill=1000, reset=1000), "release": True}},
  {"op": cons, "steps": [sc("3 500 900 1000")], "outcome": {"verdict": V(True, limit=3, rem=0, refill=500, reset=900), "release": True}},
  {"op": {"op": "consume", "key": "k", "limit": one["limit"]}, "steps": [sc("2 600 1300 1000")],
   "outcome": {"verdict": V(True, limit=3, rem=1, refill=600, reset=1300, single=True), "release": True}}])
bad("an allowed text counting more calls than the limit's uses is not believed", cons, sc, "4 500 900 1000")
bad("an allowed text of a consume that took no use is not believed", cons, sc, "0 1000 1000 1000")
bad("an allowed text whose newest call comes before its oldest is not believed", cons, sc, "2 900 500 1000")
bad("an allowed text whose oldest call has left the window is not believed", cons, sc, "2 0 900 1000")
bad("an allowed text reaching past its window and a clock step is not believed", cons, sc, "1 70000 70000 1000")
bad("an allowed text past 2^53 ms is not believed", cons, sc, "1 %d %d %d" % (2**54, 2**54, 2**54))
bad("an allowed text with a field too many is not believed", cons, sc, "1 1000 1000 1000 5")
bad("an allowed text with a signed field is not believed", cons, sc, "+1 1000 1000 1000")
bad("an allowed text to a call of two entries is not believed", {"op": "consume_many", "entries": [one, E("k2", 3, 1000)]},
    lambda r: slide("c", [one, E("k2", 3, 1000)], reply=r), "1 1000 1000 1000")
bad("a four-number refusal whose reset comes before its wait is not believed", cons, sc, [0, 400, 1000, 300])
bad("a four-number refusal without a wait is not believed", cons, sc, [0, 0, 1000, 900])
bad("a four-number refusal past 2^53 ms is not believed", cons, sc, [0, 400, 2**54, 900])
bad("a five-number allowed consume that left every use is not believed", cons, sc, [1, 3, 0, 0, 1000])
bad("a five-number allowed reply whose reset comes before its refill is not believed", cons, sc, [1, 2, 900, 800, 1000])
bad("a five-number allowed reply past 2^53 ms is not believed", cons, sc, [1, 2, 1000, 1000, 2**54])
bad("a reply of three numbers is not believed", cons, sc, [1, 2, 1000])
case("a peek may find every use left; a clock that stepped back may wait a little past the window", [
  {"op": peek1, "steps": [sp(ok(1000, 0, 3, 0, 0))], "outcome": {"verdict": V(True, limit=3, rem=3), "release": False}},
  {"op": cons, "steps": [sc(no(1000, 1500, 0, 1600))], "outcome": {"verdict": V(False, 1500, 2500, 0, 3, 0, 1500, 1600), "release": False}}])
case("a release that removed more members than it has keys is not believed", [
  {"op": cons, "steps": [sc(ok(1000, 0, 2, 1000, 1000))], "outcome": {"verdict": V(True, limit=3, rem=2, refill=1000, reset=1000), "release": True}},
  {"op": {"op": "release", "of": 0}, "steps": [rel(["k"], reply=[2])], "outcome": {"error": "reply"}}])
case("an empty batch asks nothing of the store", [
  {"op": {"op": "consume_many", "entries": []}, "steps": [], "outcome": {"verdict": V(True), "release": True}},
  {"op": {"op": "peek_many", "entries": []}, "steps": [], "outcome": {"verdict": V(True), "release": False}}])
dup = [E("a", 2, 1000), E("a", 5, 3000)]
case("a key named twice is one KEY counted against both limits", [
  {"op": {"op": "consume_many", "entries": dup}, "steps": [S("sliding", True, [lk("a")], ["c", "{call_id}", "1", "2", "1000", "1", "5", "3000"], reply=ok(50, 0, 1, 1000, 1000))],
   "outcome": {"verdict": V(True, limit=2, rem=1, refill=1000, reset=1000), "release": True}}])
tag = E("click:alice", 1, 1000)
case("a prefix and a hash tag shape the key", [
  {"op": {"op": "peek_many", "entries": [tag, E("click", 10, 1000)]},
   "steps": [S("sliding", True, ["p:log:{click}:alice", "p:log:{click}"], ["p", "-", "1", "1", "1000", "2", "10", "1000"], reply=ok(7, 0, 1, 0, 0))],
   "outcome": {"verdict": V(True, limit=1, rem=1), "release": False}}], {"prefix": "p:", "evalsha": True, "hash_tag": ":"})

abc = [a, b, c]
case("CROSSSLOT: counted key by key; a refusal gives back what was counted, then peeks the rest", [
  {"op": {"op": "consume_many", "entries": abc}, "steps": [
     slide("c", abc, fail=CROSS),
     slide("c", [a], reply=ok(1000, 0, 1, 1000, 1000)),
     slide("c", [b], reply=no(1000, 300, 0, 300)),
     rel(["a"], reply=[1]),
     slide("p", [c], reply=ok(1001, 0, 3, 0, 0))],
   "outcome": {"verdict": V(False, 300, 1300, 1, 1, 0, 300, 300), "release": False}}])
case("CROSSSLOT: a failed give-back is reported, and the refusal stands", [
  {"op": {"op": "consume_many", "entries": abc}, "steps": [
     slide("c", abc, fail=CROSS),
     slide("c", [a], reply=ok(1000, 0, 1, 1000, 1000)),
     slide("c", [b], reply=no(1000, 300, 0, 300)),
     rel(["a"], fail=LOST),
     slide("p", [c], reply=ok(1001, 0, 3, 0, 0))],
   "outcome": {"verdict": V(False, 300, 1300, 1, 1, 0, 300, 300), "release": False},
   "give_back_failures": [{"keys": [lk("a")]}]}])
case("CROSSSLOT: the longest wait of the peeked keys blocks (a failed peek leaves the refusal standing)", [
  {"op": {"op": "consume_many", "entries": [b, c, a]}, "steps": [
     slide("c", [b, c, a], fail=CROSS),
     slide("c", [b], reply=no(1000, 300, 0, 300)),
     slide("p", [c], reply=no(1000, 700, 0, 1500)),
     slide("p", [a], fail=LOST)],
   "outcome": {"verdict": V(False, 700, 1700, 1, 3, 0, 700, 1500), "release": False}}])
case("CROSSSLOT: a failure mid-way gives back every key it may have counted, then fails", [
  {"op": {"op": "consume_many", "entries": abc}, "steps": [
     slide("c", abc, fail=CROSS),
     slide("c", [a], reply=ok(1000, 0, 1, 1000, 1000)),
     slide("c", [b], fail=LOST),
     rel(["a"], reply=[1]),
     rel(["b"], reply=[0])],
   "outcome": {"error": "store"}}])
case("CROSSSLOT: allowed everywhere, the tightest entry's quota; the release goes key by key", [
  {"op": {"op": "consume_many", "entries": abc}, "steps": [
     slide("c", abc, fail=CROSS),
     slide("c", [a], reply=ok(1000, 0, 1, 1000, 1000)),
     slide("c", [b], reply=ok(1000, 0, 0, 1000, 1000)),
     slide("c", [c], reply=ok(1001, 0, 2, 2000, 2000))],
   "outcome": {"verdict": V(True, limit=1, rem=0, refill=1000, reset=1000), "release": True}},
  {"op": {"op": "release", "of": 0}, "steps": [
     rel(["a", "b", "c"], fail=CROSS), rel(["a"], reply=[1]), rel(["b"], reply=[1]), rel(["c"], reply=[1])],
   "outcome": {"unit": None}}])
case("CROSSSLOT on a peek: each key peeked; any failure fails the peek", [
  {"op": {"op": "peek_many", "entries": abc}, "steps": [
     slide("p", abc, fail=CROSS), slide("p", [a], reply=ok(5, 0, 1, 100, 100)), slide("p", [b], fail=LOST)],
   "outcome": {"error": "store"}},
  {"op": {"op": "peek_many", "entries": abc}, "steps": [
     slide("p", abc, fail=CROSS), slide("p", [a], reply=ok(5, 0, 1, 100, 100)), slide("p", [b], reply=ok(5, 0, 1, 0, 0)), slide("p", [c], reply=ok(5, 0, 3, 0, 0))],
   "outcome": {"verdict": V(True, limit=2, rem=1, refill=100, reset=100), "release": False}}])
case("a failed release is a store error; the same release may run again", [
  {"op": {"op": "consume_many", "entries": [one]}, "steps": [slide("c", [one], reply=ok(1000, 0, 2, 1000, 1000))],
   "outcome": {"verdict": V(True, limit=3, rem=2, refill=1000, reset=1000), "release": True}},
  {"op": {"op": "release", "of": 0}, "steps": [rel(["k"], fail=LOST)], "outcome": {"error": "store"}}])

case("fixed window: every operation is one script on one key", [
  {"op": {"op": "hit", "key": "w", "decay_ms": 60000, "amount": 2}, "steps": [fixed("w", ["hit", "60000", "2"], reply=[2, 60000])], "outcome": {"hit": {"count": 2, "reset_after_ms": 60000}}},
  {"op": {"op": "attempt", "key": "w", "max": 3, "decay_ms": 60000}, "steps": [fixed("w", ["attempt", "60000", "3"], reply=[1, 3, 59000])], "outcome": {"attempt": {"allowed": True, "count": 3, "reset_after_ms": 59000}}},
  {"op": {"op": "attempt", "key": "w", "max": 3, "decay_ms": 60000}, "steps": [fixed("w", ["attempt", "60000", "3"], reply=[0, 3, 58000])], "outcome": {"attempt": {"allowed": False, "count": 3, "reset_after_ms": 58000}}},
  {"op": {"op": "attempts", "key": "w"}, "steps": [fixed("w", ["get"], reply=[3, 1500])], "outcome": {"int": 3}},
  {"op": {"op": "too_many_attempts", "key": "w", "max": 3}, "steps": [fixed("w", ["get"], reply=[3, 1500])], "outcome": {"bool": True}},
  {"op": {"op": "remaining", "key": "w", "max": 5}, "steps": [fixed("w", ["get"], reply=[3, 1500])], "outcome": {"int": 2}},
  {"op": {"op": "remaining", "key": "w", "max": 2}, "steps": [fixed("w", ["get"], reply=[3, 1500])], "outcome": {"int": 0}},
  {"op": {"op": "available_in", "key": "w"}, "steps": [fixed("w", ["get"], reply=[3, 1500])], "outcome": {"int": 2}},
  {"op": {"op": "available_in_ms", "key": "w"}, "steps": [fixed("w", ["get"], reply=[3, 1500])], "outcome": {"int": 1500}},
  {"op": {"op": "reset_attempts", "key": "w"}, "steps": [fixed("w", ["reset"], reply=[0, 1400])], "outcome": {"unit": None}},
  {"op": {"op": "clear", "key": "w"}, "steps": [fixed("w", ["clear"], reply=[0, 0])], "outcome": {"unit": None}},
  {"op": {"op": "attempts", "key": "w"}, "steps": [fixed("w", ["get"], reply=[0, 0])], "outcome": {"int": 0}},
  {"op": {"op": "too_many_attempts", "key": "w", "max": 0}, "steps": [fixed("w", ["get"], reply=[0, 0])], "outcome": {"bool": False}}])
case("fixed window: NOSCRIPT, lost connections and replies of the wrong shape", [
  {"op": {"op": "hit", "key": "w", "decay_ms": 1000, "amount": -1}, "steps": [fixed("w", ["hit", "1000", "-1"], fail=NOSCRIPT), fixed("w", ["hit", "1000", "-1"], by_sha1=False, reply=[-1, 1000])], "outcome": {"hit": {"count": -1, "reset_after_ms": 1000}}},
  {"op": {"op": "hit", "key": "w", "decay_ms": 1000, "amount": 1}, "steps": [fixed("w", ["hit", "1000", "1"], reply=[0, 0])], "outcome": {"error": "reply"}},
  {"op": {"op": "attempts", "key": "w"}, "steps": [fixed("w", ["get"], reply=[3])], "outcome": {"error": "reply"}},
  {"op": {"op": "attempt", "key": "w", "max": 1, "decay_ms": 1000}, "steps": [fixed("w", ["attempt", "1000", "1"], reply=[2, 1, 5])], "outcome": {"error": "reply"}},
  {"op": {"op": "attempt", "key": "w", "max": 3, "decay_ms": 1000}, "steps": [fixed("w", ["attempt", "1000", "3"], reply=[1, 4, 500])], "outcome": {"error": "reply"}},
  {"op": {"op": "attempt", "key": "w", "max": 3, "decay_ms": 1000}, "steps": [fixed("w", ["attempt", "1000", "3"], reply=[0, 2, 500])], "outcome": {"error": "reply"}},
  {"op": {"op": "attempt", "key": "w", "max": 3, "decay_ms": 1000}, "steps": [fixed("w", ["attempt", "1000", "3"], reply=[0, 0, 0])], "outcome": {"error": "reply"}},
  {"op": {"op": "attempt", "key": "w", "max": 0, "decay_ms": 1000}, "steps": [fixed("w", ["attempt", "1000", "0"], reply=[0, 0, 0])], "outcome": {"attempt": {"allowed": False, "count": 0, "reset_after_ms": 0}}},
  {"op": {"op": "clear", "key": "w"}, "steps": [fixed("w", ["clear"], fail=LOST)], "outcome": {"error": "store"}}])
doc = {"description": "Redis (and Cluster): EVALSHA and NOSCRIPT, the key-by-key fallback on CROSSSLOT with its give-back and longest-wait peeks, failures, replies of the wrong shape and replies that break an invariant a real reply holds (each refused as a reply error), every fixed-window operation.", "cases": cases}
json.dump(doc, open("redis.json", "w"), indent=1)
print(len(cases))
