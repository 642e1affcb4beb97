-- set_if_greater.lua: raise a counter to at least a value; never lower it.
-- KEYS[1]  counter key (a string holding an integer; its TTL is kept)
-- KEYS[2]  optional: node claim key of the counter's namespace (generators pass it; the Redlock
--          fence does not)
-- KEYS[3]  with KEYS[2]: identity marker of the namespace, deleted when the claim is recorded
--          (see claim_node in common.lua)
-- ARGV[1]  the value the counter must reach (non-negative decimal string)
-- ARGV[2]  with KEYS[2]: this node's claim, "index/count|config" (recorded when absent, so the
--          counter is never left without the claim that says how to read it)
-- ARGV[3]  with KEYS[2], optional: the value instead of ARGV[1] for a counter that is missing
--          while the claim is recorded: it was lost (evicted or deleted) after values were
--          issued, some maybe not yet where ARGV[1] was read from, so it is raised above that
--          by the headroom, as a heal would
-- Returns  {0, counter before ("" when absent), counter after}
--          {2, recorded claim}   node claim mismatch: nothing changed
local value = ARGV[1]
if KEYS[2] then
  local had = redis.call('EXISTS', KEYS[2]) == 1
  local recorded = claim_node(KEYS[2], ARGV[2], KEYS[3])
  if recorded then
    return {2, recorded}
  end
  if had and ARGV[3] and dec_gt(ARGV[3], value) and redis.call('EXISTS', KEYS[1]) == 0 then
    value = ARGV[3]
  end
end
local before = redis.call('GET', KEYS[1])
if before and not dec_gt(value, before) then
  return {0, before, before}
end
redis.call('SET', KEYS[1], value, 'KEEPTTL')
return {0, before or '', value}
