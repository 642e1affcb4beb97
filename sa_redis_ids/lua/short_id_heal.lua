-- short_id_heal.lua: mark taken every position a process knows was issued (its own takes, the
-- database's values), after the node lost or rewound its bitmap; raise the running total.
-- KEYS[1]  bitmap of this node's share
-- KEYS[2]  node claim key of the namespace
-- KEYS[3]  running total of the positions ever taken on this node
-- KEYS[4]  scratch key (same hash tag; deleted before the script returns)
-- KEYS[5]  generation token of the bitmap
-- KEYS[6]  identity marker of the namespace, deleted when the claim is recorded (see claim_node
--          in common.lua)
-- ARGV[1]  this node's claim, "index/count|config"
-- ARGV[2]  the total must be at least this afterwards (decimal string)
-- ARGV[3]  a new generation token to set ("": keep the current one, or set the next argument
--          when there is none)
-- ARGV[4]  the generation to set when the node has none and ARGV[3] is ""
-- ARGV[5...] pairs: a byte offset into the bitmap, and the bytes of known positions from there
-- Returns  {0, positions newly marked taken, generation now}
--          {2, recorded claim}      node claim mismatch: nothing changed
local recorded = claim_node(KEYS[2], ARGV[1], KEYS[6])
if recorded then
  return {2, recorded}
end
local added = 0
if #ARGV > 4 then
  local before = redis.call('BITCOUNT', KEYS[1])
  redis.call('DEL', KEYS[4])
  for i = 5, #ARGV, 2 do
    redis.call('SETRANGE', KEYS[4], ARGV[i], ARGV[i + 1])
  end
  redis.call('BITOP', 'OR', KEYS[1], KEYS[1], KEYS[4])
  redis.call('DEL', KEYS[4])
  added = redis.call('BITCOUNT', KEYS[1]) - before
end
local total = redis.call('GET', KEYS[3])
if not total or dec_gt(ARGV[2], total) then
  redis.call('SET', KEYS[3], ARGV[2])
end
local generation = redis.call('GET', KEYS[5])
if ARGV[3] ~= '' or not generation then
  generation = ARGV[3] ~= '' and ARGV[3] or ARGV[4]
  redis.call('SET', KEYS[5], generation)
end
return {0, added, generation}
