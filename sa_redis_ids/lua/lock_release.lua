-- lock_release.lua: delete a Redlock key only if it still holds the caller's token.
-- KEYS[1]  lock key
-- ARGV[1]  the holder's token
-- Returns  {0, 1}  it was ours and is deleted
--          {0, 0}  absent or another holder's: nothing changed
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return {0, 1}
end
return {0, 0}
