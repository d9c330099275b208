-- ratewindow: one key's fixed window, on the server's clock. The key holds the count; its expiry is
-- the window's end, set by the hit that opens the window and never moved by later hits.
--
-- KEYS[1] the window's key
-- ARGV[1] op: 'hit' (ARGV[2] decay_ms, ARGV[3] amount), 'get', 'reset' (count to 0, window kept),
--         'clear' (count and window)
--
-- Reply: {count, ms until the window ends} with {0, 0} for a key without a window.
if redis.replicate_commands then redis.replicate_commands() end
local key, op = KEYS[1], ARGV[1]
local function int(x) return string.format('%.0f', x) end

if op == 'clear' then
  redis.call('DEL', key)
  return {0, 0}
end
local ttl = redis.call('PTTL', key)
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
