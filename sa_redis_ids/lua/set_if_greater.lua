-- set_if_greater.lua: raise a counter to at least a value; never lower it.
-- KEYS[1]  counter key: a string key, or a hash when ARGV[2] names a field
-- ARGV[1]  the value the counter must reach (non-negative decimal string)
-- ARGV[2]  hash field, or "" for a string key
-- Returns  {0, counter before ("" when absent), counter after}
local field = ARGV[2]
local before
if field == '' then
  before = redis.call('GET', KEYS[1])
else
  before = redis.call('HGET', KEYS[1], field)
end
if before and not dec_gt(ARGV[1], before) then
  return {0, before, before}
end
if field == '' then
  redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
else
  redis.call('HSET', KEYS[1], field, ARGV[1])
end
return {0, before or '', ARGV[1]}
