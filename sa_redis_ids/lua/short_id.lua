-- short_id.lua: take n free positions of one node's share of a short-ID pool, at random.
-- KEYS[1]  bitmap of this node's share: bit j set = the share's position j is taken
-- KEYS[2]  node claim key of the namespace
-- KEYS[3]  running total of the positions ever taken by this script on this node (never lowered;
--          a total below what a process received means the node lost or rewound its state)
-- KEYS[4]  generation: a token that changes whenever a process heals the bitmap, so that every
--          other process re-marks its own positions too
-- KEYS[5]  identity marker of the namespace (see node_identity_since in common.lua)
-- ARGV[1]  "identity claim": the node identity (replication ID) this process saw last ("": none
--          yet), a space, and this node's claim, "index/count|config"; a node that moved since (a
--          promoted replica, not a restart from its own data) must be healed
-- ARGV[2]  bits, the size of this node's share (bits at or past it are never used)
-- ARGV[3]  n, how many positions to take
-- ARGV[4]  6*n random bytes: each 6 bytes, read as a big-endian number modulo bits, are the
--          position tried first; if it is taken, the search starts at its byte
-- ARGV[5]  guard: the total must already be at least this ("0": none); the highest total this
--          process received from the node
-- ARGV[6]  "1": report a missing total (the generator has a floor to apply first), "0": a
--          missing total with no guard is a new pool
-- ARGV[7]  the generation this process last saw ("": none yet)
-- ARGV[8]  a new generation token, set when the node has none and this process saw none (only
--          read when ARGV[7] is "", so a process that saw one may send "")
-- ARGV[9]  span: "0" takes each value at its own random position (the positions of ARGV[4]);
--          S > 0 takes runs: each 6 random bytes of ARGV[4] name a byte where a window of S bytes
--          starts, whose free positions are all taken (one GETRANGE and one SETRANGE per window),
--          until n are taken; what the windows did not give is then searched value by value
-- Returns  ok_reply("p1,p2,...", total, generation, identity): the positions taken, in order, as one
--                                   comma-separated string (with a span: "first:count,...", runs of
--                                   consecutive positions), the running total after them, the
--                                   generation and the node identity
--          {1, positions taken}     the share has fewer free positions than asked: nothing taken
--          {2, recorded claim}      node claim mismatch: nothing taken
--          {6, total or "", generation or "", identity, lost}  the bitmap must be healed
--                                   first (short_id_heal.lua): lost is "1" when the total is
--                                   missing (with a guard or ARGV[6] "1") or below the guard,
--                                   the bitmap is missing while the total or the generation
--                                   says the pool was used, or the node moved; "0" when only
--                                   the generation is not the one this process saw (another
--                                   process healed); nothing taken
--          total * bits + position, one integer, instead of ok_reply when one value was taken
--                                   value by value by the fast path below (the generation and
--                                   the identity are then the ones this process sent)

-- The fast path of one value (n = 1, no span): the marker holds "identity claim" (one read checks
-- both, see claim_and_identity), the total is there, at or past the guard, the generation is the
-- one this process saw, the bitmap exists and the random position
-- is free. It writes nothing unless it answers (a taken position is left as it was); anything
-- else is handled in full below, from the same random bytes.
-- The marker, the total and the generation are read with one MGET. (Constant arguments of
-- redis.call are text: a Lua number is formatted with "%.17g" on every call.)
if ARGV[3] == '1' and ARGV[9] == '0' and ARGV[7] ~= '' then
  local found = redis.call('MGET', KEYS[5], KEYS[3], KEYS[4])
  local total, bits = found[2], ARGV[2] + 0
  if found[1] == ARGV[1] and total and found[3] == ARGV[7] and total + 0 >= ARGV[5] + 0
      and (total + 1) * bits < 9007199254740992 and redis.call('EXISTS', KEYS[1]) == 1 then
    local a, b, c, d, e, f = string.byte(ARGV[4], 1, 6)
    local pos = (((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f) % bits
    if redis.call('SETBIT', KEYS[1], pos, '1') == 0 then
      return redis.call('INCRBY', KEYS[3], '1') * bits + pos
    end
  end
end
--! common
local seen_id, claim = string.match(ARGV[1], '^(%S*) (.*)$')
local recorded, identity, moved = claim_and_identity(KEYS[2], claim, KEYS[5], seen_id)
if recorded then
  return {2, recorded}
end
local total = redis.call('GET', KEYS[3])
local generation = redis.call('GET', KEYS[4])
-- A missing bitmap is lost when another key says the pool was used: a total above 0 or a
-- generation (set by the first take, every heal and every reserve). Only a new pool has neither.
local lost = (not total and (ARGV[5] ~= '0' or ARGV[6] == '1'))
  or (total and dec_gt(ARGV[5], total))
  or (((total and total ~= '0') or generation) and redis.call('EXISTS', KEYS[1]) == 0)
  or moved
if lost or (ARGV[7] ~= '' and generation ~= ARGV[7]) then
  return {6, total or '', generation or '', identity, lost and '1' or '0'}
end
if not generation then
  generation = ARGV[8]
  redis.call('SET', KEYS[4], generation)
end
local key = KEYS[1]
local bits = tonumber(ARGV[2])

-- Searched a window of WINDOW bytes at a time: an unbounded BITPOS costs the whole string on
-- some servers (fakeredis copies it bit by bit), and a window that finds a free bit ends the search.
local WINDOW = 4096
local size = math.ceil(bits / 8)
-- The string's length in bytes, read once and kept up to date as SETBIT extends it.
local length = redis.call('STRLEN', key)

-- The first free position in bytes first..last (inclusive) below `bits`, or -1. Bytes past the
-- string's end are free (BITPOS answers -1 there), and an answer at or past `bits` (the padding
-- of the last byte) means nothing in the window is free.
local function find_in(first, last)
  local pos
  if first >= length then
    pos = first * 8
  else
    pos = redis.call('BITPOS', key, 0, first, last)
    if pos < 0 and last >= length then
      pos = length * 8
    end
  end
  if pos >= 0 and pos < bits then
    return pos
  end
  return -1
end

-- The first free position at or after byte `start`, wrapping around to byte 0; -1 when full.
local function find_free(start)
  local first = start
  while first < size do
    local pos = find_in(first, math.min(first + WINDOW, size) - 1)
    if pos >= 0 then
      return pos
    end
    first = first + WINDOW
  end
  first = 0
  while first < start do
    local pos = find_in(first, math.min(first + WINDOW, start) - 1)
    if pos >= 0 then
      return pos
    end
    first = first + WINDOW
  end
  return -1
end

-- The i-th random bit position (1-based), from 6 random bytes (48 bits, exact in a double).
local random = ARGV[4]
local function random_bit(i)
  local a, b, c, d, e, f = string.byte(random, 6 * i - 5, 6 * i)
  return (((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f) % bits
end

local taken = {}
local n = tonumber(ARGV[3])

-- Runs: take every free position of S-byte windows at random bytes (a byte past the string's end
-- is free), then search one by one for what is left. All or nothing: when the share runs out, every
-- window is written back as it was and every single bit cleared again.
local span = tonumber(ARGV[9])
if span > 0 then
  local runs, got, windows, singles = {}, 0, {}, {}
  local run_first, run_count = -1, 0
  local function close_run()
    if run_count > 0 then
      runs[#runs + 1] = string.format('%d:%d', run_first, run_count)
    end
    run_first, run_count = -1, 0
  end
  local function add(pos, count)
    if run_count > 0 and run_first + run_count == pos then
      run_count = run_count + count
    else
      close_run()
      run_first, run_count = pos, count
    end
    got = got + count
  end
  local tries = math.floor(string.len(random) / 6)
  for i = 1, tries do
    if got >= n then
      break
    end
    local first = math.floor(random_bit(i) / 8) % size
    local last = math.min(first + span, size) - 1
    local old = redis.call('GETRANGE', key, first, last)
    local new = {}
    for b = first, last do
      local byte = string.byte(old, b - first + 1) or 0
      local base = b * 8
      if byte == 0 and got + 8 <= n and base + 8 <= bits then
        add(base, 8)
        byte = 255
      elseif byte ~= 255 then
        local weight = 128
        for j = 0, 7 do
          local taken_bit = byte % (weight * 2) >= weight
          if not taken_bit and got < n and base + j < bits then
            add(base + j, 1)
            byte = byte + weight
          elseif taken_bit then
            close_run()
          end
          weight = weight / 2
        end
      else
        close_run()
      end
      new[#new + 1] = string.char(byte)
    end
    close_run()
    local written = table.concat(new)
    if written ~= old then
      windows[#windows + 1] = {first, old}
      redis.call('SETRANGE', key, first, written)
      if first + #written > length then
        length = first + #written
      end
    end
  end
  while got < n do
    local pos = find_free(math.floor(random_bit(1 + (got % tries)) / 8))
    if pos < 0 then
      for w = #windows, 1, -1 do
        local first, old = windows[w][1], windows[w][2]
        local back = redis.call('GETRANGE', key, first, first + span - 1)
        -- positions past the old string's end were free: write zeros there
        redis.call('SETRANGE', key, first, old .. string.rep('\0', #back - #old))
      end
      for t = 1, #singles do
        redis.call('SETBIT', key, singles[t], '0')
      end
      return {1, redis.call('BITCOUNT', key)}
    end
    redis.call('SETBIT', key, pos, '1')
    if math.floor(pos / 8) >= length then
      length = math.floor(pos / 8) + 1
    end
    singles[#singles + 1] = pos
    add(pos, 1)
    close_run()
  end
  return ok_reply(table.concat(runs, ','), redis.call('INCRBY', KEYS[3], n), generation, identity)
end
local CHUNK = 1000  -- BITFIELD subcommands per call (keeps unpack() far below Lua's stack limit)
local unpack_args = unpack or table.unpack  -- Lua 5.1 in Redis; 5.4 in some embedded servers

-- Take one position: `old` is what the random bit `text` held before BITFIELD set it. While the
-- pool is sparse it was free and is now ours; otherwise (BITFIELD changed nothing) search from
-- its byte and take what the search finds.
local function settle(pos, text, old)
  if old == 1 then
    pos = find_free(math.floor(pos / 8))
    if pos < 0 then
      return false
    end
    redis.call('SETBIT', key, pos, '1')
    local byte = math.floor(pos / 8)
    if byte >= length then
      length = byte + 1
    end
    text = string.format('%d', pos)
  end
  taken[#taken + 1] = text
  return true
end

for first = 1, n, CHUNK do
  local last = math.min(first + CHUNK - 1, n)
  local args = {'BITFIELD', key}
  local tried, texts = {}, {}
  local a = 2
  for i = first, last do
    local pos = random_bit(i)
    local text = string.format('%d', pos)
    tried[#tried + 1] = pos
    texts[#texts + 1] = text
    args[a + 1], args[a + 2], args[a + 3], args[a + 4] = 'SET', 'u1', text, '1'
    a = a + 4
  end
  local olds = redis.call(unpack_args(args))
  length = redis.call('STRLEN', key)
  for j = 1, #tried do
    if not settle(tried[j], texts[j], olds[j]) then
      -- Full: give back every bit this call set, the settled ones and the rest of this chunk.
      for t = 1, #taken do
        redis.call('SETBIT', key, taken[t], '0')
      end
      for k = j + 1, #tried do
        if olds[k] == 0 then
          redis.call('SETBIT', key, texts[k], '0')
        end
      end
      return {1, redis.call('BITCOUNT', key)}
    end
  end
end
return ok_reply(table.concat(taken, ','), redis.call('INCRBY', KEYS[3], n), generation, identity)
