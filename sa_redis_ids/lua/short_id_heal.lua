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
-- Returns  {0, positions newly marked taken, generation now, "1" if the bitmap existed or "0",
--          the node identity (replication ID, "" where INFO gives none): the server healed}
--          (the bitmap exists afterwards, so the total and the generation never stand beside
--          a missing bitmap but after a loss)
--          {2, recorded claim}      node claim mismatch: nothing changed
--          {6, total or "", generation or "", "", "1"}  ARGV[3] is "" (a heal that only marks
--                                   this process's positions) but the bitmap is missing while
--                                   the total or the generation says the pool was used: it was
--                                   lost, and the caller heals again as for a loss (a new
--                                   generation); nothing changed
local recorded = claim_node(KEYS[2], ARGV[1], KEYS[6])
if recorded then
  return {2, recorded}
end
local total = redis.call('GET', KEYS[3])
local generation = redis.call('GET', KEYS[5])
local existed = redis.call('EXISTS', KEYS[1]) == 1
if not existed and ARGV[3] == '' and ((total and total ~= '0') or generation) then
  return {6, total or '', generation or '', '', '1'}
end
local added = 0
if #ARGV > 4 then
  local before = existed and redis.call('BITCOUNT', KEYS[1]) or 0
  redis.call('DEL', KEYS[4])
  for i = 5, #ARGV, 2 do
    redis.call('SETRANGE', KEYS[4], ARGV[i], ARGV[i + 1])
  end
  redis.call('BITOP', 'OR', KEYS[1], KEYS[1], KEYS[4])
  redis.call('DEL', KEYS[4])
  added = redis.call('BITCOUNT', KEYS[1]) - before
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SETBIT', KEYS[1], '0', '0')  -- nothing to mark: an empty bitmap all the same
end
if not total or dec_gt(ARGV[2], total) then
  redis.call('SET', KEYS[3], ARGV[2])
end
if ARGV[3] ~= '' or not generation then
  generation = ARGV[3] ~= '' and ARGV[3] or ARGV[4]
  redis.call('SET', KEYS[5], generation)
end
return {0, added, generation, existed and '1' or '0', node_identity()}
