-- short_id_floor.lua: whether a short-ID generator's floor (the values a table holds) is merged
-- into this node's bitmap in the node's current state, so that it is merged once per node state
-- and not once per process; and the claim of the one process that merges it.
-- KEYS[1]  bitmap of this node's share
-- KEYS[2]  generation token of the bitmap (changes whenever a process heals a loss)
-- KEYS[3]  floor marker: "identity|generation" of the state the floor was last merged into
-- KEYS[4]  merge claim: the token of the process merging the floor now (expires)
-- KEYS[5]  identity marker of the namespace (see node_identity_since in common.lua)
-- ARGV[1]  "check": is the floor merged in this state? If not, claim the merge
--          "done": record a merge (or carry the marker over a heal that only re-marked positions)
--          "release": give up this process's claim (its merge failed), so no one waits for it
-- ARGV[2]  this process's claim token
-- ARGV[3]  check: the claim's lifetime in ms; done: the node identity the check answered
-- ARGV[4]  done: the generation the merge (or heal) left on the node
-- ARGV[5]  done: "" after a merge; or the generation the check found merged, when a heal that
--          started a new generation re-marked this process's positions without merging again
-- Returns  {0, status, identity, generation}: check: "merged", "claimed" (this process merges now) or
--          "busy" (another process merges); done: "recorded", or "stale" when the node's
--          identity or generation changed meanwhile or the bitmap is missing (nothing recorded:
--          the next check merges);
--          release: "released"
-- A marker made before a restart from the server's own data (AOF or RDB) still counts: the bitmap
-- it describes was kept with it; one made before a replica's promotion does not.
if ARGV[1] == 'release' then
  if redis.call('GET', KEYS[4]) == ARGV[2] then
    redis.call('DEL', KEYS[4])
  end
  return {0, 'released', '', ''}
end
local generation = redis.call('GET', KEYS[2]) or ''
local marker = redis.call('GET', KEYS[3])
if ARGV[1] == 'check' then
  local merged_on, merged_in = string.match(marker or '', '^(.*)|(.*)$')
  local identity, moved = node_identity_since(KEYS[5], merged_on or '')
  if merged_on and merged_in == generation and not moved
      and redis.call('EXISTS', KEYS[1]) == 1 then
    if merged_on ~= identity then  -- a restart kept it: recorded under the server's new ID
      redis.call('SET', KEYS[3], identity .. '|' .. generation)
    end
    return {0, 'merged', identity, generation}
  end
  if redis.call('SET', KEYS[4], ARGV[2], 'NX', 'PX', ARGV[3]) then
    return {0, 'claimed', identity, generation}
  end
  return {0, 'busy', identity, generation}
end
local identity = node_identity_since(KEYS[5], ARGV[3])
local status = 'stale'
-- The marker is only valid beside the bitmap the merge went into (a heal always leaves one): a
-- bitmap missing now was lost since, with the merge, and is not re-created here.
if identity == ARGV[3] and generation == ARGV[4]
    and (ARGV[5] == '' or marker == identity .. '|' .. ARGV[5])
    and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('SET', KEYS[3], identity .. '|' .. generation)
  status = 'recorded'
end
if redis.call('GET', KEYS[4]) == ARGV[2] then
  redis.call('DEL', KEYS[4])
end
return {0, status, identity, generation}
