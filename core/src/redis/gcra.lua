-- ratewindow: GCRA (a token bucket kept as one time per key) on one key.
--
-- KEYS[1] the bucket: its TAT (theoretical arrival time, when the bucket is full again) in whole ms
--         as 'ms' (at most 17 digits), or 'ms:rem:per' (ms zero-padded to 18 digits) for ms + rem/per,
--         per the uses the fraction is counted in; so a fraction shows in the text's length
-- No ARGV: reset (deletes the key). Otherwise:
-- ARGV[1] ceil(tau), the key's expiry, for a consume; 'p' for a peek (writes nothing)
-- ARGV[2] n*T in whole ms (q); ARGV[3] tau - n*T in whole ms (d): the call is allowed iff
--         TAT <= now + tau - n*T
-- ARGV[4] uses, ARGV[5], ARGV[6] the fractions of q and d in 1/uses: sent when the limit's times
--         have fractions (or with ARGV[7]); without ARGV[4] a TAT with a fraction answers -1, and
--         the engine sends the call again with them
-- ARGV[7] (optional) now in ms: the host's clock instead of TIME
--
-- Reply: now (an integer) when the bucket was full (no key, or a TAT not ahead of now): allowed;
--        otherwise the text 'allowed TAT' (allowed 1 or 0, the TAT as stored), followed on the
--        server's clock by ' sec usec' (TIME's two fields). The engine derives every verdict field
--        from it (core/src/gcra.rs), and checks `allowed` against it.
local key, px = KEYS[1], ARGV[1]
if not px then return redis.call('DEL', key) end
if not ARGV[4] then
  -- The usual call (the server's clock, whole-ms times) in the fewest steps; the same answers as the
  -- general path below. A full bucket's new key expires at its TAT (now + n*T, when it is full
  -- again: ARGV[2] ms), so a key found holds a TAT ahead of now but in its last ms.
  local t = redis.call('TIME')
  local now = t[1] * 1000 + t[2] / 1000
  now = now - now % 1
  local v = redis.call('GET', key)
  if v then
    if #v > 17 then return -1 end
    local m = v + 0
    if m > now then
      if m > now + ARGV[3] then return '0 ' .. v .. ' ' .. t[1] .. ' ' .. t[2] end
      if px ~= 'p' then
        redis.call('INCRBY', key, ARGV[2])
        redis.call('PEXPIRE', key, px)
      end
      return '1 ' .. v .. ' ' .. t[1] .. ' ' .. t[2]
    end
  end
  if px ~= 'p' then redis.call('PSETEX', key, ARGV[2], string.format('%d', now + ARGV[2])) end
  return now
end
local now, t = ARGV[7], nil
if now then
  now = now + 0
else
  t = redis.call('TIME')
  now = t[1] * 1000 + t[2] / 1000
  now = now - now % 1
end
local v = redis.call('GET', key)
local ms, rem, uses, plain = now, 0, ARGV[4], false
if v then
  if #v > 17 then
    if not uses then return -1 end
    local m, r, per = string.match(v, '^(%d+):(%d+):(%d+)$')
    m, r = m + 0, r + 0
    -- Counted under other uses: rounded up to the next whole ms (never more uses).
    if per ~= uses then
      if r > 0 then m = m + 1 end
      r = 0
    end
    if m > now or (m == now and r > 0) then ms, rem = m, r end
  else
    local m = v + 0
    if m > now then ms, plain = m, true end
  end
end
local full = ms == now and rem == 0
local ok = '1 '
if not full then
  -- A full bucket takes any cost up to the burst; otherwise TAT <= now + tau - n*T.
  local top = now + ARGV[3]
  if ms > top or (ms == top and rem > (ARGV[6] or 0) + 0) then ok = '0 ' end
end
if ok == '1 ' and px ~= 'p' then
  local r = ARGV[5]
  if ARGV[7] then
    -- A host's clock: the key must not expire on the server's clock before the host's reaches its
    -- TAT, so the expiry is stretched by how far the host's clock lags the server's.
    local s = redis.call('TIME')
    local lag = s[1] * 1000 + s[2] / 1000 - now
    if lag >= 1 then px = string.format('%d', px + lag) end
    plain = false
  end
  if rem == 0 and (not r or r == '0') then
    if plain then
      -- The key's TAT moves on by n*T on the server (INCRBY formats an integer cheaply).
      redis.call('INCRBY', key, ARGV[2])
      redis.call('PEXPIRE', key, px)
    else
      redis.call('PSETEX', key, px, string.format('%d', ms + ARGV[2]))
    end
  else
    local nms, nrem, n = ms + ARGV[2], rem + (r or 0), uses + 0
    if nrem >= n then nms, nrem = nms + 1, nrem - n end
    if nrem > 0 then
      redis.call('PSETEX', key, px, string.format('%018d:%d:%s', nms, nrem, uses))
    else
      redis.call('PSETEX', key, px, string.format('%d', nms))
    end
  end
end
if full then return now end
if t then return ok .. v .. ' ' .. t[1] .. ' ' .. t[2] end
return ok .. v
