-- dated_purge.lua: raise the purge marker (never lower it) and delete the counters of every day at
-- or before it. Once the marker is raised, no script re-creates those days.
-- KEYS[1]  purge marker: label of the last purged day
-- KEYS[2]  storage "hash": the namespace's hash; storage "key": the set of day labels
-- KEYS[3...] storage "key": the counter keys of the labels in ARGV[3...]; storage "hash": KEYS[3]
--          the set of day labels that have had a field (optional)
-- ARGV[1]  label of the last day to purge ("YYYYMMDD")
-- ARGV[2]  storage: "hash" or "key"
-- ARGV[3...] storage "key" only: labels whose keys are KEYS[3...]
-- Returns  {0, marker now, labels of the counters deleted...}
local marker = redis.call('GET', KEYS[1])
if not marker or ARGV[1] > marker then
  marker = ARGV[1]
  redis.call('SET', KEYS[1], marker)
end
local reply = {0, marker}
if ARGV[2] == 'hash' then
  local fields = redis.call('HKEYS', KEYS[2])
  for _, label in ipairs(fields) do
    if label <= marker then
      redis.call('HDEL', KEYS[2], label)
      reply[#reply + 1] = label
    end
  end
  if KEYS[3] then
    for _, label in ipairs(redis.call('SMEMBERS', KEYS[3])) do
      if label <= marker then
        redis.call('SREM', KEYS[3], label)
      end
    end
  end
else
  for i = 3, #ARGV do
    local label = ARGV[i]
    if label <= marker then
      if redis.call('DEL', KEYS[i]) == 1 then
        reply[#reply + 1] = label
      end
      redis.call('SREM', KEYS[2], label)
    end
  end
end
return reply
