-- snowflake.lua: reserve n consecutive (millisecond, sequence) slots of one node; Python composes
-- the IDs (Lua numbers are doubles). All times below are milliseconds since the layout's epoch.
-- KEYS[1]  state hash of the namespace on this node:
--            ms    last millisecond issued (may run ahead of the clock: borrowed milliseconds)
--            c     last slot issued in that millisecond (this node's slot index, 0-based)
--            seen  latest Redis time observed; a clock behind it went backwards
-- KEYS[2]  node claim key of the namespace
-- KEYS[3]  identity marker of the namespace (see node_identity_since in common.lua)
-- ARGV[1]  n, how many slots to take (>= 1)
-- ARGV[2]  "identity claim": the node identity (replication ID) this process saw last ("": none
--          yet), a space, and this node's claim, "index/count|config"; a node that moved since (a
--          promoted replica, not a restart from its own data) has its state raised as if it were
--          below the guard
-- ARGV[3]  epoch of the layout (ms since 1970)
-- ARGV[4]  last millisecond the layout can hold (2^time_bits - 1)
-- ARGV[5]  slots per millisecond on this node (its share of the sequence values)
-- ARGV[6]  tolerance: how far (ms) the clock may be behind `seen` and still be served
-- ARGV[7]  guard ms, ARGV[8] guard slot: the state must already be at or past this slot ("-1":
--          no guard); the later of the last slot this process received from the node (its mark)
--          and the database's floor
-- ARGV[9]  the floor: "none" (no floor), "ask" (a missing state, or one below the guard, is
--          reported, not healed) or "given" (the guard includes the floor)
-- ARGV[10] headroom: a lost state (missing although the mark, the floor or the node claim knows
--          of IDs, below the mark, or on a node that moved) resumes this many ms after the later
--          of the mark and the clock, and at least after the guard; a missing state with neither
--          guard, floor nor claim (a new namespace) starts at the clock
-- ARGV[11] mark ms, ARGV[12] mark slot: only with the floor "given", the mark alone (without the
--          floor); otherwise the guard is the mark. A state at or past the mark but below the
--          floor lost nothing this process knows of (rows of its own last milliseconds, another
--          node's, or a generator's before it): it is raised to the floor, not healed
-- Returns  the first slot as one integer, first ms * slots per ms + first slot, when the state was
--          sound, the node is the one this process saw and the number is exact (the common
--          case: the slots run on from it, a full millisecond at a time); else
--          ok_reply(first ms, first slot, last ms, last slot, healed, identity): the slots run on from
--          the first to the last, a full millisecond at a time (slot counts restart at 0 each
--          millisecond); healed is "" when the state was sound, else the millisecond it was
--          healed from ("-": it was missing)
--          {1, text}                 the layout's time ran out: nothing taken
--          {2, recorded claim}       node claim mismatch: nothing taken
--          {3, ms behind}            the clock is behind `seen` by more than the tolerance
--          {6, ms or ""}             the floor must be read first: nothing taken
--          {30, ms before the epoch} the Redis time lies before the layout's epoch

-- The fast path: the marker holds "identity claim" (one read checks both, see
-- claim_and_identity), the state is there, at or past the guard, and the clock not behind it.
-- It writes nothing unless it answers; anything else is handled in full below. The floor
-- argument does not matter here: "ask" only changes what a missing or low state, or a node that
-- moved, leads to, and the full path takes from a sound state exactly as this one does.
local slots = ARGV[5] + 0

-- The first slot to take: the start of `now`, or, when the last millisecond issued is now, in the
-- (borrowed) future, or the clock is slightly behind it, the slot after the last one issued.
local function next_slot(last_ms, last_c, now)
  if last_ms < now then
    return now, 0
  end
  if last_c + 1 >= slots then
    return last_ms + 1, 0
  end
  return last_ms, last_c + 1
end

if redis.call('GET', KEYS[3]) == ARGV[2] then
  local now = redis_now_ms() - ARGV[3]
  local state = redis.call('HMGET', KEYS[1], 'ms', 'c', 'seen')
  local last_ms, last_c, seen = state[1], state[2], state[3]
  if last_ms and last_c and seen then
    last_ms, last_c, seen = last_ms + 0, last_c + 0, seen + 0
    local guard_ms = ARGV[7] + 0
    if now >= 0 and now >= seen
        and (last_ms > guard_ms or (last_ms == guard_ms and last_c >= ARGV[8] + 0)) then
      local n = ARGV[1] + 0
      local ms, c = next_slot(last_ms, last_c, now)
      local first = ms * slots + c
      local last = first + n - 1
      local end_ms = math.floor(last / slots)
      if end_ms <= ARGV[4] + 0 and last < 9007199254740992 then
        -- Whole numbers below 2^53 go to Redis as plain digits (redis.call formats a number
        -- with "%.17g" in C, cheaper than string.format in Lua, but not free): only the fields
        -- that change are written. Calls in the same millisecond as the last one (several a
        -- millisecond under load) change only the slot.
        -- Slot 0 (the first call of a millisecond) goes as a literal, and a new millisecond that
        -- is the clock's own (the usual case) is formatted once for both fields ("%.14g" is
        -- plain digits below 10^14).
        local c = last % slots
        if c == 0 then
          c = '0'
        end
        if end_ms ~= last_ms then
          if end_ms == now and now < 1e14 then
            local text = tostring(now)
            redis.call('HSET', KEYS[1], 'ms', text, 'c', c, 'seen', text)
          else
            redis.call('HSET', KEYS[1], 'ms', end_ms, 'c', c, 'seen', now)
          end
        elseif now ~= seen then
          redis.call('HSET', KEYS[1], 'c', c, 'seen', now)
        else
          redis.call('HSET', KEYS[1], 'c', c)
        end
        return first
      end
    end
  end
end
--! common

-- A whole number as plain decimal text (never "1e+12").
local function whole(x)
  return string.format('%.0f', x)
end

local seen_id, claim = string.match(ARGV[2], '^(%S*) (.*)$')
local state = redis.call('HMGET', KEYS[1], 'ms', 'c', 'seen')
-- A state missing while the node claim stands was lost alone (deleted, evicted): the claim is
-- recorded by the same call that creates the state, so the namespace is not new.
local claimed = not (state[1] or state[2] or state[3]) and redis.call('EXISTS', KEYS[2]) == 1
local recorded, identity, moved = claim_and_identity(KEYS[2], claim, KEYS[3], seen_id)
if recorded then
  return {2, recorded}
end
local n = tonumber(ARGV[1])
local now = redis_now_ms() - tonumber(ARGV[3])
if now < 0 then
  return {30, -now}
end
local last_ms, last_c, seen = tonumber(state[1]), tonumber(state[2]), tonumber(state[3])
-- A state with a field deleted by hand: without its slot, any slot of its millisecond may have
-- been issued, so that millisecond counts as used up; without its millisecond, it is lost (but
-- not new: something was drawn from it).
local partial = not last_ms and (state[2] or state[3])
if last_ms and not last_c then
  last_c = slots - 1
end
local guard_ms, guard_c = tonumber(ARGV[7]), tonumber(ARGV[8])
local mark_ms, mark_c = guard_ms, guard_c
if ARGV[9] == 'given' then
  mark_ms, mark_c = tonumber(ARGV[11]), tonumber(ARGV[12])
end
local healed = ''
local low = last_ms and mark_ms >= 0
  and (last_ms < mark_ms or (last_ms == mark_ms and last_c < mark_c))
if not last_ms and not partial and not claimed and guard_ms < 0 and not moved
    and ARGV[9] ~= 'ask' then
  -- A namespace nobody is known to have drawn from (no state, no claim, no mark, no floor): it
  -- starts at the clock.
  last_ms, last_c = -1, 0
elseif not last_ms or low or moved then
  if ARGV[9] == 'ask' then
    return {6, last_ms and whole(last_ms) or ''}
  end
  -- No state although this process or the floor knows of IDs: this node lost it (FLUSHALL, a
  -- failover to a lagging replica). Below the mark, or the node moved: it may have been
  -- rewound. IDs issued before may lie ahead of both the clock and the mark (borrowed
  -- milliseconds): resume after the later of the two, plus the headroom. The floor only bounds
  -- the state from below: it shows IDs issued after the loss too (another process's heal), and
  -- headroom above them would stack one heal on the next. Never move the state back.
  local base = now
  if mark_ms > base then
    base = mark_ms
  end
  if partial and seen and seen > base then
    base = seen  -- (the state's last millisecond was at least the latest time it saw)
  end
  local target_ms, target_c = base + tonumber(ARGV[10]), slots - 1
  if guard_ms > target_ms then
    target_ms, target_c = guard_ms, guard_c
  end
  if not last_ms or last_ms < target_ms or (last_ms == target_ms and last_c < target_c) then
    healed = last_ms and whole(last_ms) or '-'
    last_ms, last_c, seen = target_ms, target_c, nil
  end
elseif last_ms < guard_ms or (last_ms == guard_ms and last_c < guard_c) then
  -- At or past the mark, below the floor: the table holds IDs of this state's millisecond (the
  -- floor counts its millisecond as used up) or of later ones. Nothing was lost that this
  -- process knows of; the next slot simply lies above the floor, at most a millisecond past the
  -- later of the floor and the clock.
  last_ms, last_c = guard_ms, guard_c
end
if seen and now < seen then
  if seen - now > tonumber(ARGV[6]) then
    return {3, seen - now}
  end
else
  seen = now
end
local ms, c = next_slot(last_ms, last_c, now)
local last_index = c + n - 1
local end_ms = ms + math.floor(last_index / slots)
local end_c = last_index % slots
if end_ms > tonumber(ARGV[4]) then
  return {1, 'the end of the layout, millisecond ' .. ARGV[4] .. ' after its epoch'}
end
redis.call('HSET', KEYS[1], 'ms', whole(end_ms), 'c', whole(end_c), 'seen', whole(seen))
local first = ms * slots + c
if healed == '' and identity == seen_id and first < 9007199254740992 - n then
  return first
end
return ok_reply(ms, c, end_ms, end_c, healed, identity)
