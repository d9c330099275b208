-- ratewindow: the sliding window log for every key of one call, in one step, on the server's clock.
--
-- KEYS    the call's distinct keys (sorted sets: score = call time in ms, member = the call's id)
-- ARGV[1] mode: 'c' consume, 'p' peek (writes nothing), 'r' release (removes this call's member)
-- ARGV[2] the call's id, unique per call, so calls in the same millisecond stay distinct
-- ARGV[3..] per entry, three at a time: key index (1-based into KEYS), uses, window_ms
--
-- Reply (consume, peek): {allowed (1|0), retry_after_ms, retry_timestamp (-1 if allowed),
--                         blocked (0-based entry index, -1 if allowed), server time in ms,
--                         tightest (0-based entry index), remaining, refill_after_ms, reset_after_ms}
--   The tightest entry has the fewest uses left after the call (ties: the longer window, then the
--   first); on a refusal it is the blocked one. refill: ms until its oldest call in the window leaves
--   (the wait, on a refusal); reset: ms until its newest call leaves; both 0 for an empty window.
-- Reply (release): {members removed}
if redis.replicate_commands then redis.replicate_commands() end
local mode, id = ARGV[1], ARGV[2]
-- Numbers go to the server as integer text: Lua's default formatting (%.14g) would round 15- and
-- 16-digit values; below 1e14 it is exact, and cheaper than string.format.
local function int(x)
  if x < 1e14 and x > -1e14 then return x end
  return string.format('%.0f', x)
end
-- PEXPIRE ... GT (Redis 7+): an expiry only ever grows, without reading it first.
local gt = (redis.REDIS_VERSION_NUM or 0) >= 0x070000

if mode == 'r' then
  local removed = 0
  for k = 1, #KEYS do removed = removed + redis.call('ZREM', KEYS[k], id) end
  return {removed}
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- One key, one entry, a small limit (the common call): one read answers a refusal. The newest
-- uses + 1 calls, newest first, decide everything: the uses-th newest is inside the window iff uses
-- or more calls are (a refusal, waiting until it leaves); more than uses calls, or any call read that
-- is outside, means there is something to trim.
if #ARGV == 5 and tonumber(ARGV[4]) <= 16 then
  local key, uses, w = KEYS[1], tonumber(ARGV[4]), tonumber(ARGV[5])
  local calls = redis.call('ZREVRANGE', key, 0, uses, 'WITHSCORES')
  local n = #calls / 2
  if n >= uses then
    local u = tonumber(calls[2 * uses]) + w
    if u > now then
      -- A consume trims what has left the window even when refused (as the memory store does):
      -- only a log longer than the limit (a key shared with a larger limit) can hold such calls.
      if mode == 'c' and n > uses then redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - w)) end
      local wait = u - now
      return {0, wait, u, 0, now, 0, 0, wait, math.max(wait, tonumber(calls[2]) + w - now)}
    end
  end
  local inside = 0
  while inside < n and tonumber(calls[2 * inside + 2]) + w > now do inside = inside + 1 end
  if mode ~= 'c' then
    if inside == 0 then return {1, 0, -1, -1, now, 0, uses, 0, 0} end
    return {1, 0, -1, -1, now, 0, uses - inside, tonumber(calls[2 * inside]) + w - now,
      tonumber(calls[2]) + w - now}
  end
  if n > inside then redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - w)) end
  -- A clock that stepped back records at the newest call, keeping the log in order.
  local at = now
  if inside > 0 and tonumber(calls[2]) > at then at = tonumber(calls[2]) end
  redis.call('ZADD', key, int(at), id)
  -- The key lives until its newest call leaves the window (one that held calls keeps a longer
  -- expiry another limit gave it; one that held none has no expiry yet).
  local ttl = w + at - now
  if inside == 0 then
    redis.call('PEXPIRE', key, int(ttl))
  elseif gt then
    redis.call('PEXPIRE', key, int(ttl), 'GT')
  elseif redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, int(ttl))
  end
  local oldest = at
  if inside > 0 then oldest = tonumber(calls[2 * inside]) end
  return {1, 0, -1, -1, now, 0, uses - inside - 1, oldest + w - now, ttl}
end
local entries = (#ARGV - 2) / 3
local longest = {}
for i = 0, entries - 1 do
  local k, w = tonumber(ARGV[3 + 3 * i]), tonumber(ARGV[5 + 3 * i])
  if (longest[k] or 0) < w then longest[k] = w end
end

-- A call drops the times that have left its (longest) window: now - t >= w. What is left is then
-- counted by ZCARD (O(1)) for the entries whose window is the longest of their key.
local size = {}
if mode == 'c' then
  for k = 1, #KEYS do
    redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', int(now - longest[k]))
    size[k] = redis.call('ZCARD', KEYS[k])
  end
end

-- Every entry is checked before anything is recorded; the longest wait blocks (ties keep the first).
local blocked, until_, blocked_reset = -1, -1, 0
local count = {}
for i = 0, entries - 1 do
  local k, uses, w = tonumber(ARGV[3 + 3 * i]), tonumber(ARGV[4 + 3 * i]), tonumber(ARGV[5 + 3 * i])
  local inside
  if size[k] and w == longest[k] then
    inside = size[k]
  else
    inside = redis.call('ZCOUNT', KEYS[k], int(now - w + 1), '+inf')
  end
  count[i] = inside
  if inside >= uses then
    -- The oldest of the newest `uses` calls decides the wait; the newest, when the window empties.
    -- One read for a small limit, two (each O(log n)) for a large one.
    local u, newest
    if uses <= 16 then
      local calls = redis.call('ZREVRANGE', KEYS[k], 0, int(uses - 1), 'WITHSCORES')
      u, newest = tonumber(calls[2 * uses]) + w, tonumber(calls[2])
    else
      u = tonumber(redis.call('ZREVRANGE', KEYS[k], int(uses - 1), int(uses - 1), 'WITHSCORES')[2]) + w
      newest = tonumber(redis.call('ZREVRANGE', KEYS[k], 0, 0, 'WITHSCORES')[2])
    end
    if u > until_ then blocked, until_, blocked_reset = i, u, newest + w - now end
  end
end
if blocked >= 0 then
  local wait = math.max(1, until_ - now)
  return {0, wait, until_, blocked, now, blocked, 0, wait, math.max(wait, blocked_reset)}
end

-- The tightest entry after the call: an allowed consume counts itself in every entry.
local recorded = (mode == 'c') and 1 or 0
local tight, left, tight_w = 0, nil, 0
for i = 0, entries - 1 do
  local uses, w = tonumber(ARGV[4 + 3 * i]), tonumber(ARGV[5 + 3 * i])
  local l = uses - count[i] - recorded
  if left == nil or l < left or (l == left and w > tight_w) then tight, left, tight_w = i, l, w end
end
local tight_k = tonumber(ARGV[3 + 3 * tight])

local recorded_at = {}
if mode == 'c' then
  for k = 1, #KEYS do
    local at = now
    if size[k] > 0 then
      -- A clock that stepped back records at the newest call, keeping the log in order.
      local newest = redis.call('ZRANGE', KEYS[k], -1, -1, 'WITHSCORES')
      if tonumber(newest[2]) > at then at = tonumber(newest[2]) end
    end
    redis.call('ZADD', KEYS[k], int(at), id)
    recorded_at[k] = at
    -- The key lives until its newest call leaves the longest window it was counted under (a new key
    -- has no expiry yet; an existing one keeps a longer one).
    local ttl = longest[k] + at - now
    if size[k] == 0 then
      redis.call('PEXPIRE', KEYS[k], int(ttl))
    elseif gt then
      redis.call('PEXPIRE', KEYS[k], int(ttl), 'GT')
    elseif redis.call('PTTL', KEYS[k]) < ttl then
      redis.call('PEXPIRE', KEYS[k], int(ttl))
    end
  end
end
local refill, reset = 0, 0
if count[tight] + recorded > 0 then
  local oldest = redis.call('ZRANGEBYSCORE', KEYS[tight_k], int(now - tight_w + 1), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local newest = recorded_at[tight_k]
  if not newest then newest = tonumber(redis.call('ZRANGE', KEYS[tight_k], -1, -1, 'WITHSCORES')[2]) end
  refill, reset = tonumber(oldest[2]) + tight_w - now, newest + tight_w - now
end
return {1, 0, -1, -1, now, tight, left, refill, reset}
