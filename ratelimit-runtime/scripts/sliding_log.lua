-- sliding_log.lua: one sorted-set member per unit of an allowed request (a request of cost
-- c logs `member` and `member:2` to `member:c`), scored by its time in ms; and the script of
-- a sliding-log limit checked alone.
--
-- The window is (now - w, now]: entries scored now - w or earlier are pruned. Allowed when
-- count + cost <= max. Rejected requests are not logged, so they do not extend a lockout.
-- retry_after is when enough of the oldest entries age out: the (count + cost - max - 1)-th
-- oldest (0-based) leaves the window at its score + w.
--
-- KEYS[1] the limit's key; ARGV: the time (see parts/clock.lua), max, window in ms, and a
-- member unique to this request.
-- KEYS[2], with the block in ms as the next argument: the limit's lockout key (`block`).
-- Then the request's cost in units (`Limit::costing`), when it is not 1.
-- Returns `allowed (0/1) remaining retry_after_ms reset_after_ms now_ms` (parts/reply.lua).

local extra = #ARGV - #KEYS - 3
if #KEYS < 1 or #KEYS > 2 or (extra ~= 0 and extra ~= 1) then
  return redis.error_reply('ERR rate-limit script: expected one key and 4 arguments, or two and 5, then the cost or nothing')
end
local key, max, window, member = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local bkey = KEYS[2]
local block = bkey and tonumber(ARGV[5])
--@include parts/bounds.lua
--@include parts/cost_arg.lua
--@include parts/block_bounds.lua
--@include parts/clock.lua
--@include parts/block_peek.lua
local allowed, remaining, retry_after, reset_after, ttl, value
if blocked_for > 0 then
  allowed, remaining, retry_after, reset_after = 0, 0, blocked_for, blocked_for
else
  --@include parts/sliding_log_peek.lua
  if allowed == 1 then
    --@include parts/sliding_log_commit.lua
  elseif bkey then
    --@include parts/block_start.lua
  end
end
--@include parts/reply.lua
