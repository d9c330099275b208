-- ratewindow: the sliding window log for every key of one call, in one step, on the server's clock.
--
-- KEYS    the call's distinct keys (sorted sets: score = call time in ms, member = the call's id; and
--         at most one refusal marker, scored -inf, which no score range over call times includes:
--         count a log's calls with ZCOUNT key 0 +inf, not ZCARD)
-- ARGV    one of three forms (the call's id: unique per call, so calls in the same millisecond stay
--         distinct; never empty):
--   'r', id                     release: removes this call's member from every key
--   'uses:window_ms'[, id]      one entry on KEYS[1]: a consume recording id, or without id a peek
--                               (writes nothing); the fewest arguments for the common call
--   mode, id, entries...        any call: mode 'c' consume or 'p' peek (id '-'); then per entry,
--                               three at a time: key index (1-based into KEYS), uses, window_ms
--
-- Reply (consume, peek): {allowed (1|0), retry_after_ms, retry_timestamp (-1 if allowed),
--                         blocked (0-based entry index, -1 if allowed), server time in ms,
--                         tightest (0-based entry index), remaining, refill_after_ms, reset_after_ms}
--   The tightest entry has the fewest uses left after the call (ties: the longer window, then the
--   first); on a refusal it is the blocked one. refill: ms until its oldest call in the window leaves
--   (the wait, on a refusal); reset: ms until its newest call leaves; both 0 for an empty window.
--   One entry, in fewer numbers (the rest implied): a peek allowed {1, remaining, refill_after_ms,
--   reset_after_ms, server time}; a consume allowed the text 'count oldest newest now' (the calls in
--   the window after it, the times of its oldest and newest call and the server time, in ms: the
--   texts the server gave or the script has, no number formatted and no table built; the core
--   computes remaining = uses - count, refill = oldest + window - now, reset = newest + window -
--   now); refused {0, retry_after_ms, server time, reset_after_ms} or, by a marker (below), the text
--   'marker seconds microseconds' (TIME's).
-- Reply (release): {members removed}
local mode, id = ARGV[1], ARGV[2]
-- Cheaper: text to a number by arithmetic (tonumber parses twice); constant arguments as text; no
-- closure (~1k instructions a run) before the general path. A: the general form's arguments.
local time, now, MK, A = nil, nil, '%016.0f%016.0f%s', ARGV

-- One key, one entry (the common call), any limit. The log's lowest member, read first, answers most
-- of it: either a refusal marker or the oldest call.
--
-- The refusal marker: the consume that fills a log (records its `uses`-th call in the window; in a
-- batch, on a key one entry names), or a refusal of a log of exactly `uses` calls, adds a member
-- scored -inf (first; no range over call times has it) named MK % {until, end, 'uses:window'} (end:
-- when the newest call leaves; the limit as the one-entry form sends it). Until the log changes, a
-- call under that limit before `until` is refused with that wait (calls only leave the window) from
-- this one read, writing nothing (and before replicate_commands, which only a write needs).
-- Whatever changes the log removes it first: every consume trims from -inf, a release removes it.
if #ARGV <= 2 and mode ~= 'r' then
  local key, lim = KEYS[1], mode
  mode = id and 'c' or 'p'
  local first = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
  time = redis.call('TIME')
  local oldest
  if first[1] then
    if first[2] == '-inf' then
      -- This limit's, until > now (fractional: as floor(now) for an integer); no table built. Most
      -- refusals decide by comparing texts (no number parsed): the marker's 32 digits (until, end)
      -- against TIME's seconds padded to 13 digits, then 999 ms and 16 nines (no end is that large):
      -- greater when until is in a later second. A marker within the current second (or a clock of
      -- other than 10-digit seconds) compares numbers. Digits only up to where they differ, so any
      -- collation orders them alike.
      local m, s = first[1], time[1]
      if string.sub(m, 33) == lim and ((#s == 10 and m > '000' .. s .. '9999999999999999999')
          or string.sub(m, 1, 16) + 0 > s * 1000 + time[2] / 1000) then
        return m .. ' ' .. s .. ' ' .. time[2]
      end
    else
      oldest = first[2] + 0
    end
  end
  -- Below here a call may write (before Redis 5, after replicate_commands only; TIME was read).
  if not redis.REDIS_VERSION_NUM and redis.replicate_commands then redis.replicate_commands() end
  -- The server time in ms as text (for ZADD and the reply) and as a number from it: one coercion.
  local now_s = time[1] .. string.sub('00000' .. time[2], -6, -4)
  now = now_s + 0
  local colon = string.find(lim, ':', 1, true)
  local uses_s, w_s = string.sub(lim, 1, colon - 1), string.sub(lim, colon + 1)
  local uses, w = uses_s + 0, w_s + 0
  if first[1] then
    if not oldest or oldest + w <= now then
      -- A stale marker, or calls that have left the window: a consume trims (the marker too), a peek
      -- takes the general path below, which counts by score ranges.
      if mode == 'c' then
        local cut = now - w
        if cut <= -1e14 then cut = string.format('%.0f', cut) end
        redis.call('ZREMRANGEBYSCORE', key, '-inf', cut)
        first = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
        oldest = first[2] and first[2] + 0
      else
        oldest = false
      end
    end
  end
  if oldest == nil then
    -- An empty log.
    if mode ~= 'c' then return {1, uses, 0, 0, now} end
    if uses == 1 and now + w < 9007199254740992 then
      -- This call fills the log: its marker in the same ZADD.
      redis.call('ZADD', key, now_s, id, '-inf', string.format(MK, now + w, now + w, lim))
    else
      redis.call('ZADD', key, now_s, id)
    end
    redis.call('PEXPIRE', key, w_s)
    return '1 ' .. now_s .. ' ' .. now_s .. ' ' .. now_s
  end
  if oldest then
    -- Every call in the log is inside the window (times are sorted; later ones, after a clock that
    -- stepped back, are inside too).
    local n = redis.call('ZCARD', key)
    if n >= uses then
      -- The uses-th newest call decides the wait; the newest, when the window empties.
      local u = oldest
      if n > uses then u = tonumber(redis.call('ZREVRANGE', key, uses - 1, uses - 1, 'WITHSCORES')[2]) end
      u = u + w
      local newest = oldest
      if n > 1 then newest = tonumber(redis.call('ZREVRANGE', key, '0', '0', 'WITHSCORES')[2]) end
      if mode == 'c' and n == uses and newest + w < 9007199254740992 then
        redis.call('ZADD', key, '-inf', string.format(MK, u, newest + w, lim))
      end
      local wait = u - now
      return {0, wait, now, math.max(wait, newest + w - now)}
    end
    if mode ~= 'c' then
      local newest = oldest
      if n > 1 then newest = tonumber(redis.call('ZREVRANGE', key, '0', '0', 'WITHSCORES')[2]) end
      return {1, uses - n, oldest + w - now, newest + w - now, now}
    end
    -- Allowed. A clock that stepped back records at the newest call, keeping the log in order: only a
    -- call later than now needs reading.
    local at = now
    if n == 1 then
      if oldest > now then at = oldest end
    elseif redis.call('ZCOUNT', key, '(' .. now_s, '+inf') > 0 then
      at = tonumber(redis.call('ZREVRANGE', key, '0', '0', 'WITHSCORES')[2])
    end
    local at_s, ttl, ttl_s = now_s, w, w_s
    if at ~= now then at_s, ttl = string.format('%.0f', at), w + at - now; ttl_s = string.format('%.0f', ttl) end
    if n + 1 == uses and at + w < 9007199254740992 then
      -- Fills the log (all inside the window: the oldest decides `until`): its marker in the ZADD.
      redis.call('ZADD', key, at_s, id, '-inf', string.format(MK, oldest + w, at + w, lim))
    else
      redis.call('ZADD', key, at_s, id)
    end
    -- The key lives until its newest call leaves the window (it may keep a longer expiry another
    -- limit gave it).
    if (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then
      redis.call('PEXPIRE', key, ttl_s, 'GT')
    elseif redis.call('PTTL', key) < ttl then
      redis.call('PEXPIRE', key, ttl_s)
    end
    -- The oldest call's score as the server gave it (integer ms: %.17g of a number below 2^53).
    return (n + 1) .. ' ' .. first[2] .. ' ' .. at_s .. ' ' .. now_s
  end
  -- A peek of a log holding a marker or calls outside the window: the general path, as one entry.
  A = {'p', '-', '1', uses_s, w_s}
end
if not redis.REDIS_VERSION_NUM and redis.replicate_commands then redis.replicate_commands() end

if mode == 'r' then
  local removed = 0
  for k = 1, #KEYS do
    removed = removed + redis.call('ZREM', KEYS[k], id)
    -- A use came back: a refusal marker (below) no longer holds.
    redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', '-inf')
  end
  return {removed}
end

if not time then
  time = redis.call('TIME')
  now = time[1] * 1000 + math.floor(time[2] / 1000)
end
-- Integer text for the server: Lua's %.14g is exact below 1e14, and cheaper than string.format.
local function int(x)
  if x < 1e14 and x > -1e14 then return x end
  return string.format('%.0f', x)
end
local function marker(u, w, until_, end_) return string.format(MK, until_, end_, u .. ':' .. w) end
local entries = (#A - 2) / 3
local longest, only = {}, {}
for i = 0, entries - 1 do
  local k, w = tonumber(A[3 + 3 * i]), tonumber(A[5 + 3 * i])
  if (longest[k] or 0) < w then longest[k] = w end
  -- The entry that alone names its key (false when several do).
  if only[k] == nil then only[k] = i else only[k] = false end
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
  local k, uses, w = tonumber(A[3 + 3 * i]), tonumber(A[4 + 3 * i]), tonumber(A[5 + 3 * i])
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
      local calls = redis.call('ZREVRANGE', KEYS[k], '0', int(uses - 1), 'WITHSCORES')
      u, newest = tonumber(calls[2 * uses]) + w, tonumber(calls[2])
    else
      u = tonumber(redis.call('ZREVRANGE', KEYS[k], int(uses - 1), int(uses - 1), 'WITHSCORES')[2]) + w
      newest = tonumber(redis.call('ZREVRANGE', KEYS[k], '0', '0', 'WITHSCORES')[2])
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
  local uses, w = tonumber(A[4 + 3 * i]), tonumber(A[5 + 3 * i])
  local l = uses - count[i] - recorded
  if left == nil or l < left or (l == left and w > tight_w) then tight, left, tight_w = i, l, w end
end
local tight_k = tonumber(A[3 + 3 * tight])

local recorded_at = {}
if mode == 'c' then
  for k = 1, #KEYS do
    local at = now
    if size[k] > 0 and redis.call('ZCOUNT', KEYS[k], '(' .. int(now), '+inf') > 0 then
      -- A clock that stepped back records at the newest call, keeping the log in order (counting the
      -- calls later than now is cheaper than reading the newest).
      at = tonumber(redis.call('ZRANGE', KEYS[k], '-1', '-1', 'WITHSCORES')[2])
    end
    -- A key one entry names, filled: its marker (the trim left calls inside the window only).
    local i = only[k]
    local uses, w = i and tonumber(A[4 + 3 * i]), i and tonumber(A[5 + 3 * i])
    if i and count[i] + 1 == uses and at + w < 9007199254740992 then
      local oldest = at
      if size[k] > 0 then oldest = redis.call('ZRANGE', KEYS[k], '0', '0', 'WITHSCORES')[2] + 0 end
      redis.call('ZADD', KEYS[k], int(at), id, '-inf', marker(A[4 + 3 * i], A[5 + 3 * i], oldest + w, at + w))
    else
      redis.call('ZADD', KEYS[k], int(at), id)
    end
    recorded_at[k] = at
    -- The key lives until its newest call leaves the longest window it was counted under (a new key
    -- has no expiry yet; an existing one keeps a longer one).
    local ttl = longest[k] + at - now
    if size[k] == 0 then
      redis.call('PEXPIRE', KEYS[k], int(ttl))
    elseif (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then
      -- PEXPIRE ... GT (Redis 7+): an expiry only ever grows, without reading it first.
      redis.call('PEXPIRE', KEYS[k], int(ttl), 'GT')
    elseif redis.call('PTTL', KEYS[k]) < ttl then
      redis.call('PEXPIRE', KEYS[k], int(ttl))
    end
  end
end
local refill, reset = 0, 0
if count[tight] + recorded > 0 then
  local oldest = redis.call('ZRANGEBYSCORE', KEYS[tight_k], int(now - tight_w + 1), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
  local newest = recorded_at[tight_k]
  if not newest then newest = tonumber(redis.call('ZRANGE', KEYS[tight_k], '-1', '-1', 'WITHSCORES')[2]) end
  refill, reset = tonumber(oldest[2]) + tight_w - now, newest + tight_w - now
end
return {1, 0, -1, -1, now, tight, left, refill, reset}
