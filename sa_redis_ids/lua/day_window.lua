-- day_window.lua: which local day it is, for the date-keyed scripts that include it
-- ("--! include day_window"). Lua cannot convert time zones, so Python passes a window of day
-- boundaries computed with zoneinfo (sa_redis_ids/generators/day_window.py) and the script picks
-- the day that holds the Redis time.

-- Pick the local day that contains `now` from a day window passed in ARGV starting at `i`:
--   ARGV[i] = m (days), ARGV[i+1 .. i+m+1] = day boundaries in UTC ms (ascending),
--   ARGV[i+m+2 .. i+2m+1] = the m day labels ("YYYYMMDD").
-- Returns label, 0-based day index within the window, the first ARGV index after the window and
-- m; label is nil when `now` lies outside the window (the caller answers STATUS_OUT_OF_WINDOW).
-- The boundaries ascend, so the day is the first whose end lies past `now` (each boundary is
-- parsed at most once).
local function pick_day(now, i)
  local m = tonumber(ARGV[i])
  local after = i + 2 * m + 2
  if now >= ARGV[i + 1] + 0 then
    for d = 0, m - 1 do
      if now < ARGV[i + 2 + d] + 0 then
        return ARGV[i + m + 2 + d], d, after, m
      end
    end
  end
  return nil, nil, after, m
end
