-- dated_fast.lua: the common call of dated_take.lua with few arguments (each argument of a script
-- call costs the server about as much as a short command): take n values of one given day when
-- everything is as the caller last saw it. Anything else answers nil with nothing taken, and the
-- caller makes the full dated_take call.
-- Takes only when the marker holds "identity claim" (one read checks the node claim and the node
-- identity, see claim_and_identity in common.lua), the day is not purged, its counter exists
-- (storage "key": its key; storage "hash": its field, checked after taking), the Redis time lies
-- in the day, and the counter reaches the caller's minimum without passing the limit. A counter
-- that does not is put back as it was, except a hash field that held 0: after the increment it
-- cannot be told from a missing one and is removed, so the full call treats it as missing (with
-- a floor, it reads the floor first).
-- KEYS[1]  identity marker of the namespace
-- KEYS[2]  purge marker: label of the last purged day (absent: nothing purged)
-- KEYS[3]  storage "hash": the namespace's hash (one field per day label); storage "key": the
--          day's counter key
-- ARGV[1]  n, how many values to take (>= 1)
-- ARGV[2]  "identity claim" as dated_take's ARGV[2], with an identity (never "")
-- ARGV[3]  the day's label
-- ARGV[4]  storage: "hash" or "key"
-- ARGV[5]  the day's first second (Unix seconds, 10 digits), ARGV[6] the next day's first second:
--          compared as text with the Redis time's seconds (same number of digits), so no number
--          is parsed
-- ARGV[7]  the least counter after taking n: n plus the guard of the day (storage "hash": at
--          least n + 1, since a field that was missing or 0 ends at n)
-- ARGV[8]  the highest counter allowed on this node (below 2^53)
-- Returns  the counter after taking n (one integer), or nil: nothing taken
local hash = ARGV[4] == 'hash'
local found
if hash then
  found = redis.call('MGET', KEYS[1], KEYS[2])
else
  found = redis.call('MGET', KEYS[1], KEYS[2], KEYS[3])
end
if found[1] ~= ARGV[2] or not (hash or found[3]) then
  return nil
end
local label, purged = ARGV[3], found[2]
if purged and label <= purged then
  return nil
end
local now = redis_now_s()
if #now ~= 10 or now < ARGV[5] or now >= ARGV[6] then
  return nil
end
local n = ARGV[1]
local after
if hash then
  after = redis.call('HINCRBY', KEYS[3], label, n)
else
  after = redis.call('INCRBY', KEYS[3], n)
end
if after >= ARGV[7] + 0 and after <= ARGV[8] + 0 then
  return after
end
if not hash then
  redis.call('DECRBY', KEYS[3], n)
elseif after == n + 0 then
  -- the field was missing, or held 0: removed, so dated_take reports it as missing
  redis.call('HDEL', KEYS[3], label)
else
  redis.call('HINCRBY', KEYS[3], label, -n)
end
return nil
