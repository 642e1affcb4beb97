-- short_id.lua: take n free positions of one node's share of a short-ID pool, at random.
-- KEYS[1]  bitmap of this node's share: bit j set = the share's position j is taken
-- KEYS[2]  node claim key of the namespace
-- ARGV[1]  this node's claim, "index/count|config"
-- ARGV[2]  bits, the size of this node's share (bits at or past it are never used)
-- ARGV[3…] one random start byte per position to take, each 0 <= start < ceil(bits / 8)
-- Returns  {0, position…}           the positions taken, one per start byte
--          {1, positions taken}     the share has fewer free positions than asked: nothing taken
--          {2, recorded claim}      node claim mismatch: nothing taken
local recorded = claim_node(KEYS[2], ARGV[1])
if recorded then
  return {2, recorded}
end
local key = KEYS[1]
local bits = tonumber(ARGV[2])

-- Searched a window of WINDOW bytes at a time: an unbounded BITPOS costs the whole string on
-- some servers (fakeredis copies it bit by bit), and a window that finds a free bit ends the search.
local WINDOW = 4096
local size = math.ceil(bits / 8)

-- The first free position in bytes first..last (inclusive) below `bits`, or -1. Bytes past the
-- string's end are free (BITPOS answers -1 there), and an answer at or past `bits` (the padding
-- of the last byte) means nothing in the window is free.
local function find_in(first, last)
  local length = redis.call('STRLEN', key)
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

local result = {0}
for i = 3, #ARGV do
  local pos = find_free(tonumber(ARGV[i]))
  if pos < 0 then
    for j = 2, #result do
      redis.call('SETBIT', key, result[j], 0)
    end
    return {1, redis.call('BITCOUNT', key)}
  end
  redis.call('SETBIT', key, pos, 1)
  result[#result + 1] = pos
end
return result
