-- ratewindow: the sliding-window counter (two fixed windows, the previous one weighted) on one key,
-- on the server's clock.
--
-- KEYS[1] the counter: 'start:window_ms:cur:prev' (start of its window, the window it was counted
--         under, uses in that window and in the one before)
-- ARGV[1] mode: 'c' consume, 'p' peek (writes nothing), 'r' reset (deletes the key)
-- ARGV[2] uses; ARGV[3] window_ms; ARGV[4] the call's cost; ARGV[5] 2 * window_ms, the expiry;
-- ARGV[6] (optional) now in ms, for TIME (a host's clock; the expiry is then stretched by how far
--         it lags the server's)
--
-- Reply: {allowed (1|0), now} without a key; {allowed, now, start, window_ms, cur, prev}: the counts
--        the call found. The engine derives every verdict field from them (core/src/counter.rs), and
--        checks `allowed` against them.
local key, mode = KEYS[1], ARGV[1]
if mode == 'r' then return redis.call('DEL', key) end
local time, now, lag = redis.call('TIME'), ARGV[6], 0
if now then
  -- A host's clock: a key must not expire on the server's clock before it does on the host's.
  now = now + 0
  lag = math.max(0, time[1] * 1000 + math.floor(time[2] / 1000) - now)
else
  now = time[1] * 1000 + math.floor(time[2] / 1000)
end
local uses, w, n = ARGV[2] + 0, ARGV[3] + 0, ARGV[4] + 0
-- now % w by a double division: corrected should it round across a whole number.
local e = now % w
if e < 0 then e = e + w elseif e >= w then e = e - w end
local base, cur, prev = now - e, 0, 0
local v = redis.call('GET', key)
-- The stored text of the window's start and of the previous count, reused when they do not change
-- (a number concatenated is formatted by sprintf).
local s, sw, sc, sp, st, pt, bt
if v then
  st, sw, sc, pt = string.match(v, '^(%d+):(%d+):(%d+):(%d+)$')
  s, sc, sp = st + 0, sc + 0, pt + 0
  -- Counts that weigh nothing at now (the key's expiry, when now is given): no key.
  local dead = s + sw
  if sc > 0 then dead = dead + sw end
  if dead <= now then v = nil end
end
if v then
  if s == base then
    cur, prev, bt = sc, sp, st
  elseif sw ~= ARGV[3] then
    -- Counts made under another window, carried into this one.
    cur, prev = sc, sp
  elseif s > base then
    -- A clock that stepped back: read at the start of the key's window.
    base, e, cur, prev, bt = s, 0, sc, sp, st
  elseif s + w == base then
    prev, pt = sc, nil
  end
end
if prev == 0 then pt = '0' elseif prev ~= sp then pt = nil end
local ok = 0
if cur + n <= uses and prev * (w - e) <= (uses - cur - n) * w then
  ok = 1
  if mode == 'c' then
    -- Two windows from now (ARGV[5], text) outlive the counts; exact past a clock step back.
    local px = ARGV[5]
    if base > now or lag > 0 then
      px = base + 2 * w - now + lag
      if px >= 1e14 then px = string.format('%.0f', px) end
    end
    local b = bt or base
    if not bt and b >= 1e14 then b = string.format('%.0f', b) end
    redis.call('SET', key, b .. ':' .. ARGV[3] .. ':' .. (cur + n) .. ':' .. (pt or prev), 'PX', px)
  end
end
if v then return {ok, now, s, sw + 0, sc, sp} end
return {ok, now}
