-- sliding_log.lua: one sorted-set member per allowed request, scored by its time in ms;
-- and the script of a sliding-log limit checked alone.
--
-- The window is (now - w, now]: entries scored now - w or earlier are pruned. Allowed when
-- fewer than max remain. Rejected requests are not logged, so they do not extend a lockout.
-- retry_after is when enough of the oldest entries age out: the (count - max)-th oldest
-- (0-based) leaves the window at its score + w.
--
-- KEYS[1] the limit's key; ARGV: the time (see parts/clock.lua), max, window in ms, and a
-- member unique to this request. Returns `allowed (0/1) remaining retry_after_ms
-- reset_after_ms` (parts/reply.lua).

if #KEYS ~= 1 or #ARGV ~= 4 then
  return redis.error_reply('ERR rate-limit script: expected one key and 4 arguments')
end
local key, max, window, member = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
--@include parts/bounds.lua
--@include parts/clock.lua
local allowed, remaining, retry_after, reset_after, ttl, value
--@include parts/sliding_log_peek.lua
if allowed == 1 then
  --@include parts/sliding_log_commit.lua
end
--@include parts/reply.lua
