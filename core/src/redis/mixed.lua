-- ratewindow: a batch mixing algorithms (sliding-log, GCRA and counter entries, all or nothing) in two
-- steps: a read of every key's state, then a write of the state the engine decided, made only if no
-- key changed in between. The engine decides (ratewindow_core::call, a scratch MemoryStore seeded with
-- what the read found), so no algorithm is written here a second time: these steps only read, compare
-- and store.
--
-- KEYS    the batch's distinct keys: sliding logs first (sliding.lua's sorted sets: one member a use,
--         scored by the call's time; refusal markers scored -inf), then GCRA keys (gcra.lua's text),
--         then counter keys (counter.lua's text)
-- ARGV[1] 'r' read, 'w' write
-- ARGV[2] how many of KEYS are sliding logs
--
-- Read reply: {TIME's seconds, TIME's microseconds, then per key: a log's {its expiry (PEXPIRETIME:
--   server ms; -1 none, -2 no key), the SHA1 of its DUMP ('' no key), then the scores of its calls
--   (no marker)}, a text key's value or ''}.
-- Write: ARGV[3] the call's id; then per key what the read found (a log's SHA1, a text key's value or
--   ''); then per log: the highest score to drop ('x': the whole log goes; '-inf': refusal markers
--   only), the call's time, its cost (members id, id .. '\1' .. i for i = 2..cost: weighted.lua's,
--   so a release finds them), its expiry (PEXPIREAT, server ms); per text key: PSETEX ms and value
--   ('' leaves the key alone).
-- Write reply: 1 written; 0 a key changed since the read (nothing written: the engine reads again).
local logs = ARGV[2] + 0

-- A log's state as the SHA1 of its DUMP (its members and scores, serialised by the server: no Lua
-- table a member; a log that changed encoding reads as changed, and the call reads again).
local function digest(key)
  local d = redis.call('DUMP', key)
  if not d then return '' end
  return redis.sha1hex(d)
end

if ARGV[1] == 'r' then
  local t = redis.call('TIME')
  local out = {t[1], t[2]}
  for k = 1, #KEYS do
    if k <= logs then
      -- The expiry as an instant, exact (PTTL would be read against the command's cached clock).
      local at = redis.pcall('PEXPIRETIME', KEYS[k])
      if type(at) ~= 'number' then
        -- Before Redis 7: from PTTL and TIME.
        at = redis.call('PTTL', KEYS[k])
        if at >= 0 then at = at + t[1] * 1000 + (t[2] - t[2] % 1000) / 1000 end
      end
      local item = {at, digest(KEYS[k])}
      local scores = redis.call('ZRANGEBYSCORE', KEYS[k], '0', '+inf', 'WITHSCORES')
      for i = 2, #scores, 2 do item[#item + 1] = scores[i] end
      out[#out + 1] = item
    else
      out[#out + 1] = redis.call('GET', KEYS[k]) or ''
    end
  end
  return out
end

local id, a = ARGV[3], 4
for k = 1, #KEYS do
  local found
  if k <= logs then found = digest(KEYS[k]) else found = redis.call('GET', KEYS[k]) or '' end
  if found ~= ARGV[a] then return 0 end
  a = a + 1
end
for k = 1, #KEYS do
  local key = KEYS[k]
  if k <= logs then
    local drop, at, cost, expiry = ARGV[a], ARGV[a + 1], ARGV[a + 2] + 0, ARGV[a + 3]
    a = a + 4
    if drop == 'x' then
      redis.call('DEL', key)
    else
      -- The calls that left the key's longest window in this batch, and any refusal marker.
      redis.call('ZREMRANGEBYSCORE', key, '-inf', drop)
    end
    local m = 1
    while m <= cost do
      local args, last = {}, math.min(cost, m + 499)
      for i = m, last do
        args[#args + 1] = at
        if i == 1 then args[#args + 1] = id else args[#args + 1] = id .. '\1' .. i end
      end
      redis.call('ZADD', key, unpack(args))
      m = last + 1
    end
    redis.call('PEXPIREAT', key, expiry)
  else
    local px, value = ARGV[a], ARGV[a + 1]
    a = a + 2
    if value ~= '' then redis.call('PSETEX', key, px, value) end
  end
end
return 1
