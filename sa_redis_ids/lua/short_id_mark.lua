-- short_id_mark.lua: mark positions of one node's share taken (reserve) or free (release).
-- A lost bitmap is never re-created here: it is reported, and the caller heals it first.
-- KEYS[1]  bitmap of this node's share
-- KEYS[2]  node claim key of the namespace
-- KEYS[3]  identity marker of the namespace, deleted when the claim is recorded (see claim_node
--          in common.lua)
-- KEYS[4]  running total of the positions ever taken on this node
-- KEYS[5]  generation token of the bitmap
-- ARGV[1]  this node's claim, "index/count|config"
-- ARGV[2]  "1" to mark taken, "0" to mark free
-- ARGV[3]  guard: the total must already be at least this ("0": none); the highest total this
--          process received from the node
-- ARGV[4]  "1": a missing total is a loss (the caller has a floor), "0": a new pool
-- ARGV[5]  the generation to set when marking taken on a node that has none (so that the
--          bitmap, once it holds reserved values, is never re-created unseen)
-- ARGV[6...] positions within the share (validated by the caller: 0 <= position < share size)
-- Returns  {0, changed}          how many positions changed state
--          {2, recorded claim}   node claim mismatch: nothing changed
--          {6, total or "", generation or "", "", "1"}  the bitmap was lost (as short_id.lua
--                                judges it: a missing or low total, or a missing bitmap while
--                                the total or the generation says the pool was used): it
--                                must be healed first; nothing changed
local recorded = claim_node(KEYS[2], ARGV[1], KEYS[3])
if recorded then
  return {2, recorded}
end
local total = redis.call('GET', KEYS[4])
local generation = redis.call('GET', KEYS[5])
if (not total and (ARGV[3] ~= '0' or ARGV[4] == '1'))
    or (total and dec_gt(ARGV[3], total))
    or (((total and total ~= '0') or generation) and redis.call('EXISTS', KEYS[1]) == 0) then
  return {6, total or '', generation or '', '', '1'}
end
local bit = ARGV[2]
if bit == '1' and not generation then
  redis.call('SET', KEYS[5], ARGV[5])
end
local changed = 0
for i = 6, #ARGV do
  if redis.call('SETBIT', KEYS[1], ARGV[i], bit) ~= tonumber(bit) then
    changed = changed + 1
  end
end
return {0, changed}
