-- set_if_greater.lua: raise a counter to at least a value; never lower it.
-- KEYS[1]  counter key (a string holding an integer; its TTL is kept)
-- ARGV[1]  the value the counter must reach (non-negative decimal string)
-- Returns  {0, counter before ("" when absent), counter after}
local before = redis.call('GET', KEYS[1])
if before and not dec_gt(ARGV[1], before) then
  return {0, before, before}
end
redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
return {0, before or '', ARGV[1]}
