-- common.lua: helpers prepended to every script by sa_redis_ids/redis/scripts.py.
-- Not a script on its own. Return-code convention of every script: a table whose first element
-- is 0 (ok, payload follows) or a small error code mapped to an exception in one Python place
-- (sa_redis_ids/redis/scripts.py, STATUS_*).

-- Record on first use which node index of how many, and which configuration, this node serves
-- for a namespace; on later calls return the recorded claim when it differs from ours.
local function claim_node(claim_key, claim)
  local recorded = redis.call('GET', claim_key)
  if not recorded then
    redis.call('SET', claim_key, claim)
    return nil
  end
  if recorded ~= claim then
    return recorded
  end
  return nil
end

-- Exact "a > b" for non-negative decimal integers given as strings without leading zeros.
-- Lua numbers are doubles (exact only to 2^53), so 64-bit values are compared as text.
local function dec_gt(a, b)
  if #a ~= #b then
    return #a > #b
  end
  return a > b
end

-- Milliseconds since the Unix epoch by the Redis server's clock, plus a test-only offset
-- (always "0" in production; see sa_redis_ids/clock.py).
local function redis_now_ms(offset)
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(offset)
end

-- Pick the local day that contains `now` from a day window passed in ARGV starting at `i`:
--   ARGV[i] = m (days), ARGV[i+1 .. i+m+1] = day boundaries in UTC ms (ascending),
--   ARGV[i+m+2 .. i+2m+1] = the m day labels ("YYYYMMDD").
-- Returns label, 0-based day index within the window, and the first ARGV index after the window;
-- label is nil when `now` lies outside the window (the caller answers STATUS_OUT_OF_WINDOW).
local function pick_day(now, i)
  local m = tonumber(ARGV[i])
  local after = i + 2 * m + 2
  for d = 0, m - 1 do
    if now >= tonumber(ARGV[i + 1 + d]) and now < tonumber(ARGV[i + 2 + d]) then
      return ARGV[i + m + 2 + d], d, after
    end
  end
  return nil, nil, after
end

-- The replication ID of this server (INFO replication, master_replid): it changes when a replica
-- is promoted to master and when a server restarts without its data, so a process that saw
-- another one knows the state may have been rewound. "" where INFO gives none.
local function node_identity()
  local info = redis.pcall('INFO', 'replication')
  if type(info) ~= 'string' then
    return ''
  end
  return string.match(info, 'master_replid:(%w+)') or ''
end
