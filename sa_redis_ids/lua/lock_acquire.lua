-- lock_acquire.lua: take a Redlock on this node and draw a fencing token for the lock name.
-- KEYS[1]  lock key (string holding the holder's token, with a PX expiry)
-- KEYS[2]  fence counter of the lock name (same hash tag as KEYS[1])
-- ARGV[1]  the acquirer's random token
-- ARGV[2]  lock TTL in milliseconds (>= 1)
-- ARGV[3]  fence counter TTL in milliseconds, renewed on every acquisition; "0": never expires
-- Returns  {0, fence counter after INCR (decimal string)}  locked: SET NX PX succeeded, or the key
--                                                           already held this token (a retry after
--                                                           a lost reply): its TTL is renewed
--          {20, ms left on the other holder's lock}        held by another token: nothing changed
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return {20, redis.call('PTTL', KEYS[1])}
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
redis.call('INCR', KEYS[2])
if ARGV[3] ~= '0' then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
-- Read it back as text: a Lua number would be exact only to 2^53.
return {0, redis.call('GET', KEYS[2])}
