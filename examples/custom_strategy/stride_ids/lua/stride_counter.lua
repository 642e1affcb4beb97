-- stride_counter.lua: take the next n counters of this node for a namespace.
-- The library prepends its common.lua (claim_node, dec_gt, node_identity, redis_now_ms).
-- KEYS[1]  the namespace's counter on this node (a string holding an integer)
-- KEYS[2]  the namespace's claim key on this node
-- ARGV[1]  n, how many counters to take (>= 1)
-- ARGV[2]  this node's claim, "index/count|config": recorded at the first call; a different
--          recorded claim means other options or another node list, which would repeat IDs
-- ARGV[3]  the highest counter allowed (decimal string)
-- Returns  {0, counter after taking n (decimal string)}
--          {1, counter now}      exhausted: nothing taken
--          {2, recorded claim}   claim mismatch: nothing taken
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
