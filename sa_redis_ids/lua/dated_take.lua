-- dated_take.lua: take the next n counter values of the current local day (DatePrefixed, DailyCode).
-- The day is the one of the window (ARGV[8...]) that holds the Redis time. Its counter is created
-- atomically here on first use, unless ARGV[5] says it must first be seeded from a floor.
-- KEYS[1]  purge marker: label of the last purged day (absent: nothing purged)
-- KEYS[2]  node claim key of the namespace
-- KEYS[3]  storage "hash": the namespace's hash, one field per day label;
--          storage "key":  the set of day labels that have a counter key (for purging)
-- KEYS[4…] storage "key" only: one counter key per day of the window, in window order
-- ARGV[1]  n, how many values to take (>= 1)
-- ARGV[2]  this node's claim, "index/count|config"
-- ARGV[3]  highest counter value allowed on this node (decimal string)
-- ARGV[4]  test offset in ms added to Redis TIME ("0" in production)
-- ARGV[5]  "1": a missing counter is not created but reported (seeded from a floor); "0": create it
-- ARGV[6]  storage: "hash" or "key"
-- ARGV[7]  storage "key": ms after the day's end at which its key expires
-- ARGV[8…] the day window: m, m+1 boundaries (UTC ms), m labels (see pick_day in common.lua)
-- Returns  {0, label, counter after taking n (decimal string), Redis now ms, day end ms}
--          {1, counter now}          exhausted: nothing taken
--          {2, recorded claim}       node claim mismatch: nothing taken
--          {4, label, marker}        the day is at or before the purge marker, or its key
--                                    expired (storage "key"): nothing taken
--          {5, Redis now ms}         the Redis time is outside the window: nothing taken
--          {6, label}                the day has no counter and must be seeded first
local recorded = claim_node(KEYS[2], ARGV[2])
if recorded then
  return {2, recorded}
end
local now = redis_now_ms(ARGV[4])
local label, d = pick_day(now, 8)
if not label then
  return {5, now}
end
local marker = redis.call('GET', KEYS[1])
if marker and label <= marker then
  return {4, label, marker}
end
local day_end = ARGV[10 + d]
local n = ARGV[1]
local after
if ARGV[6] == 'hash' then
  local exists = redis.call('HEXISTS', KEYS[3], label) == 1
  if not exists and ARGV[5] == '1' then
    return {6, label}
  end
  redis.call('HINCRBY', KEYS[3], label, n)
  after = redis.call('HGET', KEYS[3], label)
  if dec_gt(after, ARGV[3]) then
    redis.call('HINCRBY', KEYS[3], label, -tonumber(n))
    return {1, redis.call('HGET', KEYS[3], label)}
  end
else
  local key = KEYS[4 + d]
  local exists = redis.call('EXISTS', key) == 1
  if not exists then
    if redis.call('SISMEMBER', KEYS[3], label) == 1 then
      -- the day had a key that expired after its day and grace period: never re-create it
      return {4, label, label}
    end
    if ARGV[5] == '1' then
      return {6, label}
    end
    redis.call('SET', key, '0')
    redis.call('PEXPIREAT', key, string.format('%.0f', tonumber(day_end) + tonumber(ARGV[7])))
    redis.call('SADD', KEYS[3], label)
  end
  redis.call('INCRBY', key, n)
  after = redis.call('GET', key)
  if dec_gt(after, ARGV[3]) then
    redis.call('DECRBY', key, n)
    return {1, redis.call('GET', key)}
  end
end
return {0, label, after, now, day_end}
