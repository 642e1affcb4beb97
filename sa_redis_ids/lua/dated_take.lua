-- dated_take.lua: take the next n counter values of the current local day (DatePrefixed, DailyCode).
-- The day is the one of the window (ARGV[10...]) that holds the Redis time. Its counter is created
-- atomically here on first use, unless ARGV[4] says it must first be seeded from a floor. A counter
-- below the guard (what this process already received that day, or the floor) is healed first.
-- KEYS[1]  purge marker: label of the last purged day (absent: nothing purged)
-- KEYS[2]  node claim key of the namespace
-- KEYS[3]  identity marker of the namespace (see node_identity_since in common.lua)
-- KEYS[4]  storage "hash": the namespace's hash, one field per day label;
--          storage "key":  the set of day labels that have a counter key (for purging)
-- KEYS[5...] storage "key": one counter key per day of the window, in window order;
--          storage "hash": KEYS[5] the set of day labels that have had a field (a missing field
--          whose label it holds vanished: evicted or deleted with the hash)
-- ARGV[1]  n, how many values to take (>= 1)
-- ARGV[2]  "identity claim": the node identity (replication ID) this process saw last ("": none
--          yet), a space, and this node's claim, "index/count|config"; a node that moved since (a
--          promoted replica, not a restart from its own data) has the day's counter raised to at
--          least the heal value
-- ARGV[3]  highest counter value allowed on this node (decimal string)
-- ARGV[4]  the floor: "none" (no floor), "ask" (a missing counter, or one below the guard, is
--          reported, not healed), "first" (report the day even when its counter is sound: the
--          process has not read the floor yet), "given" (the guard includes the floor) or
--          "later" (as "none", but the generator has a floor this caller cannot read yet: a claim
--          it records is recorded unjudged, see UNJUDGED in common.lua). A call that finds the
--          claim unjudged and is not "later" judges the day's counter: with "ask" it reports it
--          (status 6) so the floor is read first; otherwise it raises the counter to at least the
--          heal value (silently unless it was below the guard: a new namespace whose first draw
--          came before its first flush looks the same) and records the claim as judged
-- ARGV[5]  storage: "hash" or "key"; "hash!" or "key!" when the caller needs the Redis time (a
--          buffer's block: the reply is then never the one integer)
-- ARGV[6]  storage "key": ms after the day's end at which its key expires
-- ARGV[7]  label of the day the guard is for (the guard applies to that day only)
-- ARGV[8]  guard: that day's counter must already be at least this ("0": none)
-- ARGV[9]  heal: the counter a missing or guarded counter of that day is set to (a day whose key
--          vanished too; "0": a vanished day is refused with status 7)
-- ARGV[10...] the day window: m, m+1 boundaries (UTC ms), m labels (see pick_day in day_window.lua)
-- Returns  (counter after taking n) * m + d (m days in the window, d the 0-based day), one integer,
--          when the counter was sound, the node is the one this process saw, the day is not the
--          window's last (whose caller moves the window on, by the Redis time) and the number is
--          exact (the common case); else
--          ok_reply(label, counter after taking n (decimal), Redis now ms, day end ms, healed,
--          identity): healed is "" when the counter was sound, else the counter it was healed
--          from ("-": it was missing)
--          {1, counter now}          exhausted: nothing taken
--          {2, recorded claim}       node claim mismatch: nothing taken
--          {4, label, marker}        the day is at or before the purge marker, or its key
--                                    expired (storage "key"): nothing taken
--          {5, Redis now ms}         the Redis time is outside the window: nothing taken
--          {6, label, counter or ""} the floor of the day must be read first: nothing taken
--          {7, label}                the day's key vanished without a purge (expired or
--                                    evicted) and there is neither guard nor floor: nothing taken
--! include day_window
-- The common call, when everything is as the caller last saw it, is dated_fast.lua's (fewer
-- arguments); this script is the caller's first call of a node and its call when that one missed.
local storage = ARGV[5]
local hash = storage == 'hash' or storage == 'hash!'
local seen_id, claim = string.match(ARGV[2], '^(%S*) (.*)$')
local floor = ARGV[4]
local recorded, identity, moved, judge =
  claim_and_identity(KEYS[2], claim, KEYS[3], seen_id, floor == 'later')
if recorded then
  return {2, recorded}
end
local now = redis_now_ms()
local label, d, _, m = pick_day(now, 10)
if not label then
  return {5, now}
end
local marker = redis.call('GET', KEYS[1])
if marker and label <= marker then
  return {4, label, marker}
end
local day_end = ARGV[12 + d]
local n = ARGV[1]
local key = KEYS[5 + d]
local index = hash and KEYS[5] or KEYS[4]
local guard, heal = '0', '0'
if label == ARGV[7] then
  guard, heal = ARGV[8], ARGV[9]
end

local current
if hash then
  current = redis.call('HGET', KEYS[4], label)
else
  current = redis.call('GET', key)
end
if floor == 'first' then
  return {6, label, current or ''}
end
-- a day that has no counter but is in the index had one: it expired or was evicted (or deleted)
local created = not current
local vanished = created and redis.call('SISMEMBER', index, label) == 1
local low = (current and dec_gt(guard, current)) or (not current and guard ~= '0')
local healed = ''
if low or moved or judge or (not current and (floor == 'ask' or vanished)) then
  if floor == 'ask' then
    return {6, label, current or ''}
  end
  if vanished and heal == '0' then
    return {7, label}
  end
end
if heal ~= '0' and (low or moved or vanished or judge) and (not current or dec_gt(heal, current))
    then
  healed = current or '-'
  if judge and current and not low and not moved then
    healed = ''  -- raised as a precaution: nothing says a value was lost
  end
  current = heal
  if hash then
    redis.call('HSET', KEYS[4], label, heal)
  elseif healed == '-' then
    redis.call('SET', key, heal)
    redis.call('PEXPIREAT', key, string.format('%.0f', tonumber(day_end) + tonumber(ARGV[6])))
    redis.call('SADD', KEYS[4], label)
  else
    redis.call('SET', key, heal, 'KEEPTTL')
  end
elseif not current and not hash then
  redis.call('SET', key, '0')
  redis.call('PEXPIREAT', key, string.format('%.0f', tonumber(day_end) + tonumber(ARGV[6])))
  redis.call('SADD', KEYS[4], label)
end
if hash and created then
  redis.call('SADD', index, label)
end
if judge then
  redis.call('SET', KEYS[2], claim)
end

local after
if hash then
  after = redis.call('HINCRBY', KEYS[4], label, n)
else
  after = redis.call('INCRBY', key, n)
end
local limit = ARGV[3]
if after >= 9007199254740992 or (#limit <= 16 and after > tonumber(limit)) then
  -- exhausted, or past 2^53 where a Lua number is not exact: compare the counter's text
  after = hash and redis.call('HGET', KEYS[4], label) or redis.call('GET', key)
  if dec_gt(after, limit) then
    if hash then
      redis.call('HINCRBY', KEYS[4], label, -tonumber(n))
      return {1, redis.call('HGET', KEYS[4], label)}
    end
    redis.call('DECRBY', key, n)
    return {1, redis.call('GET', key)}
  end
elseif healed == '' and identity == seen_id and d < m - 1 and after < 9007199254740992 / m
    and string.byte(storage, -1) ~= 33 then  -- 33: '!', the caller needs the Redis time
  return after * m + d
end
return ok_reply(label, after, now, day_end, healed, identity)
