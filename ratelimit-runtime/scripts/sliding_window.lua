-- sliding_window.lua: current and previous window counters, fields `<window start ms>` of
-- the hash at the limit's key (see fixed_window.lua for why fields, not keys); and the
-- script of a sliding-window limit checked alone.
--
-- With e = now - start of the current window, w the window, prev and cur the two counts:
--
--   estimate = prev * (w - e) / w + cur
--
-- A request of `cost` units (1 unless given) is allowed when estimate + cost <= max, checked
-- exactly in integers as
--
--   prev * (w - e) <= (max - cur - cost) * w
--
-- (exact while max * w < 2^53, e.g. a million requests per 31 days).
-- retry_after is the first millisecond at which that holds again if nothing else arrives:
-- still in this window when the weighted previous count decays enough, else in the next
-- window, where this window's count is the weighted previous one.
-- reset_after is when the counted requests stop counting: the end of the next window for
-- this window's count, the end of this window for the previous one's.
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
  --@include parts/sliding_window_peek.lua
  if allowed == 1 then
    --@include parts/sliding_window_commit.lua
  elseif bkey then
    --@include parts/block_start.lua
  end
end
--@include parts/reply.lua
