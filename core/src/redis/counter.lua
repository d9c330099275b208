-- ratewindow: the sliding-window counter (two fixed windows, the previous one weighted) on one key.
--
-- KEYS[1] the counter: 'start:window_ms:cur:prev' (start of its window, the window it was counted
--         under, uses in that window and in the one before)
-- No ARGV: reset (deletes the key). Otherwise:
-- ARGV[1] 2 * window_ms, the key's expiry, for a consume; 'p' for a peek (writes nothing)
-- ARGV[2] uses; ARGV[3] window_ms; ARGV[4] the call's cost
-- ARGV[5] (optional) now in ms: the host's clock instead of TIME
--
-- Reply: now (an integer) without counts that weigh anything at now (no key); otherwise the text
--        'allowed start:window_ms:cur:prev' (allowed 1 or 0, the key as found), followed on the
--        server's clock by ' sec usec' (TIME's two fields). The engine derives every verdict field
--        from it (core/src/counter.rs), and checks `allowed` against it.
local key, px = KEYS[1], ARGV[1]
if not px then return redis.call('DEL', key) end
local now, t = ARGV[5], nil
if now then
  now = now + 0
else
  t = redis.call('TIME')
  now = t[1] * 1000 + t[2] / 1000
  now = now - now % 1
end
local uses, w, n = ARGV[2] + 0, ARGV[3] + 0, ARGV[4] + 0
-- now % w by a double division: corrected should it round across a whole number.
local e = now % w
if e < 0 then e = e + w elseif e >= w then e = e - w end
local base, cur, prev = now - e, 0, 0
local v = redis.call('GET', key)
-- The stored text of the window's start and of the previous count, reused when they do not change.
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
local ok = '0 '
if cur + n <= uses and prev * (w - e) <= (uses - cur - n) * w then
  ok = '1 '
  if px ~= 'p' then
    local lag = 0
    if ARGV[5] then
      -- A host's clock: a key must not expire on the server's clock before it does on the host's.
      local c = redis.call('TIME')
      lag = c[1] * 1000 + c[2] / 1000 - now
      if lag < 1 then lag = 0 end
    end
    -- Two windows from now (ARGV[1], text) outlive the counts; exact past a clock step back.
    if base > now or lag > 0 then px = string.format('%d', base + 2 * w - now + lag) end
    redis.call('PSETEX', key, px, string.format('%s:%s:%d:%s', bt or string.format('%d', base),
      ARGV[3], cur + n, pt or string.format('%d', prev)))
  end
end
if not v then return now end
if t then return ok .. v .. ' ' .. t[1] .. ' ' .. t[2] end
return ok .. v
