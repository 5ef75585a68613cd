-- gcra.lua: generic cell rate algorithm, one key holding the theoretical arrival time (TAT)
-- as an integer number of microseconds; and the script of a GCRA limit checked alone.
--
-- Emission interval T = floor(w * 1000 / max) microseconds (at least 1), burst tolerance
-- tau = T * max, so a burst from idle allows exactly max requests; the window is thus
-- rounded down to a whole multiple of max microseconds (off by less than one microsecond
-- per request; a limit that this would change by more than 1 % is refused before it gets
-- here, see `Limit::new`).
--
--   tat      = max(stored TAT, now)
--   new_tat  = tat + cost x T   (a request counts `cost` units, 1 unless given)
--   allowed  when new_tat - now <= tau
--   remaining    = floor((tau - (new_tat - now)) / T)
--   retry_after  = new_tat - tau - now (rejected), rounded up to ms
--   reset_after  = TAT after the decision - now, rounded up to ms
--
-- KEYS[1] the limit's key; ARGV: the time (see parts/clock.lua), max, window in ms.
-- KEYS[2], with the block in ms as the next argument: the limit's lockout key (`block`).
-- Then the request's cost in units (`Limit::costing`), when it is not 1.
-- Returns `allowed (0/1) remaining retry_after_ms reset_after_ms now_ms` (parts/reply.lua).

local extra = #ARGV - #KEYS - 2
if #KEYS < 1 or #KEYS > 2 or (extra ~= 0 and extra ~= 1) then
  return redis.error_reply('ERR rate-limit script: expected one key and 3 arguments, or two and 4, then the cost or nothing')
end
local key, max, window = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local bkey = KEYS[2]
local block = bkey and tonumber(ARGV[4])
--@include parts/bounds.lua
--@include parts/cost_arg.lua
--@include parts/block_bounds.lua
--@include parts/clock.lua
--@include parts/block_peek.lua
local allowed, remaining, retry_after, reset_after, ttl, value
if blocked_for > 0 then
  allowed, remaining, retry_after, reset_after = 0, 0, blocked_for, blocked_for
else
  --@include parts/gcra_peek.lua
  if allowed == 1 then
    --@include parts/gcra_commit.lua
  elseif bkey then
    --@include parts/block_start.lua
  end
end
--@include parts/reply.lua
