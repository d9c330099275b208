-- ratewindow: a fixed window's attempt costing more than one hit (cargo feature `weights`; an attempt
-- costing 1 runs fixed.lua, unchanged). The key holds the count, its expiry the window's end, as
-- fixed.lua keeps them.
--
-- KEYS[1] the window's key
-- ARGV[1] decay_ms (a window this attempt opens), ARGV[2] max, ARGV[3] cost (>= 1)
--
-- Reply: {counted (1|0), count, ms until the window ends}; {0, 0, 0}: no window, and none opened.
-- Counted when count + cost <= max (a new window opens with `cost` hits when cost <= max).
local key, max, cost = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local count = redis.call('GET', key)
if count then
  local ttl = redis.call('PTTL', key)
  if ttl > 0 then
    if count + cost <= max then return {1, redis.call('INCRBY', key, ARGV[3]), ttl} end
    return {0, tonumber(count), ttl}
  end
end
if cost > max then return {0, 0, 0} end
redis.call('SET', key, ARGV[3], 'PX', ARGV[1])
return {1, cost, tonumber(ARGV[1])}
