-- lock_extend.lua: reset a Redlock key's TTL only if it still holds the caller's token.
-- KEYS[1]  lock key
-- ARGV[1]  the holder's token
-- ARGV[2]  new TTL in milliseconds (>= 1), counted from now
-- Returns  {0, 1}  it was ours and now expires ARGV[2] ms from now
--          {0, 0}  absent (expired) or another holder's: nothing changed
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {0, 1}
end
return {0, 0}
