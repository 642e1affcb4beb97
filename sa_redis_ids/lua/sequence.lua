-- sequence.lua: take the next n values of a node's counter, first healing a counter that is
-- missing or below what was already issued.
-- KEYS[1]  counter key (string holding an integer)
-- KEYS[2]  node claim key of the namespace
-- KEYS[3]  identity marker of the namespace (see node_identity_since in common.lua)
-- ARGV[1]  n, how many values to take (>= 1)
-- ARGV[2]  "identity claim": the node identity (replication ID) this process saw last ("": none
--          yet), a space, and this node's claim, "index/count|config"; a node that moved since
--          (a promoted replica, not a restart from its own data) has its counter raised to at
--          least the heal value
-- ARGV[3]  highest counter value allowed (decimal string)
-- ARGV[4]  guard: the counter must already be at least this ("0": no guard); the highest counter
--          this process received from the node, or the database's floor
-- ARGV[5]  heal: the counter a missing or guarded counter is set to (guard + headroom); or "ask":
--          the generator has a floor not included in this call, so a missing counter, or one
--          below the guard, is reported (status 6) instead of healed; "-" before the number: the
--          generator has a floor this caller cannot read yet, so a claim it records is recorded
--          unjudged (see UNJUDGED in common.lua), and an unjudged claim is left to a caller that
--          brings the floor. That caller (a number, the floor read, or "ask" first) raises the
--          counter to at least its heal value, as for a counter missing beside no claim, and
--          records the claim as judged: silently unless the counter was below the guard, since
--          a new namespace whose first draw came before its first flush looks the same; a
--          counter lost beside its judged claim and met by such a caller is re-created unjudged
--          the same way
-- ARGV[6]  (optional) pre: a transaction of this process (MULTI, MGET of the marker and the
--          claim, INCRBY n, EXEC) took n already, from the counter `pre` ("0": missing or 0, or
--          the claim was missing), and failed its checks; this call judges those values. They
--          stand when the claim is ours, the node has not moved, `pre` is at or above the guard
--          and ARGV[7] within the limit (reply {0, identity}, nothing more taken); otherwise they
--          are dropped (a gap) and the call goes on as the full path, judging the counter by
--          `pre` (what the transaction found, not what others' transactions made of it)
-- ARGV[7]  (with ARGV[6]) the counter the transaction left (decimal)
-- Returns  the counter after taking n, as an integer, when the counter was sound and the node is
--          the one this process saw (the common case); else, when values were taken, one string
--          "after healed identity" (after: the counter after taking n; healed: "" when the
--          counter was sound, else the counter it was healed from, "-" when it was missing (also
--          when it was missing beside its recorded claim, lost, with nothing to heal it from: no
--          guard and no floor, so it restarts at 0, reported all the same); the
--          node identity); else
--          {0, identity}              with ARGV[6]: the transaction's values stand
--          {1, counter now (string)}  exhausted: nothing taken
--          {2, recorded claim}        node claim mismatch: nothing taken
--          {6, counter or ""}         the floor must be read first: nothing taken

-- The fast path: one read of the marker checks both the node's identity and the claim (the marker
-- holds "identity claim" only while both hold, see node_identity_since); the counter is taken
-- first and checked after. Anything else (a counter below the guard, missing, exhausted or past
-- 2^53, where Lua numbers are not exact) is undone here and handled in full below.
local n, heal, pre = ARGV[1], ARGV[5], ARGV[6]
if not pre and heal ~= 'ask' and redis.call('GET', KEYS[3]) == ARGV[2] then
  local after, limit = redis.call('INCRBY', KEYS[1], n), ARGV[3]
  if after < 9007199254740992 and after - n >= ARGV[4] + 0
      and (#limit > 16 or after <= limit + 0) then
    return after
  end
  if after == tonumber(n) then  -- the counter was missing (or 0, which heals the same way)
    redis.call('DEL', KEYS[1])
  else
    redis.call('DECRBY', KEYS[1], n)
  end
end
--! common
local seen_id, claim = string.match(ARGV[2], '^(%S*) (.*)$')
local later = string.sub(heal, 1, 1) == '-'
if later then
  heal = string.sub(heal, 2)
end
-- The claim, the identity marker and the counter in one read (the claim is checked here).
local read = redis.call('MGET', KEYS[2], KEYS[3], KEYS[1])
local recorded, current = read[1], read[3]
local guard, ask = ARGV[4], heal == 'ask'
-- A counter lost beside its judged claim, met by a caller that has a floor it cannot read yet
-- (and so no guard from it): what it re-creates is left unjudged, as when the claim was lost
-- too, so the first call that brings the floor raises it by the headroom and no flush trusts a
-- counter restarted at 0 below values other processes hold.
local lost_beside = later and recorded == claim and not current and not pre
if lost_beside then
  recorded = nil
end
local vouched = claim  -- the claim the identity marker may vouch for
local judging = false
if recorded == claim .. UNJUDGED then
  if later then
    vouched = recorded
  else  -- judged now: as a counter whose claim had to be recorded (below)
    recorded, judging = nil, true
  end
end
if not recorded then
  if ask then  -- read the floor first; record nothing meanwhile (see below)
    return {6, current or ''}
  end
  if later then
    vouched = claim .. UNJUDGED
  end
  redis.call('SET', KEYS[2], vouched)
elseif recorded ~= claim and recorded ~= vouched then
  return {2, recorded}
end
local identity, moved = node_identity_since(KEYS[3], seen_id, read[2], vouched)
-- A transaction's take is never undone here: the counter may stand at the number it left for
-- another reason (recreated after a flush by others' calls), and an undo would hand out again
-- what they issued.
local taken = ARGV[7]
-- A claim this call had to record means the namespace's keys were lost (a flush) or cleared;
-- its counter may be one that transactions of other processes recreated since, not yet judged:
-- it must reach the heal value, and a transaction's `pre` from before the loss is not trusted.
local before = current  -- the counter as the call (or its transaction) found it
if pre == '0' then
  before = nil
elseif pre and recorded then
  before = pre
end
local healed = ''
if (not before and (ask or guard ~= '0')) or (before and dec_gt(guard, before)) or moved
    or (not recorded and before and heal ~= '0' and dec_gt(heal, before)) then
  if ask then
    return {6, current or ''}
  end
  if heal ~= '0' and (not before or dec_gt(heal, before)) then
    if not current or dec_gt(heal, current) then  -- (a transaction may have raised it since)
      redis.call('SET', KEYS[1], heal)
    end
    healed = before or '-'
    if judging and before and not moved and not dec_gt(guard, before) then
      healed = ''  -- raised as a precaution: nothing says a value was lost
    end
  end
elseif pre and recorded and not dec_gt(taken, ARGV[3]) then
  return {0, identity}
end
if healed == '' and (recorded or lost_beside) and not current and not pre then
  healed = '-'  -- lost beside its claim; this caller knows nothing to heal it from
end
local after = redis.call('INCRBY', KEYS[1], n)
if after < 9007199254740992 then
  after = string.format('%.0f', after)
else  -- past 2^53 a Lua number is not exact: read the counter as text
  after = redis.call('GET', KEYS[1])
end
if dec_gt(after, ARGV[3]) then
  redis.call('DECRBY', KEYS[1], n)
  return {1, redis.call('GET', KEYS[1])}
end
return ok_reply(after, healed, identity)
