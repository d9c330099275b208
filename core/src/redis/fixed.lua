-- ratewindow: one key's fixed window, on the server's clock. The key holds the count; its expiry is
-- the window's end, set by the hit that opens the window and never moved by later hits.
--
-- KEYS[1] the window's key
-- ARGV[1] op: 'hit' (ARGV[2] decay_ms, ARGV[3] amount), 'get', 'reset' (count to 0, window kept),
--         'clear' (count and window), 'attempt' (ARGV[2] decay_ms, ARGV[3] max: one hit only if
--         the window holds fewer than max)
--
-- Reply: {count, ms until the window ends} with {0, 0} for a key without a window;
--        'attempt': {counted (1|0), count, ms until the window ends}.
if redis.replicate_commands then redis.replicate_commands() end
local key, op = KEYS[1], ARGV[1]
local function int(x) return string.format('%.0f', x) end

if op == 'clear' then
  redis.call('DEL', key)
  return {0, 0}
end
local ttl = redis.call('PTTL', key)
if op == 'attempt' then
  local decay, max = tonumber(ARGV[2]), tonumber(ARGV[3])
  if ttl > 0 then
    local count = tonumber(redis.call('GET', key))
    if count < max then return {1, redis.call('INCRBY', key, 1), ttl} end
    return {0, count, ttl}
  end
  if max < 1 then return {0, 0, 0} end
  redis.call('SET', key, '1', 'PX', int(decay))
  return {1, 1, decay}
end
if op == 'hit' then
  local decay, amount = tonumber(ARGV[2]), tonumber(ARGV[3])
  if ttl > 0 then
    return {redis.call('INCRBY', key, int(amount)), ttl}
  end
  redis.call('SET', key, int(amount), 'PX', int(decay))
  return {amount, decay}
end
if ttl <= 0 then
  return {0, 0}
end
if op == 'reset' then
  redis.call('SET', key, '0', 'PX', int(ttl))
  return {0, ttl}
end
return {tonumber(redis.call('GET', key)), ttl}
