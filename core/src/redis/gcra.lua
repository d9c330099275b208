-- ratewindow: GCRA (a token bucket kept as one time per key) on one key, on the server's clock.
--
-- KEYS[1] the bucket: its TAT (theoretical arrival time, when the bucket is full again) as 'ms', or
--         'ms:rem:per' for ms + rem/per (per: the uses the fraction is counted in)
-- ARGV[1] mode: 'c' consume, 'p' peek (writes nothing), 'r' reset (deletes the key)
-- ARGV[2] uses; ARGV[3], ARGV[4] the call's cost as time, n*T = q + r/uses (0 <= r < uses);
-- ARGV[5], ARGV[6] tau - n*T = d + e/uses: the call is allowed iff TAT <= now + tau - n*T;
-- ARGV[7] ceil(tau), the key's expiry (a bucket is full by then); ARGV[8] (optional) now in ms, for
--         TIME (a host's clock; the expiry is then stretched by how far it lags the server's)
--
-- Reply: {allowed (1|0), now} when the bucket was full (no key, or a TAT behind now),
--        {allowed, now, ms, rem} otherwise: the TAT the call found, in units of 1/uses. The engine
--        derives every verdict field from it (core/src/gcra.rs), and checks `allowed` against it.
-- Arguments arrive as text and are used as text where they can be: a full bucket decides with no
-- arithmetic, and one number is formatted (the new TAT).
local key, mode = KEYS[1], ARGV[1]
if mode == 'r' then return redis.call('DEL', key) end
local time, now, lag = redis.call('TIME'), ARGV[8], nil
if now then
  now = now + 0
  lag = math.max(0, time[1] * 1000 + math.floor(time[2] / 1000) - now)
else
  now = time[1] * 1000 + math.floor(time[2] / 1000)
end
local ms, rem, plain = now, 0, true
local v = redis.call('GET', key)
if v then
  if string.find(v, ':', 1, true) then
    plain = false
    local m, r, per = string.match(v, '^(%d+):(%d+):(%d+)$')
    m, r = m + 0, r + 0
    -- Counted under other uses: rounded up to the next whole ms (never more uses).
    if per ~= ARGV[2] then
      if r > 0 then m = m + 1 end
      r = 0
    end
    if m > now or (m == now and r > 0) then ms, rem = m, r end
  else
    local m = v + 0
    if m > now then ms = m end
  end
end
local ok = 1
if ms > now or rem > 0 then
  -- A full bucket takes any cost up to the burst; otherwise TAT <= now + tau - n*T.
  local top = now + ARGV[5]
  if ms > top or (ms == top and rem > ARGV[6] + 0) then ok = 0 end
end
if ok == 1 and mode == 'c' and plain and ms > now and rem == 0 and ARGV[4] == '0' and not lag then
  -- The key's whole-ms TAT moves on by n*T on the server: INCRBY formats integers cheaply, where a
  -- Lua number sent as an argument is formatted by snprintf (51k -> 47k instructions a call).
  redis.call('INCRBY', key, ARGV[3])
  redis.call('PEXPIRE', key, ARGV[7])
elseif ok == 1 and mode == 'c' then
  local nms, nrem = ms + ARGV[3], rem
  if ARGV[4] ~= '0' then
    nrem = rem + ARGV[4]
    local uses = ARGV[2] + 0
    if nrem >= uses then nms, nrem = nms + 1, nrem - uses end
  end
  -- Integer text: Lua's %.14g rounds 15 digits and more.
  if nms >= 1e14 then nms = string.format('%.0f', nms) end
  if nrem > 0 then nms = nms .. ':' .. nrem .. ':' .. ARGV[2] end
  local px = ARGV[7]
  if lag then
    px = px + lag
    if px >= 1e14 then px = string.format('%.0f', px) end
  end
  redis.call('SET', key, nms, 'PX', px)
end
if ms == now and rem == 0 then return {ok, now} end
return {ok, now, ms, rem}
