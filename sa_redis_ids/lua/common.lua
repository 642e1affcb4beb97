-- common.lua: helpers prepended to every script (the library's and a user's own strategies')
-- by sa_redis_ids/redis/scripts.py: each top-level definition a script uses, with the comment
-- lines just above it (a script runs its whole text at every call).
-- Not a script on its own. Return-code convention of every script: a table whose first element
-- is 0 (ok, payload follows) or a small error code mapped to an exception in one Python place
-- (sa_redis_ids/redis/scripts.py, STATUS_*); an issuing script answers its success as one string
-- of the payload instead (ok_reply below), which parses faster.

-- The suffix of a node claim recorded by a call that re-created a missing counter knowing
-- neither a mark nor the floor, although the generator has a floor it could not read yet (a
-- process's direct draw before its first flush): the counter may stand below values the table
-- or other processes hold, so the first call that brings the floor judges it (sequence.lua),
-- and until then no identity marker vouches for the claim (every call takes the full path).
local UNJUDGED = ' unjudged'

-- Record on first use which node index of how many, and which configuration, this node serves
-- for a namespace; on later calls return the recorded claim when it differs from ours.
-- `marker` (optional): the namespace's identity marker, deleted when a claim is recorded. It may
-- still hold "identity claim" of a claim whose key was deleted or evicted since, and an issuing
-- script's fast path trusts it in place of the claim key (see claim_and_identity).
-- A claim recorded as `claim .. UNJUDGED` (see sequence.lua) is ours too.
local function claim_node(claim_key, claim, marker)
  local recorded = redis.call('GET', claim_key)
  if not recorded then
    redis.call('SET', claim_key, claim)
    if marker then
      redis.call('DEL', marker)
    end
    return nil
  end
  if recorded ~= claim and recorded ~= claim .. UNJUDGED then
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

-- Milliseconds since the Unix epoch by the Redis server's clock. (Arithmetic converts a numeric
-- string once; tonumber() parses it twice in Redis's Lua 5.1: the scripts' fast paths use the
-- former.)
local function redis_now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- Seconds since the Unix epoch by the Redis server's clock, as TIME answers them (decimal text):
-- compared as text with bounds of the same number of digits, it is never converted to a number.
local function redis_now_s()
  return redis.call('TIME')[1]
end

-- The replication ID of this server (INFO replication, master_replid): it changes when a replica
-- is promoted to master and when a server restarts, so a process that saw another one knows the
-- state may have been rewound. "" where INFO gives none.
local function node_identity()
  local info = redis.pcall('INFO', 'replication')
  if type(info) ~= 'string' then
    return ''
  end
  return string.match(info, 'master_replid:(%w+)') or ''
end

-- How long (ms) a node's identity marker stands in for INFO replication. The marker is written
-- neither to the replicas nor to the AOF, so a promoted replica has none; only a copy in a full
-- resynchronisation's snapshot could reach one, and it expires this soon after it was written.
local IDENTITY_TTL_MS = 1000
local NO_REPLID = '0000000000000000000000000000000000000000'

-- Write a namespace's identity marker (see node_identity_since) without replicating it or logging
-- it to the AOF; `...` are SET's options (the expiry).
local function set_marker(marker, value, ...)
  -- Not replicated, not in the AOF (where a server cannot keep a write to itself, as a Redis
  -- before 7 replicating scripts verbatim, the marker still expires within the second).
  local quiet = redis.set_repl and pcall(redis.set_repl, redis.REPL_NONE)
  redis.call('SET', marker, value, ...)
  if quiet then
    redis.set_repl(redis.REPL_ALL)
  end
end

-- Whether this server may have received anything from a master since it started (INFO stats,
-- total_net_repl_input_bytes, which counts every full resynchronisation, from disk or diskless).
-- A replica promoted right after a full resynchronisation has an empty backlog that starts where
-- its previous ID's history ended, as a restart from RDB does, but it received that
-- resynchronisation; a server restarted from its own data received nothing. Where INFO stats
-- gives no answer (a server without the counter: before Redis 7.0 a restart from RDB keeps no
-- previous ID, so only a promotion gets here), true: a heal too many is only logged, a promotion
-- taken for a restart repeats values.
local function replicated_since_start()
  local stats = redis.pcall('INFO', 'stats')
  if type(stats) ~= 'string' then
    return true
  end
  local bytes = string.match(stats, 'total_net_repl_input_bytes:(%d+)')
  return bytes ~= '0'
end

-- The node's identity and whether the node *moved* since `seen` (the identity a process saw last,
-- "" for none): it is another server now, promoted from a replica that may have missed writes.
-- A server that restarted from its own data (AOF or RDB) has another replication ID too, but
-- INFO tells it apart: no previous ID (master_replid2 all zeros: it was never a replica since it
-- started), or a replication backlog that holds nothing from before the previous ID's history
-- ended and nothing received from a master since the server started. A restart from RDB
-- restores the ID it ran under as the previous one and starts an empty backlog there, which its
-- own writes later fill and wrap (past the default 1 MB, within seconds on a busy server: the
-- backlog then begins after that point). A promoted replica's backlog holds what it received
-- before, and one promoted with an empty backlog received at least its resynchronisation
-- (`replicated_since_start`). The previous ID need not be `seen`: each restart from RDB restores
-- the one before it, so two restarts between a process's calls show an ID the process never
-- saw. A restart is trusted to have kept what its persistence kept (a promoted replica restarted
-- before any call reached it is taken for a restart too).
-- `marker` (a key of the namespace's hash tag) caches the identity, so INFO is read about once a
-- second per namespace and node, and whenever a process saw another identity than the marker's.
-- `known`: the marker's value if the caller read it already (false: missing; nil: not read).
-- `claim` (optional): the node claim the caller has just checked against the claim key; the
-- marker then holds "identity claim", so a script's fast path can check both with one read of
-- the marker (the marker keeps its expiry when only its claim part is rewritten).
local function node_identity_since(marker, seen, known, claim)
  if known == nil then
    known = redis.call('GET', marker)
  end
  local suffix = claim and (' ' .. claim) or ''
  if known then
    local id = string.match(known, '^%S*')
    if id == seen or seen == '' then
      if known ~= id .. suffix then
        set_marker(marker, id .. suffix, 'KEEPTTL')
      end
      return id, false
    end
  end
  local info = redis.pcall('INFO', 'replication')
  if type(info) ~= 'string' then
    return '', false
  end
  local id = string.match(info, 'master_replid:(%w+)') or ''
  if id ~= '' then
    set_marker(marker, id .. suffix, 'PX', IDENTITY_TTL_MS)
  end
  if seen == '' or id == seen then
    return id, false
  end
  local second = tonumber(string.match(info, 'second_repl_offset:(%d+)') or '')
  local first = tonumber(string.match(info, 'repl_backlog_first_byte_offset:(%d+)') or '')
  local restarted = string.match(info, 'master_replid2:(%w+)') == NO_REPLID
    or (second ~= nil and first ~= nil and second > 0 and first >= second
      and not replicated_since_start())
  return id, not restarted
end

-- The claim check and the node identity of an issuing script (claim_node, node_identity_since):
-- returns the recorded claim when it is not `claim` (nothing may be taken), else nil, the
-- identity, whether the node moved, and whether this call must judge an unjudged claim (see
-- UNJUDGED: recorded so, and the caller is not `later`). While the marker holds "seen claim"
-- (written only by a script that found `claim` recorded, and gone within a second, or at once
-- on a promoted replica or another process's claim), that one read stands for both checks.
-- `later` (optional): the caller has a floor it cannot read yet; a claim it records is recorded
-- unjudged, and an unjudged one is left as it is. While a claim is unjudged the marker vouches
-- only for its unjudged form, so no fast path takes from the counter before it is judged.
local function claim_and_identity(claim_key, claim, marker, seen, later)
  local known = redis.call('GET', marker)
  if known and seen ~= '' and known == seen .. ' ' .. claim then
    return nil, seen, false, false
  end
  local recorded = redis.call('GET', claim_key)
  local vouched = claim
  if not recorded then
    if later then
      vouched = claim .. UNJUDGED
    end
    redis.call('SET', claim_key, vouched)
  elseif recorded == claim .. UNJUDGED then
    vouched = recorded
  elseif recorded ~= claim then
    return recorded
  end
  local identity, moved = node_identity_since(marker, seen, known, vouched)
  return nil, identity, moved, vouched ~= claim and not later
end

-- The reply of an issuing script that took its values: the parts as one space-separated string,
-- numbers as whole decimals ('%.0f': '%d' goes through a C long, 32 bits on some servers). One
-- reply element parses much faster than a table of them, and this
-- reply comes back on every call; failures still answer a table {code, ...}.
local function ok_reply(...)
  local n = select('#', ...)
  local parts = {...}
  for i = 1, n do
    local part = parts[i]
    if part == nil then
      parts[i] = ''
    elseif type(part) == 'number' then
      parts[i] = string.format('%.0f', part)
    end
  end
  return table.concat(parts, ' ', 1, n)
end
