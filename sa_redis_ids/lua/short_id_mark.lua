-- short_id_mark.lua: mark positions of one node's share taken (reserve) or free (release).
-- KEYS[1]  bitmap of this node's share
-- KEYS[2]  node claim key of the namespace
-- KEYS[3]  identity marker of the namespace, deleted when the claim is recorded (see claim_node
--          in common.lua)
-- ARGV[1]  this node's claim, "index/count|config"
-- ARGV[2]  "1" to mark taken, "0" to mark free
-- ARGV[3...] positions within the share (validated by the caller: 0 <= position < share size)
-- Returns  {0, changed}          how many positions changed state
--          {2, recorded claim}   node claim mismatch: nothing changed
local recorded = claim_node(KEYS[2], ARGV[1], KEYS[3])
if recorded then
  return {2, recorded}
end
local bit = tonumber(ARGV[2])
local changed = 0
for i = 3, #ARGV do
  if redis.call('SETBIT', KEYS[1], ARGV[i], bit) ~= bit then
    changed = changed + 1
  end
end
return {0, changed}
