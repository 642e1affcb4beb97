-- sequence.lua: take the next n values of a node's counter.
-- KEYS[1]  counter key (string holding an integer)
-- KEYS[2]  node claim key of the namespace
-- ARGV[1]  n, how many values to take (>= 1)
-- ARGV[2]  this node's claim, "index/count|config"
-- ARGV[3]  highest counter value allowed (decimal string)
-- Returns  {0, counter after taking n (decimal string)}
--          {1, counter now (string)}  exhausted: nothing taken
--          {2, recorded claim}        node claim mismatch: nothing taken
local recorded = claim_node(KEYS[2], ARGV[2])
if recorded then
  return {2, recorded}
end
redis.call('INCRBY', KEYS[1], ARGV[1])
local after = redis.call('GET', KEYS[1])
if dec_gt(after, ARGV[3]) then
  redis.call('DECRBY', KEYS[1], ARGV[1])
  return {1, redis.call('GET', KEYS[1])}
end
return {0, after}
