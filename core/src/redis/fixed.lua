-- ratewindow: one key's fixed window, on the server's clock. The key holds the count; its expiry is
-- the window's end, set by the hit that opens the window and never moved by later hits.
--
-- KEYS[1] the window's key
-- ARGV[1] op: 'hit' (ARGV[2] decay_ms, ARGV[3] amount), 'get', 'reset' (count to 0, window kept),
--         'clear' (count and window), 'attempt' (ARGV[2] decay_ms, ARGV[3] max: one hit only if
--         the window holds fewer than max)
-- The core sends every number as integer text, which goes to SET/INCRBY as it came, and integers
-- come back as text where the script has them as text (the core reads integer text as a number).
-- No clock is read, so no replicate_commands(): replicated verbatim or by effects alike.
--
-- Reply: {count, ms until the window ends} with {0, 0} for a key without a window;
--        'attempt': {counted (1|0), count, ms until the window ends}, every one an integer (a
--        client then hands the core numbers, its cheapest reply to cross: a count read by GET or the
--        decay as sent would cross as text).
local key, op = KEYS[1], ARGV[1]
if op == 'attempt' then
  local count = redis.call('GET', key)
  if count then
    local ttl = redis.call('PTTL', key)
    if ttl > 0 then
      count = count + 0
      if count < ARGV[3] + 0 then return {1, redis.call('INCR', key), ttl} end
      return {0, count, ttl}
    end
  end
  if ARGV[3] + 0 < 1 then return {0, 0, 0} end
  redis.call('SET', key, '1', 'PX', ARGV[2])
  return {1, 1, ARGV[2] + 0}
end
if op == 'clear' then
  redis.call('DEL', key)
  return {0, 0}
end
local ttl = redis.call('PTTL', key)
if op == 'hit' then
  if ttl > 0 then
    return {redis.call('INCRBY', key, ARGV[3]), ttl}
  end
  redis.call('SET', key, ARGV[3], 'PX', ARGV[2])
  return {ARGV[3], ARGV[2]}
end
if ttl <= 0 then
  return {0, 0}
end
if op == 'reset' then
  redis.call('SET', key, '0', 'PX', ttl)
  return {0, ttl}
end
return {redis.call('GET', key), ttl}
