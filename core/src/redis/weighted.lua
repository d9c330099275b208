-- ratewindow: the sliding window log for a call that costs more than one use (cargo feature `weights`;
-- a call costing 1 everywhere runs sliding.lua), every key of the call in one step.
--
-- KEYS    the call's distinct keys: the same sorted sets as sliding.lua's, one member per use (score =
--         the call's time in ms). A call costing n is n members at one score: the call's id, then
--         id .. '\1' .. i for i = 2..n, so both scripts count a log alike and a release finds exactly
--         the call's members. Refusal markers (sliding.lua's, scored -inf) are never counted here and
--         are dropped by whatever changes the log.
-- ARGV[1] mode: 'c' consume, 'p' peek (writes nothing), 'r' release (removes this call's members)
-- ARGV[2] the call's id
-- ARGV[3] consume, peek: now in ms, or '' for the server's TIME (a host's clock; the expiry is then
--         stretched by how far it lags the server's). Release: the largest cost recorded per key.
-- ARGV[4..] per entry, four at a time: key index (1-based into KEYS), uses, window_ms, cost
--
-- Entries naming one key are one call costing the largest cost they give (each checked with it,
-- within its own uses), recorded once: the memory store's rule (core/src/memory.rs).
--
-- Reply (consume, peek): {allowed (1|0), retry_after_ms, retry_timestamp (-1 if allowed),
--   blocked (0-based entry, -1 if allowed), now, tightest (0-based entry), remaining, refill_after_ms,
--   reset_after_ms}. A refusal's quota is the blocked entry's: the uses that do remain (a heavy call
--   may be refused while a lighter one would pass) and the ms until one more comes back.
-- Reply (release): {keys the call was removed from}
if not redis.REDIS_VERSION_NUM and redis.replicate_commands then redis.replicate_commands() end
local mode, id = ARGV[1], ARGV[2]

-- Members i..j of the call (i >= 1), by `command`, in chunks (unpack's stack is bounded).
local function members(command, key, score, i, j)
  local done = 0
  while i <= j do
    local args, last = {}, math.min(j, i + 499)
    for m = i, last do
      local name = id
      if m > 1 then name = id .. '\1' .. m end
      if score then args[#args + 1] = score end
      args[#args + 1] = name
    end
    done = done + redis.call(command, key, unpack(args))
    i = last + 1
  end
  return done
end

if mode == 'r' then
  local n, removed = tonumber(ARGV[3]), 0
  for k = 1, #KEYS do
    if members('ZREM', KEYS[k], nil, 1, n) > 0 then removed = removed + 1 end
    -- Uses came back: a refusal marker no longer holds.
    redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', '-inf')
  end
  return {removed}
end

local function int(x)
  if x < 1e14 and x > -1e14 then return x end
  return string.format('%.0f', x)
end
local time = redis.call('TIME')
local server = time[1] * 1000 + math.floor(time[2] / 1000)
local now, lag = server, 0
if ARGV[3] ~= '' then
  now = tonumber(ARGV[3])
  lag = math.max(0, server - now)
end

local entries = (#ARGV - 3) / 4
local longest, cost = {}, {}
for i = 0, entries - 1 do
  local k, w, c = tonumber(ARGV[4 + 4 * i]), tonumber(ARGV[6 + 4 * i]), tonumber(ARGV[7 + 4 * i])
  if (longest[k] or 0) < w then longest[k] = w end
  if (cost[k] or 0) < c then cost[k] = c end
end

-- The newest call's time in a log (nil for none; a marker is not a call).
local function newest(key)
  local top = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  if top[2] and top[2] ~= '-inf' then return tonumber(top[2]) end
  return nil
end

-- A consume drops what has left the key's longest window (and any marker, scored -inf).
if mode == 'c' then
  for k = 1, #KEYS do
    redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', int(now - longest[k]))
  end
end

-- Every entry is checked before anything is recorded; the longest wait blocks (ties keep the first).
-- Refused when more than uses - cost uses are inside the window; the wait runs until the oldest of
-- the newest uses - cost + 1 leaves.
local blocked, until_ = -1, -1
local count = {}
for i = 0, entries - 1 do
  local k, uses, w = tonumber(ARGV[4 + 4 * i]), tonumber(ARGV[5 + 4 * i]), tonumber(ARGV[6 + 4 * i])
  local c = math.min(cost[k], uses)
  local inside = redis.call('ZCOUNT', KEYS[k], int(now - w + 1), '+inf')
  count[i] = inside
  if inside + c > uses then
    local r = int(uses - c)
    local u = tonumber(redis.call('ZREVRANGE', KEYS[k], r, r, 'WITHSCORES')[2]) + w
    if u > until_ then blocked, until_ = i, u end
  end
end

if blocked >= 0 then
  local k, uses, w = tonumber(ARGV[4 + 4 * blocked]), tonumber(ARGV[5 + 4 * blocked]), tonumber(ARGV[6 + 4 * blocked])
  local wait = until_ - now
  local remaining, refill = 0, wait
  if cost[k] > 1 then
    local inside = count[blocked]
    remaining = math.max(0, uses - inside)
    local held = math.min(inside, uses)
    if held > 0 then
      local r = int(held - 1)
      refill = math.max(0, tonumber(redis.call('ZREVRANGE', KEYS[k], r, r, 'WITHSCORES')[2]) + w - now)
    end
  end
  local top = newest(KEYS[k])
  local reset = wait
  if top then reset = math.max(wait, top + w - now) end
  return {0, wait, until_, blocked, now, blocked, remaining, refill, reset}
end

-- Allowed. The tightest entry after the call: fewest uses left, ties the longer window, then the first.
local recorded = {}
if mode == 'c' then
  for k = 1, #KEYS do
    -- A clock that stepped back records at the newest call, keeping the log in order.
    local at = now
    local top = newest(KEYS[k])
    if top and top > at then at = top end
    members('ZADD', KEYS[k], int(at), 1, cost[k])
    recorded[k] = at
    -- The key lives until its newest call leaves the longest window it was counted under (an
    -- existing expiry that is longer stays).
    local ttl = int(longest[k] + at - now + lag)
    if not top then
      redis.call('PEXPIRE', KEYS[k], ttl)
    elseif (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then
      redis.call('PEXPIRE', KEYS[k], ttl, 'GT')
    elseif redis.call('PTTL', KEYS[k]) < tonumber(ttl) then
      redis.call('PEXPIRE', KEYS[k], ttl)
    end
  end
end
local tight, left, tight_w, tight_inside = 0, nil, 0, 0
for i = 0, entries - 1 do
  local k, uses, w = tonumber(ARGV[4 + 4 * i]), tonumber(ARGV[5 + 4 * i]), tonumber(ARGV[6 + 4 * i])
  local inside = count[i]
  if recorded[k] then inside = inside + cost[k] end
  local l = math.max(0, uses - inside)
  if left == nil or l < left or (l == left and w > tight_w) then tight, left, tight_w, tight_inside = i, l, w, inside end
end
local refill, reset = 0, 0
if tight_inside > 0 then
  local k = tonumber(ARGV[4 + 4 * tight])
  local oldest = redis.call('ZRANGEBYSCORE', KEYS[k], int(now - tight_w + 1), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
  local top = recorded[k] or newest(KEYS[k])
  refill, reset = math.max(0, tonumber(oldest[2]) + tight_w - now), math.max(0, top + tight_w - now)
end
return {1, 0, -1, -1, now, tight, left, refill, reset}
