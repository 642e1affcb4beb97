-- dated_set.lua: create a day's counter at a value (mode "init": only if it does not exist; mode
-- "seed": the same, from a floor), or raise it to at least a value (mode "raise": never lowers
-- it). Refuses a purged day, and refuses "init" for a day whose counter vanished (expired,
-- evicted or deleted): only a floor ("seed") or a known value ("raise") may re-create it, and
-- then above that value by the headroom (ARGV[7]), as a heal would.
-- KEYS[1]  purge marker: label of the last purged day (absent: nothing purged)
-- KEYS[2]  node claim key of the namespace
-- KEYS[3]  identity marker of the namespace, deleted when the claim is recorded (see claim_node
--          in common.lua)
-- KEYS[4]  storage "hash": the namespace's hash; storage "key": the set of day labels
-- KEYS[5]  storage "key": the day's counter key; storage "hash": the set of day labels that
--          have had a field
-- ARGV[1]  this node's claim, "index/count|config"
-- ARGV[2]  the day's label "YYYYMMDD"
-- ARGV[3]  storage: "hash" or "key"
-- ARGV[4]  the counter value (non-negative decimal string, no leading zeros)
-- ARGV[5]  mode: "init", "seed" or "raise"
-- ARGV[6]  storage "key": UTC ms at which a newly created key expires
-- ARGV[7]  modes "seed" and "raise", optional: the value instead of ARGV[4] for a day whose
--          counter vanished (its values were issued, some maybe not yet in the database: the
--          floor, or the value to raise to, plus the headroom)
-- Returns  {0, counter before ("" when absent), counter after}
--          {2, recorded claim}       node claim mismatch: nothing changed
--          {4, label, marker}        the day is at or before the purge marker: nothing changed
--          {7, label}                the day's counter vanished (the index holds its label)
--                                    and the mode is "init": nothing changed
local recorded = claim_node(KEYS[2], ARGV[1], KEYS[3])
if recorded then
  return {2, recorded}
end
local label = ARGV[2]
local marker = redis.call('GET', KEYS[1])
if marker and label <= marker then
  return {4, label, marker}
end
local hash = ARGV[3] == 'hash'
local index = hash and KEYS[5] or KEYS[4]
local before
if hash then
  before = redis.call('HGET', KEYS[4], label)
else
  before = redis.call('GET', KEYS[5])
end
local value = ARGV[4]
if not before and redis.call('SISMEMBER', index, label) == 1 then
  if ARGV[5] == 'init' then
    return {7, label}
  end
  if ARGV[7] then
    value = ARGV[7]
  end
end
if before and (ARGV[5] ~= 'raise' or not dec_gt(value, before)) then
  return {0, before, before}
end
if hash then
  redis.call('HSET', KEYS[4], label, value)
  redis.call('SADD', index, label)
elseif before then
  redis.call('SET', KEYS[5], value, 'KEEPTTL')
else
  redis.call('SET', KEYS[5], value)
  redis.call('PEXPIREAT', KEYS[5], ARGV[6])
  redis.call('SADD', KEYS[4], label)
end
return {0, before or '', value}
