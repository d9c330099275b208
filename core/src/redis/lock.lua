-- ratewindow: one lock, one key, on the server's clock. The key holds the owner's token; its expiry
-- (PX) is the lock's TTL, so a crashed holder's lock frees itself.
--
-- KEYS[1] the lock's key
-- ARGV[1] op: 'acquire' (ARGV[2] owner, ARGV[3] ttl_ms): 1 if taken, 0 if another holds it
--             'release' (ARGV[2] owner): 1 if the owner held it and it is deleted, else 0 (compare
--             and delete in one step: a release never deletes another owner's lock)
--             'force': 1 if a lock was deleted, else 0
--             'owner': the holder's token, or nil
local key, op = KEYS[1], ARGV[1]
if op == 'acquire' then
  if redis.call('SET', key, ARGV[2], 'NX', 'PX', ARGV[3]) then return 1 end
  return 0
end
if op == 'release' then
  if redis.call('GET', key) == ARGV[2] then return redis.call('DEL', key) end
  return 0
end
if op == 'force' then
  return redis.call('DEL', key)
end
return redis.call('GET', key)
